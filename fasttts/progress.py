"""Progress of a search and of an evaluation: what the loop reports each iteration, the status
line that shows it (`fasttts solve`, `fasttts eval`), and the problems bar of `fasttts eval`.

A search can run for minutes on a CPU; `SearchRunner.run(..., on_progress=callback)` calls the
callback once per iteration with an `IterationProgress`, and `SearchStatus` turns those into a
tqdm status line under the problems bar:

    problem test/algebra/1234: iteration 3/40, live 4, completions 2, 1180 tokens, 41 s

A method may finish more paths than it returns (beam search refills its n live paths every
iteration, so completions accumulate past n, as in search-and-learn; the best n are kept):
the line then counts what the method keeps and says how many paths finished,
"completions 8 (best of 11 finished paths)", the number the summary table reports.

On a terminal the bars redraw in place; anywhere else (a log file, a pipe) they would write
carriage returns and cursor codes, so `EvalProgress` writes one plain line per finished
problem instead, and `SearchStatus` writes nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["EvalProgress", "IterationProgress", "SearchStatus", "on_terminal"]


def on_terminal(stream) -> bool:
    """Whether `stream` is a terminal (bars may redraw in place there)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


@dataclass(frozen=True)
class IterationProgress:
    """The state of a search after one of its iterations.

    Attributes:
        problem_id: the problem's id.
        iteration: the iteration just finished (0-based).
        max_iterations: the method's iteration budget (the search may stop sooner).
        live: paths still unfinished after this iteration's generation (before the method
            keeps the best of them).
        finished: paths completed so far, the ones the method will drop included.
        tokens: tokens generated so far, pruned paths included.
        elapsed_s: search time so far on the backend's clock (s; virtual on the simulator).
        completions: of the finished paths, those the method keeps so far (at most n:
            `SearchStrategy.num_kept`); None = all of them.
    """

    problem_id: str
    iteration: int
    max_iterations: int
    live: int
    finished: int
    tokens: int
    elapsed_s: float = 0.0
    completions: int | None = None

    def describe(self) -> str:
        """One line: "live 4, completions 2, 1180 tokens, 41 s", or with more paths finished
        than kept "live 8, completions 8 (best of 11 finished paths), 7245 tokens, 22 s"."""
        kept = self.finished if self.completions is None else self.completions
        extra = f" (best of {self.finished} finished paths)" if self.finished > kept else ""
        return (f"live {self.live}, completions {kept}{extra}, {self.tokens} tokens, "
                f"{self.elapsed_s:.0f} s")


class SearchStatus:
    """A callback for `on_progress` that keeps one tqdm status line for the problem being
    searched (iteration i/budget, live and finished paths, tokens so far); a new problem
    resets it. Use as a context manager, or call `close()`, to clear it.

    Args:
        position: the line's tqdm position (1: under a problems bar).
        label: the line's label (default: "problem <id>").
        file: where to write (default: stderr).
        disable: no output at all; None = none unless `file` is a terminal (a status line
            that redraws in place has no plain form).
    """

    BAR_FORMAT = "{desc}: iteration {n}/{total}{postfix}"

    def __init__(self, position: int = 0, label: str | None = None, file=None,
                 disable: bool | None = None):
        self.position, self.label, self.file = position, label, file
        self.disable = not on_terminal(file or sys.stderr) if disable is None else disable
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


class EvalProgress:
    """The progress of `fasttts eval` (module docstring): on a terminal, a problems bar with
    the running accuracy and, under it, the searching problem's `SearchStatus`; elsewhere one
    plain line per finished problem. Pass it as the search's `on_progress` callback and to
    `fasttts.eval.runner.run_eval`; `close` (or the context manager) ends the status line
    before the bar, so what is printed next starts on a line of its own.

    Args:
        total: the problems of the evaluation.
        done: those finished before this run.
        file: where to write (default: stderr).
        interactive: bars (True) or plain lines (False); None = bars on a terminal.
    """

    def __init__(self, total: int, done: int = 0, file=None, interactive: bool | None = None):
        from tqdm import tqdm

        self.file = file or sys.stderr
        self.interactive = on_terminal(self.file) if interactive is None else interactive
        self.total, self.done = total, done
        self.status = SearchStatus(position=1, file=self.file, disable=not self.interactive)
        self.bar = tqdm(total=total, initial=done, desc="problems", unit="problem",
                        file=self.file, disable=not self.interactive)

    def __call__(self, p: IterationProgress) -> None:
        self.status(p)

    def problem_done(self, line: str, accuracy: dict | None) -> None:
        """One problem finished: its plain `line` (written only when not interactive,
        `fasttts.eval.runner.problem_line`) and the running accuracy (the summary's; None
        without reference answers)."""
        self.done += 1
        self.bar.update(1)
        if accuracy:
            self.bar.set_postfix(weighted=f"{accuracy['weighted']:.2f}",
                                 majority=f"{accuracy['majority']:.2f}")
        if not self.interactive:
            print(f"problem {self.done}/{self.total} {line}", file=self.file, flush=True)

    def close(self) -> None:
        """End the status line, then the bar."""
        self.status.close()
        self.bar.close()

    def __enter__(self) -> EvalProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

