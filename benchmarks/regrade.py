"""Re-grade the stored completions of `fasttts eval` runs with the current answer extraction
and equivalence (`fasttts.eval.grading`), without running anything.

    python benchmarks/regrade.py RUN_DIR [RUN_DIR ...]

For each run folder: completions without a `\\boxed{}`, completion answers that change, and the
accuracy (weighted / majority / best vote, pass@n) as stored and as re-graded. Writes nothing.

Kept outside `fasttts bench`: a tool that re-grades stored `fasttts eval` outputs; it runs
nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fasttts.eval.datasets import load_dataset, numeric_answers
from fasttts.eval.grading import extract_answer, find_answer
from fasttts.eval.metrics import vote_and_grade

VOTES = ("weighted", "majority", "best", "pass@n")


def regrade(run_dir: Path) -> dict:
    """Stored vs re-graded numbers of one run folder (module docstring).

    Raises:
        OSError, ValueError: the folder has no readable config.json / results.jsonl.
    """
    config = json.loads((run_dir / "config.json").read_text())
    numeric = numeric_answers(load_dataset(config["dataset"]))
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()
               if line.strip()]
    graded = [r for r in records if r.get("gold") is not None]
    out = {"run": str(run_dir), "dataset": config["dataset"], "numeric": numeric,
           "problems": len(graded), "completions": 0, "unboxed": 0, "changed": 0,
           "stored": dict.fromkeys(VOTES, 0), "regraded": dict.fromkeys(VOTES, 0)}
    for r in graded:
        texts = [c["text"] for c in r["completions"]]
        answers = [find_answer(t, numeric) for t in texts]
        out["completions"] += len(texts)
        out["unboxed"] += sum(extract_answer(t) is None for t in texts)
        out["changed"] += sum(a != c["answer"] for a, c in zip(answers, r["completions"]))
        _, correct = vote_and_grade(answers, [c["score"] for c in r["completions"]], r["gold"],
                                    r["answer_rule"])
        for k in VOTES:
            out["stored"][k] += bool(r["correct"][k])
            out["regraded"][k] += bool(correct[k])
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the re-grade of each run folder; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    for run in p.parse_args(argv).runs:
        o = regrade(run)
        n = max(o["problems"], 1)
        acc = "  ".join(f"{k} {o['stored'][k] / n:.3f} -> {o['regraded'][k] / n:.3f}"
                        for k in VOTES)
        print(f"{o['run']} ({o['dataset']}, numeric={o['numeric']}): {o['problems']} problems, "
              f"{o['completions']} completions, {o['unboxed']} without \\boxed{{}}, "
              f"{o['changed']} answers changed; accuracy {acc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
