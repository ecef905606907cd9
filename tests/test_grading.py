"""Tests for fasttts.eval.grading: boxed extraction and math_verify-based equivalence."""

import threading

import pytest

from fasttts.eval.datasets import load_dataset
from fasttts.eval.grading import (
    answer_key,
    extract_answer,
    find_answer,
    grade,
    is_equivalent,
    normalize_answer,
    parse_answer,
)

# ---------------------------------------------------------------- extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("first \\boxed{1}, then \\boxed{2}", "2"),  # the last box wins
        ("no box here, the answer is 5", None),
        ("", None),
        (None, None),
        ("\\boxed{ 42 }", "42"),
        ("\\fbox{7}.", "7"),
        ("\\boxed{3} then \\fbox{4}", "4"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are not counted
        ("\\boxed{\\boxed{5}}", "5"),
        ("\\boxed{\\boxed{5}+1}", "\\boxed{5}+1"),
        ("\\boxed{3} and a truncated \\boxed{4", "3"),  # an unclosed box is ignored
        ("\\boxed{3} \\boxed{}", "3"),  # so is an empty one
        ("$\\boxed 5$", "5"),
        ("\\boxedx{3}", None),  # not the \boxed command
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


# ---------------------------------------------------------------- equivalence

EQUIVALENT = [
    ("2,125", "2125"),  # GSM8K thousands separators
    ("1,450,000", "1450000"),
    ("10,\\!080", "10080"),  # MATH style separators
    ("27.0", "27"),  # AMC answers are stored as floats
    ("-1.0", "-1"),
    ("\\text{13}", "13"),
    ("**73**", "73"),  # markdown bold
    ("\\frac{1}{2}", "0.5"),
    ("\\dfrac{1}{2}", "1/2"),
    ("(3, \\frac{2\\pi}{3})", "(3, \\frac{2\\pi}{3})"),
    ("(3, \\frac{2\\pi}{3})", "\\left( 3, \\frac{2 \\pi}{3} \\right)"),
    ("025", "25"),  # AIME answers with leading zeros
    ("$\\frac{1}{2}$", "\\frac12"),
    ("\\boxed{5}", "5"),
    ("\\frac{1}{3}", "0.333333"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
]


@pytest.mark.parametrize(("a", "b"), EQUIVALENT)
def test_equivalent_both_ways(a, b):
    assert is_equivalent(a, b)
    assert is_equivalent(b, a)


NOT_EQUIVALENT = [
    ("\\frac{1}{3}", "0.5"),
    ("2126", "2,125"),
    ("2125", "2,126"),
    ("26", "27.0"),
    ("(3, 125)", "3125"),  # commas inside a tuple are not thousands separators
    ("(3, \\frac{\\pi}{3})", "\\left( 3, \\frac{2 \\pi}{3} \\right)"),
    ("(1, 2)", "(2, 1)"),
    ("12", "13"),
    ("\\sqrt{2}", "2"),
]


@pytest.mark.parametrize(("a", "b"), NOT_EQUIVALENT)
def test_not_equivalent_both_ways(a, b):
    assert not is_equivalent(a, b)
    assert not is_equivalent(b, a)


@pytest.mark.parametrize("pred", [None, "", "   ", "\\boxed{}"])
def test_missing_prediction_is_false(pred):
    assert is_equivalent(pred, "5") is False


@pytest.mark.parametrize(
    "pred",
    ["\\frac{", "}{", "\\boxed{", "$$", "\\left(", "x^^2", "\\begin{pmatrix}", "🙂", "a" * 500],
)
def test_garbage_never_raises(pred):
    assert is_equivalent(pred, "5") is False
    assert isinstance(parse_answer(pred), list)
    answer_key(pred)  # must not raise


def test_grade():
    assert grade("We get $x = \\frac{1}{2}$, so the answer is $\\boxed{0.5}$.", "\\frac{1}{2}")
    assert grade("The total is \\boxed{2,125} dollars.", "2,125")
    assert grade("Meeting point: \\boxed{27} miles.", "27.0")
    assert not grade("First \\boxed{27}, on reflection \\boxed{28}.", "27.0")
    # no box: the stated answer counts (issue 16; it used to be graded wrong)
    assert grade("The answer is 27.", "27.0")
    assert not grade("I drove 27 miles, then 3 more.", "27.0")  # no stated answer, not numeric
    assert not grade("I drove 27 miles, then 3 more.", "27.0", numeric=True)  # the last number


@pytest.mark.parametrize(("gold", "pred"), [
    ("\\frac{1}{2006!}", "\\frac{1}{2004!}"),  # Math-Verify issue #14: tiny values
    ("10^{-31}", "10^{-30}"),
    ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}"),
    ("10^{-30}", "0.0000000000000000000000000000011"),
])
def test_tiny_numbers_are_compared_relatively(gold, pred):
    assert not is_equivalent(pred, gold)
    assert not grade(f"so \\boxed{{{pred}}}", gold)
    assert is_equivalent(gold, gold)


def test_exact_and_decimal_forms_of_one_number_still_match():
    assert is_equivalent("\\frac{2005 \\cdot 2006}{2006!}", "\\frac{1}{2004!}")
    assert is_equivalent("0.000000000000000000000000000001", "10^{-30}")
    assert is_equivalent("1267650600228229401496703205376", "2^{100}")


@pytest.mark.parametrize(("text", "numeric", "expected"), [
    ("The answer is **73**.", False, "73"),
    ("Therefore, the answer is 73.", False, "73"),
    ("So the final answer is $\\frac{1}{2}$.", False, "\\frac{1}{2}"),
    ("The answer is: 3.5.", False, "3.5"),
    ("The answer is 12, since 3 * 4 = 12.", False, "12"),
    ("The answer is (3, 4).", False, "(3, 4)"),
    ("The answer is \\boxed{9}. Or the answer is 8.", False, "9"),  # a box comes first
    ("He has 5 apples and 2,125 pears.", True, "2,125"),  # the last number, numeric only
    ("He has 5 apples and 2,125 pears.", False, None),
    ("No number here.", True, None),
])
def test_find_answer_falls_back_in_the_documented_order(text, numeric, expected):
    assert find_answer(text, numeric) == expected


def test_normalize_answer():
    assert normalize_answer("  **73** ") == "73"
    assert normalize_answer("$2,125$") == "2125"
    assert normalize_answer("\\boxed{1,450,000}") == "1450000"
    assert normalize_answer("(3, 125)") == "(3, 125)"
    assert normalize_answer("1,2") == "1,2"
    assert normalize_answer("\\(x+1\\)") == "x+1"
    assert normalize_answer(None) == ""


def test_parse_answer_returns_math_verify_objects():
    import sympy

    half = parse_answer("\\frac{1}{2}")
    assert half[0] == sympy.Rational(1, 2)
    tup = parse_answer("(3, \\frac{2\\pi}{3})")
    assert isinstance(tup[0], sympy.Tuple) and sympy.simplify(tup[0][1] - 2 * sympy.pi / 3) == 0
    assert parse_answer("2,125")[0] == 2125
    assert parse_answer("") == []
    parse_answer("1").append("x")  # a fresh list each call: the cache is not mutated
    assert parse_answer("1") == [1, "1"]


def test_answer_key():
    assert answer_key("0.5") == answer_key("\\frac{1}{2}") == "1/2"
    assert answer_key("27.0") == answer_key("27") == "27"
    assert answer_key("2,125") == answer_key("$2125$") == "2125"
    assert answer_key("\\text{13}") == "13"
    assert answer_key("3") != answer_key("4")
    assert answer_key(None) is None
    assert answer_key("  ") is None


def test_works_outside_main_thread():
    # math_verify's timeouts use signal.alarm, which fails outside the main thread
    results = []
    t = threading.Thread(
        target=lambda: results.extend(
            [is_equivalent("0.5", "\\frac{1}{2}"), is_equivalent("\\frac{1}{3}", "0.5")]
        )
    )
    t.start()
    t.join()
    assert results == [True, False]


# ---------------------------------------------------------------- packaged gold answers


def test_amc23_golds_match_integers():
    for p in load_dataset("amc23"):
        assert is_equivalent(str(int(float(p.answer))), p.answer), p.id
        assert not is_equivalent(str(int(float(p.answer)) + 1), p.answer), p.id


def test_gsm8k_golds_with_separators():
    golds = [p.answer for p in load_dataset("gsm8k") if "," in p.answer]
    assert len(golds) == 14
    for g in golds:
        assert is_equivalent(g.replace(",", ""), g)
        assert is_equivalent(g, g.replace(",", ""))


def test_aime24_golds_match_stripped_leading_zeros():
    for p in load_dataset("aime24"):
        assert is_equivalent(str(int(p.answer)), p.answer), p.id


def test_math500_golds_equivalent_to_themselves_when_boxed():
    for p in load_dataset("math500", limit=100):
        assert grade(f"The answer is $\\boxed{{{p.answer}}}$.", p.answer), p.id
