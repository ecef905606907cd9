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

Re-running the same command skips the problems already in `results.jsonl`; a line cut short
by an interrupted run is dropped and that problem is run again, so nothing is lost or
duplicated. A damaged line elsewhere (not JSON, not an object, no `id`, missing fields) is
moved to `results.jsonl.bad` with a `ResultsFileWarning` naming its line number; every other
record is kept and that problem is run again. `summary.json` and `trace.jsonl` are rewritten
on opening when they do not match the records (a run killed between the two writes).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from fasttts.eval.datasets import Problem
from fasttts.eval.metrics import problem_record, single_sample_record, summarize
from fasttts.eval.voting import ANSWER_RULES

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


def _record_problem(line: bytes) -> str | None:
    """Why one results.jsonl line is not a usable record (None if it is one)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return f"not JSON ({e})"
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    if not isinstance(record.get("id"), str):
        return "no string 'id'"
    try:  # the fields the summary and the trace read
        summarize([record])
        trace_line(record)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return f"not a problem record ({type(e).__name__}: {e})"
    return None


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
    """The append-only output folder of one evaluation configuration.

    Args:
        output_dir: the folder (created if missing).
        config: the JSON-serialisable run configuration (incl. dataset); must equal the
            `config.json` of an existing folder (its `PLATFORM_KEY` entry aside).
        platform: what this run runs on (`fasttts.engines.platform_info.run_platform`),
            written to config.json under `PLATFORM_KEY`; an existing folder's is compared only
            before problems are run into it (`check_platform`), so a finished folder's summary
            prints anywhere.

    Raises:
        OutputDirError: the folder's config differs (names the differing keys), or the path is
            a file.
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
            cfg_path = self.dir / "config.json"
            if cfg_path.exists():
                old = json.loads(cfg_path.read_text(encoding="utf-8"))
                self.recorded_platform = old.pop(PLATFORM_KEY, None)
                self._refuse("another configuration",
                             _differences(old, {k: v for k, v in self.config.items()
                                                if k != PLATFORM_KEY}))
            self.records = self._load()
        except OSError as e:
            raise OutputDirError(f"output dir {self.dir} cannot be used: {e}") from e

    def _refuse(self, what: str, diff: list[str]) -> None:
        if diff:
            raise OutputDirError(f"output dir {self.dir} holds results of {what} "
                                 f"({'; '.join(diff)}); use a new --output-dir or the same "
                                 f"settings")

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
        """The records of results.jsonl; a cut-short last line is dropped, damaged lines are
        moved to results.jsonl.bad (`ResultsFileWarning` per line), and stale summary.json /
        trace.jsonl are rewritten."""
        if not self.results.exists():
            return []
        data = self.results.read_bytes()
        lines = data.splitlines(keepends=True)
        if lines and not lines[-1].endswith(b"\n"):
            lines.pop()  # cut short by an interrupted run: that problem runs again
        good, bad = [], []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            why = _record_problem(line)
            (good if why is None else bad).append(line)
            if why is not None:
                warnings.warn(f"{self.results} line {number}: {why}; set aside in "
                              f"{self.results.name}.bad, that problem runs again",
                              ResultsFileWarning, stacklevel=3)
        if bad:
            with open(self.results.with_name(self.results.name + ".bad"), "ab") as f:
                f.write(b"".join(bad))
                f.flush()
                os.fsync(f.fileno())
        if b"".join(good) != data:
            _write_atomic_bytes(self.results, b"".join(good))
        records = [json.loads(line) for line in good]
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


def _differences(old, new, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two JSON objects, as "key: old -> new"."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            out += _differences(old.get(k), new.get(k), f"{prefix}{k}.")
        return out
    return [] if old == new else [f"{prefix[:-1]}: {old!r} -> {new!r}"]


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
