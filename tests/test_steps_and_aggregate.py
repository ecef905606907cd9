import math

import pytest

from fasttts.steps import build_messages, has_final_answer, split_steps
from fasttts.verifiers.base import ScoreRequest, aggregate


@pytest.mark.parametrize("text,steps", [
    ("a\n\nb\n\nc", ["a\n\n", "b\n\n", "c"]),
    ("a\n\nb\n\n", ["a\n\n", "b\n\n"]),
    ("a\n\n\n\nb", ["a\n\n\n\n", "b"]),
    ("", []),
    ("no delimiter", ["no delimiter"]),
    ("a\n\n \n\nb", ["a\n\n \n\n", "b"]),
    ("\n\na", ["\n\n", "a"]),
])
def test_split_steps(text, steps):
    assert split_steps(text) == steps
    assert "".join(split_steps(text)) == text


def test_split_steps_custom_delimiter():
    assert split_steps("x ## y ## z", " ## ") == ["x ## ", "y ## ", "z"]
    with pytest.raises(ValueError, match="non-empty"):
        split_steps("x", "")


def test_has_final_answer():
    assert has_final_answer("so $\\boxed{\\frac{1}{2}}$.")
    assert not has_final_answer("so $\\boxed{\\frac{1}{2}")
    assert not has_final_answer("no box")


def test_build_messages_rejects_empty_problem():
    with pytest.raises(ValueError, match="problem is empty"):
        build_messages(" \n")
    assert build_messages("1+1?", "sys") == [{"role": "system", "content": "sys"},
                                             {"role": "user", "content": "1+1?"}]


def test_aggregate_strategies():
    s = [0.5, 0.8, 0.25]
    assert aggregate(s, "last") == 0.25
    assert aggregate(s, "min") == 0.25
    assert aggregate(s, "prod") == pytest.approx(0.1)
    assert aggregate(s, "mean") == pytest.approx(1.55 / 3)
    with pytest.raises(ValueError, match="allowed: last, min, prod, mean"):
        aggregate(s, "max")
    with pytest.raises(ValueError, match="empty"):
        aggregate([], "last")
    assert math.isclose(aggregate([0.9], "prod"), 0.9)


def test_score_request_checks_start():
    with pytest.raises(ValueError, match="within 0..1"):
        ScoreRequest("p", ("a",), 2)


def test_cache_stats_since():
    from fasttts.backends.base import CacheStats

    a = CacheStats(128, 10, 3, prefix_cache_queries=100, prefix_cache_hits=40, num_preemptions=1)
    b = CacheStats(128, 10, 0, prefix_cache_queries=300, prefix_cache_hits=190, num_preemptions=1)
    d = b.since(a)
    assert (d.prefix_cache_queries, d.prefix_cache_hits, d.num_preemptions) == (200, 150, 0)
    assert d.prefix_cache_hit_rate == 0.75 and d.num_blocks_used == 0
    assert a.num_blocks_free == 7
    assert CacheStats(16, 1, 0).prefix_cache_hit_rate == 0.0
