"""The CLI's bad-input suite (with `test_cli` and `test_plan_cli`): every kind exits with code 2
and an `error:` line saying what was wrong, without a traceback and without writing anything.
Simulated backend, in-process `main()`."""

from __future__ import annotations

import pytest

from fasttts.cli import main

SIM = ["--backend", "sim"]
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
]


@pytest.mark.parametrize("kind, argv, message", KINDS, ids=[k[0] for k in KINDS])
def test_bad_invocation_is_exit_2_with_an_error_line(kind, argv, message, tmp_path, monkeypatch,
                                                     capsys):
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
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
