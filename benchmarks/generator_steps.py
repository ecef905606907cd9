"""Where a simulated generator's seconds go: engine steps, batch per step, and the roofline's
weight / KV / compute parts of every step (issue 14: why some pairs gain little).

    .venv/bin/python benchmarks/generator_steps.py --generator qwen2.5-math-7b \
        --verifier skywork-prm-1.5b --n 64 --configs baseline,sbe+la+p+m+iv

Runs one search per configuration on the same problem (the simulator is deterministic), with
the simulated generator engine's step log on, and prints one row per configuration:

- `iterations`: search iterations; `steps`: generator engine steps, and per iteration;
  `mean step tok`: a returned path's tokens / iterations (its mean step length, tokens);
  `seqs/step` and `tok/step`: sequences and new tokens per step (the batch; `cap`: the
  engine's max_num_seqs at the end);
- `weight s`, `kv s`, `compute s`: the sums over steps of weight bytes / bandwidth, KV bytes
  (cached tokens read + new tokens written) / bandwidth, and FLOPs / peak FLOP/s
  (`fasttts.perf.roofline.step_bytes`, `step_flops_bytes`); a step costs the larger of its memory and
  compute time plus the hardware's fixed per-step time, so `gen s` <= `weight s + kv s +
  compute s + steps x step overhead`;
- `gen s` / `ver s`: the run's generator and verifier seconds (`ProblemResult`).

A one-off diagnostic, not a `fasttts bench` recipe: it reads the simulator's per-step log,
which no recipe's rows keep, to explain one configuration's seconds. It builds its runs with
the comparison protocol's engines and configuration names (`fasttts.bench.compare`).

A run whose `gen s` is about `weight s` is bound by its number of steps, not by its tokens:
every decode step reads all weights once, however few sequences it carries, so adding tokens
to a step (speculation) is nearly free and only fewer steps make it faster. All seconds are
simulated (virtual clock).
"""

from __future__ import annotations

import argparse
import json

from fasttts.bench.compare import Plan, Setting, runtime_of
from fasttts.bench.compare_engines import Engines
from fasttts.eval.datasets import load_dataset
from fasttts.eval.metrics import problem_record
from fasttts.perf.roofline import StepShape, step_bytes, step_flops_bytes
from fasttts.perf.specs import HardwareSpec, ModelSpec, load_hardware, load_model


def step_split(model: ModelSpec, hw: HardwareSpec, log: list[StepShape]) -> dict:
    """Sums over one engine's step log: steps, sequences, new tokens, and the seconds of
    weight reads, KV traffic and compute (each term alone, before the roofline's max)."""
    out = dict(steps=len(log), seqs=0, tokens=0, weight_s=0.0, kv_s=0.0, compute_s=0.0)
    for shape in log:
        flops, _ = step_flops_bytes(model, shape)
        weight, kv = step_bytes(model, shape)
        out["weight_s"] += weight / hw.bandwidth
        out["kv_s"] += kv / hw.bandwidth
        out["compute_s"] += flops / hw.flops
        out["seqs"] += shape.seqs
        out["tokens"] += shape.tokens
    return out


def run_config(engines: Engines, setting: Setting, name: str, n: int, problem,
               difficulty) -> dict:
    """One search of `problem` under configuration `name` with the generator's step log on;
    the row the module docstring describes."""
    from fasttts.runtime.loop import SearchRunner

    cfg = engines.config(setting, n, runtime_of(name))
    gen, ver = engines.build(cfg)
    gen.engine.step_log = []
    gen.workload.register(problem.problem, problem.answer, difficulty)
    res = SearchRunner(gen, ver, cfg.search, cfg.verifier.agg_strategy, cfg.runtime).run(
        problem.problem, problem.id)
    rec = problem_record(res, problem.answer, problem.problem)
    split = step_split(load_model(cfg.generator.model), load_hardware(cfg.sim.hardware),
                       gen.engine.step_log)
    return dict(config=name, n=n, iterations=rec["num_iterations"],
                mean_step_tokens=rec["mean_tokens_per_beam"] / max(1, rec["num_iterations"]),
                gen_s=rec["generator_time_s"], ver_s=rec["verifier_time_s"],
                latency_s=rec["latency_s"], max_num_seqs=gen.engine.max_num_seqs,
                preemptions=rec["num_preemptions"], **split)


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run each configuration, print the table (and JSON lines with --json)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--generator", required=True)
    p.add_argument("--verifier", required=True)
    p.add_argument("--hardware", default="rtx4090")
    p.add_argument("--dataset", default="aime24")
    p.add_argument("--offset", type=int, default=0, help="which problem (index in the set)")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--configs", default="baseline,sbe+la+p+m+iv")
    p.add_argument("--json", action="store_true", help="also print each row as a JSON line")
    a = p.parse_args(argv)
    from fasttts.backends.sim.workload import problem_difficulty
    from fasttts.perf.specs import SpecError

    if a.n < 1 or a.offset < 0:
        p.error(f"--n {a.n} / --offset {a.offset}: n must be >= 1 and offset >= 0")
    names = a.configs.split(",")
    for name in names:
        try:
            runtime_of(name)  # an unknown name exits here, before any run
        except ValueError as e:
            p.error(str(e))
    try:
        for spec in (a.generator, a.verifier):
            load_model(spec)
        load_hardware(a.hardware)
    except SpecError as e:
        p.error(str(e))
    problems = load_dataset(a.dataset, limit=1, offset=a.offset)
    if not problems:
        p.error(f"--offset {a.offset}: {a.dataset} has no problem at that index")
    prob = problems[0]
    setting = Setting(f"{a.generator}+{a.verifier}", a.generator, a.verifier, a.hardware)
    engines = Engines(Plan((setting,), (a.n,), tuple(names), (a.dataset,)))
    diff = problem_difficulty(a.dataset, prob.problem, prob.meta.get("level"))
    print(f"{a.generator} + {a.verifier}, {a.hardware} (simulated seconds), {prob.id}, n={a.n}")
    print("| config | iterations | steps | steps/iteration | mean step tok | seqs/step (cap) "
          "| tok/step | weight s | kv s | compute s | gen s | ver s | latency s | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        r = run_config(engines, setting, name, a.n, prob, diff)
        print(f"| {name} | {r['iterations']} | {r['steps']} "
              f"| {r['steps'] / max(1, r['iterations']):.0f} | {r['mean_step_tokens']:.0f} "
              f"| {r['seqs'] / max(1, r['steps']):.1f} "
              f"({r['max_num_seqs']}) | {r['tokens'] / max(1, r['steps']):.1f} "
              f"| {r['weight_s']:.1f} | {r['kv_s']:.1f} | {r['compute_s']:.1f} | {r['gen_s']:.1f} "
              f"| {r['ver_s']:.1f} | {r['latency_s']:.1f} | {r['preemptions']} |", flush=True)
        if a.json:
            print(json.dumps(r), flush=True)
    engines.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
