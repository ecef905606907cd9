"""`fasttts bench`: benchmark recipes of one harness (DESIGN.md, "Benchmarks are recipes").

A recipe reproduces one evaluation (a paper figure, or one of this project's own
measurements) into an append-only output folder (`fasttts.bench.store`): resumable, with
progress bars, `summary.json` and a printed table. `RECIPES` is the one list of them.
A recipe's `report` turns its folder's rows into its part of REPORT.md (`Section`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RECIPES", "Recipe", "Section"]


@dataclass(frozen=True)
class Section:
    """One recipe's part of `fasttts bench report` (REPORT.md).

    Attributes:
        title: the figure it reproduces, e.g. "FastTTS Fig. 12: goodput vs n".
        paper: the paper's headline numbers for that figure, quoted with their section.
        ours: markdown: our table of the rows, and a sentence of what it shows.
        shortfall: where we fall short of the paper's number, plainly ("" if we do not).
        figures: file names of the PNGs the report hook wrote into its figure folder.
        headline: one line for the report's summary table: our headline number beside the
            paper's, e.g. "P97 x9.1 lower than self-consistency (paper: x15.7 on average)"
            ("": the summary table points to the section).
    """

    title: str
    paper: str
    ours: str
    shortfall: str
    figures: tuple[str, ...] = ()
    headline: str = ""


@dataclass(frozen=True)
class Recipe:
    """One benchmark recipe.

    Attributes:
        name: its command-line name.
        about: one line: what it measures and its paper source.
        backends: the backends it runs on ("sim", "vllm"); the first is the default.
        quick_time, full_time: expected wall time at --quick and full size on 2 cores (as
            measured on this project's machine, often shared with other jobs).
        main: runs it from the parsed arguments; returns the exit code.
        report: report(config, rows, figdir) -> Section: config and rows as the recipe's
            `RowStore` holds them (config.json, rows.jsonl entries {"key", "row",
            "requests"}, damaged lines set aside); writes its PNGs (matplotlib, e.g. with
            `fasttts.bench.plots`) into `figdir` (a `pathlib.Path`, not created yet). None:
            not reported yet. Called by `fasttts bench report` (`fasttts.bench.report`).
        run_configs: run_configs(args) -> the `RunConfig`s of the engines the run uses, for
            the platform `fasttts bench` records in the run's run.json
            (`fasttts.engines.platform_info`). None: the backend alone is recorded (and the
            host and default engine settings on vllm).
    """

    name: str
    about: str
    backends: tuple[str, ...]
    quick_time: str
    full_time: str
    main: Callable
    report: Callable[..., Section] | None = None
    run_configs: Callable[..., list] | None = None


def _sart_latency_report(config, rows, figdir) -> Section:
    from fasttts.bench import sart_report

    return sart_report.latency_section(config, rows, figdir)


def _sart_ablation_report(config, rows, figdir) -> Section:
    from fasttts.bench import sart_report

    return sart_report.ablation_section(config, rows, figdir)


def _sart_configs(args) -> list:
    from fasttts.bench import sart_latency

    return sart_latency.run_configs(args)


def _sart_latency(args) -> int:
    from fasttts.bench import sart_latency

    return sart_latency.main(args, sart_latency.ROWS, "sart-latency")


def _sart_ablation(args) -> int:
    from fasttts.bench import sart_latency

    return sart_latency.main(args, sart_latency.ABLATION, "sart-ablation")


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("sart-latency", "SART vs self-consistency, best-of-N and vanilla under Poisson "
           "arrivals: P50-P99 latency, accuracy, tokens (SART section 5.2, Fig. 5)",
           ("sim", "vllm"), "sim 5 min, vllm 20 min", "sim 50 min, vllm 50 min",
           _sart_latency, _sart_latency_report, _sart_configs),
    Recipe("sart-ablation", "early stopping alone, pruning alone, both, vs self-consistency, "
           "N = 8 (SART section 5.3, Fig. 6)",
           ("sim",), "sim 4 min", "sim 55 min", _sart_ablation, _sart_ablation_report,
           _sart_configs),
)}
