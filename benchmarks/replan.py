"""Re-planning between requests vs planning once, on one engine pair that serves a stream of
requests whose n changes (FastTTS section 4.3.1 applied per request; `fasttts.runtime.replan`).

    .venv/bin/python benchmarks/replan.py --hardware rtx4090 --generator qwen2.5-math-1.5b \
        --verifier math-shepherd-7b --kv-budget-gib 3 --dataset aime24 --limit 9 \
        --ns 8,64,256 --out runs/replan-sim

Problem i is searched with n = ns[i % len(ns)]. Configs, each one FastTTS instance kept for
the whole stream (so the plan carries over between requests as in a server):
- `static`: planner off, search-and-learn's static half/half split;
- `once`: planner on, planned for the first request, never re-planned;
- `replan`: planner on, re-planned before every request (n and measured path lengths);
- `replan0`: the same with `replan_min_shift` 0 (re-split whenever the optimum moves).
The configs run each problem back to back (same problems, seeds and backend) before the next
problem. Prints, per n, the median latency and precise goodput of each config and the median
per-problem ratio to `once`, plus the plan changes. Simulated runs report virtual seconds.

Kept outside `fasttts bench`: a one-off check of per-request re-planning (docs/benchmarks.md);
not a paper figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from fasttts.api import FastTTS
from fasttts.backends.sim.workload import problem_difficulty
from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig,
                            VerifierConfig)
from fasttts.eval.datasets import load_dataset
from fasttts.eval.metrics import problem_record

GiB = 1 << 30
CONFIGS = ("static", "once", "replan", "replan0")


def build(args: argparse.Namespace, name: str) -> FastTTS:
    """The FastTTS instance of a config (sim backend); `once` drops its replanner."""
    half = int(args.kv_budget_gib * GiB / 2)
    cfg = RunConfig(
        backend="sim",
        generator=EngineConfig(model=args.generator),
        verifier=VerifierConfig(engine=EngineConfig(model=args.verifier)),
        search=SearchConfig(method=args.method, n=int(args.ns.split(",")[0]),
                            beam_width=args.beam_width, max_tokens=args.max_tokens,
                            seed=args.seed),
        sim=SimConfig(hardware=args.hardware, generator_kv_cache_bytes=half,
                      verifier_kv_cache_bytes=half),
        runtime=RuntimeConfig(memory_planner=name != "static",
                              **({"replan_min_shift": 0.0} if name == "replan0" else {})),
    )
    tts = FastTTS(cfg)
    if name == "once":
        tts.replanner = None
    return tts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hardware", default="rtx4090")
    p.add_argument("--generator", default="qwen2.5-math-1.5b")
    p.add_argument("--verifier", default="math-shepherd-7b")
    p.add_argument("--kv-budget-gib", type=float, default=3.0,
                   help="both KV caches together (GiB)")
    p.add_argument("--dataset", default="aime24")
    p.add_argument("--limit", type=int, default=9)
    p.add_argument("--ns", default="8,64,256", help="n of problem i = ns[i %% len(ns)]")
    p.add_argument("--method", default="beam_search")
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    ns = [int(x) for x in args.ns.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    problems = load_dataset(args.dataset, limit=args.limit)
    systems = {name: build(args, name) for name in CONFIGS}
    rows = []
    try:
        for i, prob in enumerate(problems):
            n = ns[i % len(ns)]
            for name, tts in systems.items():
                tts.set_reference(prob.problem, prob.answer,
                                  problem_difficulty(args.dataset, prob.problem,
                                                     prob.meta.get("level")))
                search = tts.config.search.model_copy(update={"n": n})
                before = len(tts.replans)
                res = tts.solve(prob.problem, prob.id, search=search)
                rec = problem_record(res, prob.answer, prob.problem)
                plan = tts.plan
                change = tts.replans[-1] if len(tts.replans) > before else None
                row = dict(id=prob.id, n=n, config=name, latency_s=rec["latency_s"],
                           goodput=rec["precise_goodput_tok_s"],
                           preemptions=rec["num_preemptions"], clock=rec["clock"],
                           b_pre=plan.b_pre if plan else None, b_dec=plan.b_dec if plan else None,
                           replanned=change is not None,
                           resplit=bool(change and change.resplit))
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for tts in systems.values():
            tts.close()
    (out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _summary(rows, ns)
    return 0


def _summary(rows: list[dict], ns: list[int]) -> None:
    by = {(r["id"], r["config"]): r for r in rows}
    print(f"\nmedians over problems ({rows[0]['clock']} seconds); x = median per-problem ratio "
          f"to `once`\n")
    print("| n | config | problems | latency s | x latency | goodput tok/s | x goodput | "
          "preemptions | B_pre / B_dec (last) | re-plans (re-splits) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in ns:
        for name in CONFIGS:
            rs = [r for r in rows if r["n"] == n and r["config"] == name]
            if not rs:
                continue

            def ratio(key, rs=rs):
                return statistics.median(r[key] / by[(r["id"], "once")][key] for r in rs)

            caps = f"{rs[-1]['b_pre']} / {rs[-1]['b_dec']}" if rs[-1]["b_pre"] else "static"
            print(f"| {n} | {name} | {len(rs)} | "
                  f"{statistics.median(r['latency_s'] for r in rs):.1f} | {ratio('latency_s'):.2f} | "
                  f"{statistics.median(r['goodput'] for r in rs):.1f} | {ratio('goodput'):.2f} | "
                  f"{statistics.median(r['preemptions'] for r in rs):.0f} | {caps} | "
                  f"{sum(r['replanned'] for r in rs)} ({sum(r['resplit'] for r in rs)}) |")
    tot = {name: sum(r["latency_s"] for r in rows if r["config"] == name) for name in CONFIGS}
    print("\ntotal latency of the stream: " + ", ".join(
        f"{name} {t:.1f} s (x{t / tot['once']:.2f})" for name, t in tot.items()))


if __name__ == "__main__":
    raise SystemExit(main())
