"""run.json: how a recipe's output folder was made, written by `fasttts bench` around every run
of a recipe (not by the recipes), read by `fasttts bench report`.

    {"recipe": "sart-latency", "backend": "sim", "command": "fasttts bench ... (the last run)",
     "wall_s": 1234.5,                       # all runs together (a resumed run adds its own)
     "runs": [{"command", "recipe_command", "start", "end" (UTC, ISO 8601), "wall_s",
               "status" ("ok", "exit N", "interrupted", "error: ..."),
               "platform" (`fasttts.engines.platform_info.run_platform` per engine config),
               "platform_text" (one line), "fasttts_version",
               "git_commit", "git_dirty" (both as they were when the run began)}]}

Written atomically (a temporary file, then a rename) after each run, while the run holds the
folder's lock (`fasttts.eval.folder_lock`) for its whole length (so a recipe must not hand the
same folder to a child process that locks it); a run that wrote nothing (refused input)
leaves no run.json and no folder behind. A damaged run.json is moved to run.json.bad with a
warning (`RunFileWarning`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import warnings
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from fasttts.eval.folder_lock import LOCK_NAME, FolderLock
from fasttts.jsonio import JsonFileError, read_json

__all__ = ["RUN_JSON", "RunFileWarning", "git_commit", "read_run", "record_run"]

RUN_JSON = "run.json"


class RunFileWarning(UserWarning):
    """A damaged run.json was moved to run.json.bad."""


def git_commit() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout the fasttts package runs from; (None, None) when it
    is not one (an installed wheel) or git is missing. Dirty: tracked files changed."""
    here = Path(__file__).resolve().parent

    def git(*argv: str) -> str:
        return subprocess.run(["git", "-C", os.fspath(here), *argv], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()

    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain",
                                                  "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None, None


def _default_engines(dtype: str | None):
    """The default engines' `RunConfig` on vllm, both in `dtype` (None: their default, auto)."""
    from fasttts.config import RunConfig

    cfg = RunConfig(backend="vllm")
    if dtype is None:
        return cfg
    engine = cfg.verifier.engine.model_copy(update={"dtype": dtype})
    return cfg.model_copy(update={
        "generator": cfg.generator.model_copy(update={"dtype": dtype}),
        "verifier": cfg.verifier.model_copy(update={"engine": engine})})


def _platform(recipe, args) -> tuple[list[dict], str]:
    """The platforms of the run's engines (`Recipe.run_configs`) and one line of them."""
    from fasttts.engines.platform_info import describe_platform, run_platform

    try:
        if recipe.run_configs is not None:
            configs = recipe.run_configs(args)
        elif args.backend == "vllm":  # the host, dtype (--dtype) and threads of the default engines
            configs = [_default_engines(getattr(args, "dtype", None))]
        else:
            return [{"backend": "sim"}], "simulated (the recipe does not name its device)"
        platforms = [run_platform(c) for c in configs]
    except Exception as e:  # a record of the run, not a reason to fail it
        return [{"backend": args.backend, "error": str(e)}], f"{args.backend} (not recorded: {e})"
    texts = list(dict.fromkeys(describe_platform(p) for p in platforms))
    cpu = next((p["cpu"] for p in platforms if "cpu" in p), None)
    bf16 = "" if cpu is None else ("; AVX-512-BF16: yes" if "avx512_bf16" in cpu["flags"]
                                   else "; AVX-512-BF16: no")
    return platforms, "; ".join(texts) + bf16


def read_run(folder: str | os.PathLike) -> dict | None:
    """The folder's run.json (None: none; a damaged one raises).

    Raises:
        JsonFileError: run.json is not JSON, or not an object with a list of runs.
    """
    path = Path(folder) / RUN_JSON
    if not path.exists():
        return None
    value = read_json(path)
    runs = value.get("runs") if isinstance(value, dict) else None
    if not (isinstance(runs, list) and all(isinstance(r, dict) for r in runs)):
        raise JsonFileError(os.fspath(path), 'expected a JSON object whose "runs" is a list of '
                                             'objects (one per run of the recipe)')
    return value


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write(folder: Path, recipe, args, entry: dict) -> None:
    """Add `entry` to the folder's run.json (atomically)."""
    try:
        old = read_run(folder) or {}
    except JsonFileError as e:  # kept for the user, and not a reason to lose this run's record
        os.replace(folder / RUN_JSON, folder / f"{RUN_JSON}.bad")
        warnings.warn(f"{e}; moved to {RUN_JSON}.bad, {RUN_JSON} starts again with this run",
                      RunFileWarning, stacklevel=2)
        old = {}
    runs = [*old.get("runs", []), entry]
    data = {"recipe": recipe.name, "backend": args.backend, "command": entry["command"],
            "wall_s": sum(r.get("wall_s", 0.0) for r in runs), "runs": runs}
    tmp = folder / f".{RUN_JSON}.tmp"
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / RUN_JSON)


@contextmanager
def record_run(recipe, args, out: str | os.PathLike, argv: list[str],
               recipe_command: str | None = None):
    """Hold `out`'s lock around one run of `recipe` and add the run to out/run.json after it
    (module docstring) if the run wrote anything there (a run refused before it wrote, e.g.
    because the folder holds another benchmark, leaves the folder as it was); yields a dict whose "status" the
    caller sets to "exit N" for a run that returned exit code N != 0 ("ok" by default).

    Args:
        recipe: the `fasttts.bench.Recipe`.
        args: the parsed arguments (`args.backend`; passed to `Recipe.run_configs`).
        out: the recipe's output folder (checked by `fasttts.bench.store.check_out_dir`).
        argv: the command line, without the program name.
        recipe_command: the command that runs this recipe alone into `out` (`fasttts bench
            all` runs several); default: the command line.

    Raises:
        fasttts.eval.folder_lock.FolderInUse: another process writes to `out`.
    """
    folder = Path(out)
    lock = FolderLock(folder, "--out").acquire()
    result = {"status": "ok"}
    before = _contents(folder)
    start, t0 = _now(), time.monotonic()
    commit = git_commit()  # the code that runs: HEAD may move while a long run goes on
    try:
        yield result
    except KeyboardInterrupt:
        result["status"] = "interrupted"
        raise
    except Exception as e:
        result["status"] = f"error: {e}"
        raise
    finally:
        try:
            if _contents(folder) != before:
                entry = _entry(recipe, args, argv, start, t0, result["status"], commit)
                entry["recipe_command"] = recipe_command or entry["command"]
                _write(folder, recipe, args, entry)
        finally:
            lock.release()


def _contents(folder: Path) -> dict[str, tuple[int, int]]:
    """{file name: (size bytes, mtime ns)} of the folder's files, but the lock file."""
    if not folder.is_dir():
        return {}
    return {p.name: (st.st_size, st.st_mtime_ns) for p in folder.iterdir()
            if p.name != LOCK_NAME and (st := p.stat())}


def _entry(recipe, args, argv: list[str], start: str, t0: float, status: str,
           commit: tuple[str | None, bool | None]) -> dict:
    """One run's record (module docstring); `commit`: `git_commit()` when the run began."""
    from fasttts import __version__

    wall, end = time.monotonic() - t0, _now()
    platforms, text = _platform(recipe, args)
    commit, dirty = commit
    return {"command": shlex.join(["fasttts", *argv]),
            "start": start, "end": end, "wall_s": wall, "status": status,
            "platform": platforms, "platform_text": text, "fasttts_version": __version__,
            "git_commit": commit, "git_dirty": dirty}
