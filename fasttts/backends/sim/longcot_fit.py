"""Fit the long chain-of-thought workload (`fasttts.backends.sim.longcot`) to recorded data.

The data: per-sample response lengths (tokens) and correctness of a long-CoT reasoning model,
one JSON object per line with `source_problem_id`, `num_tokens`, `correct` (the project's
`../shared/data/longcot-gpqa/lengths.jsonl`: EXAONE-Deep-32B, 80 samples on each of 197
GPQA-Diamond questions). The model it fits (SART section 3, Observation 1: lengths vary widely
within a request, correctness depends on length only weakly):

- a question's log median length m_q ~ SkewNormal(skew, loc, scale) (the questions' log
  median lengths are skewed to the short side: a normal would put the pooled median 13 %
  low): maximum likelihood;
- a sample's log length = m_q + r, r = scale * t_df (Student's t: the within-question spread
  is heavy-tailed, kurtosis 7.6 in the data): maximum likelihood on every uncapped sample's
  residual log length from its question's median;
- within a question, logit P(correct | r) = alpha_q - c r: conditional maximum likelihood
  (one intercept per question) on the questions with right and wrong samples;
- a question's accuracy logit alpha_q = a + b z_q + s e, z_q the standardized m_q,
  e ~ N(0, 1) (hard questions are long and often wrong; many questions are all right or all
  wrong): (a, b, s) solve, in least squares, for the data's mean, SD and mean p (1 - p) of
  question accuracy and its correlation with log median length, the accuracies taken over
  each question's branches with the length slope and the cap applied (maximum likelihood of the logit-normal alone puts the
  mean accuracy 5 points low: it cannot hold the 37 % of all-right questions).

Run `python -m fasttts.backends.sim.longcot_fit LENGTHS.jsonl [--target-accuracy P] [--out
FILE]` to print (or write) the fitted `LongCoTModel` fields, with the logit shift that gives a
simulated model's mean accuracy P (`solve_shift`); `fitted_accuracy` is the fitted model's own
mean accuracy (a check against the data's). The committed `longcot_gpqa.json` was made this
way (its `source` field gives the command).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from fasttts.backends.sim.longcot import LongCoTModel, skew_normal

__all__ = ["fit_lengths", "load_lengths", "main", "solve_shift"]


def load_lengths(path: str | Path) -> dict[str, list[tuple[int, bool]]]:
    """(tokens, correct) of each sample, by question id, from a lengths JSONL file.

    Raises:
        ValueError: unreadable file, a line without the three fields (names the line), or no
            samples.
    """
    by_q: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            by_q[str(row["source_problem_id"])].append((int(row["num_tokens"]),
                                                        bool(row["correct"])))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{i}: expected an object with source_problem_id, "
                             f"num_tokens and correct ({e})") from e
    if not by_q:
        raise ValueError(f"{path}: no samples")
    return dict(by_q)


def _accuracy_targets(p: np.ndarray, z: np.ndarray) -> np.ndarray:
    """(mean, SD, mean of p (1 - p), corr with z) of question accuracies `p`: smooth in the
    parameters, so least squares sees every one."""
    return np.array([p.mean(), p.std(), (p * (1 - p)).mean(), np.corrcoef(z, p)[0, 1]])


def _branch_draws(fields: dict, questions: int, per_question: int, seed: int):
    """Fixed draws of the fitted model: per question (x, z, e) and per branch r, as numpy
    arrays of shapes (questions,) and (questions, per_question)."""
    rng = np.random.default_rng(seed)
    u0, u1, e = rng.standard_normal((3, questions))
    x, z = skew_normal(u0, u1, fields["log_median_skew"])
    g = rng.standard_normal((questions, per_question))
    chi = rng.chisquare(fields["spread_df"], (questions, per_question)) / fields["spread_df"]
    return x, z, e, fields["spread_scale"] * g / np.sqrt(chi)


def _question_accuracy(fields: dict, draws, a: float, b: float, s: float, cap: int):
    """Each drawn question's expected accuracy over its drawn branches (a branch longer than
    `cap` is wrong), and its standardized log median length z."""
    x, z, e, r = draws
    log_len = fields["log_median_loc"] + fields["log_median_scale"] * x[:, None] + r
    logit = (a + b * z + s * e)[:, None] - fields["length_slope"] * r
    return np.mean((log_len < math.log(cap)) / (1 + np.exp(-logit)), axis=1), z


def _fit_accuracy(fields: dict, acc: np.ndarray, meds: np.ndarray, cap: int) -> tuple:
    """(a, b, s) of the questions' logit-normal accuracy (module docstring): the expected
    accuracies of 20,000 drawn questions (16 branches each, the length slope and the cap
    applied) match the data's moments; fixed draws keep the objective smooth."""
    target = _accuracy_targets(acc, meds)
    draws = _branch_draws(fields, 20_000, 16, seed=0)

    def gap(theta):
        p, z = _question_accuracy(fields, draws, theta[0], theta[1], math.exp(theta[2]), cap)
        return _accuracy_targets(p, z) - target

    a, b, log_s = optimize.least_squares(gap, x0=[1.0, -1.0, 1.0]).x
    return float(a), float(b), float(math.exp(log_s))


def _fit_length_slope(groups: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """c of logit P(correct | r) = alpha_q - c r on the mixed questions (module docstring)."""
    k = len(groups)

    def nll(theta):
        c, alphas = theta[0], theta[1:]
        total = 0.0
        for alpha, (r, y) in zip(alphas, groups):
            logit = alpha - c * r
            total += np.sum(np.logaddexp(0, -logit) * y + np.logaddexp(0, logit) * (1 - y))
        return total

    res = optimize.minimize(nll, x0=np.zeros(k + 1), method="L-BFGS-B")
    return float(res.x[0])


def fit_lengths(by_q: dict[str, list[tuple[int, bool]]], cap: int | None = None) -> dict:
    """The `LongCoTModel` fields fitted to per-sample (tokens, correct) by question (module
    docstring). `cap`: the generation cap of the data (tokens); samples at it are left out of
    the length spread (their length is censored); default: the longest sample.

    Returns:
        {"log_median_skew", "log_median_loc", "log_median_scale", "spread_df",
        "spread_scale", "acc_intercept", "acc_slope", "acc_sd", "length_slope", "data_cap"}.
    """
    cap = cap or max(t for v in by_q.values() for t, _ in v)
    meds, resid, counts, totals, groups = [], [], [], [], []
    for samples in by_q.values():
        logs = np.log(np.array([max(t, 1) for t, _ in samples], dtype=float))
        right = np.array([c for _, c in samples], dtype=float)
        m = float(np.median(logs))
        meds.append(m)
        keep = np.array([t < cap for t, _ in samples])
        resid.extend(logs[keep] - m)
        counts.append(right.sum())
        totals.append(len(samples))
        if 0 < right.sum() < len(samples):
            groups.append((logs - m, right))
    meds = np.array(meds)
    skew, loc, spread = stats.skewnorm.fit(meds)
    df, _, scale = stats.t.fit(np.array(resid), floc=0.0)
    fields = {"log_median_skew": float(skew), "log_median_loc": float(loc),
              "log_median_scale": float(spread), "spread_df": float(df),
              "spread_scale": float(scale), "length_slope": _fit_length_slope(groups),
              "data_cap": int(cap)}
    a, b, s = _fit_accuracy(fields, np.array(counts) / np.array(totals), meds, cap)
    return fields | {"acc_intercept": a, "acc_slope": b, "acc_sd": s}


def _pooled_accuracy(fields: dict, shift: float, cap: int) -> float:
    """Mean accuracy of the fitted model's branches with `shift` on the logit, lengths cut
    at `cap` tokens (a cut branch is wrong), on fixed draws (20,000 questions x 16)."""
    draws = _branch_draws(fields, 20_000, 16, seed=1)
    p, _ = _question_accuracy(fields, draws, fields["acc_intercept"] + shift,
                              fields["acc_slope"], fields["acc_sd"], cap)
    return float(p.mean())


def solve_shift(fields: dict, target: float, cap: int) -> float:
    """The logit shift that makes the model's mean accuracy `target` with branches cut at
    `cap` tokens (the scaling rule of `fasttts.backends.sim.longcot`)."""
    return float(optimize.brentq(lambda d: _pooled_accuracy(fields, d, cap) - target, -8, 8,
                                 xtol=1e-4))


def main(argv: list[str] | None = None) -> int:
    """Print (or write with --out) the fitted fields as JSON; exit 2 on a bad file."""
    p = argparse.ArgumentParser(prog="python -m fasttts.backends.sim.longcot_fit",
                                description="fit the long-CoT workload to per-sample lengths")
    p.add_argument("lengths", help="JSONL with source_problem_id, num_tokens, correct")
    p.add_argument("--out", help="write the fields to this JSON file")
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="also solve the logit shift for this mean accuracy (0-1)")
    args = p.parse_args(argv)
    if args.target_accuracy is not None and not 0 < args.target_accuracy < 1:
        print(f"error: --target-accuracy must be within (0, 1), got {args.target_accuracy}",
              file=sys.stderr)
        return 2
    try:
        fields = fit_lengths(load_lengths(args.lengths))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    fields["fitted_accuracy"] = _pooled_accuracy(fields, 0.0, fields["data_cap"])
    if args.target_accuracy is not None:
        fields["target_accuracy"] = args.target_accuracy
        fields["shift"] = solve_shift(fields, args.target_accuracy, fields["data_cap"])
    LongCoTModel.model_validate({k: v for k, v in fields.items() if k != "fitted_accuracy"})
    text = json.dumps(fields, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
