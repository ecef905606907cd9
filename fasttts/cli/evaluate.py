"""`fasttts eval`: evaluate a dataset into an append-only output folder, optionally beside a
single greedy sample of the same generator, and print the summary."""

from __future__ import annotations

import argparse
import sys

from fasttts.cli.run_options import (add_run_options, check_models, run_config, setting_changes,
                                     techniques_on)
from fasttts.cli.tables import print_table, table

__all__ = ["GREEDY_BASELINE", "add_parser", "print_summary", "run_settings",
           "single_sample_search"]

#: The single-sample baseline's search: one greedy sample, no verifier (self-consistency of 1).
GREEDY_BASELINE = {"method": "self_consistency", "n": 1, "beam_width": 1, "temperature": 0.0}


def add_parser(sub, parents: list) -> None:
    """Add `eval` to the CLI's subcommands (`sub`, from `add_subparsers`)."""
    p = sub.add_parser("eval", parents=parents,
                       help="evaluate a dataset into an append-only output folder")
    p.add_argument("--dataset", required=True,
                   help="aime24, amc23, math500, gsm8k, or a JSONL file with problem/answer")
    p.add_argument("--limit", type=int, default=None, help="first K problems only")
    p.add_argument("--offset", type=int, default=0, help="skip the first problems")
    p.add_argument("--output-dir", required=True, help="folder for results (append-only)")
    p.add_argument("--single-sample-baseline", action="store_true",
                   help="also solve each problem with one greedy sample of the same generator "
                        "(no search, no verifier) and show its accuracy beside the search's")
    add_run_options(p)
    p.set_defaults(func=_cmd_eval)


def _cmd_eval(args: argparse.Namespace) -> int:
    from fasttts.engines.platform_info import run_platform
    from fasttts.eval.datasets import load_dataset
    from fasttts.eval.runner import ResultStore

    cfg = run_config(args)
    problems = load_dataset(args.dataset, limit=args.limit, offset=args.offset)
    if not problems:
        raise ValueError(f"no problems selected from {args.dataset!r} (offset {args.offset}): "
                         f"the dataset is empty or shorter than the offset")
    check_models(cfg)
    with ResultStore(args.output_dir, {
        "dataset": args.dataset, "offset": args.offset, "config": cfg.model_dump(mode="json"),
    } | ({"single_sample_baseline": GREEDY_BASELINE} if args.single_sample_baseline else {}),
            platform=run_platform(cfg)) as store:
        todo = [p for p in problems if p.id not in store.done_ids]
        if todo:
            store.check_platform()
        if len(todo) < len(problems):
            print(f"skipped {len(problems) - len(todo)} finished problems (already in "
                  f"{store.results}); {len(todo)} to run", file=sys.stderr)
        summary = (_run(args, cfg, problems, todo, store) if todo
                   else store.summary_of({p.id for p in problems}))
    if summary:
        print_summary(summary, args, cfg, store.recorded_platform)
    return 0


def _run(args: argparse.Namespace, cfg, problems: list, todo: list, store) -> dict | None:
    """Build the engines, check every prompt fits, and solve the problems not yet in `store`
    (with the single-sample baseline when asked), showing progress; returns the summary."""
    from fasttts.api import FastTTS
    from fasttts.backends.sim.workload import problem_difficulty
    from fasttts.eval.datasets import load_dataset, numeric_answers
    from fasttts.eval.runner import run_eval
    from fasttts.progress import EvalProgress

    with FastTTS(cfg) as tts:
        for p in todo:  # every prompt must fit before the first problem is run
            tts.check_prompt(p.problem, p.id)
            if cfg.backend == "sim":
                tts.set_reference(p.problem, p.answer, problem_difficulty(
                    args.dataset, p.problem, p.meta.get("level")))
        single = single_sample_search(cfg.search)
        with EvalProgress(len(problems), len(problems) - len(todo)) as progress:
            return run_eval(problems, lambda p: tts.solve(p.problem, p.id, on_progress=progress),
                            store, progress, numeric=numeric_answers(load_dataset(args.dataset)),
                            baseline=(lambda p: tts.solve(p.problem, p.id, search=single))
                            if args.single_sample_baseline else None)


def single_sample_search(search):
    """The search's settings for its single-sample baseline: `GREEDY_BASELINE`, with the
    method's own parameters and the selection parameters left out, as self-consistency has
    none."""
    from fasttts.config import SearchConfig
    from fasttts.search import GIVEN_ONLY

    kept = search.model_dump(exclude=set(GIVEN_ONLY))
    return SearchConfig(**(kept | GREEDY_BASELINE))


def run_settings(cfg) -> str:
    """What a run (`fasttts.config.RunConfig`) ran beyond its method and n, as one line: the
    search settings off their defaults (`SearchConfig`, `name value`), then the FastTTS
    techniques (`fasttts.cli.run_options.techniques_on`). E.g. "search: tie_tolerance 0.01;
    techniques: incremental_verification"."""
    search = setting_changes(cfg.search, skip=("method", "n"))
    return "; ".join(([f"search: {', '.join(search)}"] if search else [])
                     + [techniques_on(cfg.runtime)])


def print_summary(summary: dict, args: argparse.Namespace, cfg,
                  platform: dict | None = None) -> None:
    """Print an eval's `summary` (`fasttts.eval.runner`) as a table under a header of the run
    (method, n, dataset of `args`; the other settings and techniques of `cfg`, the
    `RunConfig`: `run_settings`) and what it ran on (`platform`, from config.json:
    `fasttts.engines.platform_info.describe_platform`), with the times' clock (on the simulated
    `cfg.sim.hardware`, or the wall clock), accuracy, the single-sample baseline's, goodput,
    latency and cache statistics."""
    from rich.text import Text

    from fasttts.engines.platform_info import describe_platform

    clock = summary.get("clock")
    where = (f"simulated {cfg.sim.hardware}, virtual-clock seconds" if clock == "simulated"
             else "wall-clock seconds")
    title = f"{args.method} n={args.n} on {args.dataset}, {summary['num_problems']} problems"
    t = table()
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("times in", where)
    t.add_row("results", Text(str(args.output_dir)))
    acc = summary["accuracy"]
    if acc:
        for k in ("weighted", "majority", "best", "pass@n"):
            t.add_row(f"accuracy ({k})", f"{acc[k]:.3f}")
    single = summary.get("single_sample")
    if single and single["accuracy"] is not None:
        t.add_row("accuracy of one greedy sample", f"{single['accuracy']:.3f}")
        t.add_row("  its latency mean (s) / tokens", f"{single['latency_s']:.1f} / "
                                                     f"{single['num_tokens']:.0f}")
    t.add_row("precise goodput (tok/s)", f"{summary['precise_goodput_tok_s']:.2f}")
    lat = summary["latency_s"]
    t.add_row("latency mean / p50 / p90 (s)", f"{lat['mean']:.1f} / {lat['p50']:.1f} / "
                                              f"{lat['p90']:.1f}")
    t.add_row("  generator time (s)", f"{summary['generator_time_s']:.1f}")
    t.add_row("  verifier time (s)", f"{summary['verifier_time_s']:.1f}")
    t.add_row("tokens generated per problem", f"{summary['tokens_generated']:.0f}")
    t.add_row("completions per problem", f"{summary['num_completions']:.1f}")
    if summary.get("batch_occupancy") is not None:
        t.add_row("generation batch occupancy", f"{summary['batch_occupancy']:.2f}")
    if summary.get("near_tie_selections"):
        t.add_row("near-tie selections",
                  f"{summary['near_tie_selections']} of {summary['selections']}")
    if summary.get("runtime_overhead_frac") is not None:
        t.add_row("runtime overhead", f"{summary['runtime_overhead_frac']:.1%}")
    if summary.get("prefix_cache_hit_rate") is not None:
        t.add_row("generator prefix-cache hit rate", f"{summary['prefix_cache_hit_rate']:.2f}")
    if summary.get("verifier_prefix_cache_hit_rate") is not None:
        t.add_row("verifier prefix-cache hit rate",
                  f"{summary['verifier_prefix_cache_hit_rate']:.2f}")
    print_table(t, [title, run_settings(cfg), describe_platform(platform)])
