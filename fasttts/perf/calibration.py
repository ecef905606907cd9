"""Fit a hardware spec to measured engine step times (the simulator's CPU calibration).

Given measured steps (each a batch of identical `SeqWork` and its median time, as written by
`benchmarks/calibrate_cpu.py measure`), find the `HardwareSpec` whose roofline
(`fasttts.perf.roofline.step_time`) predicts them best: least squares on the log of
predicted / measured time (relative error), over peak FLOP/s, bandwidth, per-step overhead,
per-sequence overhead and the compute/memory overlap, with scipy's `least_squares`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from fasttts.perf.roofline import SeqWork, StepShape, step_time
from fasttts.perf.specs import HardwareSpec, ModelSpec

__all__ = ["MeasuredStep", "error_table", "fit_hardware"]


@dataclass(frozen=True)
class MeasuredStep:
    """One measured engine step: `batch` sequences each computing `new_tokens` new tokens on
    top of `context` cached ones, which took `seconds` (median)."""

    kind: str
    batch: int
    context: int
    new_tokens: int
    seconds: float

    def shape(self) -> StepShape:
        """The step's roofline shape."""
        return StepShape.of([SeqWork(self.new_tokens, self.context)] * self.batch)


def _spec(x, name: str, memory_bytes: int, source: str) -> HardwareSpec:
    p, bw, so, sq, ov = x
    return HardwareSpec(name=name, peak_flops=math.exp(p), memory_bandwidth=math.exp(bw),
                        memory_bytes=memory_bytes, step_overhead_s=math.exp(so),
                        seq_overhead_s=math.exp(sq), overlap=1 / (1 + math.exp(-ov)),
                        source=source)


def fit_hardware(model: ModelSpec, steps: list[MeasuredStep], name: str, memory_bytes: int,
                 source: str) -> HardwareSpec:
    """The hardware spec that best predicts `steps` for `model` (module docstring).

    Efficiencies are 1: the fitted peak values are what the machine achieves.

    Raises:
        ValueError: fewer than 5 measured steps (5 parameters are fitted).
    """
    from scipy.optimize import least_squares

    if len(steps) < 5:
        raise ValueError(f"need at least 5 measured steps to fit 5 parameters, got {len(steps)}")
    shapes = [s.shape() for s in steps]
    target = [math.log(s.seconds) for s in steps]

    def residuals(x):
        hw = _spec(x, name, memory_bytes, source)
        return [math.log(step_time(model, hw, sh)) - t for sh, t in zip(shapes, target)]

    x0 = [math.log(1e11), math.log(3e10), math.log(0.01), math.log(1e-3), 0.0]
    fit = least_squares(residuals, x0, method="trf")
    return _spec(fit.x, name, memory_bytes, source)


def error_table(model: ModelSpec, hw: HardwareSpec, steps: list[MeasuredStep]) -> tuple[list[dict], float, float]:
    """Predicted vs measured per step, and the (median, max) absolute relative error."""
    rows = []
    for s in steps:
        pred = step_time(model, hw, s.shape())
        rows.append(dict(kind=s.kind, batch=s.batch, context=s.context, new_tokens=s.new_tokens,
                         measured_s=s.seconds, predicted_s=pred,
                         rel_error=pred / s.seconds - 1))
    errs = [abs(r["rel_error"]) for r in rows]
    return rows, statistics.median(errs), max(errs)
