"""The rich tables the commands print."""

from __future__ import annotations

__all__ = ["print_table", "table"]


def table(title: str | None = None):
    """A `rich.table.Table` whose title (if any) is plain text (no markup) and never wraps:
    the table is at least as wide as the title (on a terminal that wide)."""
    from rich.table import Table
    from rich.text import Text

    if title is None:
        return Table()
    return Table(title=Text(title, style="italic"), min_width=len(title))


def print_table(t, header: list[str] = ()) -> None:
    """Print table `t` under the `header` lines (what a run ran, what it ran on), each
    left-aligned and unbroken: a terminal wraps a long line at its edge, a log or file gets it
    whole."""
    from rich.console import Console
    from rich.text import Text

    console = Console()
    for line in header:
        console.print(Text(line), soft_wrap=True)
    console.print(t)
