"""The append-only output folder: resume, interrupted runs, configuration mismatch."""

import json

import pytest

from fasttts.config import SearchConfig
from fasttts.eval.datasets import Problem
from fasttts.eval.runner import OutputDirError, ResultStore, ResultsFileWarning, run_eval
from fasttts.runtime.loop import SearchRunner
from tests.scripted import ScriptedGenerator, ScriptedVerifier

PROBLEMS = [Problem(id=f"q{i}", problem=f"problem {i}", answer=str(i), meta={}) for i in range(3)]


def solver(fail_on=None):
    calls = []

    def solve(p):
        calls.append(p.id)
        if p.id == fail_on:
            raise KeyboardInterrupt
        gen = ScriptedGenerator({1: f"so \\boxed{{{p.answer}}}<eos>"})
        ver = ScriptedVerifier({f"so \\boxed{{{p.answer}}}": 0.7})
        return SearchRunner(gen, ver, SearchConfig(method="best_of_n", n=1)).run(p.problem, p.id)

    return solve, calls


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_interrupted_run_resumes_without_loss_or_duplicates(tmp_path):
    cfg = {"dataset": "x", "n": 1}
    solve, calls = solver(fail_on="q1")
    with pytest.raises(KeyboardInterrupt):
        run_eval(PROBLEMS, solve, ResultStore(tmp_path, cfg), progress=False)
    assert [r["id"] for r in lines(tmp_path / "results.jsonl")] == ["q0"]
    # simulate a crash in the middle of writing the next line
    with open(tmp_path / "results.jsonl", "a") as f:
        f.write('{"id": "q1", "trunc')
    solve, calls = solver()
    summary = run_eval(PROBLEMS, solve, ResultStore(tmp_path, cfg), progress=False)
    assert calls == ["q1", "q2"]
    assert [r["id"] for r in lines(tmp_path / "results.jsonl")] == ["q0", "q1", "q2"]
    assert summary["num_problems"] == 3 and summary["accuracy"]["weighted"] == 1.0
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    solve, calls = solver()
    run_eval(PROBLEMS, solve, ResultStore(tmp_path, cfg), progress=False)
    assert calls == []  # everything done: nothing rerun


def test_other_configuration_is_refused_naming_the_setting(tmp_path):
    solve, _ = solver()
    cfg = {"dataset": "x", "config": {"search": {"n": 1, "seed": 0}}}
    run_eval(PROBLEMS[:1], solve, ResultStore(tmp_path, cfg), progress=False)
    other = {"dataset": "x", "config": {"search": {"n": 2, "seed": 0}}}
    with pytest.raises(OutputDirError, match=r"config.search.n: 1 -> 2"):
        ResultStore(tmp_path, other)


def test_nothing_is_written_before_the_first_result(tmp_path):
    out = tmp_path / "out"
    ResultStore(out, {"n": 1})
    assert not out.exists()


def test_summary_covers_the_selected_problems_only(tmp_path):
    solve, _ = solver()
    run_eval(PROBLEMS, solve, ResultStore(tmp_path, {}), progress=False)
    solve, calls = solver()
    summary = run_eval(PROBLEMS[:2], solve, ResultStore(tmp_path, {}), progress=False)
    assert calls == [] and summary["num_problems"] == 2


@pytest.mark.parametrize("bad", ["", "  "])
def test_empty_output_dir_is_refused(bad):
    with pytest.raises(OutputDirError, match="output dir is empty"):
        ResultStore(bad, {})


def test_output_dir_below_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputDirError, match="f is not a writable folder"):
        ResultStore(tmp_path / "f" / "sub", {})


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputDirError, match="not a folder"):
        ResultStore(f, {})


def _five_done(tmp_path):
    problems = [Problem(id=f"q{i}", problem=f"problem {i}", answer=str(i), meta={})
                for i in range(5)]
    solve, _ = solver()
    run_eval(problems, solve, ResultStore(tmp_path, {}), progress=False)
    return problems


@pytest.mark.parametrize("bad, why", [
    ('{"id": "q1", garbled', "line 2: not JSON"),
    ('[1, 2, 3]', "line 2: a JSON list, not an object"),
    ('{"no_id": 1}', "line 2: no string 'id'"),
    ('{"id": "q1"}', "line 2: not a problem record"),
    ('"just a string"', "line 2: a JSON str, not an object"),
])
def test_damaged_line_in_the_middle_is_set_aside_and_later_records_kept(tmp_path, bad, why):
    problems = _five_done(tmp_path)
    path = tmp_path / "results.jsonl"
    rows = path.read_text().splitlines()
    rows[1] = bad
    path.write_text("\n".join(rows) + "\n")
    solve, calls = solver()
    with pytest.warns(ResultsFileWarning, match=why):
        store = ResultStore(tmp_path, {})
    # only the first two problems are asked for now: every later record stays on disk
    run_eval(problems[:2], solve, store, progress=False)
    assert calls == ["q1"]
    assert (tmp_path / "results.jsonl.bad").read_text() == bad + "\n"
    assert sorted(r["id"] for r in lines(path)) == ["q0", "q1", "q2", "q3", "q4"]


def test_stale_summary_and_trace_are_rewritten_when_nothing_is_left_to_do(tmp_path):
    problems = _five_done(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    trace = (tmp_path / "trace.jsonl").read_text()
    # killed between appending the last result and rewriting the summary
    (tmp_path / "summary.json").write_text(json.dumps({**summary, "num_problems": 4}))
    (tmp_path / "trace.jsonl").write_text("".join(trace.splitlines(keepends=True)[:4]))
    solve, calls = solver()
    run_eval(problems, solve, ResultStore(tmp_path, {}), progress=False)
    assert calls == []
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "trace.jsonl").read_text() == trace
