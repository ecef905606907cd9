"""Best-of-N with an outcome score: n full solutions, each scored once as a whole.

Source: Cobbe et al. 2021, "Training verifiers to solve math word problems" (outcome reward
models); Lightman et al. 2023 compare it with process supervision. The verifier sees each
finished solution as one step (its whole text) and returns one score, which ranks the
solution; intermediate steps are not scored. With a PRM as the verifier this is the PRM used
as an ORM (its score of the whole solution). Answer by weighted vote, majority vote or best
path as for best_of_n.
"""

from __future__ import annotations

from fasttts.search.best_of_n import BestOfN

__all__ = ["BestOfNOutcome"]


class BestOfNOutcome(BestOfN):
    """n independent samples to the end, one outcome score each."""

    name = "best_of_n_orm"
    outcome_scoring = True
