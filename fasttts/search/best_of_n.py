"""Best-of-N with a PRM: sample n full solutions, score every step, rank by aggregated score.

Source: Cobbe et al. 2021 / Lightman et al. 2023 (verifier reranking) as in Hugging Face
search-and-learn `best_of_n`; FastTTS section 2.2. Runs as a single iteration of the shared
loop that generates each path to its end; the answer is then chosen by PRM-weighted vote,
majority vote or the best single path (see `fasttts.eval.voting`).
"""

from __future__ import annotations

from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchStrategy, fan_out

__all__ = ["BestOfN"]


class BestOfN(SearchStrategy):
    """n independent samples, each generated to its end in one iteration."""

    name = "best_of_n"
    selects_paths = False
    speculates = False  # one iteration: no next step to speculate into

    @property
    def num_iterations(self) -> int:
        return 1

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        return fan_out(kept, self.cfg.n, new_id)

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        return []
