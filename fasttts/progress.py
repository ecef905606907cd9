"""Progress within one problem's search: what the loop reports each iteration, and a status
line that shows it (`fasttts solve`, `fasttts eval`).

A search can run for minutes on a CPU; `SearchRunner.run(..., on_progress=callback)` calls the
callback once per iteration with an `IterationProgress`, and `SearchStatus` turns those into a
tqdm status line under the problems bar:

    problem test/algebra/1234: iteration 3/40, live 4, finished 2, 1180 tokens, 41 s
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["IterationProgress", "SearchStatus"]


@dataclass(frozen=True)
class IterationProgress:
    """The state of a search after one of its iterations.

    Attributes:
        problem_id: the problem's id.
        iteration: the iteration just finished (0-based).
        max_iterations: the method's iteration budget (the search may stop sooner).
        live: paths still unfinished after this iteration's generation (before the method
            keeps the best of them).
        finished: paths completed so far.
        tokens: tokens generated so far, pruned paths included.
        elapsed_s: search time so far on the backend's clock (s; virtual on the simulator).
    """

    problem_id: str
    iteration: int
    max_iterations: int
    live: int
    finished: int
    tokens: int
    elapsed_s: float = 0.0

    def describe(self) -> str:
        """One line: "live 4, finished 2, 1180 tokens, 41 s"."""
        return (f"live {self.live}, finished {self.finished}, {self.tokens} tokens, "
                f"{self.elapsed_s:.0f} s")


class SearchStatus:
    """A callback for `on_progress` that keeps one tqdm status line for the problem being
    searched (iteration i/budget, live and finished paths, tokens so far); a new problem
    resets it. Use as a context manager, or call `close()`, to clear it.

    Args:
        position: the line's tqdm position (1: under a problems bar).
        label: the line's label (default: "problem <id>").
        file: where to write (default: stderr).
        disable: no output at all.
    """

    BAR_FORMAT = "{desc}: iteration {n}/{total}{postfix}"

    def __init__(self, position: int = 0, label: str | None = None, file=None,
                 disable: bool = False):
        self.position, self.label, self.file, self.disable = position, label, file, disable
        self.bar = None
        self.key = None

    def __call__(self, p: IterationProgress) -> None:
        from tqdm import tqdm

        desc = self.label or f"problem {p.problem_id}"
        if self.bar is None:
            # miniters=1: refreshes are throttled by time only (tqdm would also skip by count)
            self.bar = tqdm(total=p.max_iterations, initial=p.iteration + 1, desc=desc,
                            postfix=p.describe(), position=self.position, leave=False,
                            file=self.file or sys.stderr, disable=self.disable,
                            bar_format=self.BAR_FORMAT, miniters=1, mininterval=0.2,
                            dynamic_ncols=True)
        else:
            self.bar.set_description_str(desc, refresh=False)
            self.bar.set_postfix_str(p.describe(), refresh=False)
            if p.problem_id != self.key:  # a new problem: shown at once, from its iteration
                self.bar.total, self.bar.n = p.max_iterations, p.iteration + 1
                self.bar.refresh()
            else:  # throttled to one refresh per 0.2 s (the simulator runs ~100 iterations/s)
                self.bar.update(p.iteration + 1 - self.bar.n)
        self.key = p.problem_id

    def close(self) -> None:
        """Clear the status line."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            self.key = None

    def __enter__(self) -> SearchStatus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
