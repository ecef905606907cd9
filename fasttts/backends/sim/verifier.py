"""The simulated PRM: scores from the workload, time from a prefill-only `SimEngine`.

The verifier engine is priced as the real engine of its mode prices it
(`fasttts.verifiers.pooling`):

- whole-path (the baseline): each scoring request prefills the path whole (problem tokens +
  every step), with no prefix-cache read, as vLLM's STEP pooler runs;
- incremental: one request per path with new steps, prefix cache on, so a request pays for the
  tokens past its cached prefix (its new steps and the partial block before them). A new step
  whose last token lay inside the cached prefix, and that no request of the call computed, is
  read in a second round from a request cut after it, as on vLLM (`fasttts.verifiers.pooling`).

At most `max_num_seqs` (B_pre) requests run at once. The clock is the device's shared virtual
clock. A verifier the product runs in transformers (Skywork's value head, `Verifier.runner`) is
priced as transformers runs it instead (`fasttts.backends.sim.transformers_runner`: padded
batches, a prefix store of its own, no paged engine).
"""

from __future__ import annotations

import itertools

from fasttts.backends.base import CacheStats, ScoreRequest, Verifier
from fasttts.backends.sim import tokenizer as tok
from fasttts.backends.sim.engine import SimEngine, SimSequence
from fasttts.backends.sim.transformers_runner import TransformersRunner
from fasttts.backends.sim.workload import Workload

__all__ = ["SimVerifier"]


class SimVerifier(Verifier):
    """A simulated PRM on a virtual clock.

    Args:
        engine: a prefill-only engine (`logits=False`) for the verifier model.
        workload: the score model.
        offload_s: time charged per scoring call (one search iteration) for moving the
            inactive model's KV cache to and from host memory when offloading (seconds;
            `MemoryPlan.t_offload_per_iteration`).
        incremental: incremental verification (module docstring); False = whole-path, and
            the engine's prefix cache is not read.
        runner: "vllm" (the engine prices the calls) or "transformers" (module docstring;
            `engine` then only lends its model, device, clock, KV bytes and B_pre).

    Raises:
        ValueError: an unknown runner.
    """

    supports_incremental = True

    def __init__(self, engine: SimEngine, workload: Workload, offload_s: float = 0.0,
                 incremental: bool = False, runner: str = "vllm"):
        if runner not in ("vllm", "transformers"):
            raise ValueError(f"runner must be 'vllm' or 'transformers', got {runner!r}")
        self.engine = engine
        self.workload = workload
        self.offload_s = offload_s
        self.incremental = incremental
        self.runner = runner
        engine.kv.enable_prefix_caching = incremental
        mode = "incremental" if incremental else "whole-path"
        self.name = f"sim:{engine.model.name} ({mode}{', transformers' * (runner != 'vllm')})"
        self.hf = (TransformersRunner(engine.model, engine.hw, engine.clock,
                                      engine.kv.num_blocks * engine.kv.block_size
                                      * engine.model.kv_bytes_per_token, engine.max_num_seqs)
                   if runner == "transformers" else None)
        self._ids = itertools.count()

    def set_batch_size(self, batch_size: int) -> None:
        super().set_batch_size(batch_size)  # validates
        self.engine.max_num_seqs = batch_size
        if self.hf is not None:
            self.hf.batch_size = batch_size

    def input_ids(self, req: ScoreRequest) -> list[int]:
        """The PRM's input tokens: the problem, then each step (encoded step by step, so a
        path's input is a prefix of its extension's input). Nothing is kept between calls:
        encoding is cheaper than a cache that outlives the requests."""
        ids = [tok.USER, *tok.encode(req.problem), tok.ASSISTANT]
        for step in req.steps:
            ids += tok.encode(step)
        return ids[: self.engine.max_model_len]

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        if requests and self.offload_s:
            self.engine.clock.advance(self.offload_s)
        if self.hf is not None:
            self._price_transformers(requests)
        elif not self.incremental:
            self._prefill([self.input_ids(r) for r in requests])
        else:
            self._price_incremental(requests)
        return [self.workload.score_steps(r.problem, r.steps)[r.start:] for r in requests]

    def _price_incremental(self, requests: list[ScoreRequest]) -> None:
        """One request per path with new steps; then one per new step whose last token was
        in the prefix the first round found cached and that no request of the round
        computed (module docstring)."""
        todo = [r for r in requests if r.start < len(r.steps)]
        seqs = self._prefill([self.input_ids(r) for r in todo])
        again = []
        for r, seq in zip(todo, seqs):
            for k in range(r.start, len(r.steps)):
                cut = self.input_ids(ScoreRequest(r.problem, r.steps[: k + 1]))
                if len(cut) > seq.num_cached_tokens:  # computed, and so are the later ones
                    break
                if not any(s.num_cached_tokens < len(cut) <= len(s.token_ids)
                           and s.token_ids[: len(cut)] == cut for s in seqs):
                    again.append(cut)
        self._prefill(again)

    def _price_transformers(self, requests: list[ScoreRequest]) -> None:
        """Advance the clock as transformers runs the call (module docstring)."""
        if not self.incremental:
            self.hf.whole([self.input_ids(r) for r in requests])
            return
        for r in requests:
            cuts = [((r.problem, r.steps[:k + 1]),
                     len(self.input_ids(ScoreRequest(r.problem, r.steps[:k + 1]))))
                    for k in range(len(r.steps))]
            self.hf.incremental(cuts, r.start)

    def _prefill(self, prompts: list[list[int]]) -> list[SimSequence]:
        """Run `prompts` through the engine to completion; on any error, free what is left.
        Returns their sequences, in order."""
        pending, seqs = {}, []
        try:
            for ids in prompts:
                seq = SimSequence(f"v{next(self._ids)}", ids)
                pending[seq.seq_id] = seq
                seqs.append(seq)
                self.engine.add(seq)
            while pending:
                done = self.engine.step()
                if not done and not self.engine.running:
                    raise RuntimeError("verifier engine made no progress")  # pragma: no cover
                for seq in done:
                    pending.pop(seq.seq_id, None)
                    self.engine.finish(seq)
        except BaseException:
            for seq in pending.values():
                self.engine.finish(seq)
            raise
        return seqs

    def cache_stats(self) -> CacheStats | None:
        """The engine's KV-cache counters; None for a transformers verifier (no paged
        engine, as `SkyworkVerifier` reports)."""
        return self.engine.cache_stats() if self.hf is None else None

    def now(self) -> float:
        return self.engine.clock.t
