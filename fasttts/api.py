"""The Python entry point: `FastTTS(config).solve(problem)` (like `vllm.LLM` for TTS)."""

from __future__ import annotations

from fasttts.backends.base import GeneratorBackend, Verifier
from fasttts.config import RunConfig, SearchConfig
from fasttts.engines import apply_change, build_engines
from fasttts.logging_setup import configure as configure_logging
from fasttts.runtime.loop import DEFAULT_PROBLEM_ID, SearchResult, SearchRunner

__all__ = ["FastTTS"]


class FastTTS:
    """A generator, a verifier and a search, ready to solve problems.

    Each `solve` runs the driver loop with one search (`fasttts.runtime.driver`: the search
    wishes sequences and scores, the driver steps the engines). The configuration was checked
    when it was built (`fasttts.config`), so a bad one fails before any engine is built. Use as a context manager, or call `close()`, to free the engines.
    With `runtime.memory_planner` on and engines built here, the plan follows the workload
    between problems (`fasttts.runtime.replan`): `plan` is the plan in force and `replans`
    lists every change applied.

    Args:
        config: the run configuration.
        generator: an already built generator backend (default: a vLLM engine from config).
        verifier: an already built verifier (default: built from config.verifier).

    Raises:
        fasttts.models.ModelError, ValueError: a model or engine that cannot be built.
    """

    def __init__(
        self,
        config: RunConfig,
        generator: GeneratorBackend | None = None,
        verifier: Verifier | None = None,
    ):
        configure_logging()  # quiet by default; $FASTTTS_LOG_LEVEL shows the libraries' noise
        self.replans: list = []
        self.engines = build_engines(config, generator, verifier)
        self.runner = self._runner(config.search)

    @property
    def config(self) -> RunConfig:
        """The run configuration as applied (real engines: with the memory plan written in)."""
        return self.engines.config

    @property
    def generator(self) -> GeneratorBackend | None:
        """The generator engine (None once closed)."""
        return self.engines.generator

    @property
    def verifier(self) -> Verifier | None:
        """The verifier (None once closed)."""
        return self.engines.verifier

    @property
    def plan(self):
        """The memory plan in force (`fasttts.runtime.memory_planner.MemoryPlan`), or None."""
        return self.engines.plan

    @property
    def replanner(self):
        """The `fasttts.runtime.replan.Replanner` that re-plans between problems, or None;
        set it to None to keep the first plan."""
        return self.engines.replanner

    @replanner.setter
    def replanner(self, value) -> None:
        self.engines.replanner = value

    def _runner(self, search: SearchConfig) -> SearchRunner:
        return SearchRunner(self.generator, self.verifier, search,
                            self.config.verifier.agg_strategy, self.config.runtime)

    def solve(self, problem: str, problem_id: str = DEFAULT_PROBLEM_ID,
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
            context. fasttts.runtime.memory_planner.PlanError: the re-planned workload does not fit.
        """
        if self.replanner is not None:
            self._replan(self.config.model_copy(update={"search": search or self.runner.cfg}))
        runner = self.runner if search is None else self._runner(search)
        result = runner.run(problem, problem_id, on_progress=on_progress)
        if self.replanner is not None:
            self.replanner.observe_result(result, runner.cfg)
        return result

    def _replan(self, cfg: RunConfig) -> None:
        """Apply the replanner's change for the next problem (`fasttts.engines.apply_change`);
        a rebuild of real engines gets a new runner."""
        change = self.replanner.update(cfg)
        if change is None:
            return
        self.replans.append(change)
        if apply_change(self.engines, change):
            self.runner = self._runner(self.runner.cfg)

    def check_prompt(self, problem: str, problem_id: str = DEFAULT_PROBLEM_ID) -> None:
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
        self.engines.close()

    def __enter__(self) -> FastTTS:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
