"""Where a comparison's time goes, per configuration, and the problems a configuration loses
on (`fasttts.bench.compare` rows).

The FastTTS real-engine protocol asks, where a goal is missed, for the per-step time
breakdown and what would reach the goal; its goal "no configuration below 1.0x" is per
problem, which a median hides. From each row (one problem under one configuration):

- generator ms per generated token: generator seconds / tokens generated (speculative tokens
  included), x 1000;
- verifier ms per scored token: verifier seconds / the PRM's prompt tokens (a cached prefix
  that incremental scoring reads counts as scored), x 1000;
- verifier share: verifier seconds / latency;
- batch occupancy: the generator's mean running sequences / its decode slots;
- runtime overhead: the share of the search's time outside the engines
  (`runtime_overhead_frac`), in %;
- speculative, head-start tokens and declined slots: Speculative Beam Extension's counters
  (`fasttts.runtime.spec_beam_extension`; 0 without it): tokens its branches decoded, tokens
  handed to kept children, free decode slots the cost model left empty.

`breakdown_table` gives their range over the problems of each (setting, n, configuration);
`losses` names the problems where a configuration's ratio to the baseline is below 1.0.
"""

from __future__ import annotations

from collections.abc import Sequence

from fasttts.bench.common import md_table
from fasttts.bench.compare import group_rows, problem_ratios

__all__ = ["QUANTITIES", "breakdown_table", "losses"]


def _per_token(seconds: str, tokens: str):
    return lambda r: 1000 * r[seconds] / r[tokens] if r.get(tokens) else None


def _spec(name: str):
    return lambda r: (r.get("spec") or {}).get(name, 0)


#: (column header, digits, value of a row or None) of the breakdown (module docstring).
QUANTITIES = (
    ("generator ms / generated token", 1, _per_token("generator_time_s", "tokens_generated")),
    ("verifier ms / scored token", 2, _per_token("verifier_time_s", "verifier_prompt_tokens")),
    ("verifier share", 2, lambda r: r["verifier_time_s"] / r["latency_s"]
     if r.get("latency_s") else None),
    ("batch occupancy", 2, lambda r: r.get("batch_occupancy")),
    ("runtime overhead %", 2, lambda r: 100 * r["runtime_overhead_frac"]
     if r.get("runtime_overhead_frac") is not None else None),
    ("speculative tokens", 0, _spec("spec_tokens")),
    ("head-start tokens", 0, _spec("head_start_tokens")),
    ("declined slots", 0, _spec("declined_slots")),
)


def _range(xs: list[float], digits: int) -> str:
    """"lo-hi" (one value when they are equal at `digits`), "-" without values."""
    if not xs:
        return "-"
    lo, hi = f"{min(xs):,.{digits}f}", f"{max(xs):,.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def breakdown_table(rows: Sequence[dict], configs: Sequence[str]) -> str:
    """A markdown table: per (setting, n, config), each of `QUANTITIES` as its range over the
    problems ("lo-hi"). `rows`: compare rows (`fasttts.bench.compare.run`'s)."""
    head = ("setting", "n", "config", "problems", *(q[0] for q in QUANTITIES))
    body = []
    for (s, n, c), rs in group_rows(rows, configs).items():
        cols = [_range([v for r in rs if (v := f(r)) is not None], d) for _, d, f in QUANTITIES]
        body.append((s, n, c, len(rs), *cols))
    return md_table(head, body)


def losses(rows: Sequence[dict], configs: Sequence[str],
           field: str = "precise_goodput_tok_s") -> list[str]:
    """One line per (setting, n, configuration) whose `field` is below the baseline's
    (`configs[0]`) on some problem, e.g. "n = 16, sbe+la+p+m: goodput below the baseline's on
    2 of 5 problems (gsm8k-test-0 x0.91, ...)"; for latency a ratio above 1.0 is the loss."""
    worse = (lambda x: x > 1.0) if field == "latency_s" else (lambda x: x < 1.0)
    what = {"latency_s": "latency above", "precise_goodput_tok_s": "goodput below"}.get(
        field, f"{field} worse than")
    groups, out = group_rows(rows, configs), []
    for (s, n, c), rs in groups.items():
        bases = {r["id"]: r for r in groups.get((s, n, configs[0]), [])}
        ratios = problem_ratios(rs, bases, field)
        bad = {i: x for i, x in ratios.items() if worse(x)}
        if c != configs[0] and bad:
            named = ", ".join(f"{i} x{_loss_ratio(x)}" for i, x in bad.items())
            out.append(f"{s}, n = {n}, {c}: {what} the baseline's on {len(bad)} of "
                       f"{len(ratios)} problems ({named})")
    return out


def _loss_ratio(x: float) -> str:
    """A losing ratio to two decimals, or three where two would round it to 1.00 (0.997 is
    a loss; "x1.00" would not read as one)."""
    return f"{x:.3f}" if f"{x:.2f}" == "1.00" else f"{x:.2f}"
