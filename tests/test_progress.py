"""Progress within a problem: the loop reports every iteration (`SearchRunner.run(on_progress)`)
and `SearchStatus` shows it as one status line."""

from __future__ import annotations

import io
import time

from fasttts.config import SearchConfig
from fasttts.progress import IterationProgress, SearchStatus
from fasttts.runtime.loop import SearchRunner
from tests.test_search import SCORES, SCRIPT
from tests.scripted import ScriptedGenerator, ScriptedVerifier


def test_the_loop_reports_each_iteration():
    gen = ScriptedGenerator(SCRIPT)
    cfg = SearchConfig(method="beam_search", n=4, beam_width=2, num_iterations=3)
    events: list[IterationProgress] = []
    result = SearchRunner(gen, ScriptedVerifier(SCORES, gen), cfg).run("problem", "p0",
                                                                       on_progress=events.append)
    assert [e.iteration for e in events] == list(range(result.num_iterations)) == [0, 1, 2]
    assert {e.problem_id for e in events} == {"p0"} and {e.max_iterations for e in events} == {3}
    # iteration 0: 4 children, none done; iteration 1: beam 7 answers; iteration 2: all finish
    assert [(e.live, e.finished) for e in events] == [(4, 0), (3, 1), (0, 5)]
    tokens = [e.tokens for e in events]
    assert tokens == sorted(tokens) and tokens[-1] == result.tokens_generated
    assert events[-1].elapsed_s == result.latency


def test_status_line_shows_iteration_live_finished_and_tokens():
    out = io.StringIO()
    with SearchStatus(file=out) as status:
        status(IterationProgress("p0", 0, 40, 8, 0, 120, 1.2))
        status(IterationProgress("p0", 1, 40, 8, 0, 240, 2.5))  # within 0.2 s: not shown
        time.sleep(0.25)
        status(IterationProgress("p0", 4, 40, 6, 3, 900, 9.7))
        status(IterationProgress("p1", 0, 40, 8, 0, 100, 0.4))
    lines = out.getvalue().replace("\r", "\n")
    assert "problem p0: iteration 1/40, live 8, finished 0, 120 tokens, 1 s" in lines
    assert "problem p0: iteration 5/40, live 6, finished 3, 900 tokens, 10 s" in lines
    assert "problem p1: iteration 1/40, live 8, finished 0, 100 tokens, 0 s" in lines
    assert "240 tokens" not in lines and "p1: iteration 0/40" not in lines
