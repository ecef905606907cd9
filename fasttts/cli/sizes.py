"""Sizes on the command line: `512MiB`, `1.5GiB`, `2G`, `1073741824` (binary units)."""

from __future__ import annotations

import argparse
import re

__all__ = ["parse_size"]

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
