"""Dynamic branching: the branching factor of every path adapts to its PRM score and to the
budget left (REBASE-style).

Source: Wu et al. 2024, "Inference scaling laws" (REBASE: reward-balanced search), cited with
Hooper et al. 2025 in FastTTS section 3.1 ("Dynamic Branching ... makes the branching factor
itself adaptive to verifier scores and system state"):

- iteration 0 samples n first steps;
- each iteration the budget is B = n - (paths completed so far); every live path j gets
  B * softmax(score_j / tau)_j children (tau = `branch_temperature`), rounded by largest
  remainder so they sum to B (ties: better score first); a path that gets 0 is pruned;
- the search ends when the budget is spent or no path is live; the last iteration generates
  to the end. So at most n paths ever complete; the n best are returned, best first.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchStrategy, fan_out

__all__ = ["DynamicBranching", "allocate_children"]


def allocate_children(scores: list[float], budget: int, temperature: float) -> list[int]:
    """Children per path: `budget` split by softmax(scores / temperature), largest remainder.

    Args:
        scores: path scores, best first (the order breaks remainder ties).
        budget: children to hand out (>= 0).
        temperature: softmax temperature (> 0).

    Returns:
        One count per score, summing to `budget`.
    """
    if not scores or budget <= 0:
        return [0] * len(scores)
    top = max(scores)
    w = [math.exp((s - top) / temperature) for s in scores]
    total = sum(w)
    exact = [budget * x / total for x in w]
    counts = [math.floor(x) for x in exact]
    rest = budget - sum(counts)
    order = sorted(range(len(scores)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return counts


class DynamicBranching(SearchStrategy):
    """Score-proportional branching under a shrinking budget (module docstring)."""

    name = "dynamic_branching"
    shares_prefixes = True
    own_params = ("branch_temperature",)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.num_completed = 0
        self.counts: dict[int, int] = {}

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        if iteration == 0:
            return fan_out(kept, self.cfg.n, new_id)
        return [p.child(new_id()) for p in kept for _ in range(self.counts[p.beam_id])]

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        self.num_completed += len(finished)
        ranked = self.rank(live)
        counts = allocate_children([b.score for b in ranked], self.cfg.n - self.num_completed,
                                   self.cfg.branch_temperature)
        self.counts = {b.beam_id: c for b, c in zip(ranked, counts)}
        return [b for b, c in zip(ranked, counts) if c > 0]
