"""Recipe `fig11`: goodput per search method, the baseline vs FastTTS (FastTTS section 6.2,
Fig. 11): beam search, DVTS, dynamic branching, varying granularity (vg_search) and best-of-N
with the 1.5B+7B pair on the simulated RTX 4090, AIME 2024 (`fasttts.bench.compare`).
"""

from __future__ import annotations

from pathlib import Path

from fasttts.bench import Section
from fasttts.bench.compare import (FASTTTS, Plan, Setting, baseline_cell, cells_of, run_recipe,
                                   table)
from fasttts.bench.fig12 import NAMES, PAIRS
from fasttts.bench.figures import bars, spread

__all__ = ["METHODS", "main", "plan", "report"]

#: The search methods compared (`fasttts.search.METHODS`).
METHODS = ("beam_search", "dvts", "dynamic_branching", "vg_search", "best_of_n")

PAPER = ("FastTTS section 6.2, Fig. 11: \"FastTTS consistently and significantly improves "
         "precise goodput over the baseline implementation across all evaluated search "
         "methods. The goodput improvement ranges from 1.2x to 3.9x.\"")


def plan(quick: bool) -> Plan:
    """Quick: n = 32 on two problems; full: n = 32 and 128 on three problems."""
    pair = next(p for p in PAIRS if p.label == "1.5B+7B")
    settings = tuple(Setting(m, pair.generator, pair.verifier, method=m) for m in METHODS)
    return Plan(settings, (32,) if quick else (32, 128), ("baseline", FASTTTS), ("aime24",),
                limit=2 if quick else 3)


def main(args) -> int:
    """`fasttts bench fig11` (module docstring)."""
    return run_recipe(args, "fig11", plan(args.quick))


def report(config: dict, rows: list[dict], figdir: Path) -> Section:
    """Goodput bars per method and n, and the FastTTS / baseline ratios beside the paper's."""
    cells = cells_of(config, rows)
    figs = (bars(cells, "goodput", "precise goodput (tok/s)", "Fig. 11: goodput per method",
                 figdir / "fig11_goodput.png", NAMES),)
    mean, lo, hi = spread(cells, FASTTTS, "x_goodput")
    worst = min((c for c in cells if c["config"] == FASTTTS), key=lambda c: c["x_goodput"])
    ours = (f"{table(cells)}\n\nFastTTS / baseline goodput (simulated, 1.5B+7B): x{lo:.2f} "
            f"to x{hi:.2f} over methods and n (mean x{mean:.2f}); the least is "
            f"{worst['setting']} at n = {worst['n']}.")
    notes = [_loss(cells, c) for c in cells if c["config"] == FASTTTS and c["x_goodput"] < 1]
    if 1 <= lo < 1.2:
        notes.append(f"{worst['setting']} gains only x{lo:.2f} (paper: at least x1.2)")
    if hi < 3.9:
        notes.append(f"our largest gain x{hi:.2f} is below the paper's x3.9")
    return Section("FastTTS Fig. 11: goodput per search method (simulated RTX 4090)", PAPER,
                   ours, _shortfall(notes), figs)


def _loss(cells: list[dict], cell: dict) -> str:
    """A cell where FastTTS is slower than the baseline, with both verifier and generator
    times, and for best-of-N the known cause of a generator time that grew
    (docs/benchmarks.md)."""
    base = baseline_cell(cells, cell)
    causes = []
    if cell["setting"] == "best_of_n" and cell["generator_s"] > 1.01 * base["generator_s"]:
        causes.append("the memory planner sizes a first request on guessed path lengths (a "
                      "decode batch below n, or preemptions where the paths outgrow the guess; "
                      "later requests re-plan on the measured length)")
    why = (f": {'; '.join(causes)} (docs/benchmarks.md, 'Why FastTTS lost on best-of-N at "
           f"n = 128')" if causes else ": not explained yet")
    return (f"FastTTS is slower than the baseline for {cell['setting']} at n = {cell['n']} "
            f"(goodput x{cell['x_goodput']:.2f}; verifier {base['verifier_s']:.1f} -> "
            f"{cell['verifier_s']:.1f} s, generator {base['generator_s']:.1f} -> "
            f"{cell['generator_s']:.1f} s){why}")


def _sentence(note: str) -> str:
    """`note` with a capital first letter, unless it starts with a name (best_of_n)."""
    first = note.split(" ", 1)[0]
    return note if "_" in first else note[0].upper() + note[1:]


def _shortfall(notes: list[str]) -> str:
    """The notes, then what holds for every run of this recipe."""
    return ("".join(f"{_sentence(x)}. " for x in notes)
            + "Simulated, not measured on a GPU; a few AIME problems per cell. Methods with "
            "one generation round (best_of_n) leave Speculative Beam Extension nothing to "
            "speculate on: --fasttts runs them without speculation "
            "(`SearchStrategy.speculates`).")
