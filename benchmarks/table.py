"""Print one markdown table row per `fasttts eval` output folder (from its summary.json).

Usage: python benchmarks/table.py runs/defaults/*
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folders: list[str]) -> None:
    print("| run | problems | acc weighted | acc majority | pass@n | tokens/problem | "
          "latency mean s (gen / ver) | precise goodput tok/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for folder in folders:
        path = Path(folder) / "summary.json"
        if not path.is_file():
            continue
        s = json.loads(path.read_text())
        acc = s["accuracy"] or {}
        print(f"| {Path(folder).name} | {s['num_problems']} | {acc.get('weighted', 0):.2f} | "
              f"{acc.get('majority', 0):.2f} | {acc.get('pass@n', 0):.2f} | "
              f"{s['tokens_generated']:.0f} | {s['latency_s']['mean']:.1f} "
              f"({s['generator_time_s']:.1f} / {s['verifier_time_s']:.1f}) | "
              f"{s['precise_goodput_tok_s']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
