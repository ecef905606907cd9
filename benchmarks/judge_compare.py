"""Compare two verifier runs that scored the same generator samples (same seeds): accuracy of
the best path and of the PRM-weighted vote, and how often a correct completion outscores an
incorrect one of the same problem (pairwise ranking accuracy).

Usage: python benchmarks/judge_compare.py RUN_DIR_A RUN_DIR_B

Kept outside `fasttts bench`: a tool that compares two existing `fasttts eval` runs; it runs
nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fasttts.eval.grading import is_equivalent
from fasttts.eval.ranking import pairwise_accuracy


def load(folder: str) -> dict[str, dict]:
    """The records of a run folder's results.jsonl, by problem id."""
    return {r["id"]: r for r in map(json.loads, open(Path(folder) / "results.jsonl"))}


def stats(records: list[dict]) -> dict:
    """Accuracy of each answer rule, pairwise ranking accuracy (`fasttts.eval.ranking`; None
    without a pair) and its number of pairs, and mean verifier seconds, over `records`."""
    ranking, pairs = pairwise_accuracy(
        [([c["score"] for c in r["completions"]],
          [is_equivalent(c["answer"], r["gold"]) for c in r["completions"]]) for r in records])
    n = len(records)
    return {
        "problems": n,
        "best": sum(r["correct"]["best"] for r in records) / n,
        "weighted": sum(r["correct"]["weighted"] for r in records) / n,
        "majority": sum(r["correct"]["majority"] for r in records) / n,
        "pairwise_ranking": ranking if pairs else None,
        "pairs": pairs,
        "verifier_s": sum(r["verifier_time_s"] for r in records) / n,
    }


def main(a: str, b: str) -> None:
    """Print the `stats` of runs `a` and `b` over the problems both have."""
    ra, rb = load(a), load(b)
    common = sorted(set(ra) & set(rb))
    for name, runs in ((a, ra), (b, rb)):
        print(name, json.dumps(stats([runs[i] for i in common])))


if __name__ == "__main__":
    main(*sys.argv[1:3])
