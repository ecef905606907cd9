"""The generator's own confidence as a free step score (issue 17's "free verifier").

From the sampled tokens' log-probabilities (vLLM `logprobs=0`, nats), two scores per step:

- mean: exp(mean log-probability of the step's tokens), the geometric-mean token probability;
- lowest window: exp of the lowest mean log-probability over any window of `window`
  consecutive tokens up to the step's end, after DeepConf's lowest group confidence
  (Fu et al. 2025, "Deep Think with Confidence"; DeepConf averages the top-k log-probabilities
  per token, here only the sampled token's is kept).

Both cost no verifier pass. Steps are the non-blank `split_steps` pieces of the decoded text;
a step's tokens are found by decoding prefixes of the token ids (binary search per boundary).
"""

from __future__ import annotations

import bisect
import math

from fasttts.steps import split_steps

__all__ = ["confidences", "logprob_confidence", "step_confidences", "step_token_ends"]


def step_token_ends(tokenizer, token_ids: list[int], text: str) -> list[int]:
    """For each non-blank step of `text` (= decode(token_ids)), the number of tokens that
    decode to at least the text up to the step's end."""
    ends, pos = [], 0
    for step in split_steps(text):
        pos += len(step)
        if step.strip():
            ends.append(pos)
        elif ends:
            ends[-1] = pos
    lengths = _LazyLengths(tokenizer, token_ids)
    return [min(len(token_ids), bisect.bisect_left(lengths, end)) for end in ends]


class _LazyLengths:
    """len(decode(token_ids[:i])) for i in 0..n, computed on demand (a sorted sequence)."""

    def __init__(self, tokenizer, token_ids):
        self.tokenizer, self.ids, self.cache = tokenizer, token_ids, {}

    def __len__(self) -> int:
        return len(self.ids) + 1

    def __getitem__(self, i: int) -> int:
        if i not in self.cache:
            self.cache[i] = len(self.tokenizer.decode(self.ids[:i]))
        return self.cache[i]


def step_confidences(tokenizer, token_ids: list[int], logprobs: list[float], text: str,
                     window: int = 32) -> dict[str, list[float]]:
    """Per-step confidence scores in (0, 1] of one sampled completion (module docstring).

    Args:
        tokenizer: the generator's tokenizer.
        token_ids: the completion's sampled token ids.
        logprobs: their log-probabilities (nats), one per token.
        text: the decoded completion.
        window: tokens per window of the lowest-window score.

    Returns:
        {"mean": [...], "lowest_window": [...]}, one score per non-blank step.

    Raises:
        ValueError: token_ids and logprobs differ in length.
    """
    if len(token_ids) != len(logprobs):
        raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} logprobs")
    return confidences(logprobs, step_token_ends(tokenizer, token_ids, text), window)


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
