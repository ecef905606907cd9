"""Math evaluation datasets: the packaged sets and user-supplied JSONL files.

Four standard sets ship with ``fasttts`` as package data (``fasttts/data/<name>/test.jsonl``;
provenance and licenses in ``fasttts/data/README.md``):

=========  =======  =====================================
name       records  source
=========  =======  =====================================
aime24     30       AIME 2024 I + II (QwenLM/Qwen2.5-Math)
amc23      40       AMC 2023 12A + 12B (QwenLM/Qwen2.5-Math)
math500    500      MATH-500, PRM800K test split
gsm8k      1319     GSM8K test (openai/grade-school-math)
=========  =======  =====================================

Every record has ``id``, ``problem`` and ``answer`` strings; the remaining fields (``solution``,
``level``, ``subject``, and the keys of the nested ``meta`` object) end up in :attr:`Problem.meta`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fasttts.jsonio import JsonFileError, parse, read_text

__all__ = ["DATASETS", "DatasetError", "Problem", "load_dataset", "numeric_answers"]

DATASETS: tuple[str, ...] = ("aime24", "amc23", "math500", "gsm8k")
"""Names of the datasets packaged with fasttts, accepted by :func:`load_dataset`."""

_CORE_FIELDS = ("id", "problem", "answer")


class DatasetError(ValueError):
    """A dataset could not be found or a dataset file is malformed.

    Subclass of :class:`ValueError`, so ``except ValueError`` also catches it.
    """


@dataclass(frozen=True)
class Problem:
    """One evaluation problem.

    Attributes:
        id: Identifier, unique within its dataset (e.g. ``"aime24-60"``,
            ``"test/precalculus/807.json"``, ``"gsm8k-test-0"``).
        problem: The problem statement, exactly as in the file.
        answer: The reference final answer as a string (e.g. ``"204"``, ``"27.0"``, ``"2,125"``,
            ``"\\left( 3, \\frac{\\pi}{2} \\right)"``). Compare it with
            :func:`fasttts.eval.grading.is_equivalent`, not with ``==``.
        meta: Every other field of the record: ``solution``, ``level``, ``subject`` where present,
            plus the keys of the record's nested ``meta`` object (``url``, ``source_id``,
            ``index``, ...) merged in (top-level fields win on a name clash). Not part of the hash.
    """

    id: str
    problem: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False)


def load_dataset(
    name_or_path: str | os.PathLike[str],
    limit: int | None = None,
    offset: int = 0,
) -> list[Problem]:
    """Load a packaged dataset by name, or a user JSONL file by path.

    Args:
        name_or_path: One of :data:`DATASETS` (``"aime24"``, ``"amc23"``, ``"math500"``,
            ``"gsm8k"``) to load the copy packaged with fasttts; anything else is taken as the
            path of a JSONL file. Each non-blank line of that file must be a JSON object with a
            non-empty string ``problem`` and an ``answer`` (string, or a JSON number which is
            converted with ``str()``, so ``27.0`` becomes ``"27.0"``); ``id`` (string or integer)
            is optional and defaults to ``f"{file stem}-{i}"`` where ``i`` is the 0-based index
            of the record among the file's records (blank lines are skipped and not counted).
        limit: Keep at most this many problems (after ``offset``); ``None`` keeps all.
        offset: Number of problems to skip from the start of the file.

    Returns:
        The problems in file order, ``records[offset : offset + limit]``. The whole file is
        validated even when only a slice is returned; an ``offset`` past the end gives ``[]``.

    Raises:
        DatasetError: (a :class:`ValueError`) if ``name_or_path`` is neither a packaged name nor
            an existing file (the message lists the packaged names and says a JSONL path is also
            accepted); if a line is not valid JSON or not a JSON object (message gives the file
            and 1-based line number); if ``problem`` is missing/empty/not a string or ``answer``
            is missing/null/empty/not a string or finite number, or a line holds NaN or
            Infinity (message gives file, line and field);
            if ``id`` has a wrong type or two records share an ``id``; if the file is not UTF-8;
            if ``limit <= 0`` or ``offset < 0`` (or either is not an integer).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise DatasetError(f"limit must be a positive integer, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise DatasetError(f"offset must be a non-negative integer, got {offset!r}")

    if isinstance(name_or_path, str) and name_or_path in DATASETS:
        resource = resources.files("fasttts") / "data" / name_or_path / "test.jsonl"
        try:
            text = resource.read_text(encoding="utf-8")
        except FileNotFoundError as exc:  # broken installation
            raise DatasetError(
                f"packaged dataset {name_or_path!r} is missing from the fasttts installation "
                f"(expected {resource})"
            ) from exc
        problems = _parse_jsonl(text, source=f"{name_or_path} ({resource})", stem=name_or_path)
    else:
        path = Path(os.fspath(name_or_path))
        if not path.is_file():
            raise DatasetError(
                f"unknown dataset {os.fspath(name_or_path)!r}: expected one of "
                f"{', '.join(DATASETS)}, or a path to an existing JSONL file "
                "(one JSON object per line with 'problem' and 'answer' fields, optional 'id')"
            )
        try:
            text = read_text(path)  # a BOM is dropped
        except JsonFileError as exc:
            raise DatasetError(str(exc)) from exc
        problems = _parse_jsonl(text, source=str(path), stem=path.stem)

    end = None if limit is None else offset + limit
    return problems[offset:end]


_PLAIN_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def numeric_answers(problems: list[Problem]) -> bool:
    """Whether every reference answer is a plain number (``204``, ``27.0``, ``2,125``, ``-3``):
    true for GSM8K, AIME and AMC, false for MATH-500. Such datasets may grade a completion's
    last number when it states no answer (`fasttts.eval.grading.find_answer`)."""
    return bool(problems) and all(_PLAIN_NUMBER.fullmatch(p.answer.strip()) for p in problems)


def _json_object(line: str, source: str, lineno: int) -> dict:
    """The JSON object on line `lineno` of `source` (`fasttts.jsonio.parse`).

    Raises:
        DatasetError: not JSON (invalid, NaN or Infinity, a number too long, nested too deep,
            a lone surrogate), not an object.
    """
    where = f"{source}, line {lineno}"
    try:
        record = parse(line, source, lineno)
    except JsonFileError as exc:
        raise DatasetError(str(exc)) from exc
    if not isinstance(record, dict):
        raise DatasetError(
            f"{where}: expected a JSON object, got {type(record).__name__}"
        )
    return record


def _problem_and_answer(record: dict, where: str) -> tuple[str, str]:
    """A record's problem text and answer (a number as its string).

    Raises:
        DatasetError: either missing, a blank problem, an answer neither string nor finite
            number, or empty.
    """
    problem = record.get("problem")
    if "problem" not in record:
        raise DatasetError(f"{where}: missing required field 'problem'")
    if not isinstance(problem, str) or not problem.strip():
        raise DatasetError(f"{where}: field 'problem' must be a non-empty string")

    if "answer" not in record:
        raise DatasetError(f"{where}: missing required field 'answer'")
    answer = record["answer"]
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise DatasetError(
            f"{where}: field 'answer' must be a string or a number, "
            f"got {type(answer).__name__}"
        )
    if isinstance(answer, float) and not math.isfinite(answer):
        raise DatasetError(f"{where}: field 'answer' is {answer}, not a finite number")
    answer = str(answer)
    if not answer.strip():
        raise DatasetError(f"{where}: field 'answer' is empty")
    return problem, answer


def _problem_id(record: dict, where: str, default: str) -> str:
    """A record's id as a string, `default` when it has none.

    Raises:
        DatasetError: an id neither string nor integer, or empty.
    """
    if "id" not in record or record["id"] is None:
        return default
    pid = record["id"]
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise DatasetError(
            f"{where}: field 'id' must be a string or an integer, got {type(pid).__name__}"
        )
    pid = str(pid)
    if not pid:
        raise DatasetError(f"{where}: field 'id' is empty")
    return pid


def _record_meta(record: dict) -> dict[str, Any]:
    """A record's fields beyond the core ones, its nested "meta" object merged in."""
    meta: dict[str, Any] = {}
    nested = record.get("meta")
    if isinstance(nested, dict):
        meta.update(nested)
    for key, value in record.items():
        if key in _CORE_FIELDS or (key == "meta" and isinstance(nested, dict)):
            continue
        meta[key] = value
    return meta


def _parse_jsonl(text: str, source: str, stem: str) -> list[Problem]:
    """Parse and validate JSONL text into problems (see :func:`load_dataset` for the rules)."""
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    # split on "\n" only: str.splitlines() would also split on U+2028, \x0c, ... inside JSON strings
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{source}, line {lineno}"
        record = _json_object(line, source, lineno)
        problem, answer = _problem_and_answer(record, where)
        pid = _problem_id(record, where, f"{stem}-{len(problems)}")
        if pid in seen:
            raise DatasetError(
                f"{where}: duplicate id {pid!r} (first used on line {seen[pid]})"
            )
        seen[pid] = lineno
        problems.append(Problem(id=pid, problem=problem, answer=answer,
                                meta=_record_meta(record)))
    return problems
