"""The generator's own confidence as a free step score (issue 17's "free verifier").

From the sampled tokens' log-probabilities (vLLM `logprobs=0`, nats), two scores per step:

- mean: exp(mean log-probability of the step's tokens), the geometric-mean token probability;
- lowest window: exp of the lowest mean log-probability over any window of `window`
  consecutive tokens up to the step's end, after DeepConf's lowest group confidence
  (Fu et al. 2025, "Deep Think with Confidence"; DeepConf averages the top-k log-probabilities
  per token, here only the sampled token's is kept).

Both cost no verifier pass; the score math is the confidence verifier's
(`fasttts.verifiers.confidence.confidences`, one source). Steps are the non-blank `split_steps` pieces of the decoded text;
a step's tokens are found by decoding prefixes of the token ids (binary search per boundary).
"""

from __future__ import annotations

import bisect

from fasttts.steps import split_steps
from fasttts.verifiers.confidence import confidences

__all__ = ["step_confidences", "step_token_ends"]


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
