"""Sweep the KV split between the two simulated engines at fixed batch caps: what each split
really costs the generator and the incremental verifier (simulated seconds), to check the
memory planner's reuse term against the simulated engines (`fasttts.runtime.memory_planner`).

A one-off kept beside `fasttts bench fig18` (goodput vs the whole KV budget): it sweeps the
split of one budget at fixed batch caps and fits the planner's `HitModel` constants (`--fit`),
which no recipe does; rerun it only when those constants are refitted.

Usage:
    .venv/bin/python benchmarks/kv_split_sweep.py --generator qwen2.5-math-7b \
        --verifier skywork-prm-1.5b --n 512 --verifier-gib 0.11,0.25,0.5,1,1.5,2.08 \
        --b-pre 8 --b-dec 171

One beam search (beam_width 4, seed 0) of the dataset's first problem per verifier KV size,
on fresh simulated engines sharing the static split's budget (the generator gets the rest),
with incremental verification on and everything else as the baseline. Prints per split: the
verifier's and the generator's simulated seconds, the verifier's prefix-cache hit rate and
the prompt tokens it computed, iterations, the measured tree (`SearchResult.tree_tokens`) and
tokens per returned path. Then each model's seconds above its largest cache's, measured
against the planner's reuse term, and the plan `--memory-planner` makes for the same run, with
the planner's tree (W) and reuse terms (rho R) for both models.

    --fit                fit each model's `memory_planner.HitModel` (kappa, rho) to the rows
    --from-table FILE    use the rows of a table printed earlier (no searches run)
    --store-curve GIBS   a verifier run in transformers (Skywork): run the search once at the
                         first --verifier-gib, record its store's accesses, and replay them
                         through the simulator's own store (`TransformersRunner`) at each of
                         GIBS (any size, not bounded by the budget): tokens computed, the share
                         of the recompute left, and x = store / (N * mean path * KV bytes)

The committed fit and its out-of-sample check (docs/verifier-pricing.md, "The KV split"):
    ... --dataset math500 | tee math500.md; ... --dataset math500 --from-table math500.md --fit
    ... --dataset aime24 --from-table benchmarks/results/kv_split_aime24.md
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


_COLUMNS = ("verifier KV GiB", "generator KV GiB", "verifier s", "generator s", "sum s",
            "verifier hit", "verifier tokens computed", "iterations", "tree tokens",
            "tokens/path")


def _run(args, problem, verifier_bytes: int, record: list | None = None) -> list[float]:
    """One search at one split: the table's row (`_COLUMNS`). `record`: a list that gets the
    transformers store's calls, (prefixes, start) each (a verifier run in transformers only)."""
    cfg = _config(args, planner=False)
    split = sim_backend.sim_device(cfg).split
    budget = split.generator_kv + split.verifier_kv
    sizes = SimSizes(budget - verifier_bytes, verifier_bytes, args.b_dec, args.b_pre)
    gen, ver = sim_backend.build_sim(cfg, sizes=sizes)
    if record is not None:
        if ver.hf is None:
            raise SystemExit(f"--store-curve: {args.verifier} runs in a paged vLLM engine, "
                             f"not in transformers; its cache is what the plain sweep measures")
        scored = ver.hf.incremental
        ver.hf.incremental = lambda prefixes, start: (record.append((prefixes, start)),
                                                      scored(prefixes, start))[1]
    gen.workload.register(problem.problem, problem.answer,
                          problem_difficulty(args.dataset, problem.problem,
                                             problem.meta.get("level")))
    before = ver.cache_stats()
    res = SearchRunner(gen, ver, cfg.search, cfg.verifier.agg_strategy,
                       cfg.runtime).run(problem.problem, problem.id)
    if before is None:  # a transformers verifier: its store's counters (hit rate 0 = none kept)
        hit, computed = float("nan"), ver.hf.tokens_computed
    else:
        st = ver.cache_stats().since(before)
        hit, computed = st.prefix_cache_hit_rate, st.prefix_cache_queries - st.prefix_cache_hits
    path = sum(len(c.token_ids) for c in res.completions) / max(1, len(res.completions))
    return [round(verifier_bytes / GiB, 3), round((budget - verifier_bytes) / GiB, 2),
            round(res.verifier_time, 1), round(res.generator_time, 1),
            round(res.verifier_time + res.generator_time, 1),
            round(hit, 3), computed, res.num_iterations, res.tree_tokens, round(path)]


def _print_row(row: list[float]) -> None:
    print("| " + " | ".join(f"{x:.3f}" if i in (0, 5) else f"{x:.2f}" if i == 1 else
                             f"{x:.1f}" if i in (2, 3, 4) else f"{x:.0f}"
                             for i, x in enumerate(row)) + " |", flush=True)


def _load_rows(path: str) -> list[list[float]]:
    """The rows of a table this script printed (its markdown, e.g. saved with `tee`)."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"--from-table {path}: cannot read it ({e})")
    rows = []
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(_COLUMNS) and cells[0][:1].isdigit():
            try:
                rows.append([float(c) for c in cells])
            except ValueError:
                raise SystemExit(f"{path}: a row that is not all numbers: {line.strip()}")
    if not rows:
        raise SystemExit(f"{path}: no rows of a kv_split_sweep table")
    return rows


def _planner_sides(args):
    """The planner's workload for this run and its (verifier, generator) sides."""
    from fasttts.engines.sim import kv_floors
    from fasttts.runtime.memory_planner import model_sides
    from fasttts.runtime.plan_workload import plan_input

    cfg = _config(args, planner=True)
    dev = sim_backend.sim_device(cfg)
    vf, gf = kv_floors(cfg)
    inp = plan_input(cfg, dev.split.generator_kv + dev.split.verifier_kv, dev.generator,
                     dev.verifier, dev.hardware, None, vf * dev.verifier.kv_bytes_per_token,
                     gf * dev.generator.kv_bytes_per_token)
    return cfg, dev, inp, model_sides(inp)


def _fit(args, rows: list[list[float]]) -> None:
    """Fit seconds = a + b exp(-cache / tau) to each model's column and print the hit model
    (`memory_planner.HitModel`) it gives: kappa = tau / W, rho = b / R (the planner's W, R)."""
    import numpy as np
    from scipy.optimize import curve_fit

    from fasttts.runtime.memory_planner import GENERATOR_HIT, VERIFIER_HIT

    _, _, _, sides = _planner_sides(args)
    for name, col, t_col, side, hit in (("verifier", 0, 2, sides[0], VERIFIER_HIT),
                                        ("generator", 1, 3, sides[1], GENERATOR_HIT)):
        c, t = np.array([r[col] for r in rows]) * GiB, np.array([r[t_col] for r in rows])
        (a, b, tau), _ = curve_fit(lambda x, a, b, tau: a + b * np.exp(-x / tau), c, t,
                                   p0=(t.min(), t.max() - t.min(), 0.3 * GiB), maxfev=20000)
        r_raw = side.raw
        print(f"{name}: seconds = {a:.1f} + {b:.1f} exp(-cache / {tau / GiB:.3f} GiB); planner "
              f"tree W {side.tree / GiB:.2f} GiB, R {r_raw:.1f} s -> kappa {tau / side.tree:.3f}, "
              f"rho {b / r_raw:.2f}")


def _check(args, rows: list[list[float]]) -> None:
    """The planner's reuse term against the sweep: each model's seconds above its largest
    cache's, measured vs predicted, and the sum of the two."""
    _, _, _, (ver, gen) = _planner_sides(args)
    big_v, big_g = max(rows, key=lambda r: r[0]), max(rows, key=lambda r: r[1])
    print("\n| verifier KV GiB | verifier extra s measured | predicted | generator extra s "
          "measured | predicted | sum measured | sum predicted |\n|---|---|---|---|---|---|---|")
    for r in rows:
        pv = ver.recompute(int(r[0] * GiB)) - ver.recompute(int(big_v[0] * GiB))
        pg = gen.recompute(int(r[1] * GiB)) - gen.recompute(int(big_g[1] * GiB))
        mv, mg = r[2] - big_v[2], r[3] - big_g[3]
        print(f"| {r[0]:.3f} | {mv:.1f} | {pv:.1f} | {mg:.1f} | {pg:.1f} | {mv + mg:.1f} | "
              f"{pv + pg:.1f} |")


def _store_curve(args, problem) -> None:
    """Replay one search's store accesses at each size of --store-curve (module docstring)."""
    from fasttts.backends.sim.engine import VirtualClock
    from fasttts.backends.sim.transformers_runner import TransformersRunner

    calls: list = []
    row = _run(args, problem, int(float(args.verifier_gib.split(",")[0]) * GiB), calls)
    dev = sim_backend.sim_device(_config(args, planner=False))
    kv = dev.verifier.kv_bytes_per_token
    lengths = [prefixes[start][1] for prefixes, start in calls]
    whole = args.n * sum(lengths) / len(lengths) * kv
    runs = []
    for gib in [0.0] + [float(g) for g in args.store_curve.split(",")]:
        store = TransformersRunner(dev.verifier, dev.hardware, VirtualClock(), int(gib * GiB), 1)
        for prefixes, start in calls:
            store.incremental(prefixes, start)
        runs.append((gib, store.tokens_computed, store.clock.t))
    floor = sum(prefixes[start][1] - prefixes[start - 1][1] if start else prefixes[0][1]
                for prefixes, start in calls)
    print(f"the search at {row[0]:.3f} GiB: verifier {row[2]:.1f} s, {row[6]} tokens computed; "
          f"{len(calls)} scoring calls over {row[7]} iterations, mean path {whole / args.n / kv:.0f}"
          f" tokens, N * mean path * KV = {whole / GiB:.2f} GiB; tokens computed with every "
          f"parent kept: {floor}\n\n| store GiB | x | tokens computed | recompute share | "
          f"verifier s |\n|---|---|---|---|---|")
    for gib, tokens, secs in runs[1:]:
        print(f"| {gib:.2f} | {gib * GiB / whole:.3f} | {tokens} | "
              f"{(tokens - floor) / max(1, runs[0][1] - floor):.3f} | {secs:.1f} |")
    _store_check(args, [(gib, secs) for gib, _, secs in runs])


def _store_check(args, runs: list[tuple[float, float]]) -> None:
    """The planner's store term against a replayed curve ((GiB, verifier s) from 0 GiB up to a
    size that keeps every parent): the seconds above the largest size's, measured and
    predicted; with --fit, fit `memory_planner.StoreHitModel` first (rho = the measured
    recompute of no store / the planner's R; x0, shape by least squares on the share left)."""
    import numpy as np
    from scipy.optimize import curve_fit

    from fasttts.runtime.memory_planner import VERIFIER_STORE_HIT

    _, _, inp, (ver, _) = _planner_sides(args)
    whole = inp.num_requests * inp.verifier_len * inp.verifier.kv_bytes_per_token
    x = np.array([g for g, _ in runs]) * GiB / whole
    extra = np.array([t for _, t in runs]) - runs[-1][1]
    hit = VERIFIER_STORE_HIT
    if args.fit:
        (x0, shape), _ = curve_fit(lambda v, a, b: np.exp(-(v / a) ** b), x, extra / extra[0],
                                   p0=(0.3, 1.5), bounds=((1e-3, 0.3), (10.0, 5.0)))
        print(f"\nfit: share left = exp(-(x / {x0:.3f})^{shape:.2f}), x = store / (N * S * KV) "
              f"with the planner's S {inp.verifier_len}; rho = {extra[0]:.1f} s / R "
              f"{ver.raw:.1f} s = {extra[0] / ver.raw:.2f}")
        hit = type(hit)(x0=float(x0), shape=float(shape), rho=float(extra[0] / ver.raw))
    pred = hit.rho * ver.raw * np.exp(-(x / hit.x0) ** hit.shape)
    print("\n| store GiB | x (planner's S) | verifier extra s measured | predicted |\n|---|---|---|---|")
    for (gib, _), xi, m, pr in zip(runs, x, extra, pred - pred[-1]):
        print(f"| {gib:.2f} | {xi:.3f} | {m:.1f} | {pr:.1f} |")


def _plan(args) -> None:
    from fasttts.engines.sim import plan_sim

    cfg, dev, inp, (ver, gen) = _planner_sides(args)
    plan, sizes = plan_sim(cfg, dev)
    print(f"\nplanner: verifier {sizes.verifier_kv / GiB:.3f} GiB (B_pre {plan.b_pre}), "
          f"generator {sizes.generator_kv / GiB:.2f} GiB (B_dec {plan.b_dec}); predicted "
          f"{plan.t_total:.1f} s (verify {plan.t_verify:.1f}, decode {plan.t_decode:.1f}, "
          f"recompute {plan.t_recompute:.1f}); workload S {inp.verifier_len}, D "
          f"{inp.iterations}, W {inp.tree_tokens} tokens; verifier tree "
          f"{ver.tree / GiB:.2f} GiB, rho R {ver.full:.1f} s; generator tree "
          f"{gen.tree / GiB:.2f} GiB, rho R {gen.full:.1f} s")


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
    p.add_argument("--from-table", metavar="FILE",
                   help="read the rows from a table this script printed instead of running")
    p.add_argument("--store-curve", metavar="GIBS",
                   help="replay the transformers store's accesses at these sizes (GiB, "
                        "comma-separated; module docstring)")
    p.add_argument("--fit", action="store_true",
                   help="fit each model's hit model (kappa, rho) to the rows")
    args = p.parse_args(argv)
    if args.store_curve:
        _store_curve(args, load_dataset(args.dataset, 1)[0])
        return 0
    if args.from_table:
        rows = _load_rows(args.from_table)
    else:
        problem = load_dataset(args.dataset, 1)[0]
        print("| " + " | ".join(_COLUMNS) + " |\n|" + "---|" * len(_COLUMNS))
        rows = []
        for gib in args.verifier_gib.split(","):
            rows.append(_run(args, problem, int(float(gib) * GiB)))
            _print_row(rows[-1])
    if args.fit:
        _fit(args, rows)
    _check(args, rows)
    _plan(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
