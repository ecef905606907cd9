"""Baseline search at paper scale on the simulated GPU: goodput and latency vs n.

    .venv/bin/python benchmarks/sim_scaling.py --hardware rtx4090 \
        --generator qwen2.5-math-1.5b --verifier math-shepherd-7b --dataset aime24 \
        --ns 8,16,32,64,128,256,512 --out runs/sim-scaling

Runs `fasttts eval --backend sim` once per n (each into OUT/n<N>, append-only and resumable),
then prints one table: accuracy, precise goodput, latency mean/P50/P90 with the
generator/verifier split, preemptions, and the wall time this machine needed per simulated
problem. All times except the last column are simulated (virtual-clock) seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fasttts.cli import main as fasttts_main


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hardware", default="rtx4090")
    p.add_argument("--generator", default="qwen2.5-math-1.5b")
    p.add_argument("--verifier", default="math-shepherd-7b")
    p.add_argument("--dataset", default="aime24")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--method", default="beam_search")
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--ns", default="8,16,32,64,128,256,512")
    p.add_argument("--out", default="runs/sim-scaling")
    p.add_argument("--extra", default="", help="more `fasttts eval` options, space-separated")
    args = p.parse_args(argv)
    rows = []
    for n in (int(x) for x in args.ns.split(",")):
        out = Path(args.out) / f"n{n}"
        cmd = ["eval", "--backend", "sim", "--hardware", args.hardware, "--generator",
               args.generator, "--verifier", args.verifier, "--dataset", args.dataset,
               "--method", args.method, "--n", str(n), "--beam-width", str(args.beam_width),
               "--output-dir", str(out)] + (["--limit", str(args.limit)] if args.limit else [])
        cmd += args.extra.split()
        wall_file = out / "wall_s.json"
        t0 = time.perf_counter()
        rc = fasttts_main(cmd)
        if rc:
            return rc
        wall = time.perf_counter() - t0
        summary = json.loads((out / "summary.json").read_text())
        if not wall_file.exists():  # first run of this folder: record its wall time
            wall_file.write_text(json.dumps({"wall_s": wall, "problems": summary["num_problems"]}))
        w = json.loads(wall_file.read_text())
        rows.append((n, summary, w["wall_s"] / max(w["problems"], 1)))
    print(f"\n{args.method} on simulated {args.hardware}, {args.generator} + {args.verifier}, "
          f"{args.dataset} ({rows[0][1]['num_problems']} problems); simulated seconds except "
          f"the last column\n")
    print("| n | acc weighted / majority / pass@n | precise goodput tok/s | latency mean / p50 / "
          "p90 s | generator s | verifier s | preemptions / problem | wall s per problem |")
    print("|---|---|---|---|---|---|---|---|")
    for n, s, wall in rows:
        a = s["accuracy"] or {}
        lat = s["latency_s"]
        print(f"| {n} | {a.get('weighted', 0):.2f} / {a.get('majority', 0):.2f} / "
              f"{a.get('pass@n', 0):.2f} | {s['precise_goodput_tok_s']:.1f} | {lat['mean']:.1f} / "
              f"{lat['p50']:.1f} / {lat['p90']:.1f} | {s['generator_time_s']:.1f} | "
              f"{s['verifier_time_s']:.1f} | {s.get('num_preemptions') or 0:.1f} | {wall:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(run())
