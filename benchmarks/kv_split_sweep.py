"""Sweep the KV split between the two simulated engines at fixed batch caps: what each split
really costs the generator and the incremental verifier (simulated seconds), to check the
memory planner's reuse term against the simulated engines (`fasttts.runtime.memory_planner`).

Usage:
    .venv/bin/python benchmarks/kv_split_sweep.py --generator qwen2.5-math-7b \
        --verifier skywork-prm-1.5b --n 512 --verifier-gib 0.11,0.25,0.5,1,1.5,2.08 \
        --b-pre 8 --b-dec 171

One beam search (beam_width 4, seed 0) of the dataset's first problem per verifier KV size,
on fresh simulated engines sharing the static split's budget (the generator gets the rest),
with incremental verification on and everything else as the baseline. Prints per split: the
verifier's and the generator's simulated seconds, the verifier's prefix-cache hit rate and
the prompt tokens it computed, iterations, the measured tree (`SearchResult.tree_tokens`) and
tokens per returned path. Then the plan `--memory-planner` makes for the same run, with the
planner's tree (W) and reuse terms (R) for both models.
"""

from __future__ import annotations

import argparse

from fasttts.backends import sim as sim_backend
from fasttts.backends.sim import SimSizes
from fasttts.backends.sim.workload import problem_difficulty
from fasttts.config import (EngineConfig, RunConfig, RuntimeConfig, SearchConfig, SimConfig,
                            VerifierConfig)
from fasttts.eval.datasets import load_dataset
from fasttts.runtime.loop import SearchRunner

GiB = 1 << 30


def _config(args, planner: bool) -> RunConfig:
    return RunConfig(
        backend="sim", generator=EngineConfig(model=args.generator),
        verifier=VerifierConfig(engine=EngineConfig(model=args.verifier)),
        search=SearchConfig(method="beam_search", n=args.n, beam_width=args.beam_width,
                            max_tokens=args.max_tokens, seed=args.seed),
        sim=SimConfig(hardware=args.hardware),
        runtime=RuntimeConfig(incremental_verification=True, memory_planner=planner))


def _run(args, problem, verifier_bytes: int) -> str:
    cfg = _config(args, planner=False)
    split = sim_backend.sim_device(cfg).split
    budget = split.generator_kv + split.verifier_kv
    sizes = SimSizes(budget - verifier_bytes, verifier_bytes, args.b_dec, args.b_pre)
    gen, ver = sim_backend.build_sim(cfg, sizes=sizes)
    gen.workload.register(problem.problem, problem.answer,
                          problem_difficulty(args.dataset, problem.problem,
                                             problem.meta.get("level")))
    before = ver.cache_stats()
    res = SearchRunner(gen, ver, cfg.search, cfg.verifier.agg_strategy,
                       cfg.runtime).run(problem.problem, problem.id)
    st = ver.cache_stats().since(before)
    path = sum(len(c.token_ids) for c in res.completions) / max(1, len(res.completions))
    return (f"| {verifier_bytes / GiB:.3f} | {(budget - verifier_bytes) / GiB:.2f} | "
            f"{res.verifier_time:.1f} | {res.generator_time:.1f} | "
            f"{res.verifier_time + res.generator_time:.1f} | {st.prefix_cache_hit_rate:.3f} | "
            f"{st.prefix_cache_queries - st.prefix_cache_hits} | {res.num_iterations} | "
            f"{res.tree_tokens} | {path:.0f} |")


def _plan(args) -> None:
    from fasttts.engines.sim import _floors, plan_sim
    from fasttts.runtime.memory_planner import model_sides
    from fasttts.runtime.plan_workload import plan_input

    cfg = _config(args, planner=True)
    dev = sim_backend.sim_device(cfg)
    plan, sizes = plan_sim(cfg, dev)
    vf, gf = _floors(cfg)
    inp = plan_input(cfg, dev.split.generator_kv + dev.split.verifier_kv, dev.generator,
                     dev.verifier, dev.hardware, None, vf * dev.verifier.kv_bytes_per_token,
                     gf * dev.generator.kv_bytes_per_token)
    ver, gen = model_sides(inp)
    print(f"\nplanner: verifier {sizes.verifier_kv / GiB:.3f} GiB (B_pre {plan.b_pre}), "
          f"generator {sizes.generator_kv / GiB:.2f} GiB (B_dec {plan.b_dec}); predicted "
          f"{plan.t_total:.1f} s (verify {plan.t_verify:.1f}, decode {plan.t_decode:.1f}, "
          f"recompute {plan.t_recompute:.1f}); workload S {inp.verifier_len}, D "
          f"{inp.iterations}, W {inp.tree_tokens} tokens; verifier tree "
          f"{ver.tree / GiB:.2f} GiB, R {ver.full:.1f} s; generator tree {gen.tree / GiB:.2f} "
          f"GiB, R {gen.full:.1f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hardware", default="rtx4090")
    p.add_argument("--generator", default="qwen2.5-math-7b")
    p.add_argument("--verifier", default="skywork-prm-1.5b")
    p.add_argument("--dataset", default="aime24")
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verifier-gib", default="0.11,0.25,0.5,1,1.5,2.08",
                   help="verifier KV sizes to try (GiB, comma-separated)")
    p.add_argument("--b-pre", type=int, default=8, help="verifier batch cap (B_pre)")
    p.add_argument("--b-dec", type=int, default=171, help="generator batch cap (B_dec)")
    args = p.parse_args(argv)
    problem = load_dataset(args.dataset, 1)[0]
    print("| verifier KV GiB | generator KV GiB | verifier s | generator s | sum s | "
          "verifier hit | verifier tokens computed | iterations | tree tokens | tokens/path |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for gib in args.verifier_gib.split(","):
        print(_run(args, problem, int(float(gib) * GiB)), flush=True)
    _plan(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
