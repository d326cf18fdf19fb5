"""Terminal tables of ``capsim sweep`` and ``capsim size`` (rich), from :mod:`.tables`."""

from __future__ import annotations

from rich.table import Table as RichTable
from rich.text import Text

from capsim.report.sweep.tables import Table

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow"}


def rich_table(t: Table, title: str, drop: tuple[str, ...] = ()) -> RichTable:
    """``t`` as a rich table; columns named in ``drop`` are left out (e.g. long notes)."""
    keep = [i for i, c in enumerate(t.columns) if c not in drop]
    out = RichTable(title=title, title_justify="left", header_style="bold")
    for i in keep:
        out.add_column(t.columns[i], justify="left" if i < t.left or t.columns[i] == "note"
                       else "right", overflow="fold")
    for row in t.rows:
        out.add_row(*(Text(row[i].text, style=_STYLE.get(row[i].status, "")) for i in keep))
    return out
