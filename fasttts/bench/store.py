"""The append-only record store of a benchmark run (`fasttts bench NAME --out DIR`).

One run writes to a folder at a time (`fasttts.eval.folder_lock`). `DIR/config.json` holds the
recipe's configuration; `DIR/rows.jsonl` one line per finished
row (a configuration at one rate: its summary and its per-request records), written as one
complete line and synced before the next row starts. Re-running the same command skips the
rows already there: a line cut short by an interrupted run is dropped (that row runs again),
a damaged line is moved to `rows.jsonl.bad` with a warning naming its line number, so nothing
is lost or counted twice. A row is the unit: the requests of one row share an engine and
queue behind each other, so a half-run row cannot be resumed, only rerun.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from pathlib import Path

from fasttts.bench import stop
from fasttts.eval.folder_lock import FolderLock
from fasttts.jsonio import JsonFileError, parse, read_json

__all__ = ["BenchDirError", "RowStore", "RowsFileWarning", "check_out_dir"]


class BenchDirError(ValueError):
    """The output folder cannot be used (not writable, another recipe's configuration)."""


class RowsFileWarning(UserWarning):
    """Lines of rows.jsonl were set aside: a damaged line in rows.jsonl.bad, the rows of a
    problem a run left incomplete in rows.jsonl.partial (`RowStore.set_aside`)."""


def check_out_dir(out: str | os.PathLike) -> Path:
    """The output folder, checked writable before anything runs (it, or its nearest existing
    parent, must be a writable folder); not created yet.

    Raises:
        BenchDirError: empty path, a file in the way, or a folder that cannot be written.
    """
    if not str(out).strip():
        raise BenchDirError("--out is empty: give the folder to write the benchmark to")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise BenchDirError(f"--out {path} exists and is not a folder")
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    try:  # a real write, not a permission bit: root passes os.access on read-only mounts
        os.rmdir(tempfile.mkdtemp(prefix=".fasttts-probe-", dir=existing))
    except OSError as e:
        raise BenchDirError(f"--out {path} cannot be written: {existing} is not a writable "
                            f"folder ({e.strerror})") from e
    return path


def _finite(value):
    """`value` with every NaN or infinite float replaced by None (null): JSON has no NaN, and
    `fasttts.jsonio` refuses it when the file is read back."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _dumps(value) -> str:
    """`value` as strict JSON (NaN and infinities written as null)."""
    return json.dumps(_finite(value), ensure_ascii=False, allow_nan=False)


def _sync_append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class RowStore:
    """The rows of one benchmark configuration in an output folder (module docstring).

    Args:
        out: the folder (`check_out_dir`; created on the first row).
        config: the JSON-serialisable recipe configuration; an existing folder's must equal it.

    Raises:
        BenchDirError: the folder holds another configuration, or cannot be used.
    """

    def __init__(self, out: str | os.PathLike, config: dict):
        self.dir = check_out_dir(out)
        self.config = json.loads(json.dumps(config))
        self.rows_path = self.dir / "rows.jsonl"
        cfg = self.dir / "config.json"
        try:
            self._lock = FolderLock(self.dir, "--out").acquire()
        except OSError as e:
            raise BenchDirError(f"--out {self.dir} cannot be used: {e}") from e
        try:
            if cfg.exists():
                old = read_json(cfg)
                if old != self.config:
                    keys = sorted(k for k in set(old) | set(self.config)
                                  if old.get(k) != self.config.get(k))
                    raise BenchDirError(f"--out {self.dir} holds another benchmark "
                                        f"configuration (differs in {', '.join(keys)}); use a "
                                        f"new folder or the same options")
            self.rows = self._load()
        except BaseException as e:
            self.close()
            if isinstance(e, (OSError, JsonFileError)):
                raise BenchDirError(f"--out {self.dir} cannot be used: {e}") from e
            raise

    def close(self) -> None:
        """Let go of the folder (`fasttts.eval.folder_lock`: one writer per folder)."""
        self._lock.release()

    def __enter__(self) -> RowStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _load(self) -> list[dict]:
        if not self.rows_path.exists():
            return []
        data = self.rows_path.read_bytes()
        lines = data.splitlines(keepends=True)
        if lines and not lines[-1].endswith(b"\n"):
            lines.pop()  # cut short: that row runs again
        good, bad = [], []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = parse(line, os.fspath(self.rows_path), number)
                ok = isinstance(row, dict) and isinstance(row.get("key"), str) \
                    and isinstance(row.get("row"), dict)
            except JsonFileError:
                ok = False
            (good if ok else bad).append(line)
            if not ok:
                warnings.warn(f"{self.rows_path} line {number}: not a row record; set aside "
                              f"in rows.jsonl.bad, that row runs again", RowsFileWarning,
                              stacklevel=3)
        if bad:
            _sync_append(self.rows_path.with_name("rows.jsonl.bad"), b"".join(bad))
        if b"".join(good) != data:
            self._replace_rows(b"".join(good))
        return [parse(line, os.fspath(self.rows_path)) for line in good]

    @property
    def done(self) -> set[str]:
        """Keys of the rows already run."""
        return {r["key"] for r in self.rows}

    def _replace_rows(self, data: bytes) -> None:
        """Make rows.jsonl hold `data`, atomically (a temporary file renamed over it)."""
        tmp = self.rows_path.with_name(".rows.jsonl.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.rows_path)

    def set_aside(self, keys: set[str], reason: str) -> None:
        """Move the rows of `keys` out of rows.jsonl into rows.jsonl.partial (appended and
        synced first, so a kill between the two steps loses nothing), with a `RowsFileWarning`
        giving `reason`; those rows run again. No-op when `keys` is empty."""
        keys = set(keys) & self.done
        if not keys:
            return
        lines = self.rows_path.read_bytes().splitlines(keepends=True)
        out = [(line, parse(line, os.fspath(self.rows_path))["key"] in keys)
               for line in lines if line.strip()]
        _sync_append(self.rows_path.with_name("rows.jsonl.partial"),
                     b"".join(line for line, moved in out if moved))
        self._replace_rows(b"".join(line for line, moved in out if not moved))
        self.rows = [r for r in self.rows if r["key"] not in keys]
        warnings.warn(f"{self.rows_path}: {len(keys)} rows set aside in rows.jsonl.partial "
                      f"({reason}); they run again", RowsFileWarning, stacklevel=2)

    def append(self, key: str, row: dict, records: list[dict]) -> None:
        """Add one finished row (its summary and per-request records) as one synced line.

        Raises:
            KeyboardInterrupt: after the row is saved, when a stop was requested
                (`fasttts.bench.stop`).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "config.json"
        if not cfg.exists():
            tmp = self.dir / ".config.json.tmp"
            tmp.write_text(json.dumps(self.config, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, cfg)
        line = _dumps({"key": key, "row": row, "requests": records})
        _sync_append(self.rows_path, (line + "\n").encode())
        self.rows.append(json.loads(line))
        stop.check()  # a stop request whose interrupt was lost (`fasttts.bench.stop`)

    def write_summary(self, summary: dict) -> Path:
        """Write DIR/summary.json (e.g. {"rows": [...]}) atomically; returns its path."""
        path = self.dir / "summary.json"
        tmp = self.dir / ".summary.json.tmp"
        tmp.write_text(json.dumps(_finite(summary), indent=2, allow_nan=False) + "\n")
        os.replace(tmp, path)
        return path
