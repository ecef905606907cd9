"""`fasttts solve`: solve one problem and show the chosen path step by step."""

from __future__ import annotations

import argparse

from fasttts.cli.run_options import add_run_options, check_models, run_config

__all__ = ["add_parser", "print_solution"]


def add_parser(sub, parents: list) -> None:
    """Add `solve` to the CLI's subcommands (`sub`, from `add_subparsers`)."""
    p = sub.add_parser("solve", parents=parents,
                       help="solve one problem and show the chosen path")
    p.add_argument("problem", help="the problem text")
    add_run_options(p)
    p.set_defaults(func=_cmd_solve)


def _cmd_solve(args: argparse.Namespace) -> int:
    from fasttts.api import FastTTS
    from fasttts.eval.metrics import problem_record
    from fasttts.progress import SearchStatus
    from fasttts.steps import build_messages

    cfg = run_config(args)
    build_messages(args.problem)
    check_models(cfg)
    with FastTTS(cfg) as tts, SearchStatus(label="search") as status:
        result = tts.solve(args.problem, on_progress=status)
    record = problem_record(result, None, args.problem)
    print_solution(record)
    return 0


def print_solution(record: dict) -> None:
    """Print the path that gave the answer step by step (`fasttts.eval.metrics.answer_path`:
    the highest-scored completion with the answer, labelled with the vote it won and its rank
    by score), the answer, every vote and the run's statistics. Model text (steps, answers)
    is printed as plain text: `[/x]` or `\\[ x \\]` in it is not rich markup."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from fasttts.eval.metrics import answer_path
    from fasttts.eval.voting import ANSWER_RULES
    from fasttts.steps import split_steps

    console = Console()
    if not record["completions"]:
        console.print("[red]no completion[/red]")
        return
    path = answer_path(record)
    console.rule("the path that gave the answer" if path else "the top-scored path")
    console.print(Text(_path_label(record, path)))
    path = path or record["completions"][0]
    if record.get("clock") == "simulated":
        console.print("simulated backend: the texts are synthetic, the times virtual", style="dim")
    table = Table("step", "PRM score", "text", show_lines=True)
    steps, scores = split_steps(path["text"]), path["step_scores"]
    for i, step in enumerate(steps, start=1):
        score = f"{scores[i - 1]:.3f}" if i <= len(scores) else "-"  # unscored (SC, ORM)
        table.add_row(str(i), score, Text(step.strip()))
    console.print(table)
    console.rule("answer")
    pred = record["pred"]
    console.print(Text.assemble(f"answer ({ANSWER_RULES[record['answer_rule']]}): ",
                                (str(record["answer"]), "bold")))
    console.print(Text(f"PRM-weighted vote: {pred['weighted']}   majority vote: "
                       f"{pred['majority']}   best path: {pred['best']}"))
    console.print(
        f"completions {record['num_completions']}  iterations {record['num_iterations']}  "
        f"tokens generated {record['tokens_generated']}  latency {record['latency_s']:.1f} s "
        f"(generator {record['generator_time_s']:.1f} s, verifier "
        f"{record['verifier_time_s']:.1f} s)  precise goodput "
        f"{record['precise_goodput_tok_s']:.1f} tok/s"
        + (f"  runtime overhead {record['runtime_overhead_frac']:.1%}"
           if record.get("runtime_overhead_frac") is not None else "")
    )


def _path_label(record: dict, path: dict | None) -> str:
    """What the shown path is: the vote it won and its rank by PRM score, e.g. "PRM-weighted
    vote: the best of the 5 of 8 completions answering 12; score 0.731, 2nd of 8 by score"."""
    from fasttts.eval.grading import is_equivalent
    from fasttts.eval.voting import ANSWER_RULES

    completions = record["completions"]
    if path is None:
        return (f"score {completions[0]['score']:.3f}; none of the {len(completions)} "
                f"completions states an answer")
    ranked = sorted(completions, key=lambda c: -c["score"])
    rank = next(i for i, c in enumerate(ranked, start=1) if c is path)
    same = sum(c["answer"] == record["answer"] or is_equivalent(c["answer"], record["answer"])
               for c in completions)
    return (f"{ANSWER_RULES[record['answer_rule']]}: the best of the {same} of "
            f"{len(completions)} completions answering {record['answer']}; score "
            f"{path['score']:.3f}, {_ordinal(rank)} of {len(completions)} by score")


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
