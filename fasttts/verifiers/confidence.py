"""The generator's own confidence as a free verifier (kind "confidence", issue 17).

No model scores the steps: a step's score is the generator's confidence in the tokens it
sampled, exp(mean log-probability of the step's tokens), the geometric-mean token probability,
in (0, 1]; or, with `window`, DeepConf's lowest group confidence (Fu et al. 2025): exp of the
lowest mean log-probability over any `window` consecutive tokens up to the step's end. The
math is here (`confidences`); `fasttts.eval.confidence` applies it to decoded completions
offline, where the verifier comparison (`fasttts bench verifiers`) measured the mean aggregated by "min" to rank
GSM8K completions better than the zero-shot judge (0.679 vs 0.453 of pairs, docs/verifiers.md).

Where the log-probabilities come from: the runtime asks the generator for each sampled token's
log-probability when the verifier says it needs them (`needs_logprobs`), keeps them on the
beams and cuts them into steps in every `ScoreRequest` (`step_logprobs`,
`fasttts.runtime.token_logprobs`). The vLLM generator returns vLLM's `logprobs=0` values; the
simulated one draws them from its workload's quality model (`fasttts.backends.sim.workload`:
derailed paths are less confident), so this verifier runs on both backends.

It takes no memory and no time (its scoring is a few sums; the verifier time a run reports is
~0), has no engine (`cache_stats()` is None) and ignores the verifier model it is configured
with. A step's score depends only on its own tokens, so every request is scored
incrementally whatever the flag says.
"""

from __future__ import annotations

import math

from fasttts.backends.base import ScoreRequest, Verifier

__all__ = ["ConfidenceVerifier", "MissingLogprobs", "confidences", "logprob_confidence"]


class MissingLogprobs(ValueError):
    """A request reached the confidence verifier without the generator's log-probabilities."""


class ConfidenceVerifier(Verifier):
    """Step scores from the generator's token log-probabilities (module docstring).

    Args:
        engine: the configured verifier engine; unused (no model is loaded).
        batch_size: unused (scoring is free); kept as `batch_size` like other verifiers.
        incremental: accepted for the common constructor; scoring is always per step.
        window: None = exp(mean token log-probability of the step); a number of tokens = the
            lowest-window (DeepConf) variant over windows of that many tokens.
    """

    supports_incremental = True
    needs_logprobs = True
    runner = None

    def __init__(self, engine=None, batch_size: int = 64, incremental: bool = False,
                 window: int | None = None):
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 token, got {window}")
        self.batch_size = batch_size
        self.incremental = incremental
        self.window = window
        self.name = ("confidence (generator's mean token log-probability)" if window is None
                     else f"confidence (generator's lowest {window}-token window)")

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        """Score the steps `start:` of each request from its `step_logprobs`.

        Raises:
            MissingLogprobs: a request without `step_logprobs` (a generator or a request
                path that did not keep them).
        """
        out = []
        for req in requests:
            if req.step_logprobs is None:
                raise MissingLogprobs(
                    "the confidence verifier needs the generator's token log-probabilities, "
                    "but a request came without them (ScoreRequest.step_logprobs is None); "
                    "run it through fasttts's runtime, which asks the generator for them")
            steps = [list(s) for s in req.step_logprobs]
            out.append(logprob_confidence(steps, self.window)[req.start:])
        return out


def logprob_confidence(step_logprobs: list[list[float]], window: int | None = None) -> list[float]:
    """One confidence score in (0, 1] per step from the steps' own token log-probabilities
    (the confidence verifier's scores, `fasttts.verifiers.confidence`): the mean score, or
    with `window` the lowest-window one (module docstring)."""
    flat: list[float] = []
    ends = []
    for lps in step_logprobs:
        flat += lps
        ends.append(len(flat))
    out = confidences(flat, ends, window or 1, lowest=window is not None)
    return out["mean"] if window is None else out["lowest_window"]


def confidences(logprobs: list[float], ends: list[int], window: int = 32,
                lowest: bool = True) -> dict[str, list[float]]:
    """Both scores of each step, the steps ending at token counts `ends` (increasing) of
    `logprobs`. A step without tokens gets the score of the token before it (1.0 without
    one). `lowest`=False leaves "lowest_window" empty (it costs window x tokens)."""
    out: dict[str, list[float]] = {"mean": [], "lowest_window": []}
    start, low = 0, math.inf
    for end in ends:
        span = logprobs[start:end] or logprobs[max(0, end - 1):end] or [0.0]
        out["mean"].append(math.exp(sum(span) / len(span)))
        if lowest:
            for i in range(max(0, start - window + 1), max(1, end - window + 1)):
                w = logprobs[i:i + window]
                if w:
                    low = min(low, sum(w) / len(w))
            out["lowest_window"].append(math.exp(low if low < math.inf else 0.0))
        start = end
    return out
