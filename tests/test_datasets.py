"""Tests for fasttts.eval.datasets: the packaged sets and user JSONL files."""

import json
from pathlib import Path

import pytest

from fasttts.eval.datasets import DATASETS, DatasetError, Problem, load_dataset


@pytest.mark.parametrize(
    ("name", "count", "first_id"),
    [
        ("aime24", 30, "aime24-60"),
        ("amc23", 40, "amc23-0"),
        ("math500", 500, "test/precalculus/807.json"),
        ("gsm8k", 1319, "gsm8k-test-0"),
    ],
)
def test_packaged_counts_and_first_ids(name, count, first_id):
    problems = load_dataset(name)
    assert len(problems) == count
    assert problems[0].id == first_id
    assert len({p.id for p in problems}) == count
    for p in problems:
        assert isinstance(p, Problem)
        assert isinstance(p.problem, str) and p.problem.strip()
        assert isinstance(p.answer, str) and p.answer.strip()


def test_datasets_constant():
    assert DATASETS == ("aime24", "amc23", "math500", "gsm8k")


def test_packaged_contents_and_meta():
    aime = load_dataset("aime24", limit=1)[0]
    assert aime.answer == "204"
    assert aime.problem.startswith("Every morning Aya goes for a $9$-kilometer-long walk")
    assert aime.meta["source_id"] == 60
    assert "solution" in aime.meta

    amc = load_dataset("amc23", limit=1)[0]
    assert amc.answer == "27.0"  # the source's JSON float token, kept as a string
    assert amc.meta["url"].startswith("https://artofproblemsolving.com/")

    m = load_dataset("math500", limit=1)[0]
    assert m.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert m.meta["level"] == 2 and m.meta["subject"] == "Precalculus"
    assert m.meta["unique_id"] == m.id and m.meta["index"] == 0

    g = load_dataset("gsm8k", limit=1)[0]
    assert g.answer == "18" and g.meta["index"] == 0
    assert "2,125" in {p.answer for p in load_dataset("gsm8k")}  # separators kept as in source


def test_problem_is_frozen_and_hashable():
    p = load_dataset("aime24", limit=1)[0]
    with pytest.raises(AttributeError):
        p.answer = "0"  # type: ignore[misc]
    assert hash(p) == hash(Problem(p.id, p.problem, p.answer, {}))


def test_limit_and_offset():
    problems = load_dataset("gsm8k", limit=5, offset=10)
    assert [p.id for p in problems] == [f"gsm8k-test-{i}" for i in range(10, 15)]
    assert len(load_dataset("aime24", limit=100)) == 30
    assert [p.id for p in load_dataset("aime24", offset=28)] == ["aime24-88", "aime24-89"]
    assert load_dataset("amc23", offset=40) == []
    assert load_dataset("amc23", offset=1000, limit=3) == []
    assert load_dataset("math500", limit=3) == load_dataset("math500")[:3]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"limit": 0}, "limit must be a positive integer"),
        ({"limit": -2}, "limit must be a positive integer"),
        ({"offset": -1}, "offset must be a non-negative integer"),
    ],
)
def test_bad_limit_offset(kwargs, match):
    with pytest.raises(DatasetError, match=match):
        load_dataset("aime24", **kwargs)


def _write(path: Path, lines: list) -> Path:
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n",
        encoding="utf-8",
    )
    return path


def test_user_file_with_ids(tmp_path):
    f = _write(
        tmp_path / "mine.jsonl",
        [
            {"id": "q1", "problem": "1+1?", "answer": "2", "level": 1},
            {"id": "q2", "problem": "Half of 1?", "answer": "\\frac{1}{2}", "meta": {"src": "x"}},
        ],
    )
    problems = load_dataset(str(f))
    assert [p.id for p in problems] == ["q1", "q2"]
    assert problems[0] == Problem("q1", "1+1?", "2", {"level": 1})
    assert problems[1].answer == "\\frac{1}{2}"
    assert problems[1].meta == {"src": "x"}
    assert load_dataset(f, offset=1) == problems[1:]  # os.PathLike accepted too


def test_user_file_default_ids_numeric_answers_blank_lines(tmp_path):
    f = _write(
        tmp_path / "probs.jsonl",
        [
            {"problem": "a", "answer": 27.0},
            "",
            "   ",
            {"problem": "b", "answer": 5},
            {"problem": "c", "answer": "-1"},
        ],
    )
    problems = load_dataset(str(f))
    assert [p.id for p in problems] == ["probs-0", "probs-1", "probs-2"]
    assert [p.answer for p in problems] == ["27.0", "5", "-1"]
    assert all(p.meta == {} for p in problems)
    assert [p.id for p in load_dataset(str(f), limit=1, offset=2)] == ["probs-2"]


def test_unknown_name(tmp_path):
    expected = r"unknown dataset 'aime25'.*aime24, amc23, math500, gsm8k.*JSONL"
    with pytest.raises(DatasetError, match=expected):
        load_dataset("aime25")
    with pytest.raises(ValueError, match="path to an existing JSONL file"):
        load_dataset(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_dataset(str(tmp_path))  # a directory is not a file


def test_invalid_json_line(tmp_path):
    f = _write(tmp_path / "bad.jsonl", [{"problem": "a", "answer": "1"}, "{not json"])
    with pytest.raises(DatasetError, match=r"bad\.jsonl, line 2: invalid JSON"):
        load_dataset(str(f))


def test_non_object_line(tmp_path):
    f = _write(tmp_path / "arr.jsonl", ["[1, 2]"])
    with pytest.raises(DatasetError, match=r"arr\.jsonl, line 1: expected a JSON object"):
        load_dataset(str(f))


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"answer": "1"}, r"line 3: missing required field 'problem'"),
        ({"problem": "", "answer": "1"}, r"line 3: field 'problem' must be a non-empty string"),
        ({"problem": "   ", "answer": "1"}, r"line 3: field 'problem' must be a non-empty string"),
        ({"problem": 7, "answer": "1"}, r"line 3: field 'problem' must be a non-empty string"),
        ({"problem": "p"}, r"line 3: missing required field 'answer'"),
        ({"problem": "p", "answer": None}, r"line 3: field 'answer' must be a string or a number"),
        ({"problem": "p", "answer": ["1"]}, r"line 3: field 'answer' must be a string or a number"),
        ({"problem": "p", "answer": " "}, r"line 3: field 'answer' is empty"),
        ({"problem": "p", "answer": "1", "id": [1]}, r"line 3: field 'id' must be a string"),
    ],
)
def test_bad_records(tmp_path, record, match):
    # line 2 is blank: line numbers count physical lines, 1-based
    f = _write(tmp_path / "recs.jsonl", [{"problem": "ok", "answer": "0"}, "", record])
    with pytest.raises(DatasetError, match=r"recs\.jsonl, " + match):
        load_dataset(str(f))


def test_duplicate_ids(tmp_path):
    f = _write(
        tmp_path / "dup.jsonl",
        [
            {"id": "x", "problem": "a", "answer": "1"},
            {"id": "y", "problem": "b", "answer": "2"},
            {"id": "x", "problem": "c", "answer": "3"},
        ],
    )
    expected = r"dup\.jsonl, line 3: duplicate id 'x' \(first used on line 1\)"
    with pytest.raises(DatasetError, match=expected):
        load_dataset(str(f))


def test_duplicate_between_explicit_and_default_id(tmp_path):
    f = _write(
        tmp_path / "mix.jsonl",
        [{"problem": "a", "answer": "1"}, {"id": "mix-0", "problem": "b", "answer": "2"}],
    )
    with pytest.raises(DatasetError, match="duplicate id 'mix-0'"):
        load_dataset(str(f))


def test_dataset_error_is_value_error():
    assert issubclass(DatasetError, ValueError)


def test_numeric_answer_datasets():
    from fasttts.eval.datasets import numeric_answers

    assert [numeric_answers(load_dataset(d)) for d in ("gsm8k", "aime24", "amc23", "math500")] \
        == [True, True, True, False]
    assert not numeric_answers([])
