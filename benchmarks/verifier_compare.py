"""Which verifier ranks the default generator's completions best? (issue 17, one command)

    python benchmarks/verifier_compare.py --dataset gsm8k --limit 200 \\
        --candidates judge:qwen2.5-coder-0.5b-instruct,confidence,ovm:qwen2.5-coder-0.5b-instruct-ovm

1. Samples `--samples` completions of each problem plus one greedy completion with the
   generator (`fasttts.prm_train.rollouts`; stored, resumable), so every candidate scores
   the same completions.
2. Scores every completion's steps with each candidate (stored per candidate, resumable):
   `judge:<model>` (zero-shot judge), `ovm:<model>` (a trained head, incremental), and
   `confidence` (the generator's own token log-probabilities, no verifier pass; both the
   mean and the lowest-window score, `fasttts.eval.confidence`).
3. Prints, per candidate and aggregation: pairwise ranking accuracy, top-1 accuracy on the
   problems with both correct and incorrect completions next to chance
   (`fasttts.eval.ranking.mixed_top1`), AUROC of all step scores
   and of final-step scores against the completion's correctness, PRM-weighted best-of-N and
   best-single accuracy, next to majority vote, greedy and pass@N, and verifier seconds per
   problem (wall clock of the scoring calls on this machine).

`--problems mixed` keeps only the problems whose samples are partly correct: on the others
every pick is right (or wrong) whatever the scores, so a slow candidate (a judge) can be
measured there alone; a vote accuracy over all problems is then the mixed problems' plus the
all-correct problems' count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from fasttts.config import DEFAULT_GENERATOR, EngineConfig
from fasttts.eval.confidence import step_confidences
from fasttts.eval.datasets import load_dataset, numeric_answers
from fasttts.eval.metrics import vote_and_grade
from fasttts.eval.ranking import auroc, is_mixed, mixed_top1, pairwise_accuracy
from fasttts.prm_train.rollouts import RolloutConfig, sample_rollouts
from fasttts.prm_train.store import JsonlStore
from fasttts.steps import split_steps
from fasttts.verifiers import ScoreRequest, aggregate, build_verifier
from fasttts.config import VerifierConfig

GiB = 1 << 30


def steps_of(text: str) -> tuple[str, ...]:
    """The non-blank steps a search would score."""
    return tuple(s for s in split_steps(text) if s.strip())


def score_verifier(store: JsonlStore, records: list[dict], kind: str, model: str,
                   threads: int, per_call: int) -> None:
    """Step scores of every sample by a verifier, `per_call` problems per scoring call."""
    todo = [r for r in records if r["id"] not in store.records]
    if not todo:
        return
    cfg = VerifierConfig(kind=kind, engine=EngineConfig(
        model=model, num_threads=threads, kv_cache_memory_bytes=2 * GiB, max_model_len=4096))
    verifier = build_verifier(cfg, incremental=True)
    try:
        for i in tqdm(range(0, len(todo), per_call), desc=f"{kind} scores", file=sys.stderr):
            group = todo[i:i + per_call]
            reqs = [ScoreRequest(r["problem"], steps_of(s["text"]) or ("",), 0)
                    for r in group for s in r["samples"]]
            start = time.perf_counter()
            scores = verifier.score(reqs)
            seconds = (time.perf_counter() - start) / len(group)
            k = 0
            for r in group:
                n = len(r["samples"])
                store.append({"id": r["id"], "scores": scores[k:k + n], "seconds": seconds})
                k += n
    finally:
        verifier.close()


def confidence_scores(records: list[dict], generator: str) -> dict[str, dict]:
    """{"confidence-mean": {id: record}, "confidence-window": {...}} from stored logprobs."""
    from transformers import AutoTokenizer

    from fasttts.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(generator))
    out = {"confidence-mean": {}, "confidence-window": {}}
    for r in records:
        start = time.perf_counter()
        conf = [step_confidences(tok, s["token_ids"], s["logprobs"], s["text"])
                for s in r["samples"]]
        seconds = time.perf_counter() - start
        for name, key in (("confidence-mean", "mean"), ("confidence-window", "lowest_window")):
            out[name][r["id"]] = {"scores": [c[key] or [0.0] for c in conf], "seconds": seconds}
    return out


def measure(records: list[dict], scored: dict[str, dict], agg: str, numeric: bool) -> dict:
    """One table row: ranking and vote measures of one candidate and aggregation."""
    groups, steps, step_labels, finals, final_labels = [], [], [], [], []
    acc = {"weighted": 0, "best": 0, "majority": 0, "pass@n": 0}
    seconds = 0.0
    for r in records:
        s = scored[r["id"]]
        labels = [bool(c["correct"]) for c in r["samples"]]
        path = [aggregate(x, agg) for x in s["scores"]]
        groups.append((path, labels))
        for x, c in zip(s["scores"], labels):
            steps += x
            step_labels += [c] * len(x)
        finals += [x[-1] for x in s["scores"]]
        final_labels += labels
        _, correct = vote_and_grade([c["answer"] for c in r["samples"]], path, r["answer"],
                                    "weighted")
        for k in acc:
            acc[k] += correct[k]
        seconds += s["seconds"]
    n = len(records)
    pairwise, pairs = pairwise_accuracy(groups)
    top1, chance, mixed = mixed_top1(groups)
    return {"pairwise": pairwise, "pairs": pairs, "mixed_top1": top1, "mixed_chance": chance,
            "mixed_problems": mixed, "step_auroc": auroc(steps, step_labels),
            "final_auroc": auroc(finals, final_labels),
            **{k: v / n for k, v in acc.items()}, "seconds_per_problem": seconds / n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="gsm8k")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--levels", default=None, help="MATH-500 levels to keep, e.g. 1,2,3")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--generator", default=DEFAULT_GENERATOR)
    ap.add_argument("--candidates", default="confidence",
                    help="comma-separated: confidence, judge:<model>, ovm:<model>")
    ap.add_argument("--aggs", default="last,min")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--problems", choices=("all", "mixed"), default="all",
                    help="mixed: score and report only the problems whose samples are partly "
                         "correct, the only ones where a verifier's pick or pairs can change")
    ap.add_argument("--output-dir", default="runs/verifier-compare")
    args = ap.parse_args(argv)

    problems = load_dataset(args.dataset)
    if args.levels:
        keep = {int(x) for x in args.levels.split(",")}
        problems = [p for p in problems if int(p.meta.get("level", 0)) in keep]
    problems = problems[args.offset:args.offset + args.limit]
    numeric = numeric_answers(problems)
    out = Path(args.output_dir) / (args.dataset + (f"-l{args.levels}" if args.levels else ""))
    rcfg = RolloutConfig(samples=args.samples, max_tokens=args.max_tokens, greedy=True)
    store = JsonlStore(out / "rollouts.jsonl", {"generator": args.generator, **vars(rcfg)})
    bar = tqdm(total=len(problems), desc="rollouts", file=sys.stderr,
               initial=sum(p.id in store.records for p in problems))
    sample_rollouts(store, problems, EngineConfig(model=args.generator, num_threads=args.threads,
                                                  kv_cache_memory_bytes=2 * GiB),
                    rcfg, numeric, bar.update)
    bar.close()
    records = [store.records[p.id] for p in problems]
    if args.problems == "mixed":
        records = [r for r in records if is_mixed([c["correct"] for c in r["samples"]])]
        if not records:
            ap.error(f"--problems mixed: none of the {len(problems)} problems has both correct "
                     "and incorrect samples; nothing to score (use --problems all)")
    scored: dict[str, dict] = {}
    for cand in args.candidates.split(","):
        if cand == "confidence":
            scored |= confidence_scores(records, args.generator)
            continue
        kind, _, model = cand.partition(":")
        label = f"{kind}:{Path(model).name}"
        s = JsonlStore(out / f"scores-{kind}-{Path(model).name}.jsonl", {"candidate": cand})
        score_verifier(s, records, kind, model, args.threads, per_call=8)
        scored[label] = s.records
    rows = {f"{name} ({agg})": measure(records, sc, agg, numeric)
            for name, sc in scored.items() for agg in args.aggs.split(",")}
    greedy = sum(bool(r["greedy"]["correct"]) for r in records) / len(records)
    report = {"dataset": args.dataset, "levels": args.levels, "problems": len(records),
              "problem_set": args.problems,
              "samples": args.samples, "greedy_accuracy": greedy, "rows": rows}
    name = "report.json" if args.problems == "all" else f"report-{args.problems}.json"
    (out / name).write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    return 0


def print_table(report: dict) -> None:
    """The comparison as a markdown table."""
    n = report["samples"]
    subset = " mixed" if report.get("problem_set") == "mixed" else ""
    print(f"\n{report['dataset']} ({report['problems']}{subset} problems, {n} samples each; greedy "
          f"accuracy {report['greedy_accuracy']:.3f})\n")
    mixed = next(iter(report["rows"].values()), {}).get("mixed_problems")
    print(f"| verifier (aggregation) | pairwise | top-1 on {mixed} mixed (chance) | step AUROC "
          f"| final AUROC | weighted best-of-{n} | best single | majority | pass@{n} "
          f"| verifier s/problem |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, m in report["rows"].items():
        print(f"| {name} | {m['pairwise']:.3f} | {m['mixed_top1']:.3f} ({m['mixed_chance']:.3f}) "
              f"| {m['step_auroc']:.3f} | {m['final_auroc']:.3f} "
              f"| {m['weighted']:.3f} | {m['best']:.3f} | {m['majority']:.3f} | "
              f"{m['pass@n']:.3f} | {m['seconds_per_problem']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
