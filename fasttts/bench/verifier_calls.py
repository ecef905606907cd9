"""Recorded verifier scoring calls of a real search, and their price on the simulator.

`fasttts bench verifier-modes` records every scoring call of a real beam search, in both
verification modes, as one JSON line (problem_id, kv_bytes, the engines' num_threads and
dtype, and per mode its measured seconds, the engine's KV block size and the waves of token
ids the verifier prefilled: `waves_of`). This module reads such files (`read_calls`), replays
a call on the simulated verifier engine of its mode (`SimVerifierReplay`), priced on the CPU
calibration of its recorded dtype and threads (`recorded_hardware`), and turns the calls into
`fasttts.perf.calibration.MeasuredCall`s for the CPU fit (`call_shapes`; `fasttts bench
calibration`).
"""

from __future__ import annotations

import json
from pathlib import Path

from fasttts.config import DEFAULT_GENERATOR, EngineConfig
from fasttts.verifiers.base import ScoreRequest

__all__ = ["MAX_MODEL_LEN", "SimVerifierReplay", "block_size_of", "calibration_for",
           "call_shapes", "default_threads", "read_calls", "recorded_hardware", "waves_of"]

MiB = 1 << 20
#: The verifier engines' max_model_len in the recorded searches (`fasttts bench
#: verifier-modes`) and the synthetic grid (benchmarks/verifier_calibration.py).
MAX_MODEL_LEN = 4096


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


def calibration_for(dtype: str | None, num_threads: int | None, isa: str | None = None):
    """The CPU hardware spec (`fasttts.engines.real.cpu_calibration`) that prices a real
    verifier engine of `dtype` running `num_threads` threads on a CPU of instruction set `isa`
    (`fasttts.engines.platform_info.cpu_isa`); dtype None = this machine's dtype ("auto"),
    threads and instruction set (fasttts's default engine threads: every usable core); isa
    None with a dtype given = the dtype's first listed (what a record without one was measured
    on)."""
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.engines.platform_info import cpu_isa
    from fasttts.engines.real import cpu_calibration
    from fasttts.perf.specs import load_hardware

    here = dtype is None
    return load_hardware(cpu_calibration(resolve_dtype("auto") if here else dtype,
                                         num_threads or default_threads(),
                                         cpu_isa() if here else isa))


def default_threads() -> int:
    """fasttts's default engine threads (`EngineConfig.num_threads`: every usable core)."""
    return EngineConfig(model=DEFAULT_GENERATOR).num_threads


def recorded_hardware(rec: dict, hardware=None):
    """The spec that prices a recorded call or grid row: `hardware` if given, else the CPU
    calibration of the record's `dtype`, `num_threads` and `cpu_isa` (a record without them
    counts as one thread, this machine's dtype and, with a dtype, that dtype's first listed
    instruction set; every committed record carries dtype and threads and predates
    `cpu_isa`)."""
    return hardware or calibration_for(rec.get("dtype"), rec.get("num_threads", 1),
                                       rec.get("cpu_isa"))


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
                                    calibration_for(recs[0].get("dtype"), 1,
                                                    recs[0].get("cpu_isa")))
            for r in recs:
                sim.call(r["modes"][mode]["waves"])
                if r["modes"][mode]["seconds"] > min_seconds:
                    out.append(MeasuredCall(f"verifier {mode}", pid, tuple(sim.last_steps),
                                            r["modes"][mode]["seconds"]))
    return out


def waves_of(verifier, reqs: list[ScoreRequest], incremental: bool) -> list[list[list[int]]]:
    """The prefills the real verifier sends for `reqs` (`fasttts.verifiers.pooling`): one
    wave, each path whole (whole-path) or each path with new steps up to its last tag
    (incremental; a second round, for new tags found inside the cached prefix, depends on
    the cache and is not listed)."""
    if not incremental:
        return [[verifier.prompt_ids(r.problem, r.steps) for r in reqs]]
    return [verifier.prefills(reqs)]
