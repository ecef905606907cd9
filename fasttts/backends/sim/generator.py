"""The simulated generator: `GeneratorBackend` over `SimEngine` and the workload's token streams.

The runtime drives it exactly like the vLLM backend (add_sequence / step / abort); the text of
a sequence is fixed by (prompt + path, seed) through `Workload.stream`, and the time by the
roofline of the batches the engine actually ran. Token log-probabilities, when a sequence
asks for them, come from the workload's quality model (`Workload.token_logprob`: derailed paths
are less confident), so the `confidence` verifier runs on the simulator too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fasttts.backends.base import CacheStats, GenerationParams, GeneratorBackend, SequenceUpdate
from fasttts.backends.sim import tokenizer as tok
from fasttts.backends.sim.engine import SimEngine, SimSequence
from fasttts.backends.sim.workload import Workload
from fasttts.perf.roofline import DecodeCost

__all__ = ["SimGenerator"]


@dataclass(eq=False)
class _Gen:
    seq: SimSequence
    params: GenerationParams
    stream: Iterator[int]
    max_len: int
    tail_len: int = 1
    text_tail: str = ""
    num_new: int = 0
    reported_cache: bool = False
    seed: int = 0
    on_track: bool = True


class SimGenerator(GeneratorBackend):
    """A simulated generator engine on a virtual clock.

    Args:
        engine: the simulated engine core (model, hardware, KV cache, clock).
        workload: token streams and reference answers.
    """

    clock_kind = "simulated"

    def __init__(self, engine: SimEngine, workload: Workload):
        self.engine = engine
        self.workload = workload
        self.max_model_len = engine.max_model_len
        self.max_num_seqs = engine.max_num_seqs
        self.cost = DecodeCost(engine.model, engine.hw, engine.kv.block_size)
        self.eos_token_ids = (tok.EOS,)
        self._gens: dict[str, _Gen] = {}
        self._text: dict[int, str] = {}  # token id -> text (the simulated vocabulary is small)

    def set_max_running(self, max_running: int) -> None:
        if max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {max_running}")
        self.engine.max_num_seqs = self.max_num_seqs = max_running

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        return tok.encode_chat(messages)

    def decode(self, token_ids: list[int]) -> str:
        return tok.decode(token_ids)

    def add_sequence(self, seq_id: str, prompt_token_ids: list[int], params: GenerationParams,
                     priority: int = 0) -> None:
        if not prompt_token_ids:
            raise ValueError("prompt_token_ids is empty")
        if len(prompt_token_ids) >= self.max_model_len:
            raise ValueError(f"prompt of {len(prompt_token_ids)} tokens does not fit "
                             f"max_model_len={self.max_model_len}")
        if seq_id in self._gens:
            raise ValueError(f"sequence id {seq_id!r} is already in use")
        seed = 0 if params.temperature == 0 or params.seed is None else params.seed
        stream = self.workload.stream(prompt_token_ids, seed)
        seq = SimSequence(seq_id, list(prompt_token_ids), priority,
                          seeded=params.seed is not None and params.temperature > 0)
        self._gens[seq_id] = _Gen(seq, params, stream,
                                  min(self.max_model_len, len(prompt_token_ids) + params.max_tokens),
                                  max((len(s) for s in params.stop), default=1), seed=seed,
                                  on_track=params.logprobs and self.workload.on_track(
                                      prompt_token_ids))
        self.engine.add(seq)

    def step(self) -> list[SequenceUpdate]:
        out = []
        for seq in self.engine.step():
            g = self._gens[seq.seq_id]
            t = next(g.stream, tok.EOS)
            seq.token_ids.append(t)
            g.num_new += 1
            up = SequenceUpdate(seq.seq_id)
            if not g.reported_cache:
                up.num_cached_tokens = seq.num_cached_tokens or 0
                g.reported_cache = True
            if t == tok.EOS:
                up.finished, up.finish_reason = True, "eos"
            else:
                up.new_token_ids = [t]
                if g.params.logprobs:
                    g.on_track = g.on_track and not self.workload.derails(t)
                    up.new_logprobs = [self.workload.token_logprob(
                        t, g.on_track, g.seed, len(seq.token_ids))]
                text = self._text.get(t)
                if text is None:
                    text = self._text[t] = tok.decode([t])
                up.new_text = text
                window = g.text_tail + text
                for s in g.params.stop:
                    i = window.find(s)
                    if i >= 0:
                        cut = i + len(s) - len(g.text_tail)
                        up.new_text = text[:max(cut, 0)]
                        up.finished, up.finish_reason = True, "stop"
                        break
                g.text_tail = window[-g.tail_len:]
                if not up.finished and (g.num_new >= g.params.max_tokens
                                        or len(seq.token_ids) >= g.max_len):
                    up.finished, up.finish_reason = True, "length"
            if up.finished:
                self._release(seq.seq_id)
            out.append(up)
        return out

    def _release(self, seq_id: str) -> None:
        g = self._gens.pop(seq_id, None)
        if g is not None:
            self.engine.finish(g.seq)

    def abort(self, seq_ids: list[str]) -> None:
        for seq_id in seq_ids:
            self._release(seq_id)

    def num_unfinished(self) -> int:
        return len(self._gens)

    def num_waiting(self) -> int:
        return self.engine.num_waiting

    def cache_stats(self) -> CacheStats:
        return self.engine.cache_stats()

    def now(self) -> float:
        return self.engine.clock.t
