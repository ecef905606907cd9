"""Fitting the step-end head: logistic regression on frozen features, layer chosen on held-out
problems (`fasttts prm train`, issue 17).

The head has no bias, as vLLM's sequence-classification `score` layer has none
(`as_seq_cls_model`: `ReplicatedLinear(..., bias=False)`); the final-norm hidden states carry
large near-constant components that play the bias's part. Features are scaled per dimension
(no centring) for the optimiser and the scale is folded back into the weights. Each step is
weighted 1 / (steps of its completion), so every completion counts once. L-BFGS (torch) on
the L2-regularised log-loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttts.eval.ranking import auroc, pairwise_accuracy

__all__ = ["Example", "FitResult", "fit_head", "select_layer", "split_problems"]


@dataclass
class Example:
    """One completion: its problem, features [steps, layers, hidden] and outcome label."""

    problem_id: str
    features: np.ndarray
    correct: bool


@dataclass
class FitResult:
    """A fitted head and its held-out measurements.

    Attributes:
        layer: index into the candidate layers of the features.
        l2: the L2 strength chosen.
        weight: float32 [hidden] head weights (logit = weight . feature).
        metrics: held-out pairwise accuracy (final step), step AUROC and final-step AUROC.
    """

    layer: int
    l2: float
    weight: np.ndarray
    metrics: dict


def split_problems(ids: list[str], val_fraction: float, seed: int) -> set[str]:
    """The held-out problem ids: a seeded random `val_fraction` of the distinct ids."""
    distinct = sorted(set(ids))
    rng = np.random.default_rng(seed)
    k = max(1, round(len(distinct) * val_fraction))
    return set(rng.choice(distinct, size=k, replace=False).tolist())


def _design(examples: list[Example], layer: int):
    rows = [e.features[:, layer] for e in examples if len(e.features)]
    x = np.concatenate(rows).astype(np.float32)
    y = np.concatenate([np.full(len(e.features), e.correct, np.float32)
                        for e in examples if len(e.features)])
    w = np.concatenate([np.full(len(e.features), 1.0 / len(e.features), np.float32)
                        for e in examples if len(e.features)])
    return x, y, w


def fit_head(examples: list[Example], layer: int, l2: float, iters: int = 200) -> np.ndarray:
    """Weights [hidden] of the logistic head on candidate layer `layer` (no bias)."""
    import torch

    x, y, sw = _design(examples, layer)
    scale = np.sqrt((x ** 2).mean(axis=0)) + 1e-6
    xt, yt = torch.from_numpy(x / scale), torch.from_numpy(y)
    swt = torch.from_numpy(sw / sw.sum())
    w = torch.zeros(x.shape[1], requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = (torch.nn.functional.binary_cross_entropy_with_logits(
            xt @ w, yt, reduction="none") * swt).sum() + l2 * w.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    return (w.detach().numpy() / scale).astype(np.float32)


def evaluate(examples: list[Example], layer: int, weight: np.ndarray) -> dict:
    """Held-out ranking measures of a head (final-step score = the path's score, "last")."""
    scored = [e for e in examples if len(e.features)]
    step_logits = [e.features[:, layer] @ weight for e in scored]
    final = [float(s[-1]) for s in step_logits]
    by_problem: dict[str, tuple[list, list]] = {}
    for e, f in zip(scored, final):
        by_problem.setdefault(e.problem_id, ([], []))
        by_problem[e.problem_id][0].append(f)
        by_problem[e.problem_id][1].append(e.correct)
    pairwise, pairs = pairwise_accuracy(list(by_problem.values()))
    steps = np.concatenate(step_logits)
    labels = np.concatenate([np.full(len(s), e.correct) for e, s in zip(scored, step_logits)])
    return {"pairwise_accuracy": pairwise, "pairs": pairs,
            "step_auroc": auroc(steps, labels),
            "final_auroc": auroc(final, [e.correct for e in scored])}


def select_layer(train: list[Example], val: list[Example], num_layers: int,
                 l2_grid: tuple[float, ...] = (1e-4, 1e-3, 1e-2)) -> tuple[FitResult, list[dict]]:
    """Fit every (layer, l2) on `train`, measure on `val`, keep the best held-out pairwise
    accuracy (ties: final-step AUROC).

    Returns:
        (the best FitResult, one row per candidate: layer, l2 and its held-out metrics).
    """
    rows, best = [], None
    for layer in range(num_layers):
        for l2 in l2_grid:
            weight = fit_head(train, layer, l2)
            m = evaluate(val, layer, weight)
            rows.append({"layer": layer, "l2": l2, **m})
            key = (m["pairwise_accuracy"], m["final_auroc"])
            if best is None or key > best[0]:
                best = (key, FitResult(layer, l2, weight, m))
    return best[1], rows
