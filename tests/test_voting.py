"""Tests for fasttts.eval.voting: majority / weighted vote, best-of-N and Pass@N."""

import math

import pytest

from fasttts.eval.voting import best_of, group_answers, majority_vote, pass_at_n, weighted_vote

HALVES_AND_THREES = ["0.5", "\\frac{1}{2}", "3", "3", "3"]


def test_group_answers_by_equivalence():
    answers = ["0.5", "\\frac{1}{2}", "3", None, "3", "", "0.333333", "\\frac13", "1/2"]
    answers += ["27.0", "27"]
    assert group_answers(answers) == [[0, 1, 8], [2, 4], [6, 7], [9, 10]]
    assert group_answers([]) == []
    assert group_answers([None, None]) == []


def test_majority_vote_groups_equivalent_answers():
    # {0.5, 1/2}: 2 votes, {3}: 3 votes
    assert majority_vote(HALVES_AND_THREES) == "3"
    # {0.5, 1/2, 2/4}: 3 votes now beats {3}: 2 votes; the representative is the first seen
    assert majority_vote(["3", "0.5", "\\frac{1}{2}", "3", "\\frac{2}{4}"]) == "0.5"
    # equivalence, not string equality: 2,125 / 2125 / $2125$ are one group
    assert majority_vote(["7", "2,125", "7", "2125", "$2125$"]) == "2,125"


def test_majority_vote_ties_go_to_first_seen():
    assert majority_vote(["4", "3", "3", "4"]) == "4"
    assert majority_vote(["3", "4", "4", "3"]) == "3"
    assert majority_vote(["1", "2", "3"]) == "1"


def test_majority_vote_ignores_none():
    assert majority_vote([None, "5", None, None, "6", "6"]) == "6"
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


def test_weighted_vote():
    # unweighted the 3-group wins; here 0.9 + 0.9 = 1.8 > 0.5 * 3 = 1.5
    assert weighted_vote(HALVES_AND_THREES, [0.9, 0.9, 0.5, 0.5, 0.5]) == "0.5"
    # 0.2 + 0.2 = 0.4 < 0.5 * 3
    assert weighted_vote(HALVES_AND_THREES, [0.2, 0.2, 0.5, 0.5, 0.5]) == "3"
    # a None answer's weight does not count
    assert weighted_vote([None, "1", "2"], [100.0, 0.1, 0.2]) == "2"
    assert weighted_vote([None], [1.0]) is None
    assert weighted_vote([], []) is None


def test_weighted_vote_ties_go_to_first_seen():
    # 0.25 + 0.5 == 0.75 == 0.75
    assert weighted_vote(["3", "\\frac{1}{2}", "0.5"], [0.75, 0.25, 0.5]) == "3"
    assert weighted_vote(["0.5", "3", "\\frac{1}{2}"], [0.25, 0.75, 0.5]) == "0.5"


def test_weighted_vote_validation():
    with pytest.raises(ValueError, match="same length, got 2 answers and 3 weights"):
        weighted_vote(["1", "2"], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="weight 1 is not finite"):
        weighted_vote(["1", "2"], [0.1, math.nan])
    with pytest.raises(ValueError, match="weight 0 is not finite"):
        weighted_vote(["1", "2"], [math.inf, 0.2])
    with pytest.raises(ValueError, match="weight 0 is not a number"):
        weighted_vote(["1"], ["high"])


def test_best_of():
    assert best_of(["1", "2", "3"], [0.1, 0.9, 0.5]) == "2"
    assert best_of(["1", "2", "3"], [0.9, 0.9, 0.5]) == "1"  # tie: earliest
    assert best_of([None, "2"], [5.0, 0.1]) == "2"  # None answers are skipped
    assert best_of([None], [1.0]) is None
    # best-of-N ignores agreement: a lone high score beats a group
    assert best_of(HALVES_AND_THREES, [0.1, 0.1, 0.3, 0.3, 0.3]) == "3"
    assert best_of(HALVES_AND_THREES, [0.1, 0.6, 0.3, 0.3, 0.3]) == "\\frac{1}{2}"
    with pytest.raises(ValueError, match="same length, got 1 answers and 2 weights"):
        best_of(["1"], [0.1, 0.2])
    with pytest.raises(ValueError, match="not finite"):
        best_of(["1"], [-math.inf])


def test_pass_at_n():
    assert pass_at_n(["3", None, "\\frac{1}{2}"], "0.5")
    assert pass_at_n(["1", "2,125"], "2125")
    assert not pass_at_n(["3", None, "\\frac{1}{3}"], "0.5")
    assert not pass_at_n([], "1")
    assert not pass_at_n([None, None], "1")
