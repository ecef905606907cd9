"""The rich tables the commands print."""

from __future__ import annotations

__all__ = ["table"]


def table(title: str, subtitle: str | None = None):
    """A `rich.table.Table` whose title is plain text (no markup) and never wraps: the table is
    at least as wide as its title's first line (on a terminal that wide); `subtitle`, a second
    header line (what the run ran on), wraps at the table's width if it must."""
    from rich.table import Table
    from rich.text import Text

    heading = Text(title, style="italic")
    if subtitle:
        heading.append("\n" + subtitle, style="none")
    return Table(title=heading, min_width=len(title))
