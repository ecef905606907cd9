"""An append-only JSONL file of per-problem records that survives interruption.

Each line is one JSON object with a string "id". A run appends a problem's line whole (flushed
and synced) once the problem is done, so an interrupted run loses at most the problem it was
on; a cut-short last line is dropped on load and damaged lines are set aside in `<file>.bad`.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from fasttts.jsonio import JsonFileError, parse, read_json

__all__ = ["JsonlStore", "StoreConfigError"]


class StoreConfigError(ValueError):
    """The store's folder holds records made with another configuration."""


class JsonlStore:
    """Records of one configuration in `<folder>/<name>.jsonl`, beside `<name>.config.json`.

    Args:
        path: the .jsonl file (its folder is created on the first append).
        config: JSON-serialisable settings that made the records; must equal the stored ones.

    Raises:
        StoreConfigError: the stored config differs (names the differing keys).
    """

    def __init__(self, path: str | os.PathLike, config: dict):
        self.path = Path(path)
        self.config_path = self.path.with_suffix(".config.json")
        self.config = json.loads(json.dumps(config))
        if self.config_path.exists():
            try:
                old = read_json(self.config_path)
            except JsonFileError as e:
                raise StoreConfigError(f"{e}; repair it or use another output folder") from e
            if not isinstance(old, dict):
                raise StoreConfigError(f"{self.config_path} is a JSON {type(old).__name__}, not "
                                       f"the settings (an object); repair it or use another "
                                       f"output folder")
            diff = sorted(k for k in set(old) | set(self.config) if old.get(k) != self.config.get(k))
            if diff:
                raise StoreConfigError(
                    f"{self.path} holds records made with other settings ({', '.join(diff)} "
                    f"differ); use another output folder or the same settings")
        self.records: dict[str, dict] = self._load()

    def _load(self) -> dict[str, dict]:
        if not self.path.exists():
            return {}
        lines = self.path.read_bytes().splitlines(keepends=True)
        if lines and not lines[-1].endswith(b"\n"):
            lines.pop()  # cut short by an interrupted run: that problem runs again
        good, bad = {}, []
        for number, line in enumerate(lines, start=1):
            try:
                record = parse(line, str(self.path), number)
                good[record["id"]] = record
            except (JsonFileError, TypeError, KeyError) as e:
                bad.append(line)
                warnings.warn(f"{self.path} line {number}: not a record ({e}); set aside in "
                              f"{self.path.name}.bad", stacklevel=3)
        kept = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in good.values())
        if bad:
            with open(self.path.with_name(self.path.name + ".bad"), "ab") as f:
                f.write(b"".join(bad))
        if bad or kept != self.path.read_bytes():
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_bytes(kept)
            os.replace(tmp, self.path)
        return good

    def append(self, record: dict) -> None:
        """Append one record (a dict with a string "id") as one synced line."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.config_path.exists():
            self.config_path.write_text(json.dumps(self.config, indent=2, sort_keys=True) + "\n")
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records[record["id"]] = record
