"""Recipe `fig14`: top-1 (majority vote) and pass@N accuracy vs n, the baseline vs FastTTS
(FastTTS section 6.3, Fig. 14), beam search with the 1.5B+7B pair on AIME 2024 and AMC 2023 on
the simulated RTX 4090 (`fasttts.bench.compare`). The simulator's answers come from its
workload model, so the accuracies are simulated too.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from fasttts.bench import Section
from fasttts.bench.compare import FASTTTS, Plan, run_recipe, summarize, table
from fasttts.bench.fig12 import NAMES, PAIRS
from fasttts.bench.figures import lines_vs_n

__all__ = ["main", "plan", "report"]

PAPER = ("FastTTS section 6.3, Fig. 14: \"(a) the Top-1 accuracy of FastTTS is highly "
         "competitive with the baseline. On the more challenging AIME dataset, FastTTS "
         "consistently matches or slightly improves accuracy\"; \"(b) [Pass@N] matches baseline "
         "accuracy at large N but slightly exceeds it at small N\"; \"both perform comparably, "
         "confirming the algorithm equivalence\".")


def plan(quick: bool) -> Plan:
    """Quick: n = 8, 32 on two problems of each dataset; full: n = 8 to 128 on ten."""
    pair = tuple(p for p in PAIRS if p.label == "1.5B+7B")
    ns = (8, 32) if quick else (8, 16, 32, 64, 128)
    return Plan(pair, ns, ("baseline", FASTTTS), ("aime24", "amc23"), limit=2 if quick else 10)


def main(args) -> int:
    """`fasttts bench fig14` (module docstring)."""
    return run_recipe(args, "fig14", plan(args.quick))


def report(config: dict, rows: list[dict], figdir: Path) -> Section:
    """Top-1 and pass@N vs n per dataset (one panel each), and the largest gap between the
    two configurations."""
    cells = summarize([{**e["row"], "setting": e["row"]["dataset"]} for e in rows],
                      config["plan"]["configs"])
    figs = (lines_vs_n(cells, "top1_majority", "top-1 accuracy (majority vote)",
                       "Fig. 14(a): top-1 accuracy", figdir / "fig14_top1.png", NAMES,
                       ylim=(-0.02, 1.02)),
            lines_vs_n(cells, "pass_at_n", "pass@N", "Fig. 14(b): pass@N",
                       figdir / "fig14_pass_at_n.png", NAMES, ylim=(-0.02, 1.02)))
    gaps = {k: _gaps(cells, k) for k in ("top1_majority", "pass_at_n")}
    ours = (f"{table(cells)}\n\n(setting = dataset.) FastTTS minus baseline, over datasets and "
            f"n (simulated): top-1 {_range(gaps['top1_majority'])}, pass@N "
            f"{_range(gaps['pass_at_n'])}.")
    return Section("FastTTS Fig. 14: top-1 and pass@N accuracy (simulated RTX 4090)", PAPER,
                   ours, _shortfall(cells), figs)


def _shortfall(cells: list[dict]) -> str:
    """Why simulated accuracy is not the paper's, and the datasets with no correct path."""
    problems = min(c["problems"] for c in cells)
    zero = [s for s in dict.fromkeys(c["setting"] for c in cells)
            if all(c["pass_at_n"] == 0 for c in cells if c["setting"] == s)]
    text = ("Accuracy here is the simulator's: its workload model draws each path's answer "
            "and PRM scores, so the gap between the two columns measures how FastTTS's "
            "scheduling changes the search's draws and choices on the simulator (speculated "
            "head starts, R), not the models' accuracy on AIME / AMC; with "
            f"{problems} problems per cell one problem moves the accuracy by "
            f"{1 / problems:.2f}.")
    if zero:
        text += (f" No path is correct on {', '.join(zero)} at any n (pass@N 0): the "
                 f"simulator's difficulty model derails those paths, so that panel compares "
                 f"nothing.")
    return text


def _gaps(cells: list[dict], key: str) -> list[float]:
    """FastTTS minus baseline of `key` per (dataset, n)."""
    by = {(c["setting"], c["n"], c["config"]): c[key] for c in cells}
    return [by[(s, n, FASTTTS)] - v for (s, n, c), v in by.items()
            if c == "baseline" and (s, n, FASTTTS) in by]


def _range(xs: list[float]) -> str:
    return (f"{min(xs):+.2f} to {max(xs):+.2f} (mean {statistics.fmean(xs):+.2f})"
            if xs else "-")
