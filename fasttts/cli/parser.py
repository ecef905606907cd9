"""The `fasttts` argument parser (one subcommand per module of `fasttts.cli`) and `main`,
which turns every configuration error into one `error:` line and exit code 2."""

from __future__ import annotations

import argparse
import sys
import textwrap

from fasttts.cli import bench, evaluate, models, plan, serve, solve
from fasttts.cli import prm_train as prm_command

__all__ = ["build_parser", "main"]


class _Help(argparse.HelpFormatter):
    """argparse's help layout without breaking names at hyphens (`skywork-prm-1.5b`)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """An argument parser (and, through `add_subparsers`, its subcommands) using `_Help`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `fasttts` command."""
    from fasttts.cli import __doc__ as cli_doc
    from fasttts.logging_setup import ENV_VAR

    verbose_help = (f"show the libraries' own log lines and warnings (vLLM, torch, "
                    f"transformers), hidden by default; -vv for debug (also: "
                    f"${ENV_VAR}=warning|info|debug)")
    parser = _Parser(prog="fasttts", description=cli_doc.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help=verbose_help)
    verbose = _Parser(add_help=False)  # -v after the command works too
    verbose.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                         help=verbose_help)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (solve, evaluate, plan, serve, models, prm_command, bench):
        command.add_parser(sub, [verbose])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for a configuration error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the command line as given (recorded with a benchmark's results)
    from pydantic import ValidationError

    from fasttts.logging_setup import configure, log_to_stderr
    from fasttts.options import describe_error

    try:
        log_to_stderr(configure(args.verbose))
        return args.func(args)
    except ValidationError as e:
        print(f"error: {describe_error(e)}", file=sys.stderr)
        return 2
    except ValueError as e:  # includes ModelError, SearchConfigError, DatasetError, ...
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished problems are saved, re-run to continue", file=sys.stderr)
        return 130
