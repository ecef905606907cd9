"""Print one markdown table row per `fasttts eval` output folder (from its summary.json and
config.json): accuracy, tokens, latency, goodput, the single-sample baseline's accuracy and
latency when it ran, and what the run ran on (the resolved dtype, threads, vLLM, CPU flags).

Usage: python benchmarks/table.py runs/defaults/*

Kept outside `fasttts bench`: a tool that prints existing `fasttts eval` output folders as a
table; it runs nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fasttts.engines.platform_info import describe_platform


def row(folder: Path) -> str | None:
    """The table row of one output folder (None without a summary.json)."""
    path = folder / "summary.json"
    if not path.is_file():
        return None
    s = json.loads(path.read_text())
    config = folder / "config.json"
    platform = json.loads(config.read_text()).get("platform") if config.is_file() else None
    acc = s["accuracy"] or {}
    single = s.get("single_sample") or {}
    greedy = (f"{single['accuracy']:.3f} / {single['latency_s']:.1f}"
              if single.get("accuracy") is not None else "-")
    return (f"| {folder.name} | {s['num_problems']} | {acc.get('weighted', 0):.3f} | "
            f"{acc.get('majority', 0):.3f} | {acc.get('pass@n', 0):.3f} | "
            f"{s['tokens_generated']:.0f} | {s['latency_s']['mean']:.1f} "
            f"({s['generator_time_s']:.1f} / {s['verifier_time_s']:.1f}) | "
            f"{s['precise_goodput_tok_s']:.1f} | {greedy} | {describe_platform(platform)} |")


def main(folders: list[str]) -> None:
    print("| run | problems | acc weighted | acc majority | pass@n | tokens/problem | "
          "latency mean s (gen / ver) | precise goodput tok/s | one greedy sample: acc / "
          "latency s | ran on |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for folder in folders:
        line = row(Path(folder))
        if line:
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
