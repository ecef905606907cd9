"""The append-only output folder: resume, interrupted runs, configuration mismatch."""

import json

import pytest

from fasttts.config import SearchConfig
from fasttts.eval.datasets import Problem
from fasttts.eval.runner import OutputDirError, ResultStore, run_eval
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


def test_other_configuration_is_refused(tmp_path):
    ResultStore(tmp_path, {"dataset": "x", "n": 1})
    with pytest.raises(OutputDirError, match="differs in n"):
        ResultStore(tmp_path, {"dataset": "x", "n": 2})


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputDirError, match="not a folder"):
        ResultStore(f, {})
