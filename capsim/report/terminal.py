"""Terminal tables that fold instead of truncating: never a number cut to ``4…``.

A :class:`FoldedTable` is a rich renderable. At print time it packs its column
groups, in order, into as few tables as the terminal's width allows; each table
repeats the key columns (the variant, a configuration's labels) so every line
still says what it is about. Figures never wrap or shrink (``no_wrap``); only
text columns (names, verdicts, notes) wrap, and fold a word longer than the room
left. Headers may hold a line break (``"ITL\\np99"``) to stay narrow when folding;
a terminal wide enough for everything gets one table with one-line headers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


_UNBOUNDED = 100_000   # columns: wider than any terminal
_MIN_KEY = 8           # columns: narrowest a folded name gets


@dataclass(frozen=True)
class FoldColumn:
    """One column: its header, whether it holds text (may wrap) and its alignment."""

    header: str
    text: bool = False
    justify: str = "right"


@dataclass
class FoldedTable:
    """Key columns + groups of columns, folded to the console width when printed.

    Attributes:
        title: shown above the first table.
        keys: columns repeated in every table (left-aligned text).
        groups: the other columns, in order; a group stays in one table when it fits.
        rows: one list of cells (str or rich Text) per line: keys first, then every
            group's columns in order.
    """

    title: str
    keys: list[FoldColumn]
    groups: list[list[FoldColumn]]
    rows: list[list[Text | str]] = field(default_factory=list)
    _key_cap: int | None = field(default=None, repr=False)   # set by parts()

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def add_row(self, *cells: Text | str) -> None:
        self.rows.append(list(cells))

    def parts(self, console: Console, width: int) -> list[Table]:
        """The tables this one folds into at ``width`` columns."""
        options = console.options.update_width(width)
        spans, start = [], len(self.keys)
        for group in self.groups:
            spans.append(list(range(start, start + len(group))))
            start += len(group)
        every = list(range(len(self.keys), start))
        # Names wider than half the terminal fold into a fixed share of it (a third).
        whole = sum(self._whole_width(i) + 3 for i in range(len(self.keys)))
        self._key_cap = (None if whole <= width // 2
                         else max(_MIN_KEY, width // 3 // max(len(self.keys), 1) - 3))
        if self._fits(console, options, every, width, one_line=True):   # wide: one table,
            return [self._table(every, first=True, one_line=True)]     # one-line headers
        packs: list[list[int]] = []
        for span in spans:
            if packs and self._fits(console, options, packs[-1] + span, width):
                packs[-1] += span
            else:
                packs.append(list(span))
        # A group wider than the terminal on its own: split it column by column.
        out: list[list[int]] = []
        for pack in packs:
            if self._fits(console, options, pack, width) or len(pack) == 1:
                out.append(pack)
                continue
            current: list[int] = []
            for i in pack:
                if current and not self._fits(console, options, current + [i], width):
                    out.append(current)
                    current = []
                current.append(i)
            out.append(current)
        return [self._table(cols, first=n == 0) for n, cols in enumerate(out)]

    def _columns(self) -> list[FoldColumn]:
        return self.keys + [c for g in self.groups for c in g]

    def _fits(self, console: Console, options: ConsoleOptions, cols: list[int],
              width: int, one_line: bool = False) -> bool:
        # Measured unconstrained (rich clamps a table's measurement to the width offered),
        # with the key and figure columns whole (rich's minimum would wrap their headers
        # and names at spaces): a variant name should not wrap to make room.
        wide = options.update_width(_UNBOUNDED)
        table = self._table(cols, first=False, whole_keys=True, one_line=one_line)
        return Measurement.get(console, wide, table).minimum <= width

    def _table(self, cols: list[int], first: bool, whole_keys: bool = False,
               one_line: bool = False) -> Table:
        every = self._columns()
        table = Table(title=self.title if first else None, title_justify="left",
                      header_style="bold")
        index = list(range(len(self.keys))) + cols
        for i in index:
            c = every[i]
            # Keys whole (rich would wrap a name to give a verdict room) unless capped; in
            # a fit check, figures whole too (rich's minimum would wrap their headers).
            key = i < len(self.keys)
            whole = (key and self._key_cap is None) or (whole_keys and not c.text)
            table.add_column(c.header.replace("\n", " ") if one_line else c.header,
                             justify="left" if c.text else c.justify,
                             no_wrap=not c.text, overflow="fold",
                             width=self._key_cap if key else None,
                             min_width=self._whole_width(i, one_line) if whole else None)
        for row in self.rows:
            table.add_row(*(row[i] for i in index))
        return table

    def _whole_width(self, i: int, one_line: bool = False) -> int:
        """Column ``i``'s width without wrapping: its longest header line or cell."""
        cells = (Text(r[i]) if isinstance(r[i], str) else r[i] for r in self.rows)
        text = self._columns()[i].header
        header = max(Text(line).cell_len
                     for line in (text.replace("\n", " ") if one_line else text).split("\n"))
        return max([header, *(cell.cell_len for cell in cells)])

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.parts(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, options.max_width)
