"""PRM-guided beam search with Hugging Face search-and-learn semantics.

Source: Snell et al. 2024 ("Scaling LLM test-time compute optimally...") as implemented in
Hugging Face search-and-learn (`_beam_search`), the baseline of FastTTS (section 6.1):

- iteration 0 samples n first steps from the prompt;
- each iteration scores every new step with the PRM, drops finished paths from the active set
  (they become completions), keeps the n // beam_width best unfinished paths by aggregated
  score, and duplicates them back up to n active paths (each kept path expanded beam_width
  times when none finished);
- the last iteration (num_iterations - 1) generates each path to its end;
- the n best completions by aggregated score are returned (never more than n).
"""

from __future__ import annotations

from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchStrategy, fan_out, require_multiple

__all__ = ["BeamSearch"]


class BeamSearch(SearchStrategy):
    """Beam search: keep n // beam_width paths, expand each beam_width times per iteration.

    Raises:
        SearchConfigError: beam_width > n or n not a multiple of beam_width.
    """

    name = "beam_search"
    shares_prefixes = True

    @classmethod
    def check(cls, cfg) -> None:
        """n must be a positive multiple of beam_width."""
        require_multiple(cls.name, cfg.n, cfg.beam_width)

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        return fan_out(kept, self.cfg.n, new_id)

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        return self.rank(live)[: self.cfg.n // self.cfg.beam_width]
