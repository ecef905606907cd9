"""The CLI's bad-input suite (with `test_cli` and `test_plan_cli`): every kind exits with code 2
and an `error:` line saying what was wrong, without a traceback and without writing anything.
Simulated backend, in-process `main()`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fasttts.cli import main
from fasttts.perf.specs import load_hardware

SIM = ["--backend", "sim"]
HW = load_hardware("rtx4090").model_dump()
SOLVE = ["solve", "What is 2+3?", *SIM]
EVAL = ["eval", "--output-dir", "OUT", *SIM, "--dataset"]

#: dataset files written into the test's folder: name -> content
FILES = {
    "nan.jsonl": '{"problem": "p", "answer": NaN}\n',
    "inf.jsonl": '{"problem": "p", "answer": "1", "meta": {"x": Infinity}}\n',
    "huge.jsonl": '{"problem": "p", "answer": 1e400}\n',
    "badjson.jsonl": '{"problem": "p", "answer": "1"}\n{"problem": \n',
    "array.jsonl": '[1, 2]\n',
    "noproblem.jsonl": '{"problem": "  ", "answer": "1"}\n',
    "dup.jsonl": '{"id": "a", "problem": "p", "answer": "1"}\n{"id": "a", "problem": "q", '
                 '"answer": "2"}\n',
    "deep.jsonl": '{"problem": "p", "answer": "1"}\n{"problem": "p", "answer": "1", "x": '
                  + "[" * 100_000 + "]" * 100_000 + "}\n",
    "bigint.jsonl": '{"problem": "p", "answer": ' + "9" * 5000 + "}\n",
    "latin1.jsonl": '{"problem": "p", "answer": "1"}\n{"problem": "caf\udce9", "answer": "1"}\n',
    "surrogate.jsonl": '{"problem": "p \\ud800", "answer": "1"}\n',
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "notutf8.json": '{"name": "caf\udce9"}',
    "hw_huge.json": json.dumps({**HW, "memory_bytes": 1e18}),
    "hw_inf.json": json.dumps(HW).replace(str(HW["peak_flops"]), "Infinity"),
    "hw_overflow.json": json.dumps(HW).replace(str(HW["peak_flops"]), "1e999"),
    "trace_list.jsonl": "[1, 2]\n",
    "trace_paths.jsonl": '{"paths": 5}\n',
    "trace_tokens.jsonl": '{"paths": [{"step_tokens": ["a"]}]}\n',
    "workload_clip.json": '{"step_len_min": 50, "step_len_max": 10}',
}

KINDS = [
    ("generator KV cache over the device", SOLVE + ["--generator-kv-cache", "64TiB"],
     "do not fit: 0.9 x rtx4090 memory leaves"),
    ("1 TiB generator KV on a 24 GB card", EVAL + ["gsm8k", "--generator-kv-cache", "1TiB"],
     "KV caches of 1024.00 GiB (generator)"),
    ("verifier KV cache over the device", SOLVE + ["--verifier-kv-cache", "1TiB"],
     "1024.00 GiB (verifier) do not fit"),
    ("two KV caches that do not fit together",
     SOLVE + ["--generator-kv-cache", "4GiB", "--verifier-kv-cache", "4GiB"], "do not fit"),
    ("plan KV budget over the device", ["plan", "--kv-budget", "1000TiB"],
     "--kv-budget 1024000.00 GiB does not fit"),
    ("plan negative cache length", ["plan", "--cache-len", "-1"], "cache_len must be >= 1"),
    ("plan zero cache length", ["plan", "--cache-len", "0"], "cache_len must be >= 1"),
    ("verifier kind on the simulator", SOLVE + ["--verifier-kind", "skywork"],
     "verifier kind 'skywork' is not simulated"),
    ("verifier kind on the simulator (eval)", EVAL + ["gsm8k", "--verifier-kind", "qwen-prm"],
     "verifier kind 'qwen-prm' is not simulated"),
    ("NaN answer", EVAL + ["nan.jsonl"], "line 1: NaN is not a JSON number"),
    ("Infinity in a record", EVAL + ["inf.jsonl"], "line 1: Infinity is not a JSON number"),
    ("answer overflowing to inf", EVAL + ["huge.jsonl"], "field 'answer' is inf"),
    ("dataset line not JSON", EVAL + ["badjson.jsonl"], "line 2: invalid JSON"),
    ("dataset line an array", EVAL + ["array.jsonl"], "expected a JSON object, got list"),
    ("dataset problem blank", EVAL + ["noproblem.jsonl"], "'problem' must be a non-empty string"),
    ("dataset duplicate ids", EVAL + ["dup.jsonl"], "duplicate id 'a'"),
    ("unknown hardware", SOLVE + ["--hardware", "tpu9"], "unknown hardware spec 'tpu9'"),
    ("unknown simulated model", SOLVE + ["--generator", "gpt-9"], "gpt-9"),
    ("memory fraction zero", SOLVE + ["--memory-fraction", "0"], "memory_fraction"),
    ("memory fraction over 1", SOLVE + ["--memory-fraction", "1.5"], "memory_fraction"),
    ("generator share 1", SOLVE + ["--generator-kv-share", "1"], "generator_kv_share"),
    ("max-num-seqs zero", SOLVE + ["--max-num-seqs", "0"], "max_num_seqs"),
    ("block size zero", SOLVE + ["--block-size", "0"], "block_size"),
    ("fasttts and baseline", SOLVE + ["--fasttts", "--baseline"], "contradict each other"),
    ("iterations zero", SOLVE + ["--num-iterations", "0"], "num_iterations"),
    ("beam width zero", SOLVE + ["--beam-width", "0"], "beam_width"),
    ("sart alpha over 1", SOLVE + ["--method", "sart", "--sart-alpha", "2"], "sart_alpha"),
    ("parameter of another method", SOLVE + ["--sart-m", "2"],
     "sart_m is a parameter of method sart"),
    ("n not a number", SOLVE + ["--n", "abc"], "invalid int value: 'abc'"),
    ("negative KV size", SOLVE + ["--generator-kv-cache", "-1"], "is not a size"),
    ("zero KV size", SOLVE + ["--generator-kv-cache", "0"], "size must be > 0 bytes"),
    ("negative limit", EVAL + ["gsm8k", "--limit", "-1"], "limit must be a positive integer"),
    ("negative offset", EVAL + ["gsm8k", "--offset", "-1"], "offset must be a non-negative"),
    ("output dir below a file", ["eval", "--output-dir", "nan.jsonl/sub", *SIM, "--dataset",
                                 "gsm8k"], "is not a writable folder"),
    ("serve max-n zero", ["serve", *SIM, "--max-n", "0"], "max_n: Input should be greater than 0"),
    ("serve body limit zero", ["serve", *SIM, "--max-request-bytes", "0"],
     "size must be > 0 bytes"),
    ("serve model name missing", ["serve", *SIM, "--served-model-name"],
     "expected at least one argument"),
    ("missing workload file", SOLVE + ["--sim-workload", "no-such.json"], "no-such.json"),
    # issue 35: sizes, damaged files, bad values, serve flags
    ("n of a trillion", SOLVE + ["--n", "1000000000000"],
     "n: Input should be less than or equal to 4096"),
    ("best-of-N of 1e8", SOLVE + ["--method", "best_of_n", "--n", "100000000"],
     "n: Input should be less than or equal to 4096"),
    ("plan n of a trillion", ["plan", "--n", "1000000000000"],
     "n: Input should be less than or equal to 4096"),
    ("hardware memory 1e18", SOLVE + ["--hardware", "hw_huge.json"],
     "is over the simulator's limit of 1048576 blocks"),
    ("hardware Infinity", SOLVE + ["--hardware", "hw_inf.json"],
     "hw_inf.json: Infinity is not a JSON number"),
    ("hardware 1e999", SOLVE + ["--hardware", "hw_overflow.json"],
     "hw_overflow.json: not a valid HardwareSpec: peak_flops: Input should be a finite number"),
    ("hardware nested deep (eval)", EVAL + ["gsm8k", "--hardware", "deep.json"],
     "deep.json: JSON nested too deeply to read"),
    ("hardware nested deep (plan)", ["plan", "--hardware", "deep.json"],
     "deep.json: JSON nested too deeply to read"),
    ("generator spec not UTF-8 (plan)", ["plan", "--generator", "notutf8.json"],
     "notutf8.json: not UTF-8 text (byte 0xe9 at line 1, column 14)"),
    ("dataset nested deep", EVAL + ["deep.jsonl"], "deep.jsonl, line 2: JSON nested too deeply"),
    ("dataset 5000-digit answer", EVAL + ["bigint.jsonl"],
     "bigint.jsonl, line 1: a number with more than 4300 digits"),
    ("dataset not UTF-8", EVAL + ["latin1.jsonl"],
     "latin1.jsonl: not UTF-8 text (byte 0xe9 at line 2, column 17)"),
    ("dataset lone surrogate", EVAL + ["surrogate.jsonl"],
     "surrogate.jsonl, line 1: not valid UTF-8 text (an undecodable byte or a lone surrogate"),
    ("solve argument not UTF-8", ["solve", "caf\udce9", *SIM],
     "the problem: not valid UTF-8 text (an undecodable byte or a lone surrogate '\\udce9' at "
     "character 4)"),
    ("workload line a list", SOLVE + ["--sim-workload", "trace_list.jsonl"],
     "trace_list.jsonl, line 1: not a trace line (expected a JSON object, got a list)"),
    ("workload paths a number", SOLVE + ["--sim-workload", "trace_paths.jsonl"],
     "trace_paths.jsonl, line 1: not a trace line (paths: Input should be a valid list)"),
    ("workload step tokens text", SOLVE + ["--sim-workload", "trace_tokens.jsonl"],
     "trace_tokens.jsonl, line 1: not a trace line (paths.0.step_tokens.0: Input should be a "
     "valid integer"),
    ("workload clip min over max", SOLVE + ["--sim-workload", "workload_clip.json"],
     "step_len_min (50) is over step_len_max (10)"),
    ("workload nested deep", SOLVE + ["--sim-workload", "deep.json"],
     "deep.json: JSON nested too deeply to read"),
    ("temperature inf", SOLVE + ["--temperature", "inf"],
     "temperature: Input should be a finite number"),
    ("branch temperature inf", SOLVE + ["--method", "dynamic_branching", "--branch-temperature",
                                        "inf"], "branch_temperature: Input should be a finite"),
    ("generator empty", SOLVE + ["--generator", ""],
     "generator.model: String should have at least 1 character"),
    ("verifier empty", SOLVE + ["--verifier", ""],
     "verifier.engine.model: String should have at least 1 character"),
    ("prm train limit not a number", ["prm", "train", "--limit", "ten"],
     "argument --limit: 'ten' is not an integer >= 1"),
    ("prm train temperature inf", ["prm", "train", "--temperature", "inf"],
     "argument --temperature: 'inf' is not a finite number >= 0"),
    ("serve empty api key", ["serve", *SIM, "--api-key", ""],
     "argument --api-key: an empty --api-key would switch authentication off"),
    ("serve zero active requests", ["serve", *SIM, "--max-active-requests", "0"],
     "argument --max-active-requests: '0' is not an integer >= 1"),
    ("serve negative active requests", ["serve", *SIM, "--max-active-requests", "-1"],
     "argument --max-active-requests: '-1' is not an integer >= 1"),
    ("serve zero queue", ["serve", *SIM, "--max-queue", "0"],
     "argument --max-queue: '0' is not an integer >= 1"),
    ("serve negative queue", ["serve", *SIM, "--max-queue", "-1"],
     "argument --max-queue: '-1' is not an integer >= 1"),
    ("serve empty host", ["serve", *SIM, "--host", ""],
     "argument --host: an empty --host would bind every address"),
    ("serve port over 65535", ["serve", *SIM, "--port", "99999"],
     "argument --port: '99999' is not an integer from 0 to 65535"),
    ("serve negative port", ["serve", *SIM, "--port", "-1"],
     "argument --port: '-1' is not an integer from 0 to 65535"),
    ("serve host that does not resolve", ["serve", *SIM, "--host", "no-such-host.invalid"],
     "--host 'no-such-host.invalid' does not resolve to an address"),
    ("serve shutdown timeout nan", ["serve", *SIM, "--shutdown-timeout", "nan"],
     "argument --shutdown-timeout: 'nan' is not a finite number >= 0"),
    ("serve shutdown timeout negative", ["serve", *SIM, "--shutdown-timeout", "-1"],
     "argument --shutdown-timeout: '-1' is not a finite number >= 0"),
    ("serve request timeout zero", ["serve", *SIM, "--request-timeout", "0"],
     "argument --request-timeout: '0' is not a finite number > 0"),
    ("serve request timeout negative", ["serve", *SIM, "--request-timeout", "-5"],
     "argument --request-timeout: '-5' is not a finite number > 0"),
    ("serve request timeout nan", ["serve", *SIM, "--request-timeout", "nan"],
     "argument --request-timeout: 'nan' is not a finite number > 0"),
    ("serve empty model name", ["serve", *SIM, "--served-model-name", ""],
     "served_model_names: a served model name is empty"),
    ("serve tensor parallel zero", ["serve", "--tensor-parallel-size", "0"],
     "generator.tensor_parallel_size: Input should be greater than 0"),
    ("serve tensor parallel on the simulator", ["serve", *SIM, "--tensor-parallel-size", "2"],
     "--tensor-parallel-size applies to real vLLM engines"),
    ("serve data parallel negative", ["serve", *SIM, "--data-parallel-size", "-2"],
     "argument --data-parallel-size: '-2' is not an integer >= 1"),
    ("serve max-n over the largest budget", ["serve", *SIM, "--max-n", "100000"],
     "max_n: Input should be less than or equal to 4096"),
    ("serve body limit over 1 GiB", ["serve", *SIM, "--max-request-bytes", "2GiB"],
     "max_body_bytes: Input should be less than or equal to 1073741824"),
    ("serve empty allowed host", ["serve", *SIM, "--allowed-hosts", ""],
     "argument --allowed-hosts: an empty --allowed-hosts name allows no host"),
]


@pytest.mark.parametrize("kind, argv, message", KINDS, ids=[k[0] for k in KINDS])
def test_bad_invocation_is_exit_2_with_an_error_line(kind, argv, message, tmp_path, monkeypatch,
                                                     capsys):
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    before = sorted(p.name for p in tmp_path.iterdir())
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error: " in err and message in err, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_a_second_eval_into_a_held_folder_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom fasttts.eval.runner import ResultStore\n"
         "with ResultStore(sys.argv[1], {}):\n    print('holding', flush=True)\n"
         "    sys.stdin.read()\n", str(out)], text=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline() == "holding\n"
        before = sorted(p.name for p in out.iterdir())
        code = main(["eval", *SIM, "--dataset", "gsm8k", "--limit", "1", "--output-dir",
                     str(out)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert err == (f"error: {out} is being written by another process (pid {holder.pid}, "
                       f"lock file {out}/.fasttts.lock); wait for it to finish, or use another "
                       f"--output-dir\n")
        assert sorted(p.name for p in out.iterdir()) == before
    finally:
        holder.communicate("")
