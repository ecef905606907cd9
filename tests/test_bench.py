"""`fasttts bench`: the recipe list, bad input refused before anything runs, the resumable row
store, and the virtual-clock serving loop (arrivals, queueing, admission, drain) on a small
simulated configuration; plus one whole recipe run at a tiny size (the harness smoke test)."""

from __future__ import annotations

import json
import math

import pytest

from fasttts.bench import RECIPES
from fasttts.bench.sart_latency import ROWS, Row, Sizes, _search, arrivals, run, sim_questions
from fasttts.bench.serve_backends import SimBackend
from fasttts.bench.serving import Request, latency_row, poisson_arrivals, serve_virtual
from fasttts.bench.store import RowsFileWarning, RowStore
from fasttts.cli import main
from fasttts.config import EngineConfig, RunConfig, SearchConfig, SimConfig, VerifierConfig
from fasttts.eval.datasets import Problem


def test_list_names_every_recipe_with_its_backends_and_times(capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for r in RECIPES.values():
        assert r.name in out and ",".join(r.backends) in out and r.quick_time in out


@pytest.mark.parametrize("argv, message", [
    (["bench", "nope", "--out", "OUT"], "unknown recipe 'nope'"),
    (["bench", "sart-latency", "--out", "OUT", "--rates", "0,0.1"], "--rates takes two"),
    (["bench", "sart-latency", "--out", "OUT", "--rates", "0.1"], "--rates takes two"),
    (["bench", "sart-latency", "--out", "OUT", "--backend", "tpu"], "invalid choice: 'tpu'"),
    (["bench", "sart-latency", "--out", "/proc/x"], "cannot be written"),
    (["bench", "sart-latency"], "--out is required"),
    (["bench", "planner", "--out", "OUT", "--seed", "3"],
     "planner --backend sim does not take --seed: it takes no option beyond --out, --quick "
     "and --backend"),
    (["bench", "fig12", "--out", "OUT", "--rates", "1,2"],
     "fig12 --backend sim does not take --rates: it takes --max-tokens, --seed, --problems, "
     "--n"),
    (["bench", "sart-latency", "--out", "OUT", "--port", "9000"],
     "sart-latency --backend sim does not take --port"),
    (["bench", "all", "--out", "OUT", "--port", "9000"], "all --backend sim does not take --port"),
    (["bench", "fig12", "--out", "OUT", "--dtype", "bfloat16"],
     "fig12 --backend sim does not take --dtype"),
    (["bench", "calibration", "--out", "OUT", "--dtype", "float32"],
     "calibration --backend sim does not take --dtype: it takes no option beyond --out, "
     "--quick and --backend"),
    (["bench", "real-ablation", "--out", "OUT", "--dtype", "fp8"], "invalid choice: 'fp8'"),
    (["bench", "fig12", "--out", "OUT", "--n", "8,x"], "--n takes integers >= 1"),
    (["bench", "fig12", "--out", "OUT", "--n", "0"], "--n takes integers >= 1"),
    (["bench", "fig12", "--out", "OUT", "--problems", "0"], "--problems must be >= 1, got 0"),
    (["bench", "sart-latency", "--out", "OUT", "--sart-t", "0"], "--sart-t must be >= 1, got 0"),
    (["bench", "real-ablation", "--out", "OUT", "--tie-tolerance", "-0.1"],
     "--tie-tolerance must be a finite number of logits >= 0 (0 = exact ranking), got -0.1"),
    (["bench", "fig12", "--out", "OUT", "--tie-tolerance", "nan"], "got nan"),
    (["bench", "sart-latency", "--out", "OUT", "--tie-tolerance", "0.01"],
     "sart-latency --backend sim does not take --tie-tolerance"),
])
def test_bad_input_exits_2_before_anything_is_written(argv, message, tmp_path, capsys):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    with pytest.raises(SystemExit) if "invalid choice" in message else _no_exit() as e:
        code = main(argv)
    assert (e.value.code if e else code) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


class _no_exit:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_the_row_store_resumes_and_sets_damaged_lines_aside(tmp_path):
    store = RowStore(tmp_path / "o", {"recipe": "x"})
    store.append("a", {"p50_s": 1.0}, [{"index": 0}])
    store.append("b", {"p50_s": 2.0}, [])
    path = tmp_path / "o" / "rows.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "not json\n" + lines[1] + '{"key": "c", "row"')  # cut short
    with pytest.warns(RowsFileWarning, match="line 2"):
        again = RowStore(tmp_path / "o", {"recipe": "x"})
    assert again.done == {"a", "b"}
    assert (tmp_path / "o" / "rows.jsonl.bad").read_text() == "not json\n"
    assert path.read_text() == lines[0] + lines[1]
    with pytest.raises(ValueError, match="another benchmark configuration"):
        RowStore(tmp_path / "o", {"recipe": "y"})


def test_poisson_arrivals_are_seeded_and_have_the_rate():
    a = poisson_arrivals(0.5, 4000, seed=3)
    assert a == poisson_arrivals(0.5, 4000, seed=3) != poisson_arrivals(0.5, 4000, seed=4)
    assert len(a) / a[-1] == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match="rate must be > 0"):
        poisson_arrivals(0.0, 3, 0)


def _small(search: SearchConfig, slots: int = 256) -> RunConfig:
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                     search=search, sim=SimConfig(hardware="rtx4090", max_num_seqs=slots))


def _serve(method: str, n: int, times: list[float], slots: int = 256):
    from fasttts.api import FastTTS

    search = SearchConfig(method=method, n=n, max_tokens=256)
    probs = [Problem(id=f"p{i}", problem=f"what is {i} + {i}?", answer=str(2 * i))
             for i in range(len(times))]
    with FastTTS(_small(search, slots)) as tts:
        reqs = [Request(i, t, p) for i, (t, p) in enumerate(zip(times, probs))]
        return serve_virtual(tts, search, reqs)


def test_serving_on_the_virtual_clock_queues_what_does_not_fit():
    # 4 slots and self-consistency N = 4: the first request takes every slot, so requests 2
    # and 3 (arriving at once) wait until one of its branches ends and frees a slot (not
    # until it ends: branch-level admission); a late request (t = 1000 s, after a quiet gap
    # the clock jumps over) starts at its arrival. Nothing is held after the drain.
    recs, totals = _serve("self_consistency", 4, [0.0, 0.0, 0.0, 1000.0], slots=4)
    assert [r["index"] for r in recs] == [0, 1, 2, 3] and all(r["error"] is None for r in recs)
    assert recs[0]["queue_s"] == 0 and 0 < recs[1]["start_s"] < recs[0]["end_s"]
    assert recs[1]["start_s"] <= recs[2]["start_s"]
    assert recs[3]["start_s"] == 1000.0 and recs[3]["queue_s"] == 0
    assert all(r["latency_s"] == pytest.approx(r["queue_s"] + r["inference_s"]) for r in recs)
    assert totals["kv_blocks_after"] == 0 and totals["verifier_share"] == 0.0


def test_the_latency_row_by_hand():
    recs = [{"error": None, "latency_s": x, "queue_s": q, "inference_s": x - q, "tokens": t,
             "correct": c} for x, q, t, c in ((1, 0, 10, True), (2, 1, 20, False),
                                               (4, 2, 30, True))] + [
        {"error": "boom", "latency_s": 9, "queue_s": 0, "inference_s": 9, "tokens": 0,
         "correct": None}]
    row = latency_row(recs)
    assert row["p50_s"] == 2 and row["p99_s"] == pytest.approx(2 + 2 * 0.98)
    assert row["queue_s"] == 1 and row["inference_s"] == pytest.approx(4 / 3)
    assert row["accuracy"] == pytest.approx(2 / 3) and row["tokens_per_request"] == 20
    assert row["failed"] == 1 and row["requests"] == 4


def test_a_whole_recipe_at_a_tiny_size_resumes_without_running_a_row_twice(tmp_path):
    # the harness smoke test: capacity, then every row at two rates, on a small config
    problems = sim_questions(6)

    def make_search(row: Row):
        return _search(row, 192, 16)

    backend = SimBackend(problems, make_search, make_config=lambda s: _small(s, 8))
    served = []
    serve = backend.serve

    def counting(row, rate, count, on_request):
        served.append((row.label, row.n, rate))
        return serve(row, rate, count, on_request)

    backend.serve = counting
    rows = (ROWS[0], ROWS[-1])
    store = RowStore(tmp_path / "o", {"recipe": "t"})
    cap, result = run(store, backend, rows, Sizes(3, 2), lambda d, t: None)
    assert cap["capacity_rps"] > 0 and len(result) == 4 and len(served) == 5
    assert [r["rate_name"] for r in result] == ["low", "low", "high", "high"]
    assert result[2]["rate"] == pytest.approx(3 * result[0]["rate"])
    assert all(r["failed"] == 0 and r["kv_blocks_after"] == 0 for r in result)
    # a rerun finds every row done
    cap2, result2 = run(RowStore(tmp_path / "o", {"recipe": "t"}), backend, rows, Sizes(3, 2),
                        lambda d, t: None)
    assert len(served) == 5 and result2 == result and cap2 == cap
    lines = (tmp_path / "o" / "rows.jsonl").read_text().splitlines()
    assert len(lines) == 5 and len({json.loads(x)["key"] for x in lines}) == 5


def test_every_row_of_a_rate_sees_the_same_arrivals():
    probs = sim_questions(10)
    a, b = arrivals(probs, 0.1, 20, seed=7), arrivals(probs, 0.1, 20, seed=7)
    assert [(r.arrival_s, r.problem.id) for r in a] == [(r.arrival_s, r.problem.id) for r in b]
    assert all(r.arrival_s == 0 for r in arrivals(probs, math.inf, 5, seed=7))


def test_nan_cells_are_written_as_null_and_read_back(tmp_path):
    from fasttts.jsonio import read_json, read_jsonl

    with RowStore(tmp_path / "o", {"recipe": "x"}) as store:
        store.append("k", {"ratio": math.nan, "cells": [1.0, math.inf]}, [])
        path = store.write_summary({"rows": [{"median": math.nan}]})
    assert read_json(path) == {"rows": [{"median": None}]}
    assert [v["row"] for _, v in read_jsonl(tmp_path / "o" / "rows.jsonl")] == [
        {"ratio": None, "cells": [1.0, None]}]
    assert store.rows[0]["row"]["ratio"] is None


def test_compare_tables_refuse_a_file_that_is_not_a_comparison(tmp_path, capsys):
    from fasttts.bench import compare

    path = tmp_path / "rows.jsonl"
    path.write_text('{"key": "capacity", "row": {"method": "sart"}}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"rows.jsonl line 1: not a run of a comparison"):
        compare.read_rows(str(path))
    with pytest.raises(SystemExit) as exit_:
        compare.main([str(path)])
    assert exit_.value.code == 2
    assert "not a run of a comparison" in capsys.readouterr().err


def test_problems_and_n_size_a_comparison_recipe(tmp_path, capsys):
    # fig11 --quick is 2 AIME problems x n = 32 (fasttts.bench.fig11.plan); --problems 1 --n 4
    # runs one problem at n = 4 for every method and configuration, and the plan says so
    from fasttts.bench.fig11 import plan

    assert main(["bench", "fig11", "--quick", "--problems", "1", "--n", "4", "--out",
                 str(tmp_path / "o")]) == 0
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["plan"]["limit"] == 1 and config["plan"]["ns"] == [4]
    rows = [json.loads(line)["row"] for line in (tmp_path / "o" / "rows.jsonl").open()]
    quick = plan(True)
    assert len(rows) == len(quick.settings) * len(quick.configs) * len(quick.datasets)
    assert {r["n"] for r in rows} == {4}


def test_all_records_each_recipe_without_the_flags_it_does_not_take():
    from fasttts.cli.bench import _recipe_argv

    argv = ["bench", "all", "--quick", "--seed", "3", "--port=9", "--out", "D"]
    assert _recipe_argv(argv, "planner", "D/planner", ("--seed", "--port")) == [
        "bench", "planner", "--quick", "--out", "D/planner"]
    assert _recipe_argv(argv, "fig12", "D/fig12", ("--port",)) == [
        "bench", "fig12", "--quick", "--seed", "3", "--out", "D/fig12"]


def test_every_script_left_in_benchmarks_says_why_it_is_not_a_recipe():
    # issue 36: what stays in benchmarks/ is a thin wrapper or a one-off whose header says why
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "benchmarks"
    silent = []
    for path in sorted(root.glob("*.py")) + sorted(root.glob("*.sh")):
        text = path.read_text()
        head = (ast.get_docstring(ast.parse(text)) or "") if path.suffix == ".py" else "\n".join(
            line for line in text.splitlines() if line.startswith("#"))
        if "fasttts bench" not in " ".join(head.split()):
            silent.append(path.name)
    assert silent == [], f"say why these are not `fasttts bench` recipes: {silent}"
