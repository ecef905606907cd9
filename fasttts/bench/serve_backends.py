"""What serves one row of a serving benchmark: the simulated device on its virtual clock, or
real engines behind `fasttts serve` on loopback (`fasttts.bench.sart_latency`).

Both take a row (method, N, its own SART settings), an arrival rate (req/s; inf: all at
time 0) and a request count, and return the requests' records and the engine totals after
the drain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fasttts.eval.datasets import Problem

__all__ = ["LoopbackBackend", "SimBackend", "sim_run_config"]

#: Share of the KV memory the generator gets on the simulated device: the PRM caches the
#: live branches' paths for incremental scoring, at 57 KiB a token against the 14B's 192 KiB,
#: so it needs about a quarter of what the generator does.
SIM_GENERATOR_KV_SHARE = 0.75
#: The long-CoT context (R1-distill evaluations run at 32K) and generation cap (the recorded
#: data's, 32768 - 2500).
SIM_MAX_MODEL_LEN, SIM_MAX_TOKENS = 32768, 30268


def sim_run_config(search, hardware: str = "h100", slots: int | None = None):
    """The simulated run of the SART benchmark: DeepSeek-R1-Distill-Qwen-14B + Qwen2.5-Math-
    PRM-7B on one `hardware` device, the long-CoT GPQA workload, incremental verification,
    and B = `slots` decode slots (default: the generator's KV cache over the workload's mean
    branch length, SART's "B configured via the workload information").

    Raises:
        ValueError: the models do not fit the device.
    """
    from fasttts.backends.sim import sim_device
    from fasttts.backends.sim.longcot import LongCoTModel, mean_length
    from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SimConfig,
                                VerifierConfig)

    def engine(model):
        return EngineConfig(model=model, max_model_len=SIM_MAX_MODEL_LEN)

    cfg = RunConfig(backend="sim", generator=engine("deepseek-r1-distill-qwen-14b"),
                    verifier=VerifierConfig(engine=engine("qwen2.5-math-prm-7b")),
                    search=search, runtime=RuntimeConfig(incremental_verification=True),
                    sim=SimConfig(hardware=hardware, workload="longcot-gpqa",
                                  generator_kv_share=SIM_GENERATOR_KV_SHARE))
    if slots is None:
        dev = sim_device(cfg)
        tokens = dev.split.generator_kv // dev.generator.kv_bytes_per_token
        mean = mean_length(LongCoTModel.load("longcot-gpqa"), search.max_tokens)
        slots = max(1, int(tokens // mean))
    return cfg.model_copy(update={"sim": cfg.sim.model_copy(update={"max_num_seqs": slots})})


@dataclass
class SimBackend:
    """Rows on the simulated device (`fasttts.bench.serving.serve_virtual`).

    Attributes:
        problems: the requests' problems.
        make_search: row -> SearchConfig.
        seed: arrival seed.
        make_config: SearchConfig -> the RunConfig of the simulated run (default
            `sim_run_config`: the paper-scale device and long-CoT workload).
    """

    problems: list[Problem]
    make_search: object
    seed: int = 0
    make_config: object = None
    kind: str = "sim"

    def serve(self, row, rate: float, count: int, on_request) -> tuple[list[dict], dict]:
        """Serve `count` requests of `row` arriving at `rate` req/s on the virtual clock;
        `on_request(record)` after each. Returns (per-request records, the row's totals)."""
        from fasttts.api import FastTTS
        from fasttts.bench.sart_latency import arrivals
        from fasttts.bench.serving import serve_virtual

        search = self.make_search(row)
        cfg = (self.make_config or sim_run_config)(search)
        if row.runtime:
            cfg = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(
                update=dict(row.runtime))})
        with FastTTS(cfg) as tts:
            for p in self.problems:
                tts.set_reference(p.problem, p.answer)
            recs, totals = serve_virtual(tts, search, arrivals(self.problems, rate, count,
                                                               self.seed), on_request=on_request)
        return recs, totals | {"slots": cfg.sim.max_num_seqs}


@dataclass
class LoopbackBackend:
    """Rows on real engines behind `fasttts serve` (`fasttts.bench.loopback`).

    Attributes:
        base: the server's URL.
        problems: the requests' problems.
        make_search: row -> SearchConfig (its method, n, SART settings and max_tokens are
            sent as the request's `tts` options and `max_tokens`).
        seed: arrival seed.
        min_duration_s: a row's arrivals last at least this long (count = max(count,
            rate x min_duration_s)).
    """

    base: str
    problems: list[Problem]
    make_search: object
    seed: int = 0
    min_duration_s: float = 0.0
    kind: str = "vllm"
    _next: int = 0

    def serve(self, row, rate: float, count: int, on_request) -> tuple[list[dict], dict]:
        """Send `count` requests of `row` (at least `min_duration_s` of arrivals) at `rate`
        req/s to the server, wall clock; `on_request(record)` after each. Returns
        (per-request records, the row's totals, with the server's KV blocks after the drain)."""
        from fasttts.bench.loopback import drain_state, send_poisson

        search = self.make_search(row)
        if not math.isinf(rate):
            count = max(count, math.ceil(rate * self.min_duration_s))
        tts = {"method": search.method, "n": search.n} | {
            k: getattr(search, k) for k in search.model_fields_set if k.startswith("sart_")}
        recs = send_poisson(self.base, tts, rate, count, self.problems, search.max_tokens,
                            self.seed, self._next, on_request)
        self._next += count
        held = drain_state(self.base)
        return recs, {"kv_blocks_after": held.get("fasttts_kv_blocks_used"),
                      "running_after": held.get("fasttts_running_sequences")}
