"""Asymmetric multi-model memory allocation (FastTTS section 4.3): split a KV-cache budget
between the verifier and the generator by a roofline model of the whole search iteration.

Roofline-guided KV allocation (section 4.3.1). For N requests (beams), verifier input length
S, generation length S_dec and mean cached length S_cache during decoding, the iteration takes

    T_tot(B_pre, B_dec) = ceil(N / B_pre) * T_roof(verifier prefill of B_pre x S tokens)
                        + ceil(N / B_dec) * S_dec * T_roof(generator decode of B_dec sequences
                                                           at context S_cache)

subject to B_pre * KVBytes_ver(1, S) + B_dec * KVBytes_gen(1, S_dec) <= M. Latency falls
monotonically with memory, so the optimum uses the whole budget: for every feasible integer
B_pre the largest B_dec that fits is taken, T_tot evaluated, and the minimum kept; ties go to
the larger B_dec (decoding is the more memory-sensitive stage). T_roof is
`fasttts.backends.sim.roofline.step_time` on the hardware spec.

Offloading (section 4.3.2). When M is very small, the inactive model's KV cache can be moved
to host memory between phases, so each model alone may use all of M:
B_pre <= M / KVBytes_ver(1, S), B_dec <= M / KVBytes_gen(1, S_dec); this costs moving up to M
bytes out and M bytes in at each of the two phase switches of an iteration, 4 M / host
bandwidth. The planner picks whichever of the coupled and the offload plan is faster. Devices
whose memory is host memory (CPUs) have no host link: offloading does not apply there.

The static split of the search-and-learn baseline (the generator gets a fixed share of M) is
evaluated by the same T_tot, for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fasttts.backends.sim.roofline import StepShape, step_time
from fasttts.backends.sim.specs import HardwareSpec, ModelSpec

__all__ = ["MemoryPlan", "PlanError", "PlanInput", "iteration_time", "plan_for_run", "plan_input",
           "plan_memory", "plan_real_engines", "plan_within", "real_model_specs", "static_plan",
           "apply_real_plan", "engine_slots"]


class PlanError(ValueError):
    """The budget cannot hold one verifier and one generator sequence (and offloading does not
    apply or is off)."""


@dataclass(frozen=True)
class PlanInput:
    """The workload and machine the planner sizes for.

    Attributes:
        memory_bytes: M, the KV-cache budget shared by the two models (bytes).
        generator, verifier: the models' shapes.
        hardware: the roofline (P, BW) and host link.
        num_requests: N, beams per iteration.
        verifier_len: S, tokens of one verifier input.
        decode_len: S_dec, tokens a generator sequence generates (and holds in its KV).
        cache_len: mean cached length during decoding (tokens); default S_dec / 2.
        shared_len: tokens of each sequence (verifier input and generator sequence) that it
            shares with other sequences of the iteration through the prefix cache (tokens;
            0 = the paper's accounting, every sequence holds all its tokens).
        share: sequences that share those tokens (beam search: the beam_width siblings of
            one parent), so each holds shared_len / share of them.
        verifier_floor, generator_floor: bytes each KV cache takes however small its batch
            is (an engine must hold one max_model_len sequence); the coupled constraint becomes
            max(B_pre * KVBytes_ver, verifier_floor) + max(B_dec * KVBytes_gen,
            generator_floor) <= M. 0 = the paper's.
    """

    memory_bytes: int
    generator: ModelSpec
    verifier: ModelSpec
    hardware: HardwareSpec
    num_requests: int
    verifier_len: int
    decode_len: int
    cache_len: int | None = None
    shared_len: int = 0
    share: int = 1
    verifier_floor: int = 0
    generator_floor: int = 0

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "num_requests", "verifier_len", "decode_len", "share"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.shared_len <= min(self.verifier_len, self.decode_len):
            raise ValueError(f"shared_len must be within 0..min(S, S_dec) = "
                             f"{min(self.verifier_len, self.decode_len)}, got {self.shared_len}")

    def _held(self, length: int) -> int:
        """Tokens one sequence of `length` tokens holds in the KV cache (its shared tokens
        counted once per `share` sequences)."""
        return length - self.shared_len + math.ceil(self.shared_len / self.share)

    @property
    def kv_ver(self) -> int:
        """KVBytes_ver(1, S): one verifier sequence's KV (bytes), shared tokens split."""
        return self._held(self.verifier_len) * self.verifier.kv_bytes_per_token

    @property
    def kv_gen(self) -> int:
        """KVBytes_gen(1, S_dec): one generator sequence's KV (bytes), shared tokens split."""
        return self._held(self.decode_len) * self.generator.kv_bytes_per_token

    @property
    def s_cache(self) -> int:
        return self.cache_len if self.cache_len is not None else self.decode_len // 2


@dataclass(frozen=True)
class MemoryPlan:
    """A memory split and the batch caps that go with it.

    Attributes:
        b_pre: verifier batch (sequences per prefill pass).
        b_dec: generator decode batch (running sequences).
        verifier_kv_bytes, generator_kv_bytes: KV-cache sizes (bytes) that hold those batches.
        offload: the inactive model's KV cache is offloaded to host memory between phases.
        t_total: predicted iteration time (s), transfer overhead included.
        t_verify, t_decode: its verifier and generator parts (s).
        t_offload: the transfer overhead (s), 0 without offloading.
        kind: "roofline", "offload" or "static".
    """

    b_pre: int
    b_dec: int
    verifier_kv_bytes: int
    generator_kv_bytes: int
    offload: bool
    t_total: float
    t_verify: float
    t_decode: float
    t_offload: float
    kind: str

    def throughput(self, inp: PlanInput) -> float:
        """Predicted generated tokens per second of the iteration (N * S_dec / T_tot)."""
        return inp.num_requests * inp.decode_len / self.t_total


def iteration_time(inp: PlanInput, b_pre: int, b_dec: int) -> tuple[float, float]:
    """(verifier time, generator time) of one iteration at batches (b_pre, b_dec), seconds
    (the two terms of T_tot; module docstring)."""
    n, hw = inp.num_requests, inp.hardware
    pre = step_time(inp.verifier, hw, StepShape.uniform(b_pre, inp.verifier_len, 0, logits=False))
    dec = step_time(inp.generator, hw, StepShape.uniform(b_dec, 1, inp.s_cache))
    return math.ceil(n / b_pre) * pre, math.ceil(n / b_dec) * inp.decode_len * dec


def _plan(inp: PlanInput, b_pre: int, b_dec: int, kind: str, overhead: float = 0.0) -> MemoryPlan:
    tv, tg = iteration_time(inp, b_pre, b_dec)
    ver = b_pre * inp.kv_ver if kind == "offload" else max(b_pre * inp.kv_ver, inp.verifier_floor)
    return MemoryPlan(b_pre, b_dec, ver, b_dec * inp.kv_gen, kind == "offload",
                      tv + tg + overhead, tv, tg, overhead, kind)


def _coupled(inp: PlanInput) -> MemoryPlan | None:
    n, m = inp.num_requests, inp.memory_bytes
    best = None
    for b_pre in range(1, min(n, m // inp.kv_ver) + 1):
        left = m - max(b_pre * inp.kv_ver, inp.verifier_floor)
        if left < inp.generator_floor:
            break
        b_dec = min(n, left // inp.kv_gen)
        if b_dec < 1:
            break
        tv, tg = iteration_time(inp, b_pre, b_dec)
        key = (tv + tg, -b_dec)
        if best is None or key < best[0]:
            best = (key, b_pre, b_dec)
    return None if best is None else _plan(inp, best[1], best[2], "roofline")


def _fastest(count: int, cost) -> int:
    """The batch in 1..count with the least cost(batch); ties go to the larger batch."""
    return min(range(1, count + 1), key=lambda b: (cost(b), -b))


def plan_within(inp: PlanInput, generator_bytes: int, verifier_bytes: int) -> MemoryPlan | None:
    """The fastest batch caps for a KV split that stays as it is (re-planning without resizing
    the engines): B_pre <= verifier_bytes / KVBytes_ver(1, S), B_dec <= generator_bytes /
    KVBytes_gen(1, S_dec), both <= N. The two terms of T_tot then depend on one batch each, so
    each is minimised on its own (ties to the larger batch). Kind "fixed".

    Returns:
        The plan, or None when a share cannot hold one sequence.
    """
    n = inp.num_requests
    cap_pre = min(n, verifier_bytes // inp.kv_ver)
    cap_dec = min(n, generator_bytes // inp.kv_gen)
    if cap_pre < 1 or cap_dec < 1:
        return None
    b_pre = _fastest(cap_pre, lambda b: iteration_time(inp, b, 1)[0])
    b_dec = _fastest(cap_dec, lambda b: iteration_time(inp, 1, b)[1])
    tv, tg = iteration_time(inp, b_pre, b_dec)
    return MemoryPlan(b_pre, b_dec, verifier_bytes, generator_bytes, False, tv + tg, tv, tg, 0.0,
                      "fixed")


def _offload(inp: PlanInput) -> MemoryPlan | None:
    bw = inp.hardware.host_bandwidth
    b_pre = min(inp.num_requests, inp.memory_bytes // inp.kv_ver)
    b_dec = min(inp.num_requests, inp.memory_bytes // inp.kv_gen)
    if bw is None or b_pre < 1 or b_dec < 1:
        return None
    return _plan(inp, b_pre, b_dec, "offload", 4 * inp.memory_bytes / bw)


def plan_memory(inp: PlanInput, allow_offload: bool = True) -> MemoryPlan:
    """The fastest split of `inp.memory_bytes` (module docstring; FastTTS section 4.3).

    Args:
        inp: budget, models, hardware, workload.
        allow_offload: also consider offloading the inactive model's KV cache (section 4.3.2).

    Raises:
        PlanError: no plan fits (the message gives the per-sequence sizes and the budget).
    """
    coupled = _coupled(inp)
    offload = _offload(inp) if allow_offload else None
    plans = [p for p in (coupled, offload) if p is not None]
    if not plans:
        why = (" and offloading does not apply (the device has no host link)"
               if allow_offload and inp.hardware.host_bandwidth is None else "")
        raise PlanError(
            f"a KV budget of {inp.memory_bytes / 2**20:.1f} MiB cannot hold one verifier sequence "
            f"of {inp.verifier_len} tokens ({inp.kv_ver / 2**20:.1f} MiB) plus one generator "
            f"sequence of {inp.decode_len} tokens ({inp.kv_gen / 2**20:.1f} MiB){why}; give "
            f"more memory or shorter sequences")
    return min(plans, key=lambda p: (p.t_total, -p.b_dec))


#: Tokens of a path's newest step, the part siblings do not share (the simulated and real
#: workloads' median steps are 34-90 tokens).
PLAN_STEP_LEN = 64
#: Methods whose paths of one iteration share their parent's prefix with beam_width siblings.
TREE_METHODS = ("beam_search", "dvts", "vg_search", "dynamic_branching")


def plan_input(cfg, budget: int, generator: ModelSpec, verifier: ModelSpec,
               hardware: HardwareSpec, seq_len: int | None = None,
               verifier_floor: int = 0, generator_floor: int = 0) -> PlanInput:
    """The workload the planner sizes a run for.

    N = search n beams; S = S_dec = `seq_len` if given (a measured mean path length), else
    `runtime.plan_seq_len`, else 256 + max_tokens / 2 tokens, at most the generator's context;
    S_cache = S_dec / 2. Prefix sharing: all but the newest step (`PLAN_STEP_LEN` tokens) of a
    path is shared by the beam_width children of its parent (`PlanInput.shared_len`, `share`);
    a method whose paths share only the prompt (best-of-N, self-consistency, SART) shares
    nothing here. `verifier_floor`, `generator_floor`: see `PlanInput` (bytes).

    Raises:
        ValueError: a size below 1 (see `PlanInput`).
    """
    seq_len = min(seq_len or cfg.runtime.plan_seq_len or 256 + cfg.search.max_tokens // 2,
                  cfg.generator.max_model_len)
    tree = cfg.search.method in TREE_METHODS
    return PlanInput(memory_bytes=budget, generator=generator, verifier=verifier,
                     hardware=hardware, num_requests=cfg.search.n, verifier_len=seq_len,
                     decode_len=seq_len,
                     shared_len=max(0, seq_len - PLAN_STEP_LEN) if tree else 0,
                     share=min(cfg.search.beam_width, cfg.search.n) if tree else 1,
                     verifier_floor=verifier_floor, generator_floor=generator_floor)


def plan_for_run(cfg, budget: int, generator: ModelSpec, verifier: ModelSpec,
                 hardware: HardwareSpec, allow_offload: bool,
                 verifier_min_tokens: int, seq_len: int | None = None,
                 generator_min_tokens: int = 0) -> tuple[MemoryPlan, int]:
    """The plan a run applies, and the verifier's KV-cache size under it (bytes).

    The workload is `plan_input(cfg, budget, ..., seq_len)`. Without offloading the verifier
    gets what B_pre sequences need, but at least `verifier_min_tokens` tokens (one longest
    sequence; the plan's B_dec counts that floor), and the generator the rest of `budget`
    (decoding is the more memory-sensitive stage), at least `generator_min_tokens` tokens;
    with offloading each gets all of it.

    Raises:
        PlanError: nothing fits.
    """
    floor = verifier_min_tokens * verifier.kv_bytes_per_token
    plan = plan_memory(plan_input(cfg, budget, generator, verifier, hardware, seq_len, floor,
                                  generator_min_tokens * generator.kv_bytes_per_token),
                       allow_offload)
    return plan, budget if plan.offload else plan.verifier_kv_bytes


def real_model_specs(cfg) -> tuple[ModelSpec, ModelSpec]:
    """The (generator, verifier) model specs of a real-engine config.

    Raises:
        PlanError: a model without a spec.
    """
    from fasttts.backends.sim.specs import find_model_spec

    specs = []
    for model in (cfg.generator.model, cfg.verifier.engine.model):
        spec = find_model_spec(model)
        if spec is None:
            raise PlanError(f"the memory planner has no model spec for {model!r}; add a JSON "
                            f"spec to fasttts/backends/sim/specs/models/ or turn the planner off")
        specs.append(spec)
    return specs[0], specs[1]


def plan_real_engines(cfg, hardware: str):
    """`cfg` (a RunConfig for real vLLM engines) with the planner's KV sizes and batch caps
    applied (`apply_real_plan`): the generator's and verifier's `kv_cache_memory_bytes`
    re-split from their sum, the generator's admission limit = B_dec, the verifier's batch =
    B_pre. Returns (config, plan).

    Args:
        cfg: the run configuration.
        hardware: hardware spec of the machine (the CPU calibration on CPUs).

    Raises:
        PlanError: a model without a spec, nothing fits, or offloading asked for (vLLM's
            sleep mode is not wired up: the offload decision is planned and simulated only).
    """
    from fasttts.backends.sim.specs import load_hardware

    specs = real_model_specs(cfg)
    if cfg.runtime.offload:
        raise PlanError("offloading is planned and simulated (--backend sim) but not applied to "
                        "real vLLM engines yet; drop --offload")
    gen_cfg, ver_cfg = cfg.generator, cfg.verifier.engine
    budget = gen_cfg.kv_cache_memory_bytes + ver_cfg.kv_cache_memory_bytes
    from fasttts.backends.vllm_engine import min_kv_cache_tokens

    plan, ver_kv = plan_for_run(cfg, budget, specs[0], specs[1], load_hardware(hardware),
                                allow_offload=False,
                                verifier_min_tokens=min_kv_cache_tokens(ver_cfg),
                                generator_min_tokens=min_kv_cache_tokens(gen_cfg))
    return apply_real_plan(cfg, plan, budget - ver_kv, ver_kv), plan


def engine_slots(gen_cfg) -> int:
    """The running-sequence slots (vLLM `max_num_seqs`) a generator engine built from
    `gen_cfg` (an EngineConfig) has: its `extra_engine_args` value, else 256 (vLLM's CPU
    default for offline use)."""
    return gen_cfg.extra_engine_args.get("max_num_seqs", 256)


def apply_real_plan(cfg, plan: MemoryPlan, generator_kv_bytes: int, verifier_kv_bytes: int):
    """`cfg` with a plan's KV sizes and caps for real engines: the generator's
    `kv_cache_memory_bytes` and its vLLM admission limit `max_num_active_seqs` = B_dec (with
    `max_num_seqs`, the engine's slots, at least that and at least the configured value or
    256, so later re-plans can raise the limit without a rebuild), the verifier's KV size and
    batch B_pre."""
    gen_cfg, ver_cfg = cfg.generator, cfg.verifier.engine
    slots = max(plan.b_dec, engine_slots(gen_cfg))
    gen = gen_cfg.model_copy(update={
        "kv_cache_memory_bytes": generator_kv_bytes,
        "extra_engine_args": {**gen_cfg.extra_engine_args, "max_num_seqs": slots,
                              "max_num_active_seqs": plan.b_dec}})
    ver = cfg.verifier.model_copy(update={
        "batch_size": plan.b_pre,
        "engine": ver_cfg.model_copy(update={"kv_cache_memory_bytes": verifier_kv_bytes})})
    return cfg.model_copy(update={"generator": gen, "verifier": ver})


def static_plan(inp: PlanInput, generator_share: float = 0.5) -> MemoryPlan:
    """The baseline's static split: the generator gets `generator_share` of M, the verifier the
    rest, each batch as large as its share holds (at most N).

    Raises:
        PlanError: a share cannot hold one sequence.
    """
    gen_bytes = int(inp.memory_bytes * generator_share)
    b_dec = min(inp.num_requests, gen_bytes // inp.kv_gen)
    b_pre = min(inp.num_requests, (inp.memory_bytes - gen_bytes) // inp.kv_ver)
    if b_pre < 1 or b_dec < 1:
        raise PlanError(f"the static split ({generator_share:.2f} of {inp.memory_bytes / 2**20:.1f} "
                        f"MiB to the generator) cannot hold one sequence of each model")
    return _plan(inp, b_pre, b_dec, "static")
