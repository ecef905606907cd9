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

__all__ = ["AGG_STRATEGIES", "ScoreRequest", "Verifier", "aggregate"]

#: The step-score aggregations, as `fasttts.config.AggStrategy` names them.
AGG_STRATEGIES = typing.get_args(AggStrategy)


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
