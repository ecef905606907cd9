"""The verifier (PRM) interface and step-score aggregation.

A verifier scores steps of partial solutions: for each request it returns one score in [0, 1]
per step from `start` on (the scores of earlier steps depend only on their prefix, so the
runtime keeps them). Scores are combined into one path score by `aggregate`.

The interface itself (`ScoreRequest`, `Verifier`) is defined with the other engine interfaces
in `fasttts.backends.base`, below both of its implementations (the real PRMs here, the
simulated one in `fasttts.backends.sim`); it is re-exported here.
"""

from __future__ import annotations

import math
import typing

from fasttts.backends.base import ScoreRequest, Verifier
from fasttts.config import AggStrategy

__all__ = ["AGG_STRATEGIES", "SCORE_TOLERANCE", "ScoreRequest", "Verifier", "aggregate",
           "score_tolerance"]

#: The step-score aggregations, as `fasttts.config.AggStrategy` names them.
AGG_STRATEGIES = typing.get_args(AggStrategy)

#: Per runner and dtype, how far two scorings of one step may differ when only the passes
#: that computed them differ (a batch of another shape; a prefix from the cache vs computed in
#: the same pass): the same math in another order of roundings. vLLM in float32: about 1e-7
#: measured (issue 33), 1e-5 allowed; in bfloat16 (8-bit mantissa): up to 5.1e-3 over 36
#: Math-Shepherd steps and 8e-3 on a GSM8K search measured, 2e-2 allowed; float16 (11-bit
#: mantissa): 8x finer than bfloat16. transformers (Skywork) in bfloat16: 0.028 measured over
#: 16 steps (its attention over a KV cache of another length rounds differently again), 5e-2
#: allowed. The exactness tests of the real verifiers use these, and a search counts a
#: selection among scores closer than them as a near tie (`Verifier.score_tolerance`,
#: `fasttts.search.base.has_near_tie`); it still ranks them by their exact scores unless the
#: search has a tie tolerance (`SearchConfig.tie_tolerance`, bins in logits).
SCORE_TOLERANCE = {
    "vllm": {"float32": 1e-5, "bfloat16": 2e-2, "float16": 2.5e-3},
    "transformers": {"float32": 1e-5, "bfloat16": 5e-2, "float16": 6e-3},
}


def score_tolerance(runner: str, dtype: str) -> float:
    """`SCORE_TOLERANCE` of a verifier run by `runner` ("vllm" or "transformers") in `dtype`
    ("float32", "bfloat16", "float16", or a torch dtype's name such as "torch.float32");
    another dtype gets its runner's bfloat16 value, the coarsest.

    Raises:
        KeyError: an unknown runner.
    """
    table = SCORE_TOLERANCE[runner]
    return table.get(str(dtype).removeprefix("torch."), table["bfloat16"])


def aggregate(scores: list[float], strategy: str) -> float:
    """Combine a path's step scores into one score (search-and-learn `aggregate_scores`).

    Args:
        scores: step scores in [0, 1], in step order; must be non-empty.
        strategy: "last" (the newest step), "min", "prod" or "mean".

    Raises:
        ValueError: unknown strategy or no scores.
    """
    if strategy not in AGG_STRATEGIES:
        raise ValueError(f"unknown agg_strategy {strategy!r}; allowed: {', '.join(AGG_STRATEGIES)}")
    if not scores:
        raise ValueError("cannot aggregate an empty list of step scores")
    if strategy == "last":
        return scores[-1]
    if strategy == "min":
        return min(scores)
    if strategy == "prod":
        return math.prod(scores)
    return sum(scores) / len(scores)
