"""The Python entry point: `FastTTS(config).solve(problem)` (like `vllm.LLM` for TTS)."""

from __future__ import annotations

from fasttts.backends.base import GeneratorBackend
from fasttts.config import RunConfig, SearchConfig
from fasttts.logging_setup import configure as configure_logging
from fasttts.runtime.loop import SearchResult, SearchRunner
from fasttts.search import make_strategy
from fasttts.verifiers import Verifier, build_verifier

__all__ = ["FastTTS"]


def _planner_hardware(config: RunConfig) -> str:
    """The hardware spec the memory planner uses for real engines: the CPU calibration on the
    CPU build of vLLM, else the configured device (`--hardware`)."""
    try:
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            return "cpu-epyc-1thread"
    except ImportError:
        pass
    return config.sim.hardware


class FastTTS:
    """A generator, a verifier and a search, ready to solve problems.

    The search configuration is validated before any engine is built, so a bad configuration
    fails in milliseconds. Use as a context manager, or call `close()`, to free the engines.
    With `runtime.memory_planner` on and engines built here, the plan follows the workload
    between problems (`fasttts.runtime.replan`): `plan` is the plan in force and `replans`
    lists every change applied.

    Args:
        config: the run configuration.
        generator: an already built generator backend (default: a vLLM engine from config).
        verifier: an already built verifier (default: built from config.verifier).

    Raises:
        fasttts.search.SearchConfigError, fasttts.models.ModelError, ValueError: bad config.
    """

    def __init__(
        self,
        config: RunConfig,
        generator: GeneratorBackend | None = None,
        verifier: Verifier | None = None,
    ):
        make_strategy(config.search)
        configure_logging()  # quiet by default; $FASTTTS_LOG_LEVEL shows the libraries' noise
        self.plan = None
        self.replanner = None
        self.replans: list = []
        own = generator is None and verifier is None
        if config.backend == "vllm" and config.runtime.memory_planner and generator is None:
            from fasttts.runtime.memory_planner import plan_real_engines
            from fasttts.runtime.replan import real_replanner

            hardware = _planner_hardware(config)
            config, self.plan = plan_real_engines(config, hardware)
            if own:
                self.replanner = real_replanner(config, hardware, self.plan)
        self.config = config
        self.generator = generator
        self.verifier = verifier
        try:
            if config.backend == "sim" and own:
                from fasttts.backends.sim import build_sim

                self.generator, self.verifier = build_sim(config)
                if config.runtime.memory_planner:
                    from fasttts.runtime.replan import sim_replanner

                    self.plan = self.generator.plan
                    self.replanner = sim_replanner(config, self.generator, self.verifier)
            self._build_missing()
        except BaseException:
            self.close()
            raise
        self.runner = self._runner(config.search)

    def _build_missing(self) -> None:
        if self.generator is None:
            from fasttts.backends.vllm_generator import VLLMGenerator

            self.generator = VLLMGenerator(self.config.generator)
        if self.verifier is None:
            self.verifier = build_verifier(self.config.verifier,
                                           self.config.runtime.incremental_verification)

    def _runner(self, search: SearchConfig) -> SearchRunner:
        return SearchRunner(self.generator, self.verifier, search,
                            self.config.verifier.agg_strategy, self.config.runtime)

    def solve(self, problem: str, problem_id: str = "problem",
              search: SearchConfig | None = None, on_progress=None) -> SearchResult:
        """Run the search on one problem.

        Args:
            problem: the problem text.
            problem_id: its id (seeds and traces).
            search: this problem's search configuration (another n, method, ...); default the
                configuration's. With the memory planner on, the plan follows each problem's
                n and the measured path lengths (`fasttts.runtime.replan`).
            on_progress: called with a `fasttts.progress.IterationProgress` after each
                iteration (e.g. a `fasttts.progress.SearchStatus` status line).

        Raises:
            ValueError: an empty problem. PromptTooLongError: the prompt does not fit the
            context. fasttts.search.SearchConfigError: a bad `search`.
            fasttts.runtime.memory_planner.PlanError: the re-planned workload does not fit.
        """
        if search is not None:
            make_strategy(search)  # a bad search fails before any re-plan
        if self.replanner is not None:
            self._replan(self.config.model_copy(update={"search": search or self.runner.cfg}))
        runner = self.runner if search is None else self._runner(search)
        result = runner.run(problem, problem_id, on_progress=on_progress)
        if self.replanner is not None:
            self.replanner.observe_result(result, runner.cfg)
        return result

    def _replan(self, cfg: RunConfig) -> None:
        """Apply the replanner's change for the next problem: caps always, the KV split by
        resizing simulated engines or rebuilding real ones."""
        change = self.replanner.update(cfg)
        if change is None:
            return
        self.replans.append(change)
        plan = change.plan
        sim = self.config.backend == "sim"
        from fasttts.runtime.memory_planner import apply_real_plan, engine_slots

        # a vLLM engine's slots are fixed when it is built
        if change.resplit or (not sim and plan.b_dec > engine_slots(self.config.generator)):
            if sim:
                from fasttts.backends.sim import resize_sim

                resize_sim(self.generator, self.verifier, change.generator_kv_bytes,
                           change.verifier_kv_bytes, plan.t_offload_per_iteration)
            else:
                self.config = apply_real_plan(self.config, plan, change.generator_kv_bytes,
                                              change.verifier_kv_bytes)
                self.close()
                try:
                    self._build_missing()
                except BaseException:
                    self.close()
                    raise
                self.runner = self._runner(self.runner.cfg)
        self.plan = plan
        self.generator.set_max_running(plan.b_dec)
        self.verifier.set_batch_size(plan.b_pre)

    def check_prompt(self, problem: str, problem_id: str = "problem") -> None:
        """Raise ValueError / `PromptTooLongError` if `problem` cannot be searched (empty, or
        its prompt does not fit the generator's context), without generating anything."""
        self.runner.prompt_ids(problem, problem_id)

    def set_reference(self, problem: str, answer: str | None, difficulty: float | None = None) -> None:
        """Tell a simulated backend the reference answer (and difficulty in [0, 1]) of
        `problem`, so that its on-track paths reach it and accuracy is meaningful; real engines
        ignore it."""
        workload = getattr(self.generator, "workload", None)
        if workload is not None and answer is not None:
            workload.register(problem, answer, difficulty)

    def close(self) -> None:
        """Free both engines."""
        for part in (self.verifier, self.generator):
            if part is not None:
                part.close()
        self.generator = self.verifier = None

    def __enter__(self) -> FastTTS:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
