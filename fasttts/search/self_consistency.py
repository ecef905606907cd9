"""Self-consistency: n independent samples, the answer by majority vote, no verifier.

Source: Wang et al. 2023, "Self-consistency improves chain of thought reasoning in language
models"; the baseline of SART (section 5.1). Runs as one iteration of the shared loop that
generates each path to its end; the PRM is never called (verifier time 0). Every completion
gets weight 1, so the weighted vote of `fasttts.eval.voting` is the majority vote.
"""

from __future__ import annotations

from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchStrategy, fan_out

__all__ = ["SelfConsistency"]


class SelfConsistency(SearchStrategy):
    """n samples to the end, majority vote, no PRM."""

    name = "self_consistency"
    answer_rule = "majority"
    selects_paths = False

    @property
    def num_iterations(self) -> int:
        return 1

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        return fan_out(kept, self.cfg.n, new_id)

    def to_verify(self, children: list[Beam], iteration: int) -> list[Beam]:
        return []

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        return []

    def finalize(self, completed: list[Beam]) -> list[Beam]:
        for b in completed:
            b.score = 1.0
        return sorted(completed, key=lambda b: b.beam_id)[: self.cfg.n]
