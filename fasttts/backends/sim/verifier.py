"""The simulated PRM: scores from the workload, time from a prefill-only `SimEngine`.

A scoring call runs every request as a prefill-only sequence (problem tokens + step tokens) on
the verifier's engine, at most `max_num_seqs` (B_pre) at once, with prefix caching, so a path
whose earlier steps were scored before pays only for its new tokens while they stay cached.
The clock is the device's shared virtual clock.
"""

from __future__ import annotations

import itertools

from fasttts.backends.sim import tokenizer as tok
from fasttts.backends.sim.engine import SimEngine, SimSequence
from fasttts.backends.sim.workload import Workload
from fasttts.verifiers.base import ScoreRequest, Verifier

__all__ = ["SimVerifier"]


class SimVerifier(Verifier):
    """A simulated PRM on a virtual clock.

    Args:
        engine: a prefill-only engine (`logits=False`) for the verifier model.
        workload: the score model.
        offload_s: time charged per scoring call (one search iteration) for moving the
            inactive model's KV cache to and from host memory when offloading (seconds).
    """

    def __init__(self, engine: SimEngine, workload: Workload, offload_s: float = 0.0):
        self.engine = engine
        self.workload = workload
        self.offload_s = offload_s
        self.name = f"sim:{engine.model.name}"
        self._ids = itertools.count()
        self._step_ids: dict[str, list[int]] = {}  # steps recur every iteration of a search

    def set_batch_size(self, batch_size: int) -> None:
        super().set_batch_size(batch_size)  # validates
        self.engine.max_num_seqs = batch_size

    def input_ids(self, req: ScoreRequest) -> list[int]:
        """The PRM's input tokens: the problem, then each step (encoded step by step, so a
        path's input is a prefix of its extension's input)."""
        if len(self._step_ids) > 1_000_000:
            self._step_ids.clear()
        ids = [tok.USER, *tok.encode(req.problem), tok.ASSISTANT]
        for step in req.steps:
            enc = self._step_ids.get(step)
            if enc is None:
                enc = self._step_ids[step] = tok.encode(step)
            ids += enc
        return ids[: self.engine.max_model_len]

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        if requests and self.offload_s:
            self.engine.clock.advance(self.offload_s)
        pending = {}
        try:
            for req in requests:
                seq = SimSequence(f"v{next(self._ids)}", self.input_ids(req))
                pending[seq.seq_id] = seq
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
        return [self.workload.score_steps(r.problem, r.steps)[r.start:] for r in requests]

    def now(self) -> float:
        return self.engine.clock.t
