"""The narrow, step-level engine interface that the runtime drives (DESIGN.md, "backends/").

A generator backend is an engine that holds many sequences at once and advances all of them by
one engine step at a time (continuous batching), the way vLLM's `LLMEngine` does. The runtime
adds one sequence per beam, steps the engine, reads per-step deltas, and aborts sequences it no
longer needs. Every implementation (real vLLM on GPU or CPU, the simulated GPU) reports time on
its own clock (`now`) and the same KV-cache statistics, so metrics are computed the same way.

A verifier is a process reward model behind one batched scoring call (`Verifier.score` of
`ScoreRequest`s); its implementations are the real PRMs (`fasttts.verifiers`) and the simulated
one (`fasttts.backends.sim.verifier`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from fasttts.perf.roofline import DecodeCost

__all__ = ["CacheStats", "GenerationParams", "GeneratorBackend", "ScoreRequest", "SequenceUpdate",
           "Verifier"]


@dataclass(frozen=True)
class GenerationParams:
    """Sampling parameters of one sequence.

    Attributes:
        max_tokens: most new tokens this sequence may generate (tokens, >= 1).
        temperature: sampling temperature (0 = greedy).
        top_p: nucleus sampling mass in (0, 1].
        seed: per-sequence random seed; the same seed and prompt give the same text.
        stop: stop strings; the matched stop string is kept at the end of the text.
        logprobs: return the log-probability of each sampled token (`SequenceUpdate.
            new_logprobs`); off by default, so runs that do not use them pay nothing (the
            confidence verifier, `fasttts.verifiers.confidence`, turns it on).
    """

    max_tokens: int
    temperature: float = 0.8
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False


@dataclass
class SequenceUpdate:
    """What one engine step produced for one sequence (a delta, not the cumulative output).

    Attributes:
        seq_id: the id given to `add_sequence`.
        new_token_ids: token ids generated in this step.
        new_text: text generated in this step (detokenized; cut at a matched stop string).
        finished: True when the sequence ended in this step.
        finish_reason: "eos" (end-of-sequence token), "stop" (a stop string matched),
            "length" (max_tokens or the context limit reached) or None while running.
        num_cached_tokens: prompt tokens served from the prefix cache (reported once).
        new_logprobs: log-probability (nats, under the model's own distribution) of each of
            `new_token_ids`, one per token, when the sequence asked for them
            (`GenerationParams.logprobs`); empty otherwise.
    """

    seq_id: str
    new_token_ids: list[int] = field(default_factory=list)
    new_text: str = ""
    finished: bool = False
    finish_reason: str | None = None
    num_cached_tokens: int = 0
    new_logprobs: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class CacheStats:
    """KV-cache state and counters of one engine.

    Attributes:
        block_size: tokens per KV block.
        num_blocks: KV blocks the engine owns in total.
        num_blocks_used: blocks referenced by running sequences (cached-but-free blocks excluded).
        prefix_cache_queries: prompt tokens looked up in the prefix cache (cumulative).
        prefix_cache_hits: of those, tokens found (cumulative).
        num_preemptions: sequences preempted for lack of KV blocks (cumulative).
        num_recomputed_tokens: tokens computed again after a preemption (cumulative); None
            where the engine does not report it (vLLM).
    """

    block_size: int
    num_blocks: int
    num_blocks_used: int
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preemptions: int = 0
    num_recomputed_tokens: int | None = None

    @property
    def num_blocks_free(self) -> int:
        """Blocks not referenced by a running sequence (prefix-cached free blocks included)."""
        return self.num_blocks - self.num_blocks_used

    def since(self, earlier: CacheStats) -> CacheStats:
        """These statistics with the cumulative counters taken relative to `earlier` (block
        usage stays current): the cache activity of what ran in between."""
        return CacheStats(
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            num_blocks_used=self.num_blocks_used,
            prefix_cache_queries=self.prefix_cache_queries - earlier.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits - earlier.prefix_cache_hits,
            num_preemptions=self.num_preemptions - earlier.num_preemptions,
            num_recomputed_tokens=(
                None if self.num_recomputed_tokens is None or earlier.num_recomputed_tokens is None
                else self.num_recomputed_tokens - earlier.num_recomputed_tokens),
        )

    @property
    def prefix_cache_hit_rate(self) -> float:
        """hits / queries in [0, 1]; 0.0 before any query."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0


class GeneratorBackend(ABC):
    """A continuous-batching engine driven one step at a time.

    Attributes:
        max_model_len: context limit of the model in tokens (prompt + generated).
        eos_token_ids: token ids that end a sequence.
        clock_kind: "wall" (real seconds) or "simulated" (virtual seconds of a simulated
            device); results carry it so simulated numbers are never mistaken for measured.
        max_num_seqs: most sequences the engine runs in one step (its batch slots).
        cost: the engine's decode-step cost model (`fasttts.perf.roofline.DecodeCost`: its
            model spec on its device's spec or CPU calibration), or None where no spec is
            known; speculative beam extension prices its branches on it
            (`fasttts.runtime.spec_cost`).
    """

    max_model_len: int
    clock_kind: str = "wall"
    max_num_seqs: int = 256
    cost: DecodeCost | None = None

    @abstractmethod
    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a chat conversation with the generation prompt appended."""

    @abstractmethod
    def decode(self, token_ids: list[int]) -> str:
        """Text of `token_ids`."""

    @abstractmethod
    def add_sequence(
        self, seq_id: str, prompt_token_ids: list[int], params: GenerationParams, priority: int = 0
    ) -> None:
        """Queue a sequence. Lower `priority` values are scheduled first (vLLM convention).

        Raises:
            ValueError: the prompt is empty or does not fit `max_model_len`, or seq_id is in use.
        """

    @abstractmethod
    def step(self) -> list[SequenceUpdate]:
        """Run one engine step; return the deltas of the sequences that advanced or ended."""

    @abstractmethod
    def abort(self, seq_ids: list[str]) -> None:
        """Stop sequences now and free their KV blocks; unknown or finished ids are ignored."""

    @abstractmethod
    def num_unfinished(self) -> int:
        """Sequences added and not yet finished or aborted."""

    def num_waiting(self) -> int:
        """Sequences queued and not yet running (0 for engines that do not say)."""
        return 0

    def set_max_running(self, max_running: int) -> None:
        """Cap the sequences running at once (B_dec) from the next step on; `max_num_seqs`
        then reads the new cap. Used by the memory planner between requests.

        Raises:
            ValueError: max_running is not within 1..the engine's batch slots.
            NotImplementedError: the backend cannot change its cap while running.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot change its decode batch cap")

    def num_arrivals(self) -> int:
        """Requests admitted onto this engine so far when it is shared by a server (each one
        stops running speculation: SBE's phase 2 is preemptible); 0 for an engine that serves
        one search."""
        return 0

    @abstractmethod
    def cache_stats(self) -> CacheStats:
        """Current KV-cache usage and cumulative prefix-cache / preemption counters."""

    @abstractmethod
    def now(self) -> float:
        """The backend's clock in seconds (wall clock for real engines, virtual for sim)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the engine (memory, worker processes)."""


@dataclass(frozen=True)
class ScoreRequest:
    """Score `steps[start:]` of one path.

    Attributes:
        problem: the problem text.
        steps: the path's steps so far, each with its trailing delimiter (see `split_steps`).
        start: index of the first step to score; 0 <= start <= len(steps).
        step_logprobs: the generator's log-probabilities of each step's sampled tokens, one
            tuple per step of `steps` (None where the runtime did not keep them); filled only
            for verifiers that read them (`Verifier.needs_logprobs`), ignored by the others.
    """

    problem: str
    steps: tuple[str, ...]
    start: int = 0
    step_logprobs: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.start <= len(self.steps):
            raise ValueError(f"start={self.start} must be within 0..{len(self.steps)}")
        if self.step_logprobs is not None and len(self.step_logprobs) != len(self.steps):
            raise ValueError(f"{len(self.step_logprobs)} step_logprobs for "
                             f"{len(self.steps)} steps")


class Verifier(ABC):
    """A process reward model behind a batched scoring call.

    Attributes:
        name: what the verifier is (model and format), for reports.
        supports_incremental: the format can score a new step from the prefix cache alone
            (the tokens past the cached prefix computed, the score read at the step's tag; exact
            because the PRM is causal). A class fact, asked of the class (`incremental_capable`).
        incremental: this instance scores incrementally (DESIGN.md, "The verifier is priced as
            the real engine prices it"); False = every scored path is prefilled whole.
        needs_logprobs: the verifier reads the generator's token log-probabilities
            (`ScoreRequest.step_logprobs`): the runtime then asks the generator for them
            (`GenerationParams.logprobs`) and fills the requests. A class fact.
        runner: what runs the verifier's model: "vllm" (a paged, prefix-cached vLLM engine
            built from its `EngineConfig`), "transformers" (padded batches, a prefix store of
            its own: Skywork's value head), or None (no model: the confidence verifier); the
            simulator prices a verifier the way its runner runs it, and the run reports it
            (`fasttts.engines.platform_info`). A class fact.
        score_tolerance: how far two scorings of one step may differ when only the shape of
            the passes that computed them differs (batch, cached prefix or whole path), from
            the dtype the model runs in (`fasttts.verifiers.base.SCORE_TOLERANCE`); a
            selection among beams closer than this is counted as a near tie
            (`fasttts.search.base.has_near_tie`). 0 for exact scores (the simulator).
    """

    name: str = "verifier"
    supports_incremental: bool = False
    incremental: bool = False
    needs_logprobs: bool = False
    runner: str | None = "vllm"
    score_tolerance: float = 0.0

    @abstractmethod
    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        """Score a batch of paths.

        Returns:
            For each request, `len(steps) - start` scores in [0, 1], in step order.
        """

    def set_batch_size(self, batch_size: int) -> None:
        """Score at most `batch_size` paths per pass from the next call on (B_pre; the
        memory planner sets it between requests). Verifiers that batch keep the cap in their
        `batch_size` attribute.

        Raises:
            ValueError: batch_size < 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size

    def now(self) -> float:
        """The clock the verifier's time is measured on (seconds)."""
        import time

        return time.perf_counter()

    def cache_stats(self):
        """The verifier engine's KV-cache counters (`fasttts.backends.base.CacheStats`), or
        None where the verifier has no paged engine (transformers)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the verifier's engine."""
