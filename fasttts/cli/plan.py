"""`fasttts plan`: a what-if memory plan for a GPU (FastTTS section 4.3), the planned split
against the static one, with one line of why for each recommendation. Nothing is run: times
are predicted by the roofline model of the hardware and model specs. The plan shown first is
one real vLLM engines run (no offloading); a faster plan that offloads the inactive model's KV
cache (section 4.3.2) is shown beside it only as a labelled alternative, since only the
simulator applies offloading (`--backend sim --offload`). Its flags are generated from the
fields they set (`SimConfig`, `SearchConfig`, `PlanInput`; `fasttts.options`)."""

from __future__ import annotations

import argparse
import shutil
import textwrap

from fasttts.cli.sizes import parse_size
from fasttts.cli.tables import table

__all__ = ["add_parser"]

_DESCRIPTION = ("Split a GPU's KV-cache memory between the generator and the verifier and set "
                "their batch caps (FastTTS section 4.3), against the static split, with one "
                "line of why for each recommendation. The plan is one real vLLM engines run; "
                "a faster plan that offloads the inactive model's KV cache is shown beside it "
                "as an alternative only the simulator applies (--backend sim --offload). "
                "Nothing is run: times are predicted by the roofline model of the hardware and "
                "model specs.")

#: The offload alternative's label (its column and its line).
OFFLOAD_LABEL = "offload (simulated only)"

#: The `PlanInput` fields with a flag, and the flags' defaults where the field has none.
_WORKLOAD_FLAGS = ("num_requests", "memory_bytes", "verifier_len", "decode_len",
                   "decode_peak_len", "cache_len")
_WORKLOAD_DEFAULTS = {"num_requests": 64, "memory_bytes": None, "verifier_len": 1024,
                      "decode_len": 1024}


def add_parser(sub, parents: list) -> None:
    """Add `plan` to the CLI's subcommands (`sub`, from `add_subparsers`)."""
    p = sub.add_parser("plan", parents=parents, description=_DESCRIPTION,
                       help="what-if memory plan for a GPU (roofline model, no run)")
    _add_plan_options(p)
    p.set_defaults(func=_cmd_plan)


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    """The options of `fasttts plan`: specs (listed), workload and budget, with defaults."""
    from fasttts.config import SIM_GENERATOR, SIM_VERIFIER, SearchConfig, SimConfig
    from fasttts.options import add_flags
    from fasttts.perf.specs import hardware_names, model_names
    from fasttts.runtime.memory_planner import PlanInput

    add_flags(p, SimConfig, ["hardware"], notes={"hardware": f"; the specs: {', '.join(hardware_names())}"})
    p.add_argument("--generator", default=SIM_GENERATOR,
                   help=f"generator model spec: {', '.join(model_names())}, or a .json file "
                        f"(default: %(default)s)")
    p.add_argument("--verifier", default=SIM_VERIFIER,
                   help="verifier model spec, one of the same (default: %(default)s)")
    add_flags(p, PlanInput, ["num_requests"], flags={"num_requests": "--n"},
              dests={"num_requests": "n"}, defaults=_WORKLOAD_DEFAULTS)
    add_flags(p, SimConfig, ["memory_fraction"])
    add_flags(p, PlanInput, _WORKLOAD_FLAGS[1:], defaults=_WORKLOAD_DEFAULTS,
              flags={"memory_bytes": "--kv-budget"}, dests={"memory_bytes": "kv_budget"},
              types={"memory_bytes": parse_size}, metavars={"memory_bytes": "SIZE"},
              shown={"memory_bytes": "what the memory fraction leaves after the weights"})
    add_flags(p, SimConfig, ["generator_kv_share"])
    p.add_argument("--no-offload", action="store_true",
                   help="do not show the alternative that offloads the inactive model's KV to "
                        "host memory (only the simulator applies it)")
    add_flags(p, SearchConfig, ["method", "beam_width"],
              notes={"method": "; it sets the prefix sharing and the iterations whose prefix "
                               "reuse the plan prices"})


def _plan(args: argparse.Namespace):
    """(the workload, the runnable plan, the offload alternative or None, the static split) of
    `fasttts plan`'s flags. The runnable plan never offloads; the alternative is the offload
    plan when offloading is considered (not --no-offload) and it is faster.

    Raises:
        ValueError: an unknown spec, a KV budget over what the device leaves, a workload
            size below 1; `fasttts.runtime.memory_planner.PlanError`: nothing fits without
            offloading (the message says whether offloading would).
    """
    from fasttts.backends.sim import static_split
    from fasttts.config import EngineConfig, SearchConfig, SimConfig, VerifierConfig
    from fasttts.perf.specs import load_hardware, load_model
    from fasttts.runtime.memory_planner import (PlanError, PlanInput, offload_plan, plan_memory,
                                                static_plan)
    from fasttts.runtime.plan_workload import search_shape
    from fasttts.verifiers import paged_prefix_cache

    hw = load_hardware(args.hardware)
    gen, ver = load_model(args.generator), load_model(args.verifier)
    sim = SimConfig(hardware=args.hardware, memory_fraction=args.memory_fraction)
    split = static_split(hw, gen, ver, sim)
    room = split.generator_kv + split.verifier_kv  # what the weights and reserves leave
    if args.kv_budget and args.kv_budget > room:
        raise ValueError(f"--kv-budget {args.kv_budget / 2**30:.2f} GiB does not fit: "
                         f"{args.memory_fraction} x {hw.name} memory leaves {room / 2**30:.2f} "
                         f"GiB after the weights and activation reserve; give at most that")
    search = SearchConfig(method=args.method, n=args.n, beam_width=args.beam_width)
    shape = search_shape(search, min(args.verifier_len, args.decode_len))
    inp = PlanInput(memory_bytes=args.kv_budget or room, generator=gen, verifier=ver,
                    hardware=hw, num_requests=args.n, verifier_len=args.verifier_len,
                    decode_len=args.decode_len, decode_peak_len=args.decode_peak_len,
                    cache_len=args.cache_len, **shape,
                    verifier_paged=paged_prefix_cache(VerifierConfig(
                        engine=EngineConfig(model=args.verifier))))
    alt = None if args.no_offload else offload_plan(inp)
    try:
        plan = plan_memory(inp, allow_offload=False)
    except PlanError as e:
        if alt is None:
            raise
        raise PlanError(f"{e} (only offloading the inactive model's KV would fit, which the "
                        f"simulator alone applies: --backend sim --offload)") from None
    if alt is not None and alt.t_total >= plan.t_total:
        alt = None
    return inp, plan, alt, static_plan(inp, args.generator_kv_share)


def _print_plans(inp, static, plan, alt) -> None:
    """The static split and the plan side by side, and the offload alternative if any, as a
    table."""
    from rich.console import Console

    gib = 1 << 30
    t = table(f"{inp.generator.name} + {inp.verifier.name} on {inp.hardware.name}, "
              f"KV budget {inp.memory_bytes / gib:.2f} GiB")
    t.add_column("")
    t.add_column("static split", justify="right")
    t.add_column("planned", justify="right")
    plans = [static, plan]
    if alt is not None:
        t.add_column(OFFLOAD_LABEL, justify="right", style="dim")
        plans.append(alt)
    rows = [
        ("B_pre (verifier batch)", lambda p: f"{p.b_pre}"),
        ("B_dec (decode batch)", lambda p: f"{p.b_dec}"),
        ("verifier KV GiB", lambda p: f"{p.verifier_kv_bytes / gib:.2f}"),
        ("generator KV GiB", lambda p: f"{p.generator_kv_bytes / gib:.2f}"),
        ("search time s", lambda p: f"{p.t_total:.3f}"),
        ("  verifier s", lambda p: f"{p.t_verify:.3f}"),
        ("  generator s", lambda p: f"{p.t_decode:.3f}"),
        ("  prefix recompute s", lambda p: f"{p.t_recompute:.3f}"),
        *([("  offload transfer s", lambda p: f"{p.t_offload:.3f}")] if alt else []),
        ("throughput tok/s", lambda p: f"{p.throughput(inp):.0f}"),
    ]
    for name, fmt in rows:
        t.add_row(name, *(fmt(p) for p in plans))
    Console().print(t)


def _cmd_plan(args: argparse.Namespace) -> int:
    from fasttts.cli.plan_explain import explain_plan

    inp, plan, alt, static = _plan(args)
    _print_plans(inp, static, plan, alt)
    width = min(shutil.get_terminal_size().columns, 100)
    peak = (f", KV peak {inp.decode_peak_len} a path when all N run at once"
            if inp.decode_peak_len else "")
    print(f"workload: N={args.n} paths, S={args.verifier_len}, S_dec={args.decode_len}, "
          f"S_cache={inp.s_cache} tokens{peak} (times predicted by the roofline model)")
    print(f"search: {args.method}: {inp.iterations} iterations, search tree {inp.tree_tokens} "
          f"tokens")
    for line in [*explain_plan(inp, plan, static, alt, considered=not args.no_offload),
                 speculation_budget(inp, plan, args.beam_width),
                 lookahead_budget(inp, args.beam_width)]:
        print(textwrap.fill(line, width, initial_indent="- ", subsequent_indent="  "))
    return 0


def speculation_budget(inp, plan, beam_width: int) -> str:
    """One line: which bins speculative beam extension fills free slots for under `plan`
    (`fasttts.runtime.spec_cost`: at b = min(N, B_dec) standard sequences of S_cache tokens,
    a branch of bin M_i is launched when its expected saving beats the step time it adds, for
    as long as the phase has the steps left that repay its launch)."""
    from fasttts.perf.roofline import DecodeCost
    from fasttts.runtime.spec_cost import SpeculationCost

    slots = max(1, min(inp.num_requests, plan.b_dec))
    bins = SpeculationCost(DecodeCost(inp.generator, inp.hardware), beam_width).bins(
        slots, inp.s_cache)
    filled = [b for b in bins if b.worth]
    prices = "; ".join(f"M={b.potential}: P={b.keep_probability:.2f}, saves "
                       f"{_seconds(b.saving_s)}" + _repaid(b) for b in bins)
    what = ("every free slot (all bins, the paper's policy)" if len(filled) == len(bins)
            else "no slot (no bin saves what it costs)" if not filled
            else f"free slots for beams of bins M >= {filled[-1].potential} only")
    return (f"speculation budget: at {slots} decode slots SBE fills {what}; one more sequence "
            f"adds {_seconds(bins[0].cost_s)} to a full step, a branch saves per step "
            f"{prices} (a beam's branch 0 saves 1 + R (B - M) times that with truncation "
            f"ratio R: its siblings' copies); a branch is launched while the phase has the "
            f"steps left that repay its launch, the prefill of its prompt's last partial KV "
            f"block ({inp.hardware.kv_block_size}-token blocks)")


def lookahead_budget(inp, beam_width: int) -> str:
    """One line: which bins' speculative steps LookAhead Verification carries
    (`fasttts.runtime.lookahead_verification.worth_riding`), for a step of `PLAN_STEP_LEN`
    tokens after a path of S_cache tokens, beside incremental verification (the path cached)
    and under whole-path scoring (all of it computed again)."""
    from fasttts.runtime.lookahead_verification import worth_riding
    from fasttts.runtime.memory_planner import PLAN_STEP_LEN
    from fasttts.runtime.spec_cost import keep_probability

    def bins(uncached: int) -> str:
        ok = [m for m in range(beam_width, 0, -1)
              if worth_riding(keep_probability(m, beam_width), PLAN_STEP_LEN, uncached)]
        return "none" if not ok else "all" if len(ok) == beam_width else f"M >= {ok[-1]}"

    top = keep_probability(beam_width, beam_width)
    return (f"LookAhead Verification carries a {PLAN_STEP_LEN}-token speculative step where "
            f"P x (L + the path's uncached tokens) >= L: with incremental verification "
            f"{bins(0)} (P at most {top:.2f}), with whole-path scoring of "
            f"{inp.s_cache}-token paths {bins(inp.s_cache)}")


def _repaid(b) -> str:
    """', repays its launch in K steps' of a bin that saves more than it costs, else ''."""
    if not b.worth:
        return ""
    return f", repays its launch ({_seconds(b.launch_s)}) in {b.break_even_steps:.1f} steps"


def _seconds(s: float) -> str:
    """A short time: microseconds below a millisecond, else milliseconds."""
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"
