"""Every metric fasttts prints, defined once (DESIGN.md "Metrics are defined once").

All numbers come from the per-beam event log of a `SearchResult`: each returned beam's token
count, start and finish time on the backend's clock, and the generator / verifier time of the
iterations it took part in.

- precise goodput (FastTTS section 6.1): mean tokens per beam / mean beam completion time,
  tokens/s, over the completed beams a search returns; per problem, then averaged;
- completion latency: end-to-end search time per problem (s), split into generator time and
  verifier time (the rest is the loop's own overhead);
- accuracy (FastTTS section 6.3, search-and-learn): top-1 majority vote, PRM-weighted vote,
  best single path by PRM score, and pass@N.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from fasttts.beam import Beam
from fasttts.eval.grading import find_answer, is_equivalent
from fasttts.eval.voting import best_of, group_answers, majority_vote, pass_at_n, weighted_vote
from fasttts.runtime.loop import SearchResult

__all__ = ["answer_path", "percentile", "precise_goodput", "problem_record",
           "single_sample_record", "summarize", "vote_and_grade"]


def precise_goodput(beams: Sequence[Beam]) -> float:
    """Precise goodput of one problem (FastTTS section 6.1), in tokens/s.

    goodput = mean over beams of `num_tokens` / mean over beams of (finish_time - start_time).

    Args:
        beams: completed beams (each with `finish_time` set).

    Raises:
        ValueError: no beams, a beam without finish_time, or a zero mean completion time.
    """
    if not beams:
        raise ValueError("precise goodput needs at least one completed beam")
    if any(b.finish_time is None for b in beams):
        raise ValueError("precise goodput needs finished beams (finish_time set)")
    mean_tokens = statistics.fmean(b.num_tokens for b in beams)
    mean_time = statistics.fmean(b.finish_time - b.start_time for b in beams)
    if mean_time <= 0:
        raise ValueError(f"mean beam completion time must be > 0 s, got {mean_time}")
    return mean_tokens / mean_time


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks
    (numpy's default method). Raises ValueError on an empty sequence or q outside [0, 100]."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def answer_path(record: dict) -> dict | None:
    """The completion of a problem record (`problem_record`) that gives its answer: the
    highest-scored one whose answer is the answer, or equivalent to it (the vote counts
    equivalent answers as one, `fasttts.eval.voting.group_answers`); None without an answer.
    For the "best" rule it is the top-scored completion; for a vote, the best path of the
    winning group, which need not be the top-scored path."""
    answer = record["answer"]
    if answer is None:
        return None
    ranked = sorted(record["completions"], key=lambda c: -c["score"])
    return (next((c for c in ranked if c["answer"] == answer), None)
            or next((c for c in ranked if is_equivalent(c["answer"], answer)), None))


def vote_and_grade(answers: Sequence[str | None], weights: Sequence[float], gold: str | None,
                   answer_rule: str) -> tuple[dict, dict | None]:
    """The predictions of each vote over one problem's completion answers and their
    correctness: ({"majority", "weighted", "best"}, {the same, "pass@n", "answer"} or None
    without `gold`); "answer" is the correctness of the `answer_rule` vote."""
    preds = {
        "majority": majority_vote(answers),
        "weighted": weighted_vote(answers, weights) if answers else None,
        "best": best_of(answers, weights) if answers else None,
    }
    correct = None
    if gold is not None:
        correct = {k: is_equivalent(v, gold) for k, v in preds.items()}
        correct["pass@n"] = pass_at_n(answers, gold)
        correct["answer"] = correct[answer_rule]
    return preds, correct


def problem_record(result: SearchResult, gold: str | None, problem: str = "",
                   numeric: bool = False) -> dict:
    """The per-problem record (one JSONL line of `fasttts eval`).

    Args:
        result: the problem's search result.
        gold: the reference answer, or None when unknown (`fasttts solve`).
        problem: the problem text, stored for reference.
        numeric: the dataset's answers are all numbers: a completion without a boxed or
            stated answer answers its last number (`fasttts.eval.grading.find_answer`).

    Returns:
        A JSON-serialisable dict: predictions by each vote, correctness (None without gold),
        the number of distinct answers among the completions (equivalent answers count once,
        `fasttts.eval.voting.group_answers`; what pass@n can draw on), timing, goodput,
        token counts, cache statistics, and the completions with step scores.
    """
    beams = result.completions
    answers = [find_answer(b.text, numeric) for b in beams]
    preds, correct = vote_and_grade(answers, [b.score for b in beams], gold, result.answer_rule)
    cache, vcache = result.cache, result.verifier_cache
    return {
        "id": result.problem_id,
        "clock": result.clock,
        "problem": problem,
        "gold": gold,
        "pred": preds,
        "answer": preds[result.answer_rule],
        "answer_rule": result.answer_rule,
        "correct": correct,
        "num_completions": len(beams),
        "distinct_answers": len(group_answers(answers)),
        "num_iterations": result.num_iterations,
        "latency_s": result.latency,
        "generator_time_s": result.generator_time,
        "verifier_time_s": result.verifier_time,
        "precise_goodput_tok_s": precise_goodput(beams) if beams else 0.0,
        "mean_tokens_per_beam": statistics.fmean(b.num_tokens for b in beams) if beams else 0.0,
        "mean_beam_completion_s": (
            statistics.fmean(b.finish_time - b.start_time for b in beams) if beams else 0.0
        ),
        "tokens_generated": result.tokens_generated,
        "num_sequences": result.num_sequences,
        "prompt_tokens": result.prompt_tokens,
        "prefix_cache_hit_rate": cache.prefix_cache_hit_rate if cache else None,
        "num_preemptions": cache.num_preemptions if cache else None,
        "num_recomputed_tokens": cache.num_recomputed_tokens if cache else None,
        "verifier_prefix_cache_hit_rate": vcache.prefix_cache_hit_rate if vcache else None,
        "verifier_prompt_tokens": vcache.prefix_cache_queries if vcache else None,
        "batch_occupancy": result.mean_occupancy,
        "runtime_overhead_frac": result.runtime_overhead_frac,
        "selections": result.selections,
        "near_tie_selections": result.near_tie_selections,
        "prefix_schedule_cost": result.schedule_cost,
        "search_tree_tokens": result.tree_tokens,
        "spec": result.spec or None,
        "stopped_early": result.stopped_early,
        "search_stats": result.search_stats or None,
        "completions": [_completion_record(b, a, gold) for b, a in zip(beams, answers)],
    }


def _completion_record(beam, answer: str | None, gold: str | None) -> dict:
    """One completion of a problem record: its answer, scores, tokens, correctness (None
    without gold), finish reason, times (s) and text."""
    return {
        "beam_id": beam.beam_id,
        "answer": answer,
        "score": beam.score,
        "step_scores": beam.step_scores,
        "num_tokens": beam.num_tokens,
        "step_tokens": beam.step_tokens,
        "correct": is_equivalent(answer, gold) if gold is not None else None,
        "finish_reason": beam.finish_reason,
        "completion_time_s": beam.finish_time - beam.start_time,
        "generator_time_s": beam.generator_time,
        "verifier_time_s": beam.verifier_time,
        "text": beam.text,
    }


def single_sample_record(result: SearchResult, gold: str | None, numeric: bool = False) -> dict:
    """The single-sample baseline of one problem (`fasttts eval --single-sample-baseline`):
    the one greedy completion's answer, correctness (None without gold), tokens and latency
    (s), stored as a problem record's "single_sample"."""
    beam = result.completions[0] if result.completions else None
    answer = find_answer(beam.text, numeric) if beam else None
    return {"answer": answer,
            "correct": is_equivalent(answer, gold) if gold is not None else None,
            "num_tokens": beam.num_tokens if beam else 0, "latency_s": result.latency}


def _single_sample_summary(records: Sequence[dict]) -> dict | None:
    """Accuracy, mean tokens and mean latency of the single-sample baseline, when every record
    has one (None otherwise, so summaries of runs without it are unchanged)."""
    if not records or not all(r.get("single_sample") for r in records):
        return None
    s = [r["single_sample"] for r in records]
    graded = [x for x in s if x["correct"] is not None]
    return {"accuracy": (sum(bool(x["correct"]) for x in graded) / len(graded)
                         if graded else None),
            "num_tokens": statistics.fmean(x["num_tokens"] for x in s),
            "latency_s": statistics.fmean(x["latency_s"] for x in s)}


def summarize(records: Sequence[dict]) -> dict:
    """Summary over per-problem records (the `summary.json` of `fasttts eval`).

    Accuracies are fractions of problems (None when no record has a gold answer); goodput is
    the mean of per-problem precise goodput; latency has mean and P50/P90/P99 (s).

    Raises:
        ValueError: no records.
    """
    if not records:
        raise ValueError("no records to summarize")
    n = len(records)
    graded = [r for r in records if r.get("correct")]
    acc = None
    if graded:
        acc = {k: sum(bool(r["correct"][k]) for r in graded) / len(graded)
               for k in ("majority", "weighted", "best", "pass@n")}
    lat = [r["latency_s"] for r in records]
    clocks = {r.get("clock", "wall") for r in records}
    return {
        "num_problems": n,
        "clock": clocks.pop() if len(clocks) == 1 else "mixed",
        "accuracy": acc,
        "precise_goodput_tok_s": statistics.fmean(r["precise_goodput_tok_s"] for r in records),
        "latency_s": {
            "mean": statistics.fmean(lat),
            "p50": percentile(lat, 50),
            "p90": percentile(lat, 90),
            "p99": percentile(lat, 99),
        },
        "generator_time_s": statistics.fmean(r["generator_time_s"] for r in records),
        "verifier_time_s": statistics.fmean(r["verifier_time_s"] for r in records),
        "tokens_generated": statistics.fmean(r["tokens_generated"] for r in records),
        "mean_tokens_per_beam": statistics.fmean(r["mean_tokens_per_beam"] for r in records),
        "num_completions": statistics.fmean(r["num_completions"] for r in records),
        "prefix_cache_hit_rate": _mean_of(records, "prefix_cache_hit_rate"),
        "verifier_prefix_cache_hit_rate": _mean_of(records, "verifier_prefix_cache_hit_rate"),
        "num_preemptions": _mean_of(records, "num_preemptions"),
        "num_recomputed_tokens": _mean_of(records, "num_recomputed_tokens"),
        "batch_occupancy": _mean_of(records, "batch_occupancy"),
        "runtime_overhead_frac": _mean_of(records, "runtime_overhead_frac"),
        "near_tie_selections": sum(r.get("near_tie_selections") or 0 for r in records),
        "selections": sum(r.get("selections") or 0 for r in records),
    } | ({"single_sample": single} if (single := _single_sample_summary(records)) else {})


def _mean_of(records: Sequence[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return statistics.fmean(values) if values else None
