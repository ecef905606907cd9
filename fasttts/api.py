"""The Python entry point: `FastTTS(config).solve(problem)` (like `vllm.LLM` for TTS)."""

from __future__ import annotations

from fasttts.backends.base import GeneratorBackend
from fasttts.config import RunConfig
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
        self.plan = None
        if config.backend == "vllm" and config.runtime.memory_planner and generator is None:
            from fasttts.runtime.memory_planner import plan_real_engines

            config, self.plan = plan_real_engines(config, _planner_hardware(config))
        self.config = config
        self.generator = generator
        self.verifier = verifier
        try:
            if config.backend == "sim" and self.generator is None and self.verifier is None:
                from fasttts.backends.sim import build_sim

                self.generator, self.verifier = build_sim(config)
            if self.generator is None:
                from fasttts.backends.vllm_generator import VLLMGenerator

                self.generator = VLLMGenerator(config.generator)
            if self.verifier is None:
                self.verifier = build_verifier(config.verifier)
        except BaseException:
            self.close()
            raise
        self.runner = SearchRunner(
            self.generator, self.verifier, config.search, config.verifier.agg_strategy,
            config.runtime,
        )

    def solve(self, problem: str, problem_id: str = "problem") -> SearchResult:
        """Run the search on one problem. Raises ValueError for an empty problem and
        `PromptTooLongError` when the prompt does not fit the context."""
        return self.runner.run(problem, problem_id)

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
