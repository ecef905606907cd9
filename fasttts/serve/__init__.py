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
        limits: per-request limits and the served model name.
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

    device = threading.Lock()  # one device: no generator step during a verifier call

    if cfg.backend == "sim":
        from fasttts.backends.sim import build_sim

        gen, ver = build_sim(cfg)
        verifier = LockedVerifier(ver, device)
        first = [gen]

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
            from fasttts.runtime.memory_planner import plan_real_engines

            cfg, _ = plan_real_engines(cfg, _planner_hardware(cfg))
        verifier = LockedVerifier(build_verifier(cfg.verifier), device)

        def build():
            return VLLMGenerator(cfg.generator)
    try:
        hub = EngineHub(build, device_lock=device)
    except BaseException:
        verifier.close()
        raise

    scheduler = Scheduler(hub, verifier, cfg.runtime, max_active=max_active,
                          max_queue=max_queue, request_timeout_s=request_timeout_s)
    return ServerState(hub=hub, scheduler=scheduler, limits=limits, api_key=api_key)
