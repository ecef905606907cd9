"""`fasttts eval`: run a configuration over a dataset into an append-only output folder.

Layout of the output folder:

- `config.json`: the run configuration and what it ran on ("platform": the dtype each engine
  resolved to, its threads and tensor-parallel ranks, the vLLM version, the CPU's flags or
  the GPUs); a later run into the same folder must match it.
- `results.jsonl`: one record per finished problem (`fasttts.eval.metrics.problem_record`),
  each written as one complete line and flushed to disk before the next problem starts.
- `summary.json`: the summary over all records, rewritten atomically after each problem.
- `trace.jsonl`: per problem, per returned path: tokens and PRM score of every step and
  whether the path's answer is correct (`trace_line`); rewritten with the summary. The
  simulator fits its workload to it (`fasttts eval --backend sim --sim-workload trace.jsonl`).

One process writes to a folder at a time (`fasttts.eval.folder_lock`: `.fasttts.lock` holds
the writer's pid while it runs): a second run into the same folder is refused at once, with
one line naming the first one's pid; a lock left by a killed run is taken over.

Re-running the same command skips the problems already in `results.jsonl`; a line cut short
by an interrupted run is dropped and that problem is run again, so nothing is lost or
duplicated. A damaged line elsewhere (not JSON by `fasttts.jsonio`'s rules, not an object, no
`id`, missing fields) and a second record of an id (from a run before the lock, or added by
hand; the first is kept) are moved to `results.jsonl.bad` with a `ResultsFileWarning` naming
the line; every other record is kept and a problem left without a record is run again.
`summary.json` and `trace.jsonl` are rewritten on opening when they do not match the records
(a run killed between the two writes).
"""

from __future__ import annotations

import json
import os
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from fasttts.eval.datasets import Problem
from fasttts.eval.folder_lock import FolderLock
from fasttts.eval.metrics import problem_record, single_sample_record, summarize
from fasttts.eval.voting import ANSWER_RULES
from fasttts.jsonio import JsonFileError, parse, read_json

__all__ = ["PLATFORM_KEY", "OutputDirError", "ResultStore", "ResultsFileWarning", "problem_line",
           "run_eval", "trace_line"]


def trace_line(record: dict) -> dict:
    """The trace of one problem record: {"id", "clock", "paths": [{"step_tokens",
    "step_scores", "correct", "finish_reason"}]} (tokens per step, PRM score per step, final
    correctness or None without a reference answer)."""
    return {
        "id": record["id"],
        "clock": record.get("clock", "wall"),
        "paths": [{k: c.get(k) for k in ("step_tokens", "step_scores", "correct", "finish_reason")}
                  for c in record["completions"]],
    }


#: The key of config.json that records what the run ran on (resolved dtype, threads, vLLM
#: version, CPU flags or GPUs: `fasttts.engines.platform_info`).
PLATFORM_KEY = "platform"


class OutputDirError(ValueError):
    """The output folder holds results of another configuration, or cannot be used."""


class ResultsFileWarning(UserWarning):
    """A damaged line of results.jsonl was set aside in results.jsonl.bad."""


def _read_record(line: bytes, source: str, number: int) -> tuple[dict | None, str | None]:
    """(the record, None) of one results.jsonl line, or (None, why it is not a usable one)."""
    try:
        record = parse(line, source, number)
    except JsonFileError as e:
        return None, f"not JSON ({e.reason})"
    if not isinstance(record, dict):
        return None, f"a JSON {type(record).__name__}, not an object"
    if not isinstance(record.get("id"), str):
        return None, "no string 'id'"
    try:  # the fields the summary and the trace read
        summarize([record])
        trace_line(record)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        return None, f"not a problem record ({type(e).__name__}: {e})"
    return record, None


def _write_atomic(path: Path, text: str) -> None:
    _write_atomic_bytes(path, text.encode("utf-8"))


def _write_atomic_bytes(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, sync it, and rename it over `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ResultStore:
    """The append-only output folder of one evaluation configuration, held by one writer
    (module docstring) until `close` (a context manager; or when it is garbage-collected).

    Args:
        output_dir: the folder (created if missing; removed again on `close` if nothing was
            written).
        config: the JSON-serialisable run configuration (incl. dataset); must equal the
            `config.json` of an existing folder (its `PLATFORM_KEY` entry aside).
        platform: what this run runs on (`fasttts.engines.platform_info.run_platform`),
            written to config.json under `PLATFORM_KEY`; an existing folder's is compared only
            before problems are run into it (`check_platform`), so a finished folder's summary
            prints anywhere.

    Raises:
        OutputDirError: the folder's config differs (names the differing keys) or is not a
            configuration, or the path is a file.
        fasttts.eval.folder_lock.FolderInUse: another process writes to the folder.
    """

    def __init__(self, output_dir: str | os.PathLike, config: dict, platform: dict | None = None):
        if not str(output_dir).strip():
            raise OutputDirError("output dir is empty: give the folder to write results to")
        self.dir = Path(output_dir)
        self.results = self.dir / "results.jsonl"
        self.config = json.loads(json.dumps(config | ({PLATFORM_KEY: platform} if platform
                                                      else {})))
        #: The platform the folder's results ran on (config.json's; None: not recorded).
        self.recorded_platform = platform
        try:
            if self.dir.exists() and not self.dir.is_dir():
                raise OutputDirError(f"output dir {self.dir} exists and is not a folder")
            existing = next(p for p in (self.dir, *self.dir.absolute().parents) if p.exists())
            if not existing.is_dir() or not os.access(existing, os.W_OK):
                raise OutputDirError(f"output dir {self.dir} cannot be created: {existing} is "
                                     f"not a writable folder")
            self._lock = FolderLock(self.dir, "--output-dir").acquire()
        except OSError as e:
            raise OutputDirError(f"output dir {self.dir} cannot be used: {e}") from e
        self._release = weakref.finalize(self, self._lock.release)
        try:
            self._check_config()
            self.records = self._load()
        except OSError as e:
            self.close()
            raise OutputDirError(f"output dir {self.dir} cannot be used: {e}") from e
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the folder (`fasttts.eval.folder_lock`); the records stay readable."""
        self._release()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_config(self) -> None:
        """Refuse a folder whose config.json is not this run's configuration.

        Raises:
            OutputDirError: it differs (names at most 5 differing keys), or it is not a JSON
                object.
        """
        cfg_path = self.dir / "config.json"
        if not cfg_path.exists():
            return
        try:
            old = read_json(cfg_path)
        except JsonFileError as e:
            raise OutputDirError(f"{e}; the folder's configuration cannot be compared with "
                                 f"this run's: repair the file or use a new --output-dir") from e
        if not isinstance(old, dict):
            raise OutputDirError(f"{cfg_path} is a JSON {type(old).__name__}, not a run "
                                 f"configuration (an object); repair it or use a new "
                                 f"--output-dir")
        self.recorded_platform = old.pop(PLATFORM_KEY, None)
        self._refuse("another configuration", _differences(
            old, {k: v for k, v in self.config.items() if k != PLATFORM_KEY}))

    def _refuse(self, what: str, diff: list[str]) -> None:
        """Raise OutputDirError naming at most 5 of the differing keys `diff`, if any."""
        if diff:
            more = f"; and {len(diff) - 5} more" if len(diff) > 5 else ""
            raise OutputDirError(f"output dir {self.dir} holds results of {what} "
                                 f"({'; '.join(diff[:5])}{more}); use a new --output-dir or "
                                 f"the same settings")

    def check_platform(self) -> None:
        """Before running problems into the folder: refuse if its results ran on another
        platform (another resolved dtype, thread count, vLLM version, CPU or GPU), which would
        mix numbers that cannot be compared. A folder written before fasttts recorded the
        platform is accepted.

        Raises:
            OutputDirError: the platforms differ (names the differing keys).
        """
        now = self.config.get(PLATFORM_KEY)
        if self.recorded_platform is not None and now is not None:
            self._refuse("another platform", _differences(
                {PLATFORM_KEY: self.recorded_platform}, {PLATFORM_KEY: now}))

    def _create(self) -> None:
        """Create the folder and its config.json on the first write, so a run that fails
        before any problem is solved leaves nothing behind."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            cfg_path = self.dir / "config.json"
            if not cfg_path.exists():
                _write_atomic(cfg_path, json.dumps(self.config, indent=2, sort_keys=True) + "\n")
        except OSError as e:
            raise OutputDirError(f"output dir {self.dir} cannot be written: {e}") from e

    def _load(self) -> list[dict]:
        """The records of results.jsonl; a cut-short last line is dropped, damaged lines and
        second records of an id are moved to results.jsonl.bad (`ResultsFileWarning` per
        line), and stale summary.json / trace.jsonl are rewritten."""
        if not self.results.exists():
            return []
        data = self.results.read_bytes()
        lines = data.splitlines(keepends=True)
        if lines and not lines[-1].endswith(b"\n"):
            lines.pop()  # cut short by an interrupted run: that problem runs again
        good, bad, records, first = [], [], [], {}
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            record, why = _read_record(line, str(self.results), number)
            if record is not None and record["id"] in first:
                record, why = None, (f"a second record of id {record['id']!r} (the first, on "
                                     f"line {first[record['id']]}, is kept)")
            if record is None:
                bad.append(line)
                again = "" if why.startswith("a second") else ", that problem runs again"
                warnings.warn(f"{self.results} line {number}: {why}; set aside in "
                              f"{self.results.name}.bad{again}", ResultsFileWarning,
                              stacklevel=3)
                continue
            first[record["id"]] = number
            good.append(line)
            records.append(record)
        if bad:
            with open(self.results.with_name(self.results.name + ".bad"), "ab") as f:
                f.write(b"".join(bad))
                f.flush()
                os.fsync(f.fileno())
        if b"".join(good) != data:
            _write_atomic_bytes(self.results, b"".join(good))
        if records:
            self.records = records
            self._refresh_summary()
        return records

    def summary_of(self, ids: set[str]) -> dict | None:
        """Summary over the records of the given problem ids (None if none is done)."""
        records = [r for r in self.records if r["id"] in ids]
        return summarize(records) if records else None

    @property
    def done_ids(self) -> set[str]:
        """Ids of the problems with a record."""
        return {r["id"] for r in self.records}

    def append(self, record: dict) -> dict:
        """Append one record as a single line, flushed and synced; rewrite summary.json and
        return it."""
        line = json.dumps(record, ensure_ascii=False) + "\n"
        self._create()
        with open(self.results, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.records.append(record)
        return self.write_summary()

    def write_summary(self) -> dict | None:
        """Write summary.json and trace.jsonl over all records (atomically); returns the
        summary, or None if there are no records."""
        if not self.records:
            return None
        self._create()
        summary, trace, text = self._summary_files()
        _write_atomic(self.dir / "trace.jsonl", trace)
        _write_atomic(self.dir / "summary.json", text)
        return summary

    def _summary_files(self) -> tuple[dict, str, str]:
        """(summary, trace.jsonl text, summary.json text) of the records."""
        summary = summarize(self.records)
        trace = "".join(json.dumps(trace_line(r)) + "\n" for r in self.records)
        return summary, trace, json.dumps(summary, indent=2) + "\n"

    def _refresh_summary(self) -> None:
        """Rewrite summary.json and trace.jsonl if they do not match the records."""
        _, trace, text = self._summary_files()
        for name, want in (("trace.jsonl", trace), ("summary.json", text)):
            path = self.dir / name
            if not path.is_file() or path.read_text(encoding="utf-8") != want:
                self.write_summary()
                return


def _short(text: str, limit: int = 60) -> str:
    """`text`, cut to `limit` characters."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _differences(old, new, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two JSON objects, as "key: old -> new" (each
    value cut to 60 characters)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(k), new.get(k), f"{prefix}{_short(k, 40)}.")
        return out
    if old == new:
        return []
    return [f"{prefix[:-1]}: {_short(repr(old))} -> {_short(repr(new))}"]


def run_eval(
    problems: Sequence[Problem],
    solve: Callable[[Problem], object],
    store: ResultStore,
    progress=None,
    numeric: bool = False,
    baseline: Callable[[Problem], object] | None = None,
) -> dict | None:
    """Solve every problem not yet in `store` and append its record.

    Args:
        problems: the problems, in order.
        solve: returns the `SearchResult` of one problem.
        store: the output folder.
        progress: a `fasttts.progress.EvalProgress` told of each finished problem (a bar on a
            terminal, a plain line elsewhere); None = nothing shown.
        numeric: the dataset's answers are all numbers (`fasttts.eval.datasets.numeric_answers`):
            allows the last-number answer fallback.
        baseline: returns a one-sample `SearchResult` of the same problem (the single-sample
            baseline), stored in the record as "single_sample"; None = no baseline.

    Returns:
        The summary over the records of `problems` (None if there are none).
    """
    for p in [p for p in problems if p.id not in store.done_ids]:
        result = solve(p)
        record = problem_record(result, p.answer, p.problem, numeric)
        if baseline is not None:
            record["single_sample"] = single_sample_record(baseline(p), p.answer, numeric)
        acc = store.append(record)["accuracy"]
        if progress:
            progress.problem_done(problem_line(record, result.finished_paths, acc), acc)
    return store.summary_of({p.id for p in problems})


def problem_line(record: dict, finished_paths: int, accuracy: dict | None) -> str:
    """One finished problem in plain words (`fasttts.progress.EvalProgress` writes it when its
    output is not a terminal): "gsm8k-test-2: answer 18 (correct, PRM-weighted vote),
    8 completions (best of 10 finished paths), 5 iterations, 2831 tokens, 31.1 s; so far
    weighted 0.67, majority 0.67" (`finished_paths`: `SearchResult.finished_paths`;
    `accuracy`: the summary's so far, None without reference answers)."""
    right = (record["correct"] or {}).get("answer")
    verdict = "" if right is None else "correct, " if right else "wrong, "
    kept = record["num_completions"]
    extra = f" (best of {finished_paths} finished paths)" if finished_paths > kept else ""
    so_far = (f"; so far weighted {accuracy['weighted']:.2f}, majority "
              f"{accuracy['majority']:.2f}" if accuracy else "")
    return (f"{record['id']}: answer {record['answer']} ({verdict}"
            f"{ANSWER_RULES[record['answer_rule']]}), {kept} completions{extra}, "
            f"{record['num_iterations']} iterations, {record['tokens_generated']} tokens, "
            f"{record['latency_s']:.1f} s{so_far}")
