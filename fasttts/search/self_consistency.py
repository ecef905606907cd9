"""Self-consistency: n independent samples, the answer by majority vote, no verifier.

Source: Wang et al. 2023, "Self-consistency improves chain of thought reasoning in language
models"; the baseline of SART (section 5.1). Runs as one iteration of the shared loop that
generates each path to its end; the PRM is never called (verifier time 0). Every completion
gets weight 1, so the weighted vote of `fasttts.eval.voting` is the majority vote.
"""

from __future__ import annotations

from fasttts.beam import Beam
from fasttts.search.best_of_n import BestOfN

__all__ = ["SelfConsistency"]


class SelfConsistency(BestOfN):
    """n samples to the end (as best-of-N), majority vote, no PRM."""

    name = "self_consistency"
    answer_rule = "majority"
    uses_verifier = False

    def to_verify(self, children: list[Beam], iteration: int) -> list[Beam]:
        return []

    def finalize(self, completed: list[Beam]) -> list[Beam]:
        for b in completed:
            b.score = 1.0
        return sorted(completed, key=lambda b: b.beam_id)[: self.cfg.n]
