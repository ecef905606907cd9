"""The rich tables the commands print."""

from __future__ import annotations

__all__ = ["table"]


def table(title: str):
    """A `rich.table.Table` whose title is plain text (no markup) and never wraps: the table is
    at least as wide as its title (on a terminal that wide)."""
    from rich.table import Table
    from rich.text import Text

    return Table(title=Text(title, style="italic"), min_width=len(title))
