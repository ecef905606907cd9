"""Fit the memory planner's lineage constant on one set of measured search trees, and report it
out of sample on another.

Usage:
    .venv/bin/python benchmarks/lineage_fit.py --fit runs/lineage-math500/rows.jsonl \
        --test runs/fig12/rows.jsonl

The planner estimates the unique tokens W of one iteration's beam-search tree
(`fasttts.runtime.memory_planner.PlanInput.tree_tokens`) from N, beam_width, the path length and
the lineages it keeps at every depth: `fasttts.search.base.TREE_LINEAGE_DIVISOR` c, lineages =
N / (c beam_width). The runtime measures W (`SearchResult.tree_tokens`, `search_tree_tokens` in
the rows of a `fasttts bench` comparison recipe, `fasttts.bench.compare`, or in the committed
`*.runs.jsonl` of the former runtime_ablation.py). For every baseline record (beam search,
beam_width 4) this prints measured / estimated W at each integer c in 1..16 and the c with the
smallest median |log(measured / estimated)| on the `--fit` records, then the same ratios on the
`--test` records at that c and at the constant in force.

Kept outside `fasttts bench`: fits one planner constant from existing run files; it runs
nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from pathlib import Path

from fasttts.bench.compare import read_rows
from fasttts.config import SearchConfig
from fasttts.perf.specs import load_hardware, load_model
from fasttts.runtime.memory_planner import PlanInput
from fasttts.runtime.plan_workload import search_shape
from fasttts.search.base import TREE_LINEAGE_DIVISOR

BEAM_WIDTH = 4


def _records(path: Path) -> list[dict]:
    """The baseline records of a rows.jsonl or a flat runs.jsonl (`read_rows`)."""
    rows = read_rows(path)
    return [r for r in rows if r.get("config") == "baseline" and r.get("search_tree_tokens")]


def estimate(rec: dict, divisor: int) -> int:
    """The planner's W for a record's search (n, beam_width 4, its mean path length including
    the prompt) with lineages N / (divisor x beam_width) (tokens)."""
    n = rec["n"]
    seq_len = int(rec["prompt_tokens"] + rec["mean_tokens_per_beam"])
    shape = search_shape(SearchConfig(method="beam_search", n=n, beam_width=BEAM_WIDTH), seq_len)
    shape["lineages"] = max(1, n // (divisor * shape["share"]))
    spec = load_model("qwen2.5-math-1.5b")
    inp = PlanInput(memory_bytes=1 << 30, generator=spec, verifier=spec,
                    hardware=load_hardware("rtx4090"), num_requests=n, verifier_len=seq_len,
                    decode_len=seq_len, **shape)
    return dataclasses.replace(inp).tree_tokens


def _log_error(recs: list[dict], divisor: int) -> float:
    return statistics.median(abs(math.log(r["search_tree_tokens"] / estimate(r, divisor)))
                             for r in recs)


def _table(name: str, recs: list[dict], divisor: int) -> None:
    by_n: dict[int, list[float]] = {}
    for r in recs:
        by_n.setdefault(r["n"], []).append(r["search_tree_tokens"] / estimate(r, divisor))
    cells = ", ".join(f"n={n}: {min(v):.2f}-{max(v):.2f}" for n, v in sorted(by_n.items()))
    print(f"{name} (c = {divisor}, {len(recs)} records): measured / estimated W {cells}; "
          f"median |log error| {_log_error(recs, divisor):.3f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fit", required=True, help="runs.jsonl to fit the constant on")
    p.add_argument("--test", required=True, help="runs.jsonl to report it on (out of sample)")
    args = p.parse_args(argv)
    fit, test = _records(Path(args.fit)), _records(Path(args.test))
    errors = {c: _log_error(fit, c) for c in range(1, 17)}
    best = min(errors, key=errors.get)
    print("fit set median |log error| by c: "
          + ", ".join(f"{c}: {e:.3f}" for c, e in errors.items()))
    _table("fit", fit, best)
    _table("test (out of sample)", test, best)
    _table("test at the constant in force", test, TREE_LINEAGE_DIVISOR)
    print(f"fitted c = {best}; in force: {TREE_LINEAGE_DIVISOR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
