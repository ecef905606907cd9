"""Pairwise ranking accuracy and AUROC against hand-computed values (fasttts.eval.ranking)."""

import math

from fasttts.eval.ranking import auroc, is_mixed, mixed_top1, pairwise_accuracy


def test_pairwise_by_hand():
    # problem 1: correct {0.9, 0.2}, incorrect {0.5}: pairs (0.9>0.5) right, (0.2<0.5) wrong
    # problem 2: correct {0.4}, incorrect {0.4, 0.1}: a tie (1/2) and a right one
    # problem 3: all correct, no pairs
    acc, pairs = pairwise_accuracy([([0.9, 0.2, 0.5], [True, True, False]),
                                    ([0.4, 0.4, 0.1], [True, False, False]),
                                    ([0.3, 0.7], [True, True])])
    assert pairs == 4
    assert acc == (1 + 0 + 0.5 + 1) / 4


def test_pairwise_without_pairs_is_nan():
    acc, pairs = pairwise_accuracy([([0.1], [True])])
    assert pairs == 0 and math.isnan(acc)


def test_mixed_top1_by_hand():
    # problem 1 mixed: top is 0.9 (correct); chance 2/3
    # problem 2 mixed: 0.4 tie between a correct (first) and an incorrect: the first wins; chance 1/3
    # problem 3 mixed: top 0.8 is incorrect; chance 1/2
    # problem 4 all correct: not counted
    top, chance, problems = mixed_top1([([0.9, 0.2, 0.5], [True, True, False]),
                                        ([0.4, 0.4, 0.1], [True, False, False]),
                                        ([0.3, 0.8], [True, False]),
                                        ([0.3, 0.7], [True, True])])
    assert problems == 3
    assert top == 2 / 3
    assert chance == (2 / 3 + 1 / 3 + 1 / 2) / 3
    assert mixed_top1([([0.1], [True])])[2] == 0


def test_auroc_by_hand():
    # positives 0.8, 0.4; negatives 0.6, 0.1: pairs (0.8>0.6, 0.8>0.1, 0.4<0.6, 0.4>0.1) = 3/4
    assert auroc([0.8, 0.6, 0.4, 0.1], [True, False, True, False]) == 0.75
    assert auroc([0.5, 0.5], [True, False]) == 0.5
    assert math.isnan(auroc([0.5, 0.4], [True, True]))


class _CharTokenizer:
    """One character per token: decode joins them."""

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_step_confidences_by_hand():
    from fasttts.eval.confidence import step_confidences

    text = "ab\n\ncd"  # steps "ab\n\n" (4 tokens) and "cd" (2 tokens)
    ids = [ord(c) for c in text]
    lp = [-1.0, -1.0, 0.0, 0.0, -2.0, -4.0]
    got = step_confidences(_CharTokenizer(), ids, lp, text, window=2)
    assert got["mean"] == [math.exp(-0.5), math.exp(-3.0)]
    # windows of 2 ending in step 1: (-1,-1) (-1,0) (0,0) -> lowest -1; then (0,-2) (-2,-4) -> -3
    assert got["lowest_window"] == [math.exp(-1.0), math.exp(-3.0)]


def test_is_mixed_needs_both_a_correct_and_an_incorrect_completion():
    assert is_mixed([True, False, False])
    assert not is_mixed([True, True])
    assert not is_mixed([False, False, False])
    assert not is_mixed([])
