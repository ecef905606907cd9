"""Progress within a problem and over an evaluation: the loop reports every iteration
(`SearchRunner.run(on_progress)`) with the completions the method keeps, `SearchStatus` shows
it as one status line on a terminal, and `EvalProgress` writes bars on a terminal and plain
lines anywhere else."""

from __future__ import annotations

import io
import re
import time

from fasttts.config import SearchConfig
from fasttts.progress import EvalProgress, IterationProgress, SearchStatus
from fasttts.runtime.loop import SearchRunner
from tests.test_search import SCORES, SCRIPT
from tests.scripted import ScriptedGenerator, ScriptedVerifier


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def screen(raw: str) -> list[str]:
    """What a terminal shows after `raw`: carriage return, newline, cursor up (ESC[A) and
    erase-line codes applied; other escape codes dropped."""
    rows, row, col = [[]], 0, 0
    for token in re.findall(r"\x1b\[[0-9;]*[A-Za-z]|\r|\n|[^\x1b\r\n]", raw):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
        elif token == "\x1b[A":
            row = max(row - 1, 0)
        elif token.startswith("\x1b["):
            if token.endswith("K"):
                del rows[row][col:]
            continue
        else:
            while len(rows[row]) < col:
                rows[row].append(" ")
            rows[row][col:col + 1] = [token]
            col += 1
        while len(rows) <= row:
            rows.append([])
    return ["".join(r).rstrip() for r in rows]


def _run(method="beam_search", report=True):
    gen = ScriptedGenerator(SCRIPT)
    cfg = SearchConfig(method=method, n=4, beam_width=2, num_iterations=3)
    events: list[IterationProgress] = []
    result = SearchRunner(gen, ScriptedVerifier(SCORES, gen), cfg).run(
        "problem", "p0", on_progress=events.append if report else None)
    return result, events


def test_the_loop_reports_each_iteration_with_the_completions_it_keeps():
    result, events = _run()
    assert [e.iteration for e in events] == list(range(result.num_iterations)) == [0, 1, 2]
    assert {e.problem_id for e in events} == {"p0"} and {e.max_iterations for e in events} == {3}
    # iteration 0: 4 children, none done; iteration 1: beam 7 answers; iteration 2: all four
    # children finish, so 5 paths finished with n = 4: beam search refills n live paths each
    # iteration (search-and-learn), and the best 4 are returned
    assert [(e.live, e.finished, e.completions) for e in events] == [(4, 0, 0), (3, 1, 1),
                                                                      (0, 5, 4)]
    assert result.finished_paths == 5 and len(result.completions) == 4
    tokens = [e.tokens for e in events]
    assert tokens == sorted(tokens) and tokens[-1] == result.tokens_generated
    assert events[-1].elapsed_s == result.latency


def test_dvts_reports_answered_subtrees_without_changing_its_answers():
    quiet, _ = _run("dvts", report=False)
    result, events = _run("dvts")
    assert [c.beam_id for c in result.completions] == [c.beam_id for c in quiet.completions]
    assert events[-1].completions == len(result.completions) <= events[-1].finished


def test_the_line_counts_what_the_method_keeps_and_says_how_many_finished():
    assert IterationProgress("p", 2, 40, 3, 1, 500, 3.0, 1).describe() == \
        "live 3, completions 1, 500 tokens, 3 s"
    assert IterationProgress("p", 13, 40, 8, 11, 7245, 22.0, 8).describe() == \
        "live 8, completions 8 (best of 11 finished paths), 7245 tokens, 22 s"


def test_status_line_on_a_terminal_shows_iteration_live_completions_and_tokens():
    out = _Terminal()
    with SearchStatus(file=out) as status:
        status(IterationProgress("p0", 0, 40, 8, 0, 120, 1.2, 0))
        status(IterationProgress("p0", 1, 40, 8, 0, 240, 2.5, 0))  # within 0.2 s: not shown
        time.sleep(0.25)
        status(IterationProgress("p0", 4, 40, 6, 3, 900, 9.7, 3))
        status(IterationProgress("p1", 0, 40, 8, 0, 100, 0.4, 0))
    lines = out.getvalue().replace("\r", "\n")
    assert "problem p0: iteration 1/40, live 8, completions 0, 120 tokens, 1 s" in lines
    assert "problem p0: iteration 5/40, live 6, completions 3, 900 tokens, 10 s" in lines
    assert "problem p1: iteration 1/40, live 8, completions 0, 100 tokens, 0 s" in lines
    assert "240 tokens" not in lines and "p1: iteration 0/40" not in lines


def test_status_line_writes_nothing_when_not_on_a_terminal():
    out = io.StringIO()
    with SearchStatus(file=out) as status:
        status(IterationProgress("p0", 0, 40, 8, 0, 120, 1.2, 0))
    assert out.getvalue() == ""


def test_eval_progress_off_a_terminal_writes_one_plain_line_per_problem():
    out = io.StringIO()
    with EvalProgress(3, done=1, file=out) as progress:
        progress(IterationProgress("a", 0, 40, 8, 0, 10, 1.0, 0))
        progress.problem_done("a: answer 3", {"weighted": 0.5, "majority": 1.0})
        progress.problem_done("b: answer 4", None)
    text = out.getvalue()
    assert text == "problem 2/3 a: answer 3\nproblem 3/3 b: answer 4\n"
    assert "\r" not in text and "\x1b" not in text


def test_eval_progress_on_a_terminal_leaves_the_next_output_a_line_of_its_own():
    out = _Terminal()
    with EvalProgress(2, file=out) as progress:
        progress(IterationProgress("a", 0, 40, 8, 0, 10, 1.0, 0))
        time.sleep(0.25)
        progress(IterationProgress("a", 3, 40, 6, 2, 80, 4.0, 2))
        progress.problem_done("a", {"weighted": 1.0, "majority": 1.0})
        progress(IterationProgress("b", 0, 40, 8, 0, 10, 1.0, 0))
        progress.problem_done("b", {"weighted": 0.5, "majority": 0.5})
    out.write("TABLE\n")
    shown = [line for line in screen(out.getvalue()) if line]
    assert shown[-1] == "TABLE"  # the table starts on a line of its own ...
    assert shown[-2].startswith("problems: 100%") and "2/2" in shown[-2]  # under the bar
    assert not any("iteration" in line for line in shown)  # the status line was cleared
