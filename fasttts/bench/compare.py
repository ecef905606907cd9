"""The one comparison protocol of `fasttts bench` (DESIGN.md, "Benchmarks are recipes").

A comparison runs configurations of the FastTTS runtime on the same problems, seeds and
backend in one process, and reports each against the first (the baseline):

- a configuration is named `baseline` (every technique off: search-and-learn on vLLM) or by
  techniques joined by `+` (`PARTS`: `sbe` Speculative Beam Extension, `la` LookAhead
  Verification, `p` prefix-aware scheduling, `m` memory planner, `o` its offload option, `iv`
  incremental verification), with an optional `:R` suffix, the truncation ratio
  (`sbe+la:0.5`); `FASTTTS` names what --fasttts turns on (`RuntimeConfig.fasttts`: the
  techniques of `RuntimeConfig.FASTTTS` the search method uses);
- a `Setting` is one (model pair, hardware, method, memory) the configurations are compared
  on; a `Plan` is the settings x n x configurations x problems of one recipe;
- for each n (ascending), setting and problem (the datasets taken in turn: the first problem
  of each, then the second, ...), the configurations run back to back in an order rotated
  by the problem's index (`interleaved`), so machine-speed swings hit every configuration
  alike;
  on the real backend both engines' prefix caches are reset before every run
  (`fasttts.bench.compare_engines`);
- a row is one (setting, n, configuration, problem) run, appended to the recipe's `RowStore`
  (key `row_key`) when it ends: a killed run resumes with no record lost or counted twice,
  and a problem it left with only some configurations run runs again in all of them (its
  finished rows moved to rows.jsonl.partial), so every problem's rows come from one sitting;
- every metric comes from `fasttts.eval.metrics.problem_record`; `summarize` gives per
  (setting, n, configuration) the medians over problems and the ratios to the baseline as the
  MEDIAN OF PER-PROBLEM RATIOS (`median_ratio`), and beside every goodput the fraction of the
  roofline limit (`fasttts.eval.limit`: limit seconds / latency, median over problems).

API (stable: recipes of other modules build on it):
    `Setting`, `Plan`, `runtime_of(name)`, `interleaved(configs, index)`,
    `row_key(setting, n, config, problem_id)`, `run(plan, store, progress=True)`,
    `group_rows(rows, configs)`, `problem_ratios(rows, bases, field)`,
    `median_ratio(rows, bases, field)`, `summarize(rows, configs)`, `table(cells)`,
    `run_recipe(args, recipe, plan)` (the `main` of a comparison recipe: folder check,
    store, run, summary.json, printed table), `cells_of(config, entries)` (report hooks: the
    summary cells from a RowStore's config and rows), `read_rows(path)` and
    `python -m fasttts.bench.compare FILE... [--baseline NAME] [--breakdown]` (the table of
    finished or committed runs; with where the time goes and the problems each configuration
    loses on). `Plan(occupancy=True)` keeps the first problem's batch-occupancy trace
    in its rows; `Setting(kv_budget_gib=...)` fixes both KV caches together (sim).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from itertools import product

from fasttts.bench.common import md_table
from fasttts.config import RuntimeConfig

__all__ = ["FASTTTS", "PARTS", "Plan", "Setting", "baseline_cell", "cells_of",
           "check_tie_tolerance", "group_rows", "interleaved",
           "median_ratio", "problem_ratios", "read_rows", "row_key", "run", "run_configs",
           "run_recipe", "runtime_of", "summarize", "table", "with_args"]

#: A configuration name's techniques: short name -> `RuntimeConfig` field.
PARTS = {"sbe": "spec_beam_extension", "la": "lookahead_verification",
         "p": "prefix_aware_scheduling", "m": "memory_planner", "o": "offload",
         "iv": "incremental_verification"}
#: The configuration name of what --fasttts turns on (`RuntimeConfig.FASTTTS`).
FASTTTS = "+".join(k for k, v in PARTS.items() if v in RuntimeConfig.FASTTTS)


def runtime_of(name: str) -> RuntimeConfig:
    """The `RuntimeConfig` of a configuration name (module docstring): `baseline`, or
    techniques of `PARTS` joined by `+`, optionally with `:R` (0 <= R <= 1); `FASTTTS` is
    the FastTTS bundle (`RuntimeConfig.fasttts`), as --fasttts.

    Raises:
        ValueError: an unknown technique, a ratio that is not a number in [0, 1], or a
            combination `RuntimeConfig` refuses (e.g. `la` without `sbe`).
    """
    base, sep, ratio = name.partition(":")
    parts = [] if base == "baseline" else base.split("+")
    unknown = [x for x in parts if x not in PARTS]
    if unknown or not parts and base != "baseline":
        raise ValueError(f"unknown configuration {name!r}: use baseline, or techniques of "
                         f"{', '.join(PARTS)} joined by + (e.g. {FASTTTS}), optionally with "
                         f":R (0 <= R <= 1)")
    extra = {}
    if sep:
        try:
            extra["spec_truncation_ratio"] = float(ratio)
        except ValueError:
            raise ValueError(f"configuration {name!r}: R after ':' must be a number within "
                             f"[0, 1], got {ratio!r}") from None
    try:
        if base == FASTTTS:  # what --fasttts runs: the techniques the method uses
            return RuntimeConfig.fasttts(**extra)
        return RuntimeConfig(**{PARTS[x]: True for x in parts}, **extra)
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        msg = e.errors()[0]["msg"].removeprefix("Value error, ") if hasattr(e, "errors") \
            else str(e)
        raise ValueError(f"configuration {name!r}: {msg}") from None


def check_tie_tolerance(value: float, name: str) -> None:
    """Refuse a tie tolerance (`SearchConfig.tie_tolerance`, logits) that a comparison's
    searches would refuse, before anything runs.

    Args:
        value: the tolerance, logits.
        name: what the error calls it (an option such as "--tie-tolerance").

    Raises:
        ValueError: `value` negative or not finite; the message names `name` and what is
            allowed.
    """
    if not 0.0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number of logits >= 0 (0 = exact "
                         f"ranking), got {value}")


@dataclass(frozen=True)
class Setting:
    """One setting the configurations are compared on.

    Attributes:
        label: its name in keys and tables, e.g. "1.5B+7B" or "rtx3070ti".
        generator, verifier: model specs (sim) or models (vllm); None = the backend's
            default (sim: qwen2.5-math-1.5b + math-shepherd-7b; vllm: the embedded models).
        hardware: the simulated device (`fasttts/perf/specs/hardware/`).
        method: the search method (`fasttts.search.METHODS`).
        memory_fraction: sim: the fraction of device memory both engines use (None: the
            `SimConfig` default, 0.9).
        kv_budget_gib: sim: both KV caches together (GiB; split in half, the planner re-splits
            it); None: what the memory fraction leaves.
    """

    label: str
    generator: str | None = None
    verifier: str | None = None
    hardware: str = "rtx4090"
    method: str = "beam_search"
    memory_fraction: float | None = None
    kv_budget_gib: float | None = None


@dataclass(frozen=True)
class Plan:
    """What one comparison runs: settings x ns x configs x problems.

    Attributes:
        settings: the settings (`Setting`).
        ns: the search budgets n.
        configs: the configuration names; the first is the baseline of every ratio.
        datasets: datasets (`fasttts.eval.datasets`), `limit` problems of each from `offset`.
        backend: "sim" (simulated device, virtual clock) or "vllm" (real engines, wall).
        beam_width, max_tokens, seed, verifier_kind: the search's own settings.
        dtype, kv_cache_gib: vllm: the engines' dtype and KV cache per engine (GiB; the
            memory planner re-splits the sum).
        occupancy: keep the first problem's batch-occupancy trace in its rows (FastTTS Fig. 17).
        tie_tolerance: every search's `SearchConfig.tie_tolerance` (logits; 0 = exact ranking,
            left out of `as_config` so folders made before it resume).
    """

    settings: tuple[Setting, ...]
    ns: tuple[int, ...]
    configs: tuple[str, ...]
    datasets: tuple[str, ...] = ("aime24",)
    limit: int = 10
    offset: int = 0
    backend: str = "sim"
    beam_width: int = 4
    max_tokens: int = 2048
    seed: int = 0
    verifier_kind: str = "auto"
    dtype: str = "auto"
    kv_cache_gib: float = 1.0
    occupancy: bool = False
    tie_tolerance: float = 0.0

    def check(self) -> None:
        """Refuse a plan before anything runs.

        Raises:
            ValueError: no settings / ns / configs, an n < 1, repeated labels or configs, a
                configuration `runtime_of` refuses, limit < 1, or a tie tolerance that is
                negative or not finite.
        """
        if not self.settings or not self.ns or not self.configs:
            raise ValueError("a comparison needs settings, ns and configs")
        if min(self.ns) < 1 or self.limit < 1:
            raise ValueError(f"n and the problem limit must be >= 1, got ns={self.ns}, "
                             f"limit={self.limit}")
        labels = [s.label for s in self.settings]
        if len(set(labels)) != len(labels) or len(set(self.configs)) != len(self.configs):
            raise ValueError(f"setting labels and configs must be unique: {labels}, "
                             f"{self.configs}")
        for name in self.configs:
            runtime_of(name)
        check_tie_tolerance(self.tie_tolerance, "the tie tolerance")

    def as_config(self) -> dict:
        """The JSON form stored in the recipe's config.json (without `tie_tolerance` when
        0)."""
        config = json.loads(json.dumps(asdict(self)))
        if not self.tie_tolerance:
            del config["tie_tolerance"]
        return config

    @classmethod
    def from_config(cls, config: dict) -> Plan:
        """The plan of a stored config.json (`as_config`; extra keys ignored)."""
        known = {k: config[k] for k in cls.__dataclass_fields__ if k in config}
        known["settings"] = tuple(Setting(**s) for s in known["settings"])
        for k in ("ns", "configs", "datasets"):
            known[k] = tuple(known[k])
        return cls(**known)


def run_configs(plan: Plan) -> list:
    """The `RunConfig` of each setting of `plan` (its baseline at its first n; validation
    only, no engine), for the platform `fasttts bench` records in run.json."""
    from fasttts.bench.compare_engines import Engines

    engines = Engines(plan)
    return [engines.config(s, plan.ns[0], runtime_of(plan.configs[0]), check_only=True)
            for s in plan.settings]


def interleaved(configs: Sequence[str], index: int) -> list[str]:
    """The order problem `index` runs `configs` in: rotated left by index mod len(configs)
    (problem 0: as given; problem 1: from the second, ...)."""
    k = index % len(configs)
    return [*configs[k:], *configs[:k]]


def row_key(setting: str, n: int, config: str, problem_id: str) -> str:
    """The RowStore key of one run: `setting|n<N>|config|problem`."""
    return f"{setting}|n{n}|{config}|{problem_id}"


#: The fields of a problem record (`fasttts.eval.metrics.problem_record`) a row keeps.
ROW_FIELDS = ("id", "clock", "latency_s", "generator_time_s", "verifier_time_s",
              "precise_goodput_tok_s", "tokens_generated", "batch_occupancy", "spec",
              "num_preemptions", "search_tree_tokens", "correct", "mean_tokens_per_beam",
              "verifier_prefix_cache_hit_rate", "verifier_prompt_tokens", "prompt_tokens",
              "runtime_overhead_frac", "selections", "near_tie_selections", "distinct_answers")


def _completions_sha(result) -> str:
    """A hash of the returned completions' token ids in order: equal = the same completions."""
    ids = json.dumps([list(b.token_ids) for b in result.completions])
    return hashlib.sha256(ids.encode()).hexdigest()[:16]


def _problems(plan: Plan):
    """[(dataset, problem)] of the plan, the datasets taken in turn (the first problem of
    each, then the second of each, ...), so a run cut short holds every dataset alike."""
    from itertools import chain, zip_longest

    from fasttts.eval.datasets import load_dataset

    per_dataset = [[(ds, p) for p in load_dataset(ds, limit=plan.limit, offset=plan.offset)]
                   for ds in plan.datasets]
    return [x for x in chain.from_iterable(zip_longest(*per_dataset)) if x is not None]


def _jobs(plan: Plan, problems):
    """Every run of the plan in protocol order: (setting, n, index, dataset, problem, config);
    n ascending outermost, so a run cut short holds every setting at the smaller n."""
    for n in sorted(plan.ns):
        for s in plan.settings:
            for i, (ds, prob) in enumerate(problems):
                for name in interleaved(plan.configs, i):
                    yield s, n, i, ds, prob, name


def _set_aside_incomplete(plan: Plan, problems, store) -> None:
    """Set aside (`RowStore.set_aside`) the rows of every problem that has some but not all of
    its configurations in `store` (a run cut between them), so each problem's configurations
    run back to back in one sitting, as the interleaved protocol assumes: rows run in
    different sittings would compare a problem under different machine load."""
    done, partial, names = store.done, set(), []
    for s, n, (_, prob) in product(plan.settings, plan.ns, problems):
        keys = {row_key(s.label, n, name, prob.id) for name in plan.configs}
        if keys & done and not keys <= done:
            partial |= keys & done
            names.append(f"{s.label} n={n} {prob.id}")
    store.set_aside(partial, "problems not run in all configurations: " + ", ".join(names))


def run(plan: Plan, store, progress: bool = True) -> list[dict]:
    """Run every row of `plan` not in `store` yet (module docstring), in protocol order.

    Every configuration is checked (and, on the sim, its `RunConfig` built) before the first
    run, so bad input is refused before an engine starts. A problem left with only some of its
    configurations run (a run cut between them) runs again in all of them
    (`_set_aside_incomplete`).

    Args:
        plan: what to run (`Plan.check` is called).
        store: the recipe's `fasttts.bench.store.RowStore`.
        progress: show a tqdm bar on a terminal; elsewhere (a log file) one plain line per
            finished row, "run 7/100: math500 ID, default models n=16 iv: 2.20 tok/s, 144.1 s
            (wall)".

    Returns:
        Every row of the plan in the store, in protocol order (dicts of `ROW_FIELDS` plus
        setting, dataset, n, config, wall_s, limit_s, completions_sha[, occupancy]).

    Raises:
        ValueError: a bad plan (`Plan.check`, `RunConfig` validation).
    """
    from tqdm import tqdm

    from fasttts.bench.compare_engines import Engines

    plan.check()
    problems = _problems(plan)
    engines = Engines(plan)
    for s, n, name in product(plan.settings, plan.ns, plan.configs):
        engines.config(s, n, runtime_of(name), check_only=True)  # before any engine starts
    _set_aside_incomplete(plan, problems, store)
    done = {e["key"]: e["row"] for e in store.rows}
    jobs = list(_jobs(plan, problems))
    bar = tqdm(total=len(jobs), desc="runs", unit="run", disable=None if progress else True)
    count = sum(1 for j in jobs if row_key(j[0].label, j[1], j[5], j[4].id) in done)
    bar.update(count)
    try:
        for s, n, i, ds, prob, name in jobs:
            key = row_key(s.label, n, name, prob.id)
            if key in done:
                continue
            done[key] = row = _run_row(engines, plan, s, n, i, ds, prob, name)
            store.append(key, row, [])
            count += 1
            bar.update(1)
            what = (f"{s.label} n={n} {name}: {row['precise_goodput_tok_s']:.2f} tok/s, "
                    f"{row['latency_s']:.1f} s ({row['clock']})")
            bar.set_postfix_str(what, refresh=False)
            if progress and bar.disable:  # not a terminal (a log file): one plain line a row
                print(f"run {count}/{len(jobs)}: {ds} {prob.id}, {what}", file=sys.stderr,
                      flush=True)
    finally:
        bar.close()
        engines.close()
    return [done[row_key(j[0].label, j[1], j[5], j[4].id)] for j in jobs]


def _run_row(engines, plan: Plan, s: Setting, n: int, index: int, dataset: str, prob,
             name: str) -> dict:
    """One run: build (or reset) the engines, search the problem, make its row."""
    from fasttts.eval.metrics import problem_record

    cfg = engines.config(s, n, runtime_of(name))
    t0 = time.perf_counter()
    res = engines.search(cfg, dataset, prob)
    wall = time.perf_counter() - t0
    rec = problem_record(res, prob.answer, prob.problem)
    row = {k: rec[k] for k in ROW_FIELDS}
    row.update(setting=s.label, dataset=dataset, n=n, config=name, wall_s=wall,
               limit_s=engines.limit_seconds(cfg, rec), completions_sha=_completions_sha(res))
    if plan.occupancy and index == 0:
        row["occupancy"] = res.occupancy
    return row


def problem_ratios(rows: Iterable[dict], bases: dict[str, dict], field_: str) -> dict[str, float]:
    """Problem id -> row[field] / base[field], pairing each row with the baseline row of the
    same problem (`bases`: problem id -> row); problems without a baseline row or with a zero
    / missing baseline value are left out."""
    return {r["id"]: r[field_] / b[field_] for r in rows
            if (b := bases.get(r["id"])) and b.get(field_) and r.get(field_) is not None}


def median_ratio(rows: Iterable[dict], bases: dict[str, dict], field_: str) -> float:
    """The median over problems of `problem_ratios`; nan when there is none."""
    xs = list(problem_ratios(rows, bases, field_).values())
    return statistics.median(xs) if xs else float("nan")


def _stat(rows: Sequence[dict], key, stat=statistics.median) -> float:
    """`stat` (the median unless given) of `key` over `rows` (a field name or a callable of a
    row), rows without a value left out; nan when none has one."""
    xs = [v for r in rows if (v := (key(r) if callable(key) else r.get(key))) is not None]
    return stat(xs) if xs else float("nan")


def _fraction(rows: Sequence[dict], vote: str) -> float:
    graded = [r for r in rows if r.get("correct")]
    return statistics.fmean(bool(r["correct"][vote]) for r in graded) if graded else float("nan")


def _cell(rows: list[dict], bases: dict[str, dict]) -> dict:
    """The summary of one (setting, n, config) over its problems."""
    ratio = {k: median_ratio(rows, bases, k) for k in
             ("precise_goodput_tok_s", "latency_s", "generator_time_s", "verifier_time_s")}
    same = sum(1 for r in rows if (b := bases.get(r["id"])) and r.get("completions_sha")
               and r["completions_sha"] == b.get("completions_sha"))
    return {
        "problems": len(rows), "clock": rows[0]["clock"],
        "goodput": _stat(rows, "precise_goodput_tok_s"),
        "x_goodput": ratio["precise_goodput_tok_s"],
        "limit_fraction": _stat(rows, lambda r: r["limit_s"] / r["latency_s"]
                                  if r.get("limit_s") and r["latency_s"] else None),
        "latency_s": _stat(rows, "latency_s"), "x_latency": ratio["latency_s"],
        "generator_s": _stat(rows, "generator_time_s"),
        "x_generator": ratio["generator_time_s"],
        "verifier_s": _stat(rows, "verifier_time_s"), "x_verifier": ratio["verifier_time_s"],
        "verifier_share": _stat(rows, lambda r: r["verifier_time_s"] / r["latency_s"]
                                  if r["latency_s"] else None),
        "top1_majority": _fraction(rows, "majority"),
        "top1_weighted": _fraction(rows, "weighted"), "pass_at_n": _fraction(rows, "pass@n"),
        "tokens_per_path": _stat(rows, "mean_tokens_per_beam"),
        "distinct_answers": _stat(rows, "distinct_answers", statistics.fmean),
        "preemptions": _stat(rows, "num_preemptions"),
        "same_as_baseline": f"{same}/{len(rows)}",
        "near_tie": f"{sum(r.get('near_tie_selections') or 0 for r in rows)}/"
                    f"{sum(r.get('selections') or 0 for r in rows)}",
    }


def group_rows(rows: Iterable[dict], configs: Sequence[str]) -> dict[tuple, list[dict]]:
    """(setting, n, config) -> its rows, in report order: settings as first seen, n ascending,
    configs in the order of `configs` (others after them, as first seen)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["setting"], r["n"], r["config"]), []).append(r)
    settings = list(dict.fromkeys(s for s, _, _ in groups))
    order = {c: k for k, c in enumerate(configs)}
    keys = sorted(groups, key=lambda k: (settings.index(k[0]), k[1], order.get(k[2], len(order))))
    return {k: groups[k] for k in keys}


def summarize(rows: Iterable[dict], configs: Sequence[str]) -> list[dict]:
    """Per (setting, n, config) (`group_rows` order): `_cell`'s medians over problems and
    ratios to `configs[0]` (the baseline) as medians of per-problem ratios, plus setting, n,
    config."""
    groups = group_rows(rows, configs)
    return [{"setting": s, "n": n, "config": c,
             **_cell(rs, {r["id"]: r for r in groups.get((s, n, configs[0]), [])})}
            for (s, n, c), rs in groups.items()]


def baseline_cell(cells: Sequence[dict], cell: dict) -> dict | None:
    """The baseline's cell of `cell`'s setting and n among `cells` (`summarize`), or None."""
    return next((b for b in cells if (b["setting"], b["n"], b["config"]) ==
                 (cell["setting"], cell["n"], "baseline")), None)


def cells_of(config: dict, entries: Sequence[dict]) -> list[dict]:
    """A report hook's summary cells from a RowStore's config.json (`Plan.as_config` under
    "plan") and its rows ({"key", "row", "requests"} entries)."""
    return summarize([e["row"] for e in entries], config["plan"]["configs"])


def _f(x, digits: int = 2) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def table(cells: Sequence[dict]) -> str:
    """The cells of `summarize` as one markdown table; seconds on the runs' clock
    ("simulated" or "wall", said in the header); ratios are medians of per-problem ratios,
    "distinct answers" the mean over problems of the answers a run's completions give
    (equivalent ones once; `fasttts.eval.metrics.problem_record`)."""
    clock = cells[0]["clock"] if cells else "wall"
    head = ("setting", "n", "config", "problems", "goodput tok/s", "x goodput",
            "fraction of limit", f"latency s ({clock})", "x latency", "generator s",
            "verifier s", "x verifier", "verifier share", "top-1 (majority)", "pass@n",
            "distinct answers (mean)", "same tokens as base", "near-tie selections")
    return md_table(head, ((
        c["setting"], c["n"], c["config"], c["problems"], _f(c["goodput"], 1),
        _f(c["x_goodput"]), _f(c["limit_fraction"]), _f(c["latency_s"], 1), _f(c["x_latency"]),
        _f(c["generator_s"], 1), _f(c["verifier_s"], 1), _f(c["x_verifier"]),
        _f(c["verifier_share"]), _f(c["top1_majority"]), _f(c["pass_at_n"]),
        _f(c["distinct_answers"], 1), c["same_as_baseline"], c["near_tie"]) for c in cells))


def with_args(plan: Plan, args) -> Plan:
    """`plan` with the command line's --seed, --max-tokens, --problems (its limit), --n (its
    ns), --dtype and --tie-tolerance where given (`args`: the parsed `fasttts bench`
    arguments)."""
    tie = getattr(args, "tie_tolerance", None)
    return replace(plan, seed=getattr(args, "seed", plan.seed),
                   tie_tolerance=plan.tie_tolerance if tie is None else tie,
                   max_tokens=getattr(args, "max_tokens", None) or plan.max_tokens,
                   limit=getattr(args, "problems", None) or plan.limit,
                   ns=tuple(getattr(args, "ns", None) or plan.ns),
                   dtype=getattr(args, "dtype", None) or plan.dtype)


def run_recipe(args, recipe: str, plan: Plan) -> int:
    """The `main` of a comparison recipe: `plan` with the command line's options
    (`with_args`); check it and --out before anything runs, run
    it into a `RowStore` (config {"recipe", "quick", "plan"}), write DIR/summary.json
    ({"cells": summarize(...)}) and print the table.

    Raises:
        ValueError: a bad plan; `fasttts.bench.store.BenchDirError` (a ValueError): --out
            cannot be used or holds another configuration.
    """
    from fasttts.bench.store import RowStore, check_out_dir

    plan = with_args(plan, args)
    plan.check()
    out = check_out_dir(args.out)
    with RowStore(out, {"recipe": recipe, "quick": bool(args.quick),
                        "plan": plan.as_config()}) as store:
        rows = run(plan, store)
        cells = summarize(rows, plan.configs)
        path = store.write_summary({"cells": cells})
    print(table(cells))
    print(f"\nratios: median over problems of the per-problem ratio to {plan.configs[0]}; "
          f"fraction of limit: roofline limit / latency\nwrote {path}", file=sys.stderr)
    return 0


def read_rows(path: str) -> list[dict]:
    """The rows of a comparison's rows.jsonl ({"key", "row"} entries) or of a flat runs.jsonl
    of the former benchmarks/runtime_ablation.py (as committed under benchmarks/results/);
    a row without a setting gets the file's name.

    Raises:
        OSError: the file cannot be read; ValueError: a line is not JSON, or not a run of a
            comparison (an object with "id", "n" and "config"), naming the file and line.
    """
    from pathlib import Path

    from fasttts.jsonio import read_jsonl

    name = Path(path).name.removesuffix(".jsonl").removesuffix(".runs")
    out = []
    for number, r in read_jsonl(path):
        r = r["row"] if isinstance(r, dict) and isinstance(r.get("row"), dict) else r
        if not isinstance(r, dict) or not {"id", "n", "config"} <= r.keys():
            raise ValueError(f"{path} line {number}: not a run of a comparison (an object "
                             f"with id, n and config; a rows.jsonl of fig11-fig16 or "
                             f"real-ablation, or a committed *.runs.jsonl)")
        out.append({"setting": name, **r})
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m fasttts.bench.compare FILE... [--baseline NAME] [--breakdown]`: the summary
    table of committed or finished runs (`read_rows`), ratios to NAME (default baseline);
    --breakdown adds `fasttts.bench.breakdown`'s table and losses."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m fasttts.bench.compare",
                                description="the comparison table of rows.jsonl / runs.jsonl "
                                            "files (medians of per-problem ratios)")
    p.add_argument("files", nargs="+")
    p.add_argument("--baseline", default="baseline", help="the configuration ratios are to")
    p.add_argument("--breakdown", action="store_true",
                   help="also print where the time goes per configuration and the problems "
                        "each configuration is below the baseline on (fasttts.bench.breakdown)")
    a = p.parse_args(argv)
    try:
        rows = [r for f in a.files for r in read_rows(f)]
    except (OSError, ValueError) as e:
        p.error(str(e))
    if not any(r.get("config") == a.baseline for r in rows):
        p.error(f"no row of configuration {a.baseline!r} in {', '.join(a.files)}")
    print(table(summarize(rows, (a.baseline,))))
    if a.breakdown:
        from fasttts.bench.breakdown import breakdown_table, losses

        configs = list(dict.fromkeys([a.baseline, *(r["config"] for r in rows)]))
        print(f"\n{breakdown_table(rows, configs)}\n")
        for field in ("precise_goodput_tok_s", "latency_s"):
            for line in losses(rows, configs, field):
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
