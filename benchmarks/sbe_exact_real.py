"""Is speculative beam extension at R = 0 the baseline's search on the real engine?

Usage (holds real engines: run under the machine-wide lock):
    flock /tmp/fasttts-real-engine.lock .venv/bin/python benchmarks/sbe_exact_real.py \
        --dataset gsm8k --offset 40 --limit 2 --n 8 --max-tokens 384 --dtype float32 \
        --out benchmarks/results/sbe_exact_real_fp32.json

One process, the default models, the engines built once; per problem, back to back: the
baseline; SBE + LookAhead + prefix-aware scheduling at R = 0 (the same whole-path verifier);
the same with incremental verification (a second, prefix-cached verifier engine). The memory
planner is left out (it would rebuild the engines with other sizes). Reported per problem and
configuration: whether every selection (kept beam ids, per iteration) and every returned
completion's token ids equal the baseline's, the SBE counters, generator / verifier seconds
and the runtime overhead.

Kept outside `fasttts bench`: a one-off exactness check of SBE at R = 0 on the real engine
(issue 33), recorded in benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fasttts.backends.vllm_engine import cpu_has_bf16  # noqa: E402
from fasttts.config import (RunConfig, RuntimeConfig, SearchConfig,  # noqa: E402
                            VerifierConfig, EngineConfig, DEFAULT_GENERATOR, DEFAULT_VERIFIER)
from fasttts.engines import build_engines  # noqa: E402
from fasttts.eval.datasets import load_dataset  # noqa: E402
from fasttts.runtime.loop import SearchRunner  # noqa: E402
from fasttts.verifiers import build_verifier  # noqa: E402

CONFIGS = {
    "baseline": RuntimeConfig(),
    "sbe+la+p R=0": RuntimeConfig(spec_beam_extension=True, lookahead_verification=True,
                                  prefix_aware_scheduling=True, spec_truncation_ratio=0.0),
    "sbe+la+p+iv R=0": RuntimeConfig(spec_beam_extension=True, lookahead_verification=True,
                                     prefix_aware_scheduling=True, spec_truncation_ratio=0.0,
                                     incremental_verification=True),
}


def _run(generator, verifier, search, runtime, problem):
    picked = []
    runner = SearchRunner(generator, verifier, search, runtime=runtime,
                          on_select=lambda it, kept: picked.append([b.beam_id for b in kept]))
    t0 = time.perf_counter()
    r = runner.run(problem.problem, problem.id)
    return {"selections": picked,
            "completions": [list(b.token_ids) for b in r.completions],
            "generator_s": r.generator_time, "verifier_s": r.verifier_time,
            "wall_s": time.perf_counter() - t0, "spec": r.spec,
            "runtime_overhead_frac": r.runtime_overhead_frac,
            "batch_occupancy": r.mean_occupancy}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="gsm8k")
    p.add_argument("--offset", type=int, default=40)
    p.add_argument("--limit", type=int, default=2)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=384)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    engine = dict(dtype=args.dtype, max_model_len=2048, kv_cache_memory_bytes=512 << 20)
    cfg = RunConfig(generator=EngineConfig(model=DEFAULT_GENERATOR, **engine),
                    verifier=VerifierConfig(engine=EngineConfig(model=DEFAULT_VERIFIER,
                                                                **engine)),
                    search=SearchConfig(n=args.n, beam_width=args.beam_width,
                                        max_tokens=args.max_tokens))
    engines = build_engines(cfg)
    inc_verifier = build_verifier(cfg.verifier, incremental=True)
    problems = load_dataset(args.dataset, limit=args.offset + args.limit)[args.offset:]
    report = {"host": {"cpu_bf16": cpu_has_bf16()}, "dtype": args.dtype,
              "args": vars(args) | {"out": str(args.out)}, "problems": {}}
    try:
        for prob in problems:
            rows = {}
            for name, runtime in CONFIGS.items():
                ver = inc_verifier if runtime.incremental_verification else engines.verifier
                rows[name] = _run(engines.generator, ver, cfg.search, runtime, prob)
            base = rows["baseline"]
            for name, row in rows.items():
                row["same_selections"] = row["selections"] == base["selections"]
                row["same_completion_tokens"] = row["completions"] == base["completions"]
            report["problems"][prob.id] = rows
            print(json.dumps({prob.id: {k: {x: v[x] for x in (
                "same_selections", "same_completion_tokens", "generator_s", "verifier_s",
                "spec", "runtime_overhead_frac")} for k, v in rows.items()}}, indent=1),
                flush=True)
    finally:
        inc_verifier.close()
        engines.close()
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
