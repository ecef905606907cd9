"""Planner time per call (FastTTS section 4.3.1 says the search takes < 1 ms on one thread).

Times `plan_memory` on the default what-if workload (1.5B generator + 7B PRM on the RTX 4090,
4.23 GiB of KV, S = S_dec = 1024 tokens) for each n, with the paper's T_tot (one pass, no
reuse term) and with the prefix-reuse term of a beam search (beam_width 4). Prints the median
of `--calls` calls per row.

    python benchmarks/planner_time.py --ns 8,64,256,512 --calls 50
"""

from __future__ import annotations

import argparse
import statistics
import time

from fasttts.config import SearchConfig
from fasttts.perf.specs import load_hardware, load_model
from fasttts.runtime.memory_planner import PlanInput, plan_memory
from fasttts.runtime.plan_workload import search_shape


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="8,64,256,512")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--kv-budget-gib", type=float, default=4.23)
    args = ap.parse_args()
    gen, ver = load_model("qwen2.5-math-1.5b"), load_model("math-shepherd-7b")
    hw = load_hardware("rtx4090")
    print("| n | T_tot | median ms per call | B_pre | B_dec | verifier KV GiB |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in args.ns.split(",")):
        beam = SearchConfig(method="beam_search", n=n, beam_width=4)
        for label, shape in (("paper (one pass)", {}),
                             ("with reuse (beam search)", search_shape(beam, 1024))):
            inp = PlanInput(memory_bytes=int(args.kv_budget_gib * (1 << 30)), generator=gen,
                            verifier=ver, hardware=hw, num_requests=n, verifier_len=1024,
                            decode_len=1024, **shape)
            times = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                plan = plan_memory(inp)
                times.append(time.perf_counter() - t0)
            print(f"| {n} | {label} | {statistics.median(times) * 1e3:.2f} | {plan.b_pre} | "
                  f"{plan.b_dec} | {plan.verifier_kv_bytes / (1 << 30):.2f} |")


if __name__ == "__main__":
    main()
