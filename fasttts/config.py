"""Validated configuration of a run: engines, verifier, search (pydantic models).

Every field has a unit and a range; a bad value raises `pydantic.ValidationError` whose message
names the field and what is allowed. Method-specific checks (n divisible by beam_width, ...)
live with the method in `fasttts.search`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["AggStrategy", "EngineConfig", "RunConfig", "RuntimeConfig", "SearchConfig", "SimConfig",
           "VerifierConfig",
           "DEFAULT_GENERATOR", "DEFAULT_VERIFIER", "SIM_GENERATOR", "SIM_VERIFIER"]

AggStrategy = Literal["last", "min", "prod", "mean"]

#: The embedded defaults (chosen by measured accuracy and speed; README "Default models").
DEFAULT_GENERATOR = "qwen2.5-coder-0.5b-instruct"
DEFAULT_VERIFIER = "qwen2.5-coder-0.5b-instruct"
#: The simulator's defaults: the FastTTS paper's 1.5B generator + 7B PRM pair (model specs).
SIM_GENERATOR = "qwen2.5-math-1.5b"
SIM_VERIFIER = "math-shepherd-7b"

GiB = 1 << 30


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
        num_threads: CPU threads of the engine (CPU build only).
        seed: engine seed (per-sequence seeds are set by the search).
        tensor_parallel_size: vLLM tensor parallelism, passed through unchanged.
        extra_engine_args: any other `vllm.EngineArgs` fields, passed through unchanged.
    """

    model: str
    dtype: str = "auto"
    kv_cache_memory_bytes: int = Field(default=1 * GiB, gt=0)
    block_size: int | None = Field(default=None, gt=0)
    max_model_len: int = Field(default=4096, gt=0)
    enforce_eager: bool | None = None
    num_threads: int = Field(default=1, gt=0)
    seed: int = 0
    tensor_parallel_size: int = Field(default=1, gt=0)
    extra_engine_args: dict = Field(default_factory=dict)


class VerifierConfig(_Strict):
    """Which PRM scores the steps and how its step scores are combined.

    Attributes:
        kind: scoring format: "judge" (zero-shot judge from an instruct model, the embedded
            default), "math-shepherd" (`+`/`-` logits at a step tag), "qwen-prm"
            (Qwen2.5-Math-PRM, `<extra_0>` separators), "skywork" (value-head PRM via
            transformers), "ovm" (a trained step-end head, `fasttts prm train`), or "auto"
            (from the model's name: judge for embedded instruct models).
        engine: the verifier's engine.
        agg_strategy: how a path's step scores become one score (`last|min|prod|mean`).
        batch_size: most scoring requests in flight at once (verifier batch, B_pre).
    """

    kind: Literal["auto", "judge", "math-shepherd", "qwen-prm", "skywork", "ovm"] = "auto"
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(model=DEFAULT_VERIFIER))
    agg_strategy: AggStrategy = "last"
    batch_size: int = Field(default=64, gt=0)


class SearchConfig(_Strict):
    """The search-and-learn style search parameters.

    Attributes:
        method: search method name (see `fasttts.search.METHODS`).
        n: search budget: beams kept alive per iteration (beam search) or samples (best-of-N).
        beam_width: children per kept beam; beam search keeps n // beam_width beams.
        num_iterations: most generate -> verify -> select rounds; the last generates to the end.
        temperature: sampling temperature of the generator.
        top_p: nucleus sampling mass.
        max_tokens: most tokens one path may generate in total (tokens).
        step_delimiter: text that ends a step, shared by generator and verifier.
        seed: base seed; per-sequence seeds derive from (seed, problem, iteration, beam).
        system_prompt: system message of the generator's chat prompt.
        lookahead: search-and-learn's greedy lookahead k: each new step is scored after k more
            greedy (temperature 0) steps are rolled out from it (steps; 0 = off). Methods that
            select between paths only (beam_search, dvts, dynamic_branching, vg_search).
        granularity: VG-search's g: verify and branch every g steps (steps; vg_search).
        branch_temperature: dynamic branching's softmax temperature over path scores (lower
            = more children for the best paths; dynamic_branching).
        sart_m: SART's M, completed branches that stop the request (default n // 2).
        sart_alpha: SART's alpha, the phase-1 pruning threshold on PRM scores in [0, 1].
        sart_beta: SART's beta, most branches phase 1 may prune (default n // 2).
        sart_t: SART's T, decode steps (tokens) between pruning checks; a check runs at the
            first step boundary after T tokens (tokens).
    """

    method: str = "beam_search"
    n: int = Field(default=8, gt=0)
    beam_width: int = Field(default=4, gt=0)
    num_iterations: int = Field(default=40, gt=0)
    temperature: float = Field(default=0.8, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=2048, gt=0)
    step_delimiter: str = "\n\n"
    seed: int = 0
    system_prompt: str | None = None
    lookahead: int = Field(default=0, ge=0)
    granularity: int = Field(default=2, gt=0)
    branch_temperature: float = Field(default=0.2, gt=0.0)
    sart_m: int | None = Field(default=None, gt=0)
    sart_alpha: float = Field(default=0.5, ge=0.0, le=1.0)
    sart_beta: int | None = Field(default=None, ge=0)
    sart_t: int = Field(default=64, gt=0)

    @field_validator("step_delimiter")
    @classmethod
    def _nonempty_delimiter(cls, v: str) -> str:
        if not v:
            raise ValueError("step_delimiter must be a non-empty string, e.g. '\\n\\n'")
        return v


class SimConfig(_Strict):
    """The simulated device of `backend="sim"` (`fasttts.backends.sim`).

    With the simulator, `generator.model` and `verifier.engine.model` name model specs
    (`fasttts.perf.specs.model_names()`), not weights.

    Attributes:
        hardware: hardware spec name or .json path (`rtx4090`, `h200`, ...).
        memory_fraction: fraction of device memory the two engines may use (like vLLM's
            gpu_memory_utilization), in (0, 1].
        generator_kv_share: the generator's share of the KV memory left after both models'
            weights and activation reserves (the static split; 0.5 as in search-and-learn).
        activation_reserve_bytes: memory each engine keeps for activations (bytes).
        generator_kv_cache_bytes, verifier_kv_cache_bytes: explicit KV-cache sizes (bytes)
            that replace the static split when set.
        block_size: tokens per KV block (vLLM's GPU default 16).
        max_num_seqs: most running sequences of the generator (B_dec cap).
        max_num_batched_tokens: token budget of one engine step (chunked prefill).
        workload: a WorkloadModel .json or a recorded trace.jsonl; None = the parametric default.
    """

    hardware: str = "rtx4090"
    memory_fraction: float = Field(default=0.9, gt=0.0, le=1.0)
    generator_kv_share: float = Field(default=0.5, gt=0.0, lt=1.0)
    activation_reserve_bytes: int = Field(default=GiB // 2, ge=0)
    generator_kv_cache_bytes: int | None = Field(default=None, gt=0)
    verifier_kv_cache_bytes: int | None = Field(default=None, gt=0)
    block_size: int = Field(default=16, gt=0)
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
        spec_beam_extension: Speculative Beam Extension with the two-phase preemptible
            scheduler (FastTTS section 4.1, `fasttts.runtime.spec_beam_extension`).
        lookahead_verification: LookAhead Verification (section 4.1.3); needs
            spec_beam_extension.
        prefix_aware_scheduling: submit each iteration's beams grouped by parent in lineage
            order, with matching engine priorities (section 4.2,
            `fasttts.runtime.prefix_scheduling`); off = search-and-learn's round-robin order.
        memory_planner: split the KV memory between verifier and generator, and cap their
            batches, by the roofline-guided planner (section 4.3.1,
            `fasttts.runtime.memory_planner`) instead of the static split.
        offload: let the planner offload the inactive model's KV cache when that is faster
            (section 4.3.2); needs memory_planner.
        incremental_verification: score only each path's new steps, one request cut after
            the step's tag and read at its last token, so the PRM's prefix cache serves the
            rest (`fasttts.verifiers.pooling`; exact, since every supported PRM is causal);
            off = every scored path is prefilled whole, as search-and-learn does.
        plan_seq_len: the path length (tokens, prompt included) the planner sizes for; None =
            256 + max_tokens / 2 for the first request, then the mean measured path length of
            the last 8 requests.
        replan_min_shift: between requests the planner re-plans for the request's n and the
            measured lengths (`fasttts.runtime.replan`); it re-splits the KV memory (resizing,
            for real engines rebuilding, both engines) only when the optimum's verifier share
            moved by more than this fraction of the budget; the batch caps always follow.
        spec_truncation_ratio: R, mean kept fraction of the speculative tokens a duplicate
            of a kept beam inherits (the paper's best: 0.85; 0 = duplicates inherit nothing,
            exactly equivalent search).
    """

    spec_beam_extension: bool = False
    lookahead_verification: bool = False
    prefix_aware_scheduling: bool = False
    memory_planner: bool = False
    offload: bool = False
    incremental_verification: bool = False
    plan_seq_len: int | None = Field(default=None, gt=0)
    replan_min_shift: float = Field(default=0.1, ge=0.0, le=1.0)
    spec_truncation_ratio: float = Field(default=0.85, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _lookahead_needs_sbe(self) -> RuntimeConfig:
        if self.lookahead_verification and not self.spec_beam_extension:
            raise ValueError("lookahead_verification needs spec_beam_extension (it verifies the "
                             "speculative steps); turn both on, e.g. with --fasttts")
        if self.offload and not self.memory_planner:
            raise ValueError("offload is an option of memory_planner; turn the planner on too")
        return self

    @classmethod
    def fasttts(cls, **overrides) -> RuntimeConfig:
        """Speculative beam extension, LookAhead Verification and incremental verification
        turned on. Prefix-aware scheduling and the memory planner (which `--fasttts` adds
        where the models have specs) are turned on with their own fields."""
        return cls(**{"spec_beam_extension": True, "lookahead_verification": True,
                      "incremental_verification": True, **overrides})


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
