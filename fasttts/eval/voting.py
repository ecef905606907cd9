"""Answer aggregation over N sampled solutions: majority vote, weighted vote, best-of-N, Pass@N.

Sources:

* FastTTS paper, §6.3 (evaluation metrics): *Top-1 accuracy* takes the majority vote over the N
  final answers (:func:`majority_vote`); *Pass@N* counts a problem as solved if any of the N
  answers is correct (:func:`pass_at_n`).
* Hugging Face ``search-and-learn`` (the reference implementation of verifier-guided search):
  *weighted best-of-N* sums the PRM scores of all solutions that reach the same answer and picks
  the answer with the highest total (its ``find_answer_with_highest_weight``), reimplemented here
  as :func:`weighted_vote`; plain *best-of-N* takes the single highest-scored solution
  (:func:`best_of`).

Answers are grouped by mathematical equivalence, not string equality: each answer is compared with
:func:`fasttts.eval.grading.is_equivalent` against the representative (first-seen member) of
every existing group, in first-seen order, and joins the first group it matches; equal
:func:`fasttts.eval.grading.answer_key` values are a fast path that skips the comparison.
``None`` (no extracted answer) and empty answers never vote. All ties go to the group (or answer)
seen first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fasttts.eval.grading import answer_key, is_equivalent

__all__ = ["ANSWER_RULES", "best_of", "group_answers", "majority_vote", "pass_at_n",
           "weighted_vote"]

#: The votes a method's answer may come from (`SearchStrategy.answer_rule`), as printed.
ANSWER_RULES = {"weighted": "PRM-weighted vote", "majority": "majority vote",
                "best": "highest-scored completion"}


def group_answers(answers: Sequence[str | None]) -> list[list[int]]:
    """Group answers by equivalence.

    Args:
        answers: Extracted answers; ``None`` and empty/whitespace-only answers are skipped.

    Returns:
        One list of indices into ``answers`` per group, groups in first-seen order, indices
        ascending. The first index of a group is its representative. An answer joins the first
        group whose representative it is equivalent to
        (``is_equivalent(answer, representative)``, the representative acting as gold), or any
        group that already holds an answer with the same :func:`answer_key`.

    Raises:
        Nothing.
    """
    groups: list[list[int]] = []
    key_to_group: dict[str, int] = {}
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        key = answer_key(answer)
        if key is None:
            continue
        g = key_to_group.get(key)
        if g is None:
            for j, members in enumerate(groups):
                if is_equivalent(answer, answers[members[0]]):
                    g = j
                    break
        if g is None:
            g = len(groups)
            groups.append([])
        groups[g].append(i)
        key_to_group.setdefault(key, g)
    return groups


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """Top-1 majority vote over N answers (FastTTS paper §6.3, "Top-1 accuracy").

    Args:
        answers: Extracted final answers of the N solutions; ``None`` entries are ignored.

    Returns:
        The representative (first-seen answer, as given) of the largest equivalence group;
        ties go to the group seen first. ``None`` if there is no answer to vote on.

    Raises:
        Nothing.

    Example:
        ``majority_vote(["0.5", "\\\\frac{1}{2}", "3", "3", "3"]) == "3"`` (3 votes against 2).
    """
    groups = group_answers(answers)
    if not groups:
        return None
    best = max(range(len(groups)), key=lambda g: (len(groups[g]), -g))
    return answers[groups[best][0]]


def weighted_vote(answers: Sequence[str | None], weights: Sequence[float]) -> str | None:
    """PRM-weighted majority vote ("weighted best-of-N", as in search-and-learn).

    Each equivalence group scores the sum of its members' weights; the group with the highest
    total wins. A reimplementation of the idea of search-and-learn's
    ``find_answer_with_highest_weight``, with equivalence grouping instead of string keys.

    Args:
        answers: Extracted final answers; ``None`` entries are ignored (their weight too).
        weights: One finite score per answer (e.g. the PRM score of the solution).

    Returns:
        The representative (first-seen member) of the group with the largest total weight;
        ties go to the group seen first. ``None`` if there is no answer to vote on.

    Raises:
        ValueError: if ``answers`` and ``weights`` have different lengths, or a weight is not a
            finite number (NaN, inf).
    """
    w = _check_weights(answers, weights)
    groups = group_answers(answers)
    if not groups:
        return None
    totals = [math.fsum(w[i] for i in members) for members in groups]
    best = max(range(len(groups)), key=lambda g: (totals[g], -g))
    return answers[groups[best][0]]


def best_of(answers: Sequence[str | None], weights: Sequence[float]) -> str | None:
    """Best-of-N: the answer of the single highest-weighted solution.

    Args:
        answers: Extracted final answers; ``None`` and empty answers are ignored.
        weights: One finite score per answer.

    Returns:
        The answer with the highest weight (ties: the earliest), or ``None`` if no answer.

    Raises:
        ValueError: if the lengths differ or a weight is not finite.
    """
    w = _check_weights(answers, weights)
    best: int | None = None
    for i, answer in enumerate(answers):
        if answer is None or not answer.strip():
            continue
        if best is None or w[i] > w[best]:
            best = i
    return None if best is None else answers[best]


def pass_at_n(answers: Sequence[str | None], gold: str) -> bool:
    """Pass@N (FastTTS paper §6.3): is any of the N answers equivalent to the gold answer?

    Args:
        answers: Extracted final answers; ``None`` entries never match.
        gold: The reference answer.

    Returns:
        ``True`` if at least one answer satisfies ``is_equivalent(answer, gold)``.

    Raises:
        Nothing.
    """
    return any(is_equivalent(a, gold) for a in answers if a is not None)


def _check_weights(answers: Sequence[str | None], weights: Sequence[float]) -> list[float]:
    if len(answers) != len(weights):
        raise ValueError(
            f"answers and weights must have the same length, got {len(answers)} answers "
            f"and {len(weights)} weights"
        )
    out: list[float] = []
    for i, x in enumerate(weights):
        try:
            v = float(x)
        except (TypeError, ValueError):
            raise ValueError(f"weight {i} is not a number: {x!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"weight {i} is not finite: {x!r}")
        out.append(v)
    return out
