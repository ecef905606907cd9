"""VG-search: beam search with a verification granularity of g steps.

Source: Chen et al. 2025, "Rethinking the role of verification granularity in test-time
scaling" (VG-Search); FastTTS section 3.1 ("varying verification granularities"). Beam search
verifies and branches after every step (g = 1); VG-search generates g steps per round:

- a round starts at an iteration i with i % g == 0: the kept paths are duplicated up to n
  (round-robin, as in beam search; iteration 0 samples n first steps);
- inside a round each path extends by one more step per iteration without branching;
- the PRM scores the round's steps at its last iteration ((i + 1) % g == 0), and the
  n // beam_width best unfinished paths are kept; a path that finishes earlier is scored when
  it finishes (its score ranks the completions);
- the last iteration generates to the end; at most n completions, best first.

With g = 1 it makes exactly beam search's decisions (tested).
"""

from __future__ import annotations

from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchStrategy, fan_out, require_multiple

__all__ = ["VGSearch"]


class VGSearch(SearchStrategy):
    """Beam search that verifies and branches every `granularity` steps (module docstring).

    Raises:
        SearchConfigError: n not a positive multiple of beam_width.
    """

    name = "vg_search"
    shares_prefixes = True
    own_params = ("granularity",)

    @classmethod
    def check(cls, cfg) -> None:
        """n must be a positive multiple of beam_width."""
        require_multiple(cls.name, cfg.n, cfg.beam_width)

    @property
    def steps_per_level(self) -> int:
        """`granularity` steps between two branchings."""
        return self.cfg.granularity

    def _round_end(self, iteration: int) -> bool:
        return (iteration + 1) % self.cfg.granularity == 0

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        self._iteration = iteration
        if iteration % self.cfg.granularity == 0:
            return fan_out(kept, self.cfg.n, new_id)
        return [b.child(new_id()) for b in kept]

    def to_verify(self, children: list[Beam], iteration: int) -> list[Beam]:
        if self._round_end(iteration):
            return children
        return [b for b in children if b.finished]

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        if not self._round_end(self._iteration):
            return live
        return self.rank(live)[: self.cfg.n // self.cfg.beam_width]
