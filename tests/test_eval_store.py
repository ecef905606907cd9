"""The append-only output folder: resume, interrupted runs, configuration mismatch."""

import json
import os
import subprocess
import sys

import pytest

from fasttts.config import SearchConfig
from fasttts.eval.datasets import Problem
from fasttts.eval.folder_lock import LOCK_NAME, FolderInUse
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


def test_nothing_is_left_behind_without_a_result(tmp_path):
    out = tmp_path / "out" / "run"
    with ResultStore(out, {"n": 1}):
        assert (out / LOCK_NAME).read_text() == f"{os.getpid()}\n"  # held while it runs
    assert not (tmp_path / "out").exists()  # the folders it created, and the lock, are gone


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
    ('{"id": "q1", "n": ' + "7" * 5000 + "}", "line 2: not JSON \\(a number with more than 4300"),
    ("[" * 100_000, "line 2: not JSON \\(JSON nested too deeply"),
    ('{"id": "q1\udcff"}', "line 2: not JSON \\(not UTF-8 text \\(byte 0xff at column 11"),
    ('{"id": "q1\\udc80"}', "line 2: not JSON \\(not valid UTF-8 text"),
    ('{"id": "q1", "latency_s": NaN}', "line 2: not JSON \\(NaN is not a JSON number"),
])
def test_damaged_line_in_the_middle_is_set_aside_and_later_records_kept(tmp_path, bad, why):
    problems = _five_done(tmp_path)
    path = tmp_path / "results.jsonl"
    rows = path.read_bytes().splitlines()
    rows[1] = bad.encode("utf-8", "surrogateescape")
    path.write_bytes(b"\n".join(rows) + b"\n")
    solve, calls = solver()
    with pytest.warns(ResultsFileWarning, match=why):
        store = ResultStore(tmp_path, {})
    # only the first two problems are asked for now: every later record stays on disk
    run_eval(problems[:2], solve, store, progress=False)
    assert calls == ["q1"]
    assert (tmp_path / "results.jsonl.bad").read_bytes() == rows[1] + b"\n"
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


def test_a_second_record_of_an_id_is_set_aside_and_counted_once(tmp_path):
    problems = _five_done(tmp_path)
    path = tmp_path / "results.jsonl"
    rows = path.read_text().splitlines(keepends=True)
    path.write_text("".join(rows + [rows[1], rows[3]]))  # added by hand, or by a second run
    with pytest.warns(ResultsFileWarning, match=r"line 6: a second record of id 'q1' \(the "
                                                 r"first, on line 2, is kept\)"):
        store = ResultStore(tmp_path, {})
    solve, calls = solver()
    summary = run_eval(problems, solve, store, progress=False)
    assert calls == [] and summary["num_problems"] == 5
    assert path.read_text() == "".join(rows)
    assert (tmp_path / "results.jsonl.bad").read_text() == rows[1] + rows[3]
    assert json.loads((tmp_path / "summary.json").read_text())["num_problems"] == 5


#: A second process that holds a folder's lock until its stdin closes.
_HOLDER = """
import sys
from fasttts.eval.runner import ResultStore
with ResultStore(sys.argv[1], {}):
    print("holding", flush=True)
    sys.stdin.read()
"""


def _hold(folder):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert holder.stdout.readline() == "holding\n"
    return holder


def test_a_second_writer_is_refused_with_the_first_ones_pid_and_the_file_intact(tmp_path):
    problems = _five_done(tmp_path)
    before = (tmp_path / "results.jsonl").read_bytes()
    holder = _hold(tmp_path)
    try:
        with pytest.raises(FolderInUse, match=rf"{tmp_path} is being written by another "
                                              rf"process \(pid {holder.pid}, lock file .*; wait "
                                              rf"for it to finish, or use another --output-dir"):
            ResultStore(tmp_path, {})
    finally:
        holder.communicate("")
    assert (tmp_path / "results.jsonl").read_bytes() == before
    solve, calls = solver()  # the first writer is gone: the folder is free again
    with ResultStore(tmp_path, {}) as store:
        run_eval(problems, solve, store, progress=False)
    assert calls == [] and not (tmp_path / LOCK_NAME).exists()


def test_a_stale_lock_of_a_killed_run_is_taken_over(tmp_path):
    problems = _five_done(tmp_path)
    (tmp_path / LOCK_NAME).write_text("999999999\n")  # left by kill -9: no process holds it
    solve, calls = solver()
    with ResultStore(tmp_path, {}) as store:
        assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        run_eval(problems, solve, store, progress=False)
    assert calls == [] and not (tmp_path / LOCK_NAME).exists()


def test_one_process_may_open_its_folder_twice(tmp_path):
    first = ResultStore(tmp_path, {})
    with ResultStore(tmp_path, {}):
        pass
    assert (tmp_path / LOCK_NAME).exists()  # still held by `first`
    first.close()
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.parametrize("text, message", [
    ("{garbled", r"config.json: invalid JSON \(Expecting property name enclosed in double "
                 r"quotes at line 1, column 2\); the folder's configuration cannot be compared"),
    ("[1]", r"config.json is a JSON list, not a run configuration \(an object\)"),
    ("\udc80", r"config.json: not UTF-8 text \(byte 0x80 at line 1, column 1\)"),
])
def test_a_damaged_config_json_is_named_in_one_line(tmp_path, text, message):
    (tmp_path / "config.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(OutputDirError, match=message) as e:
        ResultStore(tmp_path, {"dataset": "x", "config": {"search": {"n": 1}}})
    assert len(str(e.value)) < 300 and "\n" not in str(e.value)
    assert not (tmp_path / LOCK_NAME).exists()


def test_another_configuration_is_named_in_short(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({f"k{i}": "v" * 5000 for i in range(9)}))
    with pytest.raises(OutputDirError, match=r"k0: 'vvv.*\.\.\. -> None; .*; and 4 more\)") as e:
        ResultStore(tmp_path, {})
    assert len(str(e.value)) < 800
