"""`fasttts serve`: many clients, one generator and one verifier engine (see `app`)."""

from __future__ import annotations

import threading

from fasttts.config import RunConfig
from fasttts.serve.protocol import ServerLimits

__all__ = ["build_state"]


def build_state(cfg: RunConfig, limits: ServerLimits, api_key: str | None = None,
                max_active: int = 4, max_queue: int = 64,
                request_timeout_s: float | None = None):
    """Start the engines, the stepping hub and the scheduler of a server.

    Args:
        cfg: engines, backend and FastTTS techniques (its search part is unused: each request
            brings its own).
        limits: per-request limits and the served model names (none given: the generator's
            name as configured, `cfg.generator.model`, as vLLM serves a model).
        api_key: bearer token clients must send (None = none).
        max_active: most requests searching at once.
        max_queue: most requests waiting.
        request_timeout_s: most seconds one request may search (None = no limit).

    Returns:
        A `fasttts.serve.app.ServerState`.

    Raises:
        fasttts.models.ModelError, ValueError: the engines cannot be built.
    """
    from fasttts.serve.app import ServerState
    from fasttts.serve.hub import EngineHub
    from fasttts.serve.scheduler import LockedVerifier, Scheduler

    if not limits.served_model_names:
        limits = limits.model_copy(update={"served_model_names": (cfg.generator.model,)})
    device = threading.Lock()  # one device: no generator step during a verifier call
    replanner, slots = None, None

    if cfg.backend == "sim":
        from fasttts.backends.sim import build_sim

        gen, ver = build_sim(cfg)
        verifier = LockedVerifier(ver, device)
        first = [gen]
        if cfg.runtime.memory_planner:
            from fasttts.runtime.replan import sim_replanner

            replanner = sim_replanner(cfg, gen, ver)

        def build():
            if first:
                return first.pop()
            g, v = build_sim(cfg)  # a restart gets a fresh simulated device (both models)
            verifier.inner = v
            return g
    else:
        from fasttts.api import _planner_hardware
        from fasttts.backends.vllm_generator import VLLMGenerator
        from fasttts.verifiers import build_verifier

        if cfg.runtime.memory_planner:
            from fasttts.runtime.memory_planner import engine_slots, plan_real_engines
            from fasttts.runtime.replan import real_replanner

            cfg, plan = plan_real_engines(cfg, _planner_hardware(cfg))
            replanner = real_replanner(cfg, _planner_hardware(cfg), plan)
            slots = engine_slots(cfg.generator)
        verifier = LockedVerifier(
            build_verifier(cfg.verifier, cfg.runtime.incremental_verification), device)

        def build():
            return VLLMGenerator(cfg.generator)
    try:
        hub = EngineHub(build, device_lock=device)
    except BaseException:
        verifier.close()
        raise

    def apply_plan(plan) -> None:
        """The plan's caps on the engines, between two engine steps (a restarted engine
        gets them at the next change)."""
        with hub.device_lock, hub.cv:
            hub.engine.set_max_running(plan.b_dec if slots is None else min(plan.b_dec, slots))
            verifier.inner.set_batch_size(plan.b_pre)

    scheduler = Scheduler(hub, verifier, cfg.runtime, max_active=max_active,
                          max_queue=max_queue, request_timeout_s=request_timeout_s,
                          replanner=replanner, config=cfg, apply_plan=apply_plan)
    return ServerState(hub=hub, scheduler=scheduler, limits=limits, api_key=api_key)
