"""`fasttts models`: list the embedded models (and trained heads), or prepare them."""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]


def add_parser(sub, parents: list) -> None:
    """Add `models` to the CLI's subcommands (`sub`, from `add_subparsers`)."""
    p = sub.add_parser("models", parents=parents, help="prepare or list the embedded models")
    p.add_argument("action", choices=("prepare", "list"))
    p.add_argument("names", nargs="*", help="models to prepare (default: the defaults)")
    p.add_argument("--force", action="store_true", help="convert again")
    p.set_defaults(func=_cmd_models)


def _cmd_models(args: argparse.Namespace) -> int:
    from fasttts.config import DEFAULT_GENERATOR, DEFAULT_VERIFIER
    from fasttts.models import (DERIVED_MODELS, EMBEDDED_MODELS, embedded_names, prepare_model,
                                prepared_path)

    if args.action == "list":
        for name in embedded_names():
            ready = (prepared_path(name) / "config.json").is_file()
            state = "prepared" if ready else "not prepared"
            if name in EMBEDDED_MODELS:
                m = EMBEDDED_MODELS[name]
                print(f"{name}\t{state}\t{m.description}\t(pip extra: fasttts[{m.pip_extra}])")
            else:
                print(f"{name}\t{state}\t{DERIVED_MODELS[name].description}")
        return 0
    names = args.names or sorted({DEFAULT_GENERATOR, DEFAULT_VERIFIER})
    unknown = [n for n in names if n not in embedded_names()]
    if unknown:
        raise ValueError(f"unknown embedded model {unknown[0]!r}; embedded models are: "
                         f"{', '.join(embedded_names())}")
    for name in names:
        print(f"preparing {name} ...", flush=True)
        print(f"{name}: {prepare_model(name, force=args.force)}")
    return 0
