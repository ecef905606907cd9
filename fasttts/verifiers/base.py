"""The verifier (PRM) interface and step-score aggregation.

A verifier scores steps of partial solutions: for each request it returns one score in [0, 1]
per step from `start` on (the scores of earlier steps depend only on their prefix, so the
runtime keeps them). Scores are combined into one path score by `aggregate`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = ["AGG_STRATEGIES", "ScoreRequest", "Verifier", "aggregate"]

AGG_STRATEGIES = ("last", "min", "prod", "mean")


@dataclass(frozen=True)
class ScoreRequest:
    """Score `steps[start:]` of one path.

    Attributes:
        problem: the problem text.
        steps: the path's steps so far, each with its trailing delimiter (see `split_steps`).
        start: index of the first step to score; 0 <= start <= len(steps).
    """

    problem: str
    steps: tuple[str, ...]
    start: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.start <= len(self.steps):
            raise ValueError(f"start={self.start} must be within 0..{len(self.steps)}")


class Verifier(ABC):
    """A process reward model behind a batched scoring call.

    Attributes:
        name: what the verifier is (model and format), for reports.
        supports_incremental: the format can score a new step from the prefix cache alone
            (one request cut right after the step's tag, read at its last token; exact because
            the PRM is causal). A class fact, asked of the class (`incremental_capable`).
        incremental: this instance scores incrementally (DESIGN.md, "The verifier is priced as
            the real engine prices it"); False = every scored path is prefilled whole.
    """

    name: str = "verifier"
    supports_incremental: bool = False
    incremental: bool = False

    @abstractmethod
    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        """Score a batch of paths.

        Returns:
            For each request, `len(steps) - start` scores in [0, 1], in step order.
        """

    def set_batch_size(self, batch_size: int) -> None:
        """Score at most `batch_size` paths per pass from the next call on (B_pre; the
        memory planner sets it between requests). Verifiers that batch keep the cap in their
        `batch_size` attribute.

        Raises:
            ValueError: batch_size < 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size

    def now(self) -> float:
        """The clock the verifier's time is measured on (seconds)."""
        import time

        return time.perf_counter()

    def cache_stats(self):
        """The verifier engine's KV-cache counters (`fasttts.backends.base.CacheStats`), or
        None where the verifier has no paged engine (transformers)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the verifier's engine."""


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
