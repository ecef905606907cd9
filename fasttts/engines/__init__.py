"""Engine assembly, written once: the generator, the verifier, the memory plan and the
replanner of a run, built from its `RunConfig` for the library (`fasttts.api.FastTTS`) and the
server (`fasttts.serve.build_state`) alike.

- simulated (`backend="sim"`): both engines on one simulated device, sized by the static
  split or, with the memory planner on, by the plan (`fasttts.engines.sim`);
- real (`backend="vllm"`): with the planner on, the plan is written into the engines' configs
  before they are built (`fasttts.engines.real`), then a vLLM generator and the verifier of
  its scoring format are built.
- without a verifier model (the "confidence" kind, `MODEL_FREE_KINDS`): the planner has
  nothing to split, the generator gets all the KV memory (`generator_only_plan`: real engines
  the two configured KV sizes together, the simulator all its device leaves) and no replanner
  runs.

A re-plan between problems (`fasttts.runtime.replan`) is applied here too (`apply_change`):
batch caps always, the KV split by resizing simulated engines or rebuilding real ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from fasttts.backends import sim as sim_backend
from fasttts.backends.base import GeneratorBackend, Verifier
from fasttts.backends.vllm_generator import VLLMGenerator
from fasttts.config import RunConfig
from fasttts.engines.real import (apply_real_plan, engine_slots, plan_real_engines,
                                  planner_hardware, real_decode_cost, real_replanner)
from fasttts.engines.sim import plan_sim, sim_replanner
from fasttts.runtime.memory_planner import MemoryPlan, generator_only_plan
from fasttts.runtime.replan import Replan, Replanner
from fasttts.verifiers import MODEL_FREE_KINDS, build_verifier

__all__ = ["Engines", "apply_change", "build_engines", "check_sim_engines", "planner_hardware",
           "restart_generator", "running_cap"]


@dataclass
class Engines:
    """The engines of a run and the memory plan they were built with.

    Attributes:
        config: the run configuration as applied (real engines: with the plan's KV sizes and
            batch caps written in; changes when a re-plan rebuilds them).
        generator, verifier: the engines (None once closed).
        plan: the memory plan in force; None with the planner off.
        replanner: keeps the plan matched to each problem; None with the planner off, or
            when the caller brought an engine of its own.
    """

    config: RunConfig
    generator: GeneratorBackend | None = None
    verifier: Verifier | None = None
    plan: MemoryPlan | None = None
    replanner: Replanner | None = None

    def close(self) -> None:
        """Free both engines (verifier first)."""
        for part in (self.verifier, self.generator):
            if part is not None:
                part.close()
        self.generator = self.verifier = None


def build_engines(config: RunConfig, generator: GeneratorBackend | None = None,
                  verifier: Verifier | None = None) -> Engines:
    """The engines `config` describes, the memory plan and the replanner (module docstring).

    Args:
        config: the run configuration.
        generator, verifier: engines the caller already built; only the missing ones are
            built (as real vLLM engines), and no replanner is set up.

    Raises:
        fasttts.models.ModelError, ValueError: an engine cannot be built (unknown spec or
            model, models that do not fit).
        fasttts.runtime.memory_planner.PlanError: the planner finds no plan.
    """
    own = generator is None and verifier is None
    engines = Engines(config, generator, verifier)
    model_free = config.verifier.kind in MODEL_FREE_KINDS
    if config.backend == "vllm" and config.runtime.memory_planner and model_free:
        engines.config, engines.plan = _generator_only_real(config)
    elif config.backend == "vllm" and config.runtime.memory_planner and generator is None:
        hardware = planner_hardware(config)
        engines.config, engines.plan = plan_real_engines(config, hardware)
        if own:
            engines.replanner = real_replanner(engines.config, hardware, engines.plan)
    try:
        if config.backend == "sim" and own:
            _build_sim(engines)
        _build_missing(engines)
    except BaseException:
        engines.close()
        raise
    return engines


def _build_sim(engines: Engines) -> None:
    """Both simulated engines, sized by the plan when the planner is on."""
    cfg = engines.config
    if not cfg.runtime.memory_planner or cfg.verifier.kind in MODEL_FREE_KINDS:
        engines.generator, engines.verifier = sim_backend.build_sim(cfg)
        if engines.verifier is None:  # no verifier model (`MODEL_FREE_KINDS`)
            engines.verifier = build_verifier(cfg.verifier)
        if cfg.runtime.memory_planner:
            engines.plan = generator_only_plan(sim_backend.sim_device(cfg).split.generator_kv,
                                               cfg.sim.max_num_seqs)
        return
    device = sim_backend.sim_device(cfg)
    engines.plan, sizes = plan_sim(cfg, device)
    engines.generator, engines.verifier = sim_backend.build_sim(cfg, sizes=sizes)
    engines.replanner = sim_replanner(cfg, device, engines.plan, sizes)


def _generator_only_real(cfg: RunConfig) -> tuple[RunConfig, MemoryPlan]:
    """A real-engine config without a verifier model under the planner: the generator gets
    both configured KV sizes and its full batch (module docstring)."""
    gen = cfg.generator
    kv = gen.kv_cache_memory_bytes + cfg.verifier.engine.kv_cache_memory_bytes
    plan = generator_only_plan(kv, engine_slots(gen))
    return apply_real_plan(cfg, plan, kv, cfg.verifier.engine.kv_cache_memory_bytes), plan


def _build_missing(engines: Engines) -> None:
    """Real engines for the parts not built yet: a vLLM generator, the configured verifier."""
    cfg = engines.config
    if engines.generator is None:
        engines.generator = _real_generator(cfg)
    if engines.verifier is None:
        engines.verifier = build_verifier(cfg.verifier, cfg.runtime.incremental_verification)


def _real_generator(cfg: RunConfig) -> VLLMGenerator:
    """A vLLM generator built from `cfg`, carrying its cost model (`real_decode_cost`)."""
    generator = VLLMGenerator(cfg.generator)
    generator.cost = real_decode_cost(cfg)
    return generator


def check_sim_engines(config: RunConfig) -> None:
    """Raise the error building the simulated engines of `config` would raise (unknown spec,
    models that do not fit, a KV cache too small, an unreadable workload file, no memory
    plan), without running anything."""
    build_engines(config)


def running_cap(engines: Engines, plan: MemoryPlan) -> int:
    """The generator's running-sequence cap under `plan`: B_dec, within a real engine's slots
    (fixed when it was built)."""
    if engines.config.backend == "sim":
        return plan.b_dec
    return min(plan.b_dec, engine_slots(engines.config.generator))


def apply_change(engines: Engines, change: Replan) -> bool:
    """Apply a re-plan between problems: resize simulated engines or rebuild real ones when
    the KV split changed (or B_dec outgrew a real engine's slots), then set both batch caps.

    Returns:
        True when the engines were rebuilt (their configs changed: `engines.config`).

    Raises:
        ValueError, RuntimeError: an engine cannot be resized or rebuilt (the engines are
            closed when a rebuild fails).
    """
    plan, cfg = change.plan, engines.config
    sim = cfg.backend == "sim"
    rebuilt = False
    if change.resplit or (not sim and plan.b_dec > engine_slots(cfg.generator)):
        if sim:
            sim_backend.resize_sim(engines.generator, engines.verifier,
                                   change.generator_kv_bytes, change.verifier_kv_bytes,
                                   plan.t_offload_per_iteration)
        else:
            engines.config = apply_real_plan(cfg, plan, change.generator_kv_bytes,
                                             change.verifier_kv_bytes)
            engines.close()
            try:
                _build_missing(engines)
            except BaseException:
                engines.close()
                raise
            rebuilt = True
    engines.plan = plan
    engines.generator.set_max_running(plan.b_dec)
    engines.verifier.set_batch_size(plan.b_pre)
    return rebuilt


def restart_generator(engines: Engines) -> tuple[GeneratorBackend, Verifier | None]:
    """A fresh generator after an engine failure (the server's restart), and the verifier
    that must replace the old one, if any: a simulated device is rebuilt whole (both models,
    one clock), as `config` plans it; a real generator is rebuilt alone from the applied
    config."""
    if engines.config.backend == "sim":
        fresh = build_engines(engines.config)
        return fresh.generator, fresh.verifier
    return _real_generator(engines.config), None
