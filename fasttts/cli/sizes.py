"""Sizes and numbers on the command line: `parse_size` (`512MiB`, `1.5GiB`, `2G`, `1073741824`,
binary units) and `number`, the argparse types of bounded integers and finite floats (flags
not generated from a config model, whose ranges the model checks). Each refuses a bad value
with one line that says what is allowed ("argument --port: '99999' is not an integer from 0
to 65535"), never argparse's "invalid _positive value"."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

__all__ = ["PORT", "POSITIVE_INT", "number", "parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from a size such as `1073741824`, `512MiB`, `1.5GiB`, `2G` (binary units).

    Raises:
        argparse.ArgumentTypeError: not a size, or not positive.
    """
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 1GiB, 512MiB, 1073741824)")
    unit = (m.group(2) or "").upper()[:1]
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be > 0 bytes, got {text!r}")
    return value


def number(kind: type, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> Callable[[str], int | float]:
    """An argparse type: `kind` (int, or float: finite only) within [low, high] (`low_open`:
    above `low`); None = unbounded on that side.

    The returned function raises `argparse.ArgumentTypeError` naming the value and the range.
    """
    name = "an integer" if kind is int else "a finite number"
    if low is not None and high is not None:
        allowed = f"{name} from {low} to {high}"
    elif low is not None:
        allowed = f"{name} {'>' if low_open else '>='} {low}"
    else:
        allowed = f"{name} <= {high}" if high is not None else name

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if (value is None or (kind is float and not math.isfinite(value))
                or (low is not None and (value <= low if low_open else value < low))
                or (high is not None and value > high)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {allowed}")
        return value

    parse.__name__ = allowed  # argparse names the type by it in some messages
    return parse


#: An integer >= 1 (a count, a limit).
POSITIVE_INT = number(int, 1)
#: A TCP port (0 = any free port).
PORT = number(int, 0, 65535)
