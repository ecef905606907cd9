"""How well a verifier ranks completions: pairwise ranking accuracy and AUROC.

- Pairwise ranking accuracy: over every (correct, incorrect) pair of completions of the same
  problem, the fraction the verifier orders correctly, ties counting one half (the issue-17
  "ranks a correct completion above an incorrect one" measure; problems with only correct or
  only incorrect completions have no pairs).
- AUROC: the Mann-Whitney U statistic over all (positive, negative) pairs, ties one half,
  computed from ranks (`scipy.stats.rankdata`); equal to the area under the ROC curve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

__all__ = ["auroc", "pairwise_accuracy"]


def pairwise_accuracy(groups: Sequence[tuple[Sequence[float], Sequence[bool]]]) -> tuple[float, int]:
    """(fraction of correctly ordered within-problem pairs, number of pairs).

    Args:
        groups: per problem, (scores of its completions, whether each is correct).

    Returns:
        (accuracy in [0, 1], pairs); accuracy is NaN when no problem has a pair.
    """
    right, pairs = 0.0, 0
    for scores, correct in groups:
        pos = [s for s, c in zip(scores, correct) if c]
        neg = [s for s, c in zip(scores, correct) if not c]
        for p in pos:
            for q in neg:
                right += 1.0 if p > q else 0.5 if p == q else 0.0
        pairs += len(pos) * len(neg)
    return (right / pairs if pairs else float("nan")), pairs


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve of `scores` for binary `labels` (NaN if one class is absent)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
