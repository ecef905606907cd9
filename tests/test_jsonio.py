"""`fasttts.jsonio`: every way a JSON file a user hands in can be damaged is one line naming
the file, the line and what was wrong (no RecursionError, int-digits ValueError or codec
message)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from fasttts.jsonio import JsonFileError, check_text, parse, read_json, read_jsonl, read_model

BAD = [
    ("invalid", b'{"a": 1,}', "invalid JSON (Expecting property name enclosed in double quotes "
                              "at line 1, column 9)"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply to read"),
    ("5000 digits", b'{"a": ' + b"7" * 5000 + b"}", "a number with more than 4300 digits"),
    ("NaN", b'{"a": NaN}', "NaN is not a JSON number (not valid JSON)"),
    ("-Infinity", b"[-Infinity]", "-Infinity is not a JSON number"),
    ("not UTF-8", b'{"a": 1,\n "b": "\xff"}', "not UTF-8 text (byte 0xff at line 2, column 8)"),
    ("lone surrogate", b'{"a": ["ok", {"\\udc80": 1}]}',
     "not valid UTF-8 text (an undecodable byte or a lone surrogate '\\udc80' at character 1)"),
]


@pytest.mark.parametrize("kind, data, reason", BAD, ids=[k for k, _, _ in BAD])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, kind, data, reason):
    path = tmp_path / "f.json"
    path.write_bytes(data)
    with pytest.raises(JsonFileError) as e:
        read_json(path)
    assert str(e.value).startswith(f"{path}: {reason}") and "\n" not in str(e.value)
    assert e.value.where == str(path) and e.value.reason.startswith(reason)


def test_a_damaged_jsonl_line_is_named_by_its_number(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a": 3,,}\n')
    lines = read_jsonl(path)
    assert next(lines) == (1, {"a": 1}) and next(lines) == (3, {"a": 2})
    with pytest.raises(JsonFileError, match=r"f.jsonl, line 4: invalid JSON \(Expecting property "
                                            r"name enclosed in double quotes at column 9\)$"):
        next(lines)
    assert parse(b"[1, 2]", "x") == [1, 2]


def test_a_file_that_is_not_the_model_names_each_field(tmp_path):
    class Spec(BaseModel):
        model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
        speed: float
        size: int

    path = tmp_path / "s.json"
    path.write_text('{"speed": 1e999, "size": "big", "extra": 1}')
    with pytest.raises(JsonFileError) as e:
        read_model(path, Spec)
    assert str(e.value) == (f"{path}: not a valid Spec: speed: Input should be a finite number; "
                            f"size: Input should be a valid integer, unable to parse string as "
                            f"an integer; extra: Extra inputs are not permitted")
    path.write_text("[1]")
    with pytest.raises(JsonFileError, match="expected a JSON object of Spec fields, got a list"):
        read_model(path, Spec)
    with pytest.raises(JsonFileError, match=r"missing.json: cannot be read \(No such file"):
        read_model(tmp_path / "missing.json", Spec)


def test_text_from_outside_a_file_is_checked_too():
    assert check_text("fine ✓", "the problem") == "fine ✓"
    with pytest.raises(ValueError, match=r"^the problem: not valid UTF-8 text \(an undecodable "
                                         r"byte or a lone surrogate '\\udcff' at character 3\)$"):
        check_text("ab\udcff", "the problem")
