"""`fasttts plan` explains itself: one line of why for each recommendation of the memory
planner (batch caps, KV split) and for its speed-up over the static split, then the offload
alternative: why it is faster, and that only the simulator applies it.

The numbers come from the planner's own model (`fasttts.runtime.memory_planner`): the KV a
batch needs, the search tree a cache must hold to keep its prefixes, and the offload plan it
compared against; nothing is estimated twice.
"""

from __future__ import annotations

from fasttts.runtime.memory_planner import MemoryPlan, PlanInput, model_sides, offload_plan

__all__ = ["explain_plan"]

_GIB = 1 << 30


def _gib(n: float) -> str:
    return f"{n / _GIB:.2f} GiB"


def _passes(n: int, batch: int) -> int:
    return -(-n // batch)


def _why_batch(what: str, batch: int, cap: int, n: int) -> str:
    """Why a batch cap: all paths in one pass, the most its memory holds, or a trade."""
    one, many = {"B_pre": ("verifier pass", "verifier passes"),
                 "B_dec": ("decode round", "decode rounds")}[what]
    if batch >= n:
        return f"{what} {batch}: all {n} paths in one {one}"
    passes = _passes(n, batch)
    if _passes(n, cap) == passes:
        return (f"{what} {batch}: {passes} {many} over the {n} paths, the fewest its KV share "
                f"allows (it holds {cap} sequences)")
    return (f"{what} {batch}: {passes} {many}; a batch of {cap} would fit, but the memory it "
            f"takes from the other batch or the prefix caches costs more time than it saves")


def _why_split(inp: PlanInput, plan: MemoryPlan) -> str:
    """Why the KV split: what each batch needs, and where the rest went."""
    ver, gen = model_sides(inp)
    v_need, g_need = ver.need(plan.b_pre), gen.need(plan.b_dec)
    spare_v, spare_g = plan.verifier_kv_bytes - v_need, plan.generator_kv_bytes - g_need
    left = f"the {_gib(spare_v + spare_g)} left"
    if spare_v + spare_g < _GIB / 200:
        return (f"KV split: the batches need {_gib(v_need)} (verifier) + {_gib(g_need)} "
                f"(generator), all of the budget")
    if inp.iterations == 1:
        rule = f"{left} go to the generator (one pass: no prefix to keep between iterations)"
    elif not ver.saves:
        rule = f"{left} go to the generator (the verifier re-reads whole paths: no cache use)"
    elif not ver.paged:
        rule = (f"{left} are split where the two models' recompute is least (the verifier's "
                f"store of whole prefixes in transformers: its recompute falls S-shaped with "
                f"its size, to 1/e at {_gib(ver.scale)}; the generator's paged cache: by e per "
                f"{_gib(gen.scale)})")
    else:
        rule = (f"{left} are split where the two prefix caches save equal recompute time per "
                f"byte (each model's recompute falls exponentially with its cache, by e per "
                f"{_gib(ver.scale)} for the verifier and {_gib(gen.scale)} for the generator)")
    return (f"KV split: the batches need {_gib(v_need)} (verifier) + {_gib(g_need)} "
            f"(generator); {rule}: +{_gib(spare_v)} verifier, +{_gib(spare_g)} generator")


def _why_offload(inp: PlanInput, plan: MemoryPlan, alt: MemoryPlan | None,
                 considered: bool) -> str:
    """The offload alternative (section 4.3.2): faster and simulated only, or why not."""
    if alt is not None:
        return (f"alternative, offload (simulated only: --backend sim --offload; vLLM engines do "
                f"not offload the inactive model's KV): {plan.t_total / alt.t_total:.2f}x "
                f"faster than the plan ({plan.t_total:.3f} s -> {alt.t_total:.3f} s predicted, "
                f"{alt.t_offload:.3f} s of it host transfers), each model having the whole "
                f"{_gib(inp.memory_bytes)} while it runs, B_pre {alt.b_pre}, B_dec {alt.b_dec}")
    if not considered:
        return "offload inactive KV: not considered (--no-offload)"
    if inp.hardware.host_bandwidth is None:
        return (f"offload inactive KV: no, {inp.hardware.name}'s memory is host memory (no host "
                f"link to offload over)")
    off = offload_plan(inp)
    if off is None:
        return "offload inactive KV: no, the budget cannot hold one sequence of each model"
    return (f"offload inactive KV: no, offloading would take {off.t_total:.3f} s "
            f"({off.t_offload:.3f} s of host transfers) against {plan.t_total:.3f} s")


def _speedup(plan: MemoryPlan, static: MemoryPlan) -> str:
    """The planned vs static line; a tie says why the plan still differs."""
    ratio = static.t_total / plan.t_total
    if abs(ratio - 1) >= 0.005:
        return (f"planned vs static: {ratio:.2f}x faster search ({static.t_total:.3f} s -> "
                f"{plan.t_total:.3f} s predicted)")
    if (plan.b_pre, plan.b_dec) == (static.b_pre, static.b_dec):
        why = f"both reach B_pre {plan.b_pre} and B_dec {plan.b_dec}"
    else:
        why = "the planned batches are no faster here"
    if max(plan.t_recompute, static.t_recompute) < 5e-4:  # below the printed millisecond
        why += " and keep every prefix"
    return (f"planned vs static: same predicted time ({plan.t_total:.3f} s): {why}, so the "
            f"planned split only places spare memory differently")


def explain_plan(inp: PlanInput, plan: MemoryPlan, static: MemoryPlan,
                 alt: MemoryPlan | None = None, considered: bool = True) -> list[str]:
    """One line of why for each recommendation of `plan` (batch caps, KV split; a plan real
    engines run, so without offloading), then how it compares with the static split `static`,
    then the offload alternative `alt` (faster, simulated only) or why there is none
    (`considered`: offloading was looked at, not --no-offload)."""
    ver, gen = model_sides(inp)
    m = inp.memory_bytes
    cap_pre = ver.cap(m - gen.need(plan.b_dec), inp.num_requests)
    cap_dec = gen.cap(m - ver.need(plan.b_pre), inp.num_requests)
    return [_why_batch("B_pre", plan.b_pre, cap_pre, inp.num_requests),
            _why_batch("B_dec", plan.b_dec, cap_dec, inp.num_requests),
            _why_split(inp, plan),
            _speedup(plan, static),
            _why_offload(inp, plan, alt, considered)]
