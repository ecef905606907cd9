"""matplotlib for the report hooks of `fasttts bench` (`fasttts.bench.Recipe.report`): figures
drawn off-screen (the Agg backend: no display needed) and saved as PNGs into the recipe's
figure folder."""

from __future__ import annotations

from pathlib import Path

__all__ = ["pyplot", "save", "subplots"]


def pyplot():
    """matplotlib.pyplot, on the Agg backend (files only: no display is needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def subplots(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6):
    """A new figure of `nrows` x `ncols` panels, each `width` x `height` inches, on the Agg
    backend: (figure, axes as a flat list)."""
    fig, axes = pyplot().subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    return fig, [ax for row in axes for ax in row]


def save(fig, figdir: str | Path, name: str) -> str:
    """Write `fig` as `figdir/name` (a PNG, 120 dpi, the folder created), close it, and
    return `name` (for `Section.figures`)."""
    import matplotlib.pyplot as plt

    figdir = Path(figdir)
    figdir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(figdir / name, dpi=120)
    plt.close(fig)
    return name
