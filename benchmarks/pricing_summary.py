"""The verifier-pricing goal table from `runtime_ablation.py` result folders.

Usage:
    .venv/bin/python benchmarks/pricing_summary.py runs/i14-sim-1.5b-7b runs/i14-sim-1.5b-1.5b \
        runs/i14-sim-7b-1.5b [--candidate sbe+la+p+m+iv] [--baseline baseline]

For each folder (one model pair) and n: the median over problems of the per-problem ratios
candidate / baseline of precise goodput and latency, the candidate's verifier share of latency,
and both runs' fraction of the limit (the roofline lower bound of the run's own work / its
latency). Then the mean of the goodput ratios over every folder and n, the mean at the largest
n, and the median latency change. Seconds are whatever clock the runs used (the table says).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _rows(folder: Path, specs: tuple | None) -> list[dict]:
    """The runs of a result folder (its runs.jsonl) or of a runs.jsonl file itself (as
    committed under benchmarks/results/); with `specs` (generator, verifier, hardware) the
    limit is computed again from each row (`fasttts.eval.limit.record_limit_seconds`)."""
    from fasttts.eval.limit import record_limit_seconds

    path = folder if folder.is_file() else folder / "runs.jsonl"
    if not path.is_file():
        raise SystemExit(f"{folder}: neither a runs.jsonl file nor a folder holding one "
                         "(runtime_ablation.py --out writes it)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows if specs else ():
        r["limit_s"] = record_limit_seconds(r, r["n"], *specs)
    return rows


def _cells(rows: list[dict], cand: str, base: str) -> dict[int, dict]:
    """Per n: the medians of the per-problem ratios and shares."""
    by = {(r["id"], r["n"], r["config"]): r for r in rows}
    out = {}
    for n in sorted({r["n"] for r in rows}):
        pairs = [(by[(i, n, cand)], by[(i, n, base)]) for (i, m, c) in by
                 if m == n and c == cand and (i, n, base) in by]
        if not pairs:
            continue
        out[n] = dict(
            problems=len(pairs),
            goodput=statistics.median(c["precise_goodput_tok_s"] / b["precise_goodput_tok_s"]
                                      for c, b in pairs),
            latency=statistics.median(c["latency_s"] / b["latency_s"] for c, b in pairs),
            share=statistics.median(c["verifier_time_s"] / c["latency_s"] for c, _ in pairs),
            base_share=statistics.median(b["verifier_time_s"] / b["latency_s"] for _, b in pairs),
            limit_cand=statistics.median(c["limit_s"] / c["latency_s"] for c, _ in pairs),
            limit_base=statistics.median(b["limit_s"] / b["latency_s"] for _, b in pairs),
            clock=pairs[0][0]["clock"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+")
    p.add_argument("--candidate", default="sbe+la+p+m+iv")
    p.add_argument("--baseline", default="baseline")
    p.add_argument("--specs", default=None, metavar="GEN,VER,HW",
                   help="recompute every row's limit with these model and hardware specs "
                        "(one folder at a time)")
    args = p.parse_args(argv)
    specs = None
    if args.specs:
        from fasttts.perf.specs import load_hardware, load_model

        g, v, h = args.specs.split(",")
        specs = (load_model(g), load_model(v), load_hardware(h))
    print("| models (folder) | n | problems | x goodput | x latency | verifier share "
          "(baseline -> candidate) | fraction of limit (baseline -> candidate) |")
    print("|---|---|---|---|---|---|---|")
    all_cells = []
    for folder in args.folders:
        cells = _cells(_rows(Path(folder), specs), args.candidate, args.baseline)
        for n, c in cells.items():
            all_cells.append((n, c))
            print(f"| {Path(folder).name} | {n} | {c['problems']} | {c['goodput']:.2f} | "
                  f"{c['latency']:.2f} | {c['base_share']:.2f} -> {c['share']:.2f} | "
                  f"{c['limit_base']:.2f} -> {c['limit_cand']:.2f} |")
    if not all_cells:
        raise SystemExit("no candidate/baseline pairs in these folders")
    top = max(n for n, _ in all_cells)
    print(f"\n{args.candidate} vs {args.baseline} ({all_cells[0][1]['clock']} seconds): mean x "
          f"goodput {statistics.fmean(c['goodput'] for _, c in all_cells):.2f} over "
          f"{len(all_cells)} (models, n) cells; at n = {top}: "
          f"{statistics.fmean(c['goodput'] for n, c in all_cells if n == top):.2f}; median x "
          f"latency {statistics.median(c['latency'] for _, c in all_cells):.2f}; verifier share "
          f"at n <= 256 at most "
          f"{max((c['share'] for n, c in all_cells if n <= 256), default=float('nan')):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
