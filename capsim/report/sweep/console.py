"""Terminal tables of ``capsim sweep`` and ``capsim size`` (rich), from :mod:`.tables`.

Each is a :class:`~capsim.report.terminal.FoldedTable`: in a narrow terminal the
columns fold into several tables that repeat the configuration's labels; no figure
is cut.
"""

from __future__ import annotations

from rich.text import Text

from capsim.report.sweep.tables import Table
from capsim.report.terminal import FoldColumn, FoldedTable

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow"}

#: Columns holding sentences or names (they may wrap); every other column is a figure.
_TEXT = ("note", "binding SLO (worst run)", "cheapest passing configuration", "status")

#: A swept field's dotted path longer than this heads its column by its last part: the
#: label columns repeat in every folded part, and 41 characters of
#: variants.0.engine.max_num_batched_tokens would take half of an 80-column terminal.
_LONGEST_LABEL = 24

#: Columns kept together when they fit (a target and its margin).
_TOGETHER = {"margin": "binding SLO (worst run)"}


def rich_table(t: Table, title: str, drop: tuple[str, ...] = ()) -> FoldedTable:
    """``t`` as a folding terminal table; columns named in ``drop`` are left out (they stay
    in the report). The ``t.left`` label columns repeat in every folded part; a long
    dotted swept field is headed by its last part (``max_num_batched_tokens``) unless two
    share it."""
    keep = [i for i, c in enumerate(t.columns) if c not in drop]
    keys = [i for i in keep if i < t.left]
    short = [t.columns[i].rsplit(".", 1)[-1] if len(t.columns[i]) > _LONGEST_LABEL
             else t.columns[i] for i in keys]
    heads = {i: (s if short.count(s) == 1 else t.columns[i]) for i, s in zip(keys, short)}
    groups: list[list[int]] = []
    for i in keep:
        if i < t.left:
            continue
        if groups and _TOGETHER.get(t.columns[i]) == t.columns[groups[-1][-1]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    out = FoldedTable(title, [FoldColumn(heads[i], text=True) for i in keys],
                      [[_column(t.columns[i]) for i in g] for g in groups])
    order = keys + [i for g in groups for i in g]
    for row in t.rows:
        out.add_row(*(Text(row[i].text, style=_STYLE.get(row[i].status, "")) for i in order))
    return out


def _column(name: str) -> FoldColumn:
    return FoldColumn(name, text=name in _TEXT)
