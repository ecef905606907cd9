"""`fasttts prm train`: the command line of the PRM bootstrap (`fasttts.prm_train.train`);
in the command-line layer, so `fasttts.prm_train` never imports back up into `fasttts.cli`."""

from __future__ import annotations

import argparse
import sys

from fasttts.cli.sizes import POSITIVE_INT, number
from fasttts.config import DEFAULT_GENERATOR

__all__ = ["add_parser"]

_TRAIN_DATA = "../shared/data/gsm8k-train/train.jsonl"


def _layers(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--layers {text!r}: give layer numbers like 8,12,16")
    if not layers or min(layers) < 1:
        raise argparse.ArgumentTypeError(f"--layers {text!r}: layers are numbered from 1")
    return layers


def add_parser(sub, parents: list) -> None:
    """Add `prm train` to the CLI's subcommands."""
    p = sub.add_parser("prm", parents=parents,
                       help="bootstrap a PRM for a generator from its own rollouts")
    actions = p.add_subparsers(dest="prm_action", required=True, metavar="ACTION")
    t = actions.add_parser("train", parents=parents, help=(
        "sample graded rollouts of training problems, fit a head on the generator's hidden "
        "state at each step's end (outcome labels, as in OVM), and save it as a verifier"))
    t.add_argument("--generator", default=DEFAULT_GENERATOR,
                   help="the generator the head is for (default: %(default)s)")
    t.add_argument("--data", default=_TRAIN_DATA,
                   help="training problems, JSONL with problem/answer; never an evaluation "
                        "set (default: %(default)s)")
    t.add_argument("--limit", type=POSITIVE_INT, default=200,
                   help="training problems (default: %(default)s)")
    t.add_argument("--offset", type=number(int, 0), default=0, help="problems skipped first")
    t.add_argument("--samples", type=POSITIVE_INT, default=8,
                   help="rollouts per problem (default: %(default)s)")
    t.add_argument("--temperature", type=number(float, 0), default=0.8)
    t.add_argument("--max-tokens", type=POSITIVE_INT, default=1024, help="tokens per rollout")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--layers", type=_layers, default=(8, 12, 16, 20, 24),
                   help="candidate layers, chosen on held-out problems (default: 8,12,16,20,24)")
    t.add_argument("--output-dir", default="runs/prm-train",
                   help="rollouts, features, report and head (resumable; default: %(default)s)")
    t.add_argument("--name", default="", help="the head's verifier name (default: <generator>-ovm)")
    t.add_argument("--num-threads", type=POSITIVE_INT, default=2, help="CPU threads of the engine")
    t.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    from fasttts.eval.folder_lock import FolderLock
    from fasttts.prm_train.rollouts import RolloutConfig
    from fasttts.prm_train.train import TrainConfig, train_head

    cfg = TrainConfig(
        generator=args.generator, data=args.data, limit=args.limit, offset=args.offset,
        rollouts=RolloutConfig(samples=args.samples, temperature=args.temperature,
                               max_tokens=args.max_tokens, seed=args.seed),
        layers=args.layers, out_dir=args.output_dir, name=args.name,
        num_threads=args.num_threads)
    with FolderLock(args.output_dir, "--output-dir"):  # one writer per output folder
        report = train_head(cfg, command="fasttts " + " ".join(sys.argv[1:]))
    held = report["held_out"]
    print(f"head: {report['head']}")
    print(f"layer {report['layer']}, l2 {report['l2']}: held-out pairwise ranking "
          f"{held['pairwise_accuracy']:.3f} ({held['pairs']} pairs), step AUROC "
          f"{held['step_auroc']:.3f}, final-step AUROC {held['final_auroc']:.3f}")
    print(f"{report['completions']} completions of {report['problems']} problems, "
          f"{report['correct_fraction']:.3f} correct; report: {args.output_dir}/report.json")
    print("to serve it: copy the head folder into fasttts/models/heads/ (or pass the built "
          "checkpoint folder as --verifier)")
    return 0
