"""Reading the JSON and JSONL files a user hands in (datasets, results folders, workload
models and traces, hardware and model specs): every way a file can be damaged becomes one
`JsonFileError` line that names the file, the line and what was expected, never a traceback.

Refused, beyond invalid JSON: bytes that are not UTF-8 (line and column named), NaN and
Infinity (Python's extension, not JSON), an integer longer than Python reads
(`sys.get_int_max_str_digits()`), nesting deeper than the parser's recursion allows, and a
string holding a lone surrogate escape (`"\\ud800"`: no UTF-8 text can hold it, so it would
fail later, when the text is encoded).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

_Model = TypeVar("_Model", bound=BaseModel)

__all__ = ["JsonFileError", "check_text", "field_errors", "parse", "read_json", "read_jsonl",
           "read_model", "read_text"]


class JsonFileError(ValueError):
    """A file (or one line of it) that is not the JSON expected; the message names the file,
    the line and what was wrong.

    Attributes:
        where: the file, with ", line N" for one line.
        reason: what was wrong.
    """

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str):
    """`json.loads`' parse_constant: NaN, Infinity and -Infinity are not JSON."""
    raise _NotJson(f"{name} is not a JSON number (not valid JSON); write a finite number, or "
                   f"the value as a string")


def _position(data: bytes | str, offset: int, whole: bool = True) -> str:
    """'line L, column C' of an offset into a file's bytes or text (both 1-based); 'column C'
    only, for one line (`whole` False)."""
    newline = b"\n" if isinstance(data, bytes) else "\n"
    column = f"column {offset - data.rfind(newline, 0, offset)}"
    return f"line {data.count(newline, 0, offset) + 1}, {column}" if whole else column


def _text_problem(text: str) -> str | None:
    """Why `text` is not valid Unicode text (None if it is)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"not valid UTF-8 text (an undecodable byte or a lone surrogate "
                f"{text[e.start]!r} at character {e.start + 1})")
    return None


def check_text(text: str, what: str) -> str:
    """`text` if it is valid Unicode text (encodable as UTF-8): for text from outside a JSON
    file (a command-line argument holding undecodable bytes, a request's message).

    Raises:
        ValueError: a lone surrogate ("`what`: not valid UTF-8 text (... at character N)").
    """
    why = _text_problem(text)
    if why is not None:
        raise ValueError(f"{what}: {why}")
    return text


def _check_strings(value: Any, where: str) -> None:
    """Every string (and key) in a parsed JSON value is valid text (`_text_problem`); walked
    without recursion, so any depth the parser accepted is walked.

    Raises:
        JsonFileError: a string that is not.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            why = _text_problem(item)
            if why is not None:
                raise JsonFileError(where, why)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse(text: str | bytes, source: str, line: int | None = None) -> Any:
    """The JSON value of `text` (one document; bytes must be UTF-8).

    Args:
        text: the JSON text: a whole file, or one line of a JSONL file.
        source: names it in errors (the file).
        line: the line of `source` that `text` is (1-based); None = `text` is the whole file.

    Raises:
        JsonFileError: the text is not JSON as the module docstring says.
    """
    where = source if line is None else f"{source}, line {line}"
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonFileError(where, f"not UTF-8 text (byte 0x{text[e.start]:02x} at "
                                       f"{_position(text, e.start, line is None)})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise JsonFileError(where, f"invalid JSON ({e.msg} at "
                                   f"{_position(text, e.pos, line is None)})") from None
    except _NotJson as e:
        raise JsonFileError(where, str(e)) from None
    except RecursionError:
        raise JsonFileError(where, f"JSON nested too deeply to read (arrays or objects more "
                                   f"than about {sys.getrecursionlimit()} levels deep)") from None
    except ValueError:  # an integer over Python's digit limit
        raise JsonFileError(where, f"a number with more than {sys.get_int_max_str_digits()} "
                                   f"digits (not read: write it shorter, or as a string)"
                            ) from None
    _check_strings(value, where)
    return value


def read_text(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file (a leading byte-order mark dropped).

    Raises:
        JsonFileError: unreadable, or not UTF-8 (names the line and column).
    """
    try:
        data = open(path, "rb").read()
    except OSError as e:
        raise JsonFileError(os.fspath(path), f"cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise JsonFileError(os.fspath(path), f"not UTF-8 text (byte 0x{data[e.start]:02x} at "
                                             f"{_position(data, e.start)})") from None


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value of a whole file (`read_text`, then `parse`).

    Raises:
        JsonFileError: unreadable or not JSON (names the file and the line).
    """
    return parse(read_text(path), os.fspath(path))


def read_jsonl(path: str | os.PathLike, text: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSONL file, 1-based. Lines are split
    at "\\n" only (`str.splitlines` would also split at U+2028 inside a JSON string).

    Args:
        path: the file (named in errors).
        text: its text, if already read (default: `read_text(path)`).

    Raises:
        JsonFileError: unreadable, or a line that is not JSON (names the file and the line).
    """
    text = read_text(path) if text is None else text
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, parse(line, os.fspath(path), number)


def field_errors(error: ValidationError) -> str:
    """One line of a pydantic `ValidationError`: each field's message, "n: Input should be
    greater than 0; ..." (a validator's own message without pydantic's "Value error, ")."""
    return "; ".join(
        (f"{'.'.join(str(x) for x in err['loc'])}: " if err["loc"] else "")
        + err["msg"].removeprefix("Value error, ") for err in error.errors())


def read_model(path: str | os.PathLike, model: type[_Model]) -> _Model:
    """The pydantic `model` a JSON file holds (`read_json`, then `model.model_validate`).

    Raises:
        JsonFileError: unreadable, not JSON, or not a valid `model` (each field named).
    """
    value = read_json(path)
    if not isinstance(value, dict):
        raise JsonFileError(os.fspath(path), f"expected a JSON object of {model.__name__} "
                                             f"fields, got a {type(value).__name__}")
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise JsonFileError(os.fspath(path), f"not a valid {model.__name__}: "
                                             f"{field_errors(e)}") from None
