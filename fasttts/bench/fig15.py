"""Recipe `fig15`: goodput on constrained GPUs, the baseline vs FastTTS (FastTTS section
6.4, Fig. 15): the simulated RTX 3070 Ti (8 GB) and RTX 4070 Ti (12 GB)
(`fasttts/perf/specs/hardware/`), beam search with the 1.5B+1.5B pair (a 7B model in 16 bits
does not fit either card) on AIME 2024 (`fasttts.bench.compare`).
"""

from __future__ import annotations

from pathlib import Path

from fasttts.bench import Section
from fasttts.bench.compare import FASTTTS, Plan, Setting, cells_of, run_recipe, table
from fasttts.bench.fig12 import NAMES, PAIRS
from fasttts.bench.figures import bars, spread

__all__ = ["HARDWARE", "main", "plan", "report"]

#: The constrained GPUs (hardware spec names).
HARDWARE = ("rtx3070ti", "rtx4070ti")

PAPER = ("FastTTS section 6.4, Fig. 15: \"We evaluate FastTTS on NVIDIA RTX 3070 Ti (8GB) and "
         "RTX 4070 Ti (12GB) GPUs. [...] our system consistently outperforms the baseline, "
         "achieving goodput speedups of 1.4x-1.6x.\" \"On the HumanEval code generation "
         "benchmark, FastTTS attains speedups ranging from 1.3x to 1.8x\".")


def plan(quick: bool) -> Plan:
    """Quick: n = 8, 32 on two problems; full: n = 8, 32, 128 on three."""
    pair = next(p for p in PAIRS if p.label == "1.5B+1.5B")
    settings = tuple(Setting(h, pair.generator, pair.verifier, hardware=h) for h in HARDWARE)
    return Plan(settings, (8, 32) if quick else (8, 32, 128), ("baseline", FASTTTS),
                ("aime24",), limit=2 if quick else 3)


def main(args) -> int:
    """`fasttts bench fig15` (module docstring)."""
    return run_recipe(args, "fig15", plan(args.quick))


def report(config: dict, rows: list[dict], figdir: Path) -> Section:
    """Goodput bars per GPU and n, the FastTTS / baseline ratios beside the paper's."""
    cells = cells_of(config, rows)
    figs = (bars(cells, "goodput", "precise goodput (tok/s)",
                 "Fig. 15: goodput on RTX 3070 Ti / 4070 Ti", figdir / "fig15_goodput.png",
                 NAMES),)
    mean, lo, hi = spread(cells, FASTTTS, "x_goodput")
    ours = (f"{table(cells)}\n\nFastTTS / baseline goodput (simulated, 1.5B+1.5B): x{lo:.2f} "
            f"to x{hi:.2f} over the two GPUs and n (mean x{mean:.2f}).")
    notes = [f"the least gain x{lo:.2f} is below the paper's x1.4"] if lo < 1.4 else []
    return Section("FastTTS Fig. 15: constrained GPUs (simulated RTX 3070 Ti and 4070 Ti)",
                   PAPER, ours, "; ".join(notes) + ("; " if notes else "") +
                   "HumanEval is not run (no code dataset or code verifier in this project). "
                   "The GPUs are simulated from their spec sheets (no such card was measured).",
                   figs)
