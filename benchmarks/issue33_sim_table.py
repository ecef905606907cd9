"""The simulated RTX 4090 before / after table of issue 33 (docs/benchmarks.md).

    .venv/bin/python benchmarks/issue33_sim_table.py [benchmarks/results/issue33_sim]

Reads `<version>-<pair>.runs.jsonl` (`benchmarks/runtime_ablation.py` rows; PROVENANCE.md in
the folder says how each was made) and prints, per model pair, n and configuration, the median
over problems of the per-problem goodput and latency ratios to the cached-verifier baseline
(`iv`) for each version, and the baseline's median verifier seconds before and after.
Simulated seconds.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PAIRS = ("1.5b-7b", "1.5b-1.5b", "7b-1.5b")
VERSIONS = ("before", "after-nocost", "after")
CONFIGS = ("sbe+la+p+m+iv:0", "sbe+la+p+m+iv")


def _rows(path: Path) -> dict:
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out[(r["id"], r["n"], r["config"])] = r
    return out


def _ratio(rows: dict, n: int, config: str, key: str) -> float:
    ids = sorted({k[0] for k in rows})
    return statistics.median(rows[(i, n, config)][key] / rows[(i, n, "iv")][key] for i in ids)


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "benchmarks/results/issue33_sim")
    print("| pair | n | config | before | after, every free slot | after, cost-aware | "
          "iv verifier s before -> after |")
    print("|---|---|---|---|---|---|---|")
    for pair in PAIRS:
        runs = {v: _rows(folder / f"{v}-{pair}.runs.jsonl") for v in VERSIONS}
        ns = sorted({k[1] for k in runs["after"]})
        for n in ns:
            ver = [statistics.median(r[k]["verifier_time_s"] for k in r if k[1:] == (n, "iv"))
                   for r in (runs["before"], runs["after"])]
            for c in CONFIGS:
                cells = [f"{_ratio(runs[v], n, c, 'precise_goodput_tok_s'):.2f} / "
                         f"{_ratio(runs[v], n, c, 'latency_s'):.2f}" for v in VERSIONS]
                print(f"| {pair} | {n} | {c} | {' | '.join(cells)} | "
                      f"{ver[0]:.1f} -> {ver[1]:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
