"""Fit a hardware spec to measured engine times (the simulator's CPU calibration).

Two kinds of measurement are fitted together:

- `MeasuredStep`: one engine step of a batch of identical `SeqWork` and its median time, as
  measured by `fasttts bench calibration --backend vllm` (`fasttts.bench.cpu_measure`: the
  generator's decode and prefill steps);
- `MeasuredCall`: one real verifier scoring call, timed whole, with the engine steps the
  simulated engine schedules for its prefills (`fasttts.bench.verifier_calls.call_shapes`), so the fit sees the batched, partly prefix-cached prefills a verifier runs.

The fit finds the `HardwareSpec` whose roofline (`fasttts.perf.roofline.step_time`, summed
over a call's steps) predicts them best: least squares on the log of predicted / measured time
(relative error), over peak FLOP/s, bandwidth, per-step overhead, per-sequence overhead and
the compute/memory overlap, with scipy's `least_squares`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from fasttts.perf.roofline import SeqWork, StepShape, step_time
from fasttts.perf.specs import VLLM_CPU_BLOCK_SIZE, HardwareSpec, ModelSpec

__all__ = ["MeasuredCall", "MeasuredStep", "error_table", "fit_hardware", "predict"]


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

    def shapes(self) -> tuple[StepShape, ...]:
        """The engine steps the measured time covers: this one."""
        return (self.shape(),)


@dataclass(frozen=True)
class MeasuredCall:
    """One timed call of several engine steps (a verifier scoring call).

    Attributes:
        kind: what was timed (e.g. "verifier whole" or "verifier incremental").
        group: which run it belongs to (a problem id), for leave-one-group-out checks.
        steps: the roofline shape of each engine step the call ran.
        seconds: the measured wall time of the whole call.
    """

    kind: str
    group: str
    steps: tuple[StepShape, ...]
    seconds: float

    def shapes(self) -> tuple[StepShape, ...]:
        """The engine steps the measured time covers."""
        return self.steps


Measured = MeasuredStep | MeasuredCall


def predict(model: ModelSpec, hw: HardwareSpec, m: Measured) -> float:
    """Predicted seconds of a measurement: the roofline time summed over its steps."""
    return sum(step_time(model, hw, sh) for sh in m.shapes())


def _spec(x, name: str, memory_bytes: int, source: str) -> HardwareSpec:
    p, bw, so, sq, ov = x
    return HardwareSpec(name=name, peak_flops=math.exp(p), memory_bandwidth=math.exp(bw),
                        memory_bytes=memory_bytes, step_overhead_s=math.exp(so),
                        seq_overhead_s=math.exp(sq), overlap=1 / (1 + math.exp(-ov)),
                        kv_block_size=VLLM_CPU_BLOCK_SIZE, source=source)


def fit_hardware(model: ModelSpec, steps: Sequence[Measured], name: str, memory_bytes: int,
                 source: str) -> HardwareSpec:
    """The hardware spec that best predicts `steps` for `model` (module docstring).

    Efficiencies are 1: the fitted peak values are what the machine achieves. Each
    measurement counts once, whatever the number of engine steps it covers.

    Raises:
        ValueError: fewer than 5 measurements (5 parameters are fitted).
    """
    from scipy.optimize import least_squares

    if len(steps) < 5:
        raise ValueError(f"need at least 5 measurements to fit 5 parameters, got {len(steps)}")
    target = [math.log(s.seconds) for s in steps]

    def residuals(x):
        hw = _spec(x, name, memory_bytes, source)
        return [math.log(predict(model, hw, m)) - t for m, t in zip(steps, target)]

    x0 = [math.log(1e11), math.log(3e10), math.log(0.01), math.log(1e-3), 0.0]
    fit = least_squares(residuals, x0, method="trf")
    return _spec(fit.x, name, memory_bytes, source)


def error_table(model: ModelSpec, hw: HardwareSpec,
                steps: Sequence[Measured]) -> tuple[list[dict], float, float]:
    """Predicted vs measured per measurement, and the (median, max) absolute relative error.

    A row holds kind, measured_s, predicted_s and rel_error, plus batch/context/new_tokens
    for a `MeasuredStep`, group and the number of engine steps for a `MeasuredCall`.
    """
    rows = []
    for s in steps:
        pred = predict(model, hw, s)
        if isinstance(s, MeasuredStep):
            what = dict(batch=s.batch, context=s.context, new_tokens=s.new_tokens)
        else:
            what = dict(group=s.group, engine_steps=len(s.steps))
        rows.append(dict(kind=s.kind, **what, measured_s=s.seconds, predicted_s=pred,
                         rel_error=pred / s.seconds - 1))
    errs = [abs(r["rel_error"]) for r in rows]
    return rows, statistics.median(errs), max(errs)
