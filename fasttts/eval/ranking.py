"""How well a verifier ranks completions: pairwise ranking accuracy and AUROC.

- Pairwise ranking accuracy: over every (correct, incorrect) pair of completions of the same
  problem, the fraction the verifier orders correctly, ties counting one half (the issue-17
  "ranks a correct completion above an incorrect one" measure; problems with only correct or
  only incorrect completions have no pairs).
- Top-1 on mixed problems: over problems with both correct and incorrect completions, how
  often the highest-scored completion is correct, next to chance (the mean fraction correct
  of those problems); the measure best-of-N selection depends on, where pairwise accuracy
  averages over every pair.
- AUROC: the Mann-Whitney U statistic over all (positive, negative) pairs, ties one half,
  computed from ranks (`scipy.stats.rankdata`); equal to the area under the ROC curve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

__all__ = ["auroc", "mixed_top1", "pairwise_accuracy"]


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


def is_mixed(correct: Sequence[bool]) -> bool:
    """Whether one problem's completions are partly correct (`correct`: one bool per completion).

    Only on such a problem can the correctness of a verifier's pick (best-of-N, a weighted
    vote) differ from another verifier's, and only such a problem has pairs to rank."""
    return 0 < sum(map(bool, correct)) < len(correct)


def mixed_top1(groups: Sequence[tuple[Sequence[float], Sequence[bool]]]) -> tuple[float, float, int]:
    """(top-1 accuracy, chance, problems) over the problems with both correct and incorrect
    completions.

    Args:
        groups: per problem, (scores of its completions, whether each is correct).

    Returns:
        top-1: the fraction of those problems whose highest-scored completion is correct (ties:
        the first of the highest, as `fasttts.eval.voting.best_of`); chance: the mean over them
        of the fraction of completions correct (what a random pick gets); problems: how many.
        Both are NaN when no problem is mixed.
    """
    top = chance = 0.0
    mixed = 0
    for scores, correct in groups:
        if not is_mixed(correct):
            continue
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        top += bool(correct[best])
        chance += sum(map(bool, correct)) / len(correct)
        mixed += 1
    if not mixed:
        return float("nan"), float("nan"), 0
    return top / mixed, chance / mixed, mixed


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve of `scores` for binary `labels` (NaN if one class is absent)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
