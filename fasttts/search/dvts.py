"""Diverse Verifier Tree Search (DVTS): n // beam_width independent subtrees, each a greedy
PRM-guided search that keeps its own best path.

Source: Beeching, Tunstall and Rush, "Scaling test-time compute with open models" (Hugging
Face, 2024) and search-and-learn's `_dvts`; FastTTS section 3.1 ("Diverse Selection"):

- iteration 0 samples n first steps; step i belongs to subtree i // beam_width;
- each iteration every subtree's beam_width new steps are scored and the subtree keeps its
  best one (by aggregated score); if that one finished, it is the subtree's answer and the
  subtree stops (its other finished candidates are discarded, as in search-and-learn);
  otherwise the kept path is expanded beam_width times again;
- the last iteration generates every kept path to its end;
- the result is one completion per subtree (n // beam_width, never more), best first. Every
  returned path finished; one cut by the token budget says so (`finish_reason="length"`).
"""

from __future__ import annotations

from collections.abc import Callable

from fasttts.beam import Beam
from fasttts.search.base import SearchStrategy, require_multiple

__all__ = ["DVTS"]


class DVTS(SearchStrategy):
    """DVTS over n // beam_width subtrees (module docstring).

    Raises:
        SearchConfigError: n not a positive multiple of beam_width.
    """

    name = "dvts"
    shares_prefixes = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.answers: dict[int, Beam] = {}

    @classmethod
    def check(cls, cfg) -> None:
        """n must be a positive multiple of beam_width."""
        require_multiple(cls.name, cfg.n, cfg.beam_width)

    def planned_lineages(self, share: int) -> int:
        """n / beam_width subtrees that never merge (an upper bound: finished subtrees stop)."""
        return max(1, self.cfg.n // share)

    def expand(self, kept: list[Beam], iteration: int, new_id: Callable[[], int]) -> list[Beam]:
        bw = self.cfg.beam_width
        if iteration == 0:
            children = [kept[0].child(new_id()) for _ in range(self.cfg.n)]
            for i, c in enumerate(children):
                c.subtree = i // bw
            return children
        return [parent.child(new_id()) for parent in kept for _ in range(bw)]

    def select(self, live: list[Beam], finished: list[Beam]) -> list[Beam]:
        by_tree: dict[int, list[Beam]] = {}
        for b in live + finished:
            by_tree.setdefault(b.subtree, []).append(b)
        kept = []
        for tree in sorted(by_tree):
            best = self.rank(by_tree[tree])[0]
            if best.finished:
                self.answers[tree] = best
            else:
                kept.append(best)
        return kept

    def num_kept(self, completed: list[Beam]) -> int:
        """The subtrees with a finished path so far: each returns one (`finalize`)."""
        return len({b.subtree for b in completed})

    def finalize(self, completed: list[Beam]) -> list[Beam]:
        # A search whose last candidates all finished ends without select(): a subtree not
        # answered yet takes its best candidate of its last round (the deepest ones; earlier
        # finished candidates that lost to a live path were discarded).
        last_round: dict[int, list[Beam]] = {}
        for b in completed:
            if b.subtree in self.answers:
                continue
            cur = last_round.setdefault(b.subtree, [])
            if cur and len(b.lineage) > len(cur[0].lineage):
                cur.clear()
            if not cur or len(b.lineage) == len(cur[0].lineage):
                cur.append(b)
        for tree, cands in last_round.items():
            self.answers[tree] = self.rank(cands)[0]
        return self.rank(list(self.answers.values()))[: self.cfg.n // self.cfg.beam_width]
