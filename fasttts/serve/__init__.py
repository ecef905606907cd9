"""`fasttts serve`: many clients, one generator and one verifier engine (see `app`)."""

from __future__ import annotations

from fasttts.config import RunConfig
from fasttts.engines import build_engines, restart_generator, running_cap
from fasttts.serve.completions import ServerState
from fasttts.serve.hub import EngineHub
from fasttts.serve.protocol import ServerLimits
from fasttts.serve.scheduler import Scheduler, SharedVerifier

__all__ = ["build_state"]


def build_state(cfg: RunConfig, limits: ServerLimits, api_key: str | None = None,
                max_active: int = 256, max_queue: int = 64,
                request_timeout_s: float | None = None):
    """Start the engines, the driver loop (`fasttts.serve.hub`) and the scheduler of a server.

    Args:
        cfg: engines, backend and FastTTS techniques (its search part is unused: each request
            brings its own).
        limits: per-request limits and the served model names (none given: the generator's
            name as configured, `cfg.generator.model`, as vLLM serves a model).
        api_key: bearer token clients must send (None = none).
        max_active: most requests searching at once (a safety limit; admission is by free
            decode slots, `fasttts.serve.admission`).
        max_queue: most requests waiting.
        request_timeout_s: most seconds one request may search (None = no limit).

    Returns:
        A `fasttts.serve.completions.ServerState`.

    Raises:
        fasttts.models.ModelError, ValueError: the engines cannot be built.
    """
    if not limits.served_model_names:
        limits = limits.model_copy(update={"served_model_names": (cfg.generator.model,)})
    engines = build_engines(cfg)
    verifier = SharedVerifier(engines.verifier)
    first = [engines.generator]

    def build():
        """The generator now, then a fresh one after each engine failure."""
        if first:
            return first.pop()
        generator, fresh_verifier = restart_generator(engines)
        if fresh_verifier is not None:  # a simulated device restarts whole
            verifier.inner = fresh_verifier
        return generator

    try:
        hub = EngineHub(build, verifier)
    except BaseException:
        engines.close()
        raise

    def apply_plan(plan) -> None:
        """The plan's caps on the engines, between two turns of the driver loop (a restarted
        engine gets them at the next change)."""
        with hub.cv:
            hub.engine.set_max_running(running_cap(engines, plan))
            verifier.inner.set_batch_size(plan.b_pre)

    scheduler = Scheduler(hub, verifier, engines.config.runtime, max_active=max_active,
                          max_queue=max_queue, request_timeout_s=request_timeout_s,
                          replanner=engines.replanner, config=engines.config,
                          apply_plan=apply_plan)
    return ServerState(hub=hub, scheduler=scheduler, limits=limits, api_key=api_key)
