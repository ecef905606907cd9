"""Recipe `planner`: the memory planner's search time per call (FastTTS section 4.3.1: the
allocation search "averag[es] < 1 ms on a single CPU thread").

Times `fasttts.runtime.memory_planner.plan_memory` (wall clock, `time.perf_counter`, one
Python thread on this host) on the what-if workload of Fig. 10: the 1.5B generator
(qwen2.5-math-1.5b) and the 7B PRM (math-shepherd-7b) on the RTX 4090 spec, 4.23 GiB of KV,
S = S_dec = 1024 tokens; for each n, once with the paper's T_tot (one pass, no reuse term)
and once with the prefix-reuse term of a beam search (beam_width 4,
`fasttts.runtime.plan_workload.search_shape`). A row is one (n, T_tot) pair: the median,
90th percentile and maximum of `calls` calls, the plan (B_pre, B_dec, the verifier's KV) and
whether the median is under the paper's 1 ms. The planner's inputs are simulated specs; the
times are this CPU's.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

from fasttts.bench import Section
from fasttts.bench.common import md_table, progress
from fasttts.bench.plots import save, subplots
from fasttts.bench.store import RowStore, check_out_dir
from fasttts.config import SIM_GENERATOR, SIM_VERIFIER

__all__ = ["PAPER_MS", "main", "report", "time_plan"]

#: The paper's bound on one planner call (FastTTS section 4.3.1), milliseconds.
PAPER_MS = 1.0
#: The T_tot variants timed: the paper's one pass, and with beam search's reuse term.
VARIANTS = ("paper (one pass)", "with reuse (beam search)")
#: (n values, calls per row) by --quick.
SIZES = {True: ((8, 64, 256, 512), 20), False: ((8, 16, 32, 64, 128, 256, 512), 200)}
KV_BUDGET_GIB = 4.23
SEQ_LEN = 1024


def _plan_input(n: int, variant: str):
    from fasttts.config import SearchConfig
    from fasttts.perf.specs import load_hardware, load_model
    from fasttts.runtime.memory_planner import PlanInput
    from fasttts.runtime.plan_workload import search_shape

    shape = ({} if variant == VARIANTS[0]
             else search_shape(SearchConfig(method="beam_search", n=n, beam_width=4), SEQ_LEN))
    return PlanInput(memory_bytes=int(KV_BUDGET_GIB * (1 << 30)),
                     generator=load_model(SIM_GENERATOR),
                     verifier=load_model(SIM_VERIFIER), hardware=load_hardware("rtx4090"),
                     num_requests=n, verifier_len=SEQ_LEN, decode_len=SEQ_LEN, **shape)


def time_plan(n: int, variant: str, calls: int) -> dict:
    """One row: `calls` timed `plan_memory` calls at `n` beams with the T_tot `variant`.

    Returns:
        {"n", "variant", "calls", "median_ms", "p90_ms", "max_ms" (milliseconds per call),
        "b_pre", "b_dec", "verifier_kv_gib", "under_paper_bound" (median < `PAPER_MS`)}.
    Raises:
        ValueError: calls < 1 or an unknown variant.
    """
    from fasttts.runtime.memory_planner import plan_memory

    if calls < 1 or variant not in VARIANTS:
        raise ValueError(f"time_plan takes calls >= 1 and a variant of {VARIANTS}; got "
                         f"{calls}, {variant!r}")
    inp = _plan_input(n, variant)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        plan = plan_memory(inp)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    median = statistics.median(times)
    return {"n": n, "variant": variant, "calls": calls, "median_ms": median,
            "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))], "max_ms": times[-1],
            "b_pre": plan.b_pre, "b_dec": plan.b_dec,
            "verifier_kv_gib": plan.verifier_kv_bytes / (1 << 30),
            "under_paper_bound": median < PAPER_MS}


def main(args) -> int:
    """`fasttts bench planner [--quick] --out DIR`: time every row not in DIR yet, write
    DIR/summary.json and print the table. Raises BenchDirError for an unusable --out."""
    ns, calls = SIZES[args.quick]
    config = {"recipe": "planner", "backend": "sim", "quick": args.quick, "ns": list(ns),
              "calls": calls,
              "kv_budget_gib": KV_BUDGET_GIB, "seq_len": SEQ_LEN, "hardware": "rtx4090",
              "generator": SIM_GENERATOR, "verifier": SIM_VERIFIER}
    with RowStore(check_out_dir(args.out), config) as store:
        keys = [(n, v) for n in ns for v in VARIANTS]
        for n, variant in progress(keys, "planner rows"):
            key = f"n{n}|{variant}"
            if key not in store.done:
                store.append(key, time_plan(n, variant, calls)
                             | {"host": _host(), "load_average": os.getloadavg()[0]}, [])
        rows = [r["row"] for r in store.rows]
        summary = store.write_summary({"rows": rows})
    print(_table(rows))
    print(f"\nwrote {summary}")
    return 0


def _host() -> str:
    from fasttts.engines.platform_info import cpu_summary

    return f"{cpu_summary()['model'] or 'unknown CPU'}, Python {platform.python_version()}"


def _table(rows: list[dict]) -> str:
    return md_table(
        ("n", "T_tot", "calls", "median ms", "p90 ms", "max ms", "B_pre", "B_dec",
         "verifier KV GiB", f"median < {PAPER_MS:g} ms"),
        ((r["n"], r["variant"], r["calls"], f"{r['median_ms']:.3f}", f"{r['p90_ms']:.3f}",
          f"{r['max_ms']:.3f}", r["b_pre"], r["b_dec"], f"{r['verifier_kv_gib']:.2f}",
          "yes" if r["under_paper_bound"] else "NO") for r in rows))


def report(config: dict, rows: list[dict], figdir) -> Section:
    """The planner's section of REPORT.md and `planner.png` (median ms per call vs n)."""
    data = [r["row"] for r in rows]
    fig, axes = subplots(width=6.0, height=4.0)
    ax = axes[0]
    for variant in VARIANTS:
        pts = sorted((r["n"], r["median_ms"]) for r in data if r["variant"] == variant)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=variant)
    ax.axhline(PAPER_MS, color="grey", linestyle="--", label="paper: < 1 ms (section 4.3.1)")
    ax.set(xscale="log", xlabel="n (beams per iteration)", ylabel="median ms per call",
           title="Planner search time per call (this CPU; RTX 4090 specs, simulated)")
    ax.legend()
    name = save(fig, figdir, "planner.png")
    over = [r for r in data if not r["under_paper_bound"]]
    host = data[0].get("host", "this host") if data else "this host"
    shortfall = "" if not over else (
        "Over the paper's 1 ms: " + ", ".join(f"n = {r['n']} {r['variant']} "
                                               f"{r['median_ms']:.2f} ms" for r in over)
        + f" (wall clock of a Python search on {host}, 1-minute load average "
          f"{max(r.get('load_average', 0.0) for r in over):.1f} while it ran; the paper's "
          "searcher ran on an Intel Xeon Silver 4310 thread).")
    return Section(
        title="FastTTS section 4.3.1: memory planner search time per call",
        paper="\"This entire search process is computationally trivial, averaging <1 ms on a "
              "single CPU thread\" (FastTTS section 4.3.1).",
        ours=f"Wall clock of `plan_memory` on {host}, one thread, {config.get('calls')} calls "
             f"per row; inputs: 1.5B + 7B PRM on the RTX 4090 spec (simulated), "
             f"{config.get('kv_budget_gib')} GiB of KV, S = S_dec = {config.get('seq_len')}."
             f"\n\n{_table(data)}",
        shortfall=shortfall, figures=(name,))
