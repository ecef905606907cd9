"""Figures and numbers of the comparison recipes' report hooks (`fasttts.bench.compare`
cells): lines vs n per setting, grouped bars, and the spread of a ratio over cells.
matplotlib on the Agg backend (no display); every title says the clock ("simulated").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

__all__ = ["bars", "breakdown", "lines_vs_n", "spread"]


def _pyplot():
    """matplotlib.pyplot on the Agg backend (`fasttts.bench.plots`)."""
    from fasttts.bench.plots import pyplot

    return pyplot()


def _clock(cells: Sequence[dict]) -> str:
    return "simulated" if cells and cells[0]["clock"] == "simulated" else "wall clock"


def _finish_panels(plt, fig, axes, ylabel: str, title: str, cells: Sequence[dict], path: Path,
                   legend_size: int = 7) -> str:
    """Label the first panel, title the figure with the clock, write `path`; its name."""
    axes[0][0].set_ylabel(ylabel)
    axes[0][0].legend(fontsize=legend_size)
    fig.suptitle(f"{title} ({_clock(cells)})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path).name


def lines_vs_n(cells: Sequence[dict], field: str, ylabel: str, title: str, path: Path,
               names: dict[str, str] | None = None, logy: bool = False,
               ylim: tuple[float, float] | None = None) -> str:
    """One panel per setting, one line per configuration: `field` of each cell vs n (log2
    axis). `names` relabels configurations in the legend; `ylim` fixes the y range (e.g.
    (0, 1) for accuracies). Writes `path` (PNG); returns its file name."""
    plt = _pyplot()
    settings = list(dict.fromkeys(c["setting"] for c in cells))
    fig, axes = plt.subplots(1, len(settings), figsize=(4 * len(settings), 3.4), squeeze=False)
    for ax, s in zip(axes[0], settings):
        mine = [c for c in cells if c["setting"] == s]
        for config in dict.fromkeys(c["config"] for c in mine):
            pts = sorted((c["n"], c[field]) for c in mine if c["config"] == config)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    label=(names or {}).get(config, config))
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        if ylim:
            ax.set_ylim(*ylim)
        ax.set_title(s, fontsize=9)
        ax.set_xlabel("n (beams)")
        ax.grid(alpha=0.3)
    return _finish_panels(plt, fig, axes, ylabel, title, cells, path)


def bars(cells: Sequence[dict], field: str, ylabel: str, title: str, path: Path,
         names: dict[str, str] | None = None, group=lambda c: f"{c['setting']}\nn={c['n']}",
         hline: float | None = None) -> str:
    """Grouped bars: one group per `group(cell)` (default setting and n), one bar per
    configuration, height `field`; `hline` draws a reference line (e.g. 1.0 for ratios).
    Writes `path` (PNG); returns its file name."""
    plt = _pyplot()
    groups = list(dict.fromkeys(group(c) for c in cells))
    configs = list(dict.fromkeys(c["config"] for c in cells))
    width = 0.8 / len(configs)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 + 0.35 * len(groups) * len(configs)), 3.6))
    for k, config in enumerate(configs):
        value = {group(c): c[field] for c in cells if c["config"] == config}
        ax.bar([g + (k - (len(configs) - 1) / 2) * width for g in range(len(groups))],
               [value.get(g, math.nan) for g in groups], width,
               label=(names or {}).get(config, config))
    if hline is not None:
        ax.axhline(hline, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(groups)), groups, fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} ({_clock(cells)})", fontsize=10)
    ax.margins(y=0.2)
    ax.legend(fontsize=7, ncol=min(4, len(configs)))
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path).name


def breakdown(cells: Sequence[dict], title: str, path: Path,
              names: dict[str, str] | None = None) -> str:
    """Latency split per setting and n: one bar per configuration, generator seconds filled
    and verifier seconds hatched on top (medians over problems, so the parts need not add up
    to the median latency). One panel per setting. Writes `path`; returns its name."""
    plt = _pyplot()
    settings = list(dict.fromkeys(c["setting"] for c in cells))
    configs = list(dict.fromkeys(c["config"] for c in cells))
    width = 0.8 / len(configs)
    fig, axes = plt.subplots(1, len(settings), figsize=(4 * len(settings), 3.4), squeeze=False)
    for ax, s in zip(axes[0], settings):
        ns = sorted({c["n"] for c in cells if c["setting"] == s})
        for k, config in enumerate(configs):
            by = {c["n"]: c for c in cells if c["setting"] == s and c["config"] == config}
            x = [i + (k - (len(configs) - 1) / 2) * width for i in range(len(ns))]
            gen = [by[n]["generator_s"] if n in by else math.nan for n in ns]
            ver = [by[n]["verifier_s"] if n in by else math.nan for n in ns]
            bar = ax.bar(x, gen, width, label=f"{(names or {}).get(config, config)} generator")
            ax.bar(x, ver, width, bottom=gen, color=bar.patches[0].get_facecolor(),
                   alpha=0.45, hatch="//", label=f"{(names or {}).get(config, config)} verifier")
        ax.set_xticks(range(len(ns)), [str(n) for n in ns])
        ax.set_xlabel("n (beams)")
        ax.set_title(s, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    return _finish_panels(plt, fig, axes, "seconds (median over problems)", title, cells, path,
                          legend_size=6)


def spread(cells: Sequence[dict], config: str, field: str) -> tuple[float, float, float]:
    """(mean, min, max) of `field` over the cells of `config` (nan without any)."""
    xs = [c[field] for c in cells if c["config"] == config and c[field] == c[field]]
    if not xs:
        return math.nan, math.nan, math.nan
    return statistics.fmean(xs), min(xs), max(xs)
