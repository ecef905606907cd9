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
    beam b (sequence tag "la<j>") generates `script["la<j>:<b>"]`. A request-prefixed id
    ("req-1::p/b3") reads `script["req-1::3"]` when the script has it.

    At most `max_num_seqs` sequences run in a step, the first by (priority, arrival), as
    vLLM's priority scheduler admits them; the others wait (`num_waiting`). `history` holds,
    per step, the ids that ran in it (sorted)."""

    def __init__(self, script: dict, chars_per_step: int = 3, max_model_len: int = 4096,
                 max_num_seqs: int = 256):
        self.script = script
        self.chars_per_step = chars_per_step
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.clock = 0.0
        self.live: dict[str, dict] = {}
        self.added: list[tuple[str, GenerationParams]] = []
        self.aborted: list[str] = []
        self.history: list[list[str]] = []
        self.steps = 0
        self._arrivals = 0

    def encode_chat(self, messages):
        return [ord(c) for c in messages[-1]["content"]]

    def decode(self, token_ids):
        return "".join(chr(t) for t in token_ids)

    def add_sequence(self, seq_id, prompt_token_ids, params, priority=0):
        beam_id = int(seq_id.rsplit("/b", 1)[1])
        tag = seq_id.rsplit("/", 2)[1].partition("la")
        request = seq_id.partition("::")[0] + "::" if "::" in seq_id else ""
        key = f"la{tag[2]}:{beam_id}" if tag[1] else beam_id
        text = self.script.get(f"{request}{key}" if request else key, self.script.get(key))
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
        self.live[seq_id] = {"text": text, "pos": 0, "reason": reason,
                             "order": (priority, self._arrivals)}
        self._arrivals += 1
        self.added.append((seq_id, params))

    def _running(self) -> list[str]:
        """The running sequences keep their slots; free slots go to waiting ones in
        (priority, arrival) order."""
        running = [s for s in self.live if self.live[s].get("running")]
        waiting = sorted((s for s in self.live if not self.live[s].get("running")),
                         key=lambda s: self.live[s]["order"])
        for seq_id in waiting[: max(0, self.max_num_seqs - len(running))]:
            self.live[seq_id]["running"] = True
            running.append(seq_id)
        return running

    def num_waiting(self):
        return max(0, len(self.live) - self.max_num_seqs)

    def step(self):
        self.clock += 0.001
        self.steps += 1
        out = []
        running = self._running()
        self.history.append(sorted(running))
        for seq_id in running:
            s = self.live[seq_id]
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
