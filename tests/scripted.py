"""A scripted engine and verifier for policy tests: the text of every beam and the score of
every step are given by the test, so the expected search decisions can be derived by hand.

The scripted generator is a test double of the *engine* only; it implements the same
`GeneratorBackend` interface as vLLM, emits a few tokens per engine step, honours stop strings
and max_tokens, and reports time on a virtual clock (1 ms per engine step).
"""

from __future__ import annotations

from fasttts.backends.base import CacheStats, GenerationParams, GeneratorBackend, SequenceUpdate
from fasttts.verifiers.base import ScoreRequest, Verifier


class ScriptedGenerator(GeneratorBackend):
    """Beam `b` generates `script[b]` (one char = one token). A script ending in "<eos>"
    finishes with end-of-sequence after the text before it. A greedy lookahead rollout j of
    beam b (sequence tag "la<j>") generates `script["la<j>:<b>"]`."""

    def __init__(self, script: dict[int, str], chars_per_step: int = 3, max_model_len: int = 4096):
        self.script = script
        self.chars_per_step = chars_per_step
        self.max_model_len = max_model_len
        self.clock = 0.0
        self.live: dict[str, dict] = {}
        self.added: list[tuple[str, GenerationParams]] = []
        self.aborted: list[str] = []
        self.steps = 0

    def encode_chat(self, messages):
        return [ord(c) for c in messages[-1]["content"]]

    def decode(self, token_ids):
        return "".join(chr(t) for t in token_ids)

    def add_sequence(self, seq_id, prompt_token_ids, params, priority=0):
        beam_id = int(seq_id.rsplit("/b", 1)[1])
        tag = seq_id.rsplit("/", 2)[1].partition("la")
        text = self.script[f"la{tag[2]}:{beam_id}" if tag[1] else beam_id]
        eos = text.endswith("<eos>")
        text = text.removesuffix("<eos>")
        # Cut at the first stop string (kept), as vLLM does with include_stop_str_in_output.
        reason = "eos" if eos else "length"
        for stop in params.stop:
            i = text.find(stop)
            if i >= 0:
                text, reason = text[: i + len(stop)], "stop"
        if len(text) > params.max_tokens:
            text, reason = text[: params.max_tokens], "length"
        self.live[seq_id] = {"text": text, "pos": 0, "reason": reason}
        self.added.append((seq_id, params))

    def step(self):
        self.clock += 0.001
        self.steps += 1
        out = []
        for seq_id, s in list(self.live.items()):
            chunk = s["text"][s["pos"] : s["pos"] + self.chars_per_step]
            s["pos"] += len(chunk)
            done = s["pos"] >= len(s["text"])
            out.append(SequenceUpdate(seq_id, [ord(c) for c in chunk], chunk, done,
                                      s["reason"] if done else None))
            if done:
                del self.live[seq_id]
        return out

    def abort(self, seq_ids):
        for s in seq_ids:
            if s in self.live:
                del self.live[s]
                self.aborted.append(s)

    def num_unfinished(self):
        return len(self.live)

    def cache_stats(self):
        return CacheStats(block_size=16, num_blocks=100, num_blocks_used=len(self.live))

    def now(self):
        return self.clock


class ScriptedVerifier(Verifier):
    """Score of a step = `scores[step text stripped]`; records every request it got."""

    name = "scripted"

    def __init__(self, scores: dict[str, float], clock: ScriptedGenerator | None = None):
        self.scores = scores
        self.requests: list[ScoreRequest] = []
        self.gen = clock

    def score(self, requests):
        self.requests.extend(requests)
        if self.gen is not None:
            self.gen.clock += 0.01
        return [[self.scores[s.strip()] for s in r.steps[r.start :]] for r in requests]
