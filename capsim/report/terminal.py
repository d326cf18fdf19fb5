"""Terminal tables that fold instead of truncating: never a number cut to ``4…``.

A :class:`FoldedTable` is a rich renderable. At print time it packs its column
groups, in order, into as few tables as the terminal's width allows; each table
repeats the key columns (the variant, a configuration's labels) so every line
still says what it is about. Figures never wrap or shrink (``no_wrap``); only
text columns (names, verdicts, notes) wrap, and fold a word longer than the room
left. Headers may hold a line break (``"ITL\\np99"``) to stay narrow when folding;
a terminal wide enough for everything gets one table with one-line headers. A capped
name breaks after a separator (``-``, ``_``, ``/``, ``.``, ``·``, a space) rather than
inside a word: ``a100-80gb`` stays whole where it fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


_UNBOUNDED = 100_000   # columns: wider than any terminal
_MIN_KEY = 8           # columns: narrowest a folded name gets
# a capped name may break after a space, or after a separator not followed by one
_BREAK_AFTER = re.compile(r"(?<=[-_/.·])(?!\s)|(?<=\s)(?!\s)")


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
    _key_caps: list[int | None] = field(default_factory=list, repr=False)   # by parts()

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
        self._key_caps = self._caps(width)
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

    def _caps(self, width: int) -> list[int | None]:
        """Each key column's width cap (None: whole). Keys wider than half the terminal
        share a third of it; a key narrower than its share (a rank "#") stays whole and
        leaves the rest to the others; a cap never cuts a word of the header."""
        wholes = [self._whole_width(i) for i in range(len(self.keys))]
        if sum(w + 3 for w in wholes) <= width // 2:
            return [None] * len(wholes)
        room, capped = width // 3, set(range(len(wholes)))
        while capped:
            share = room // len(capped) - 3
            narrow = {i for i in capped if wholes[i] <= share}
            if not narrow:
                break
            capped -= narrow
            room -= sum(wholes[i] + 3 for i in narrow)
        share = max(_MIN_KEY, room // max(len(capped), 1) - 3)
        # never narrower than the header's longest word ("configuration" whole)
        return [max(share, *(len(w) for w in self.keys[i].header.split())) if i in capped
                else None for i in range(len(wholes))]

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
            cap = self._key_caps[i] if i < len(self._key_caps) else None
            key = i < len(self.keys)
            whole = (key and cap is None) or (whole_keys and not c.text)
            table.add_column(c.header.replace("\n", " ") if one_line else c.header,
                             justify="left" if c.text else c.justify,
                             no_wrap=not c.text, overflow="fold", width=cap,
                             min_width=self._whole_width(i, one_line) if whole else None)
        for row in self.rows:
            table.add_row(*(_break_name(row[i], self._key_caps[i])
                            if i < len(self._key_caps) and self._key_caps[i] else row[i]
                            for i in index))
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


def _break_name(cell: Text | str, cap: int) -> Text:
    """``cell`` as lines of at most ``cap`` columns, broken after separators; a piece
    longer than ``cap`` is left for rich to fold."""
    text = Text(cell) if isinstance(cell, str) else cell
    if text.cell_len <= cap:
        return text
    plain = text.plain
    ends = [m.start() for m in _BREAK_AFTER.finditer(plain)] + [len(plain)]
    offsets, start, last = [], 0, 0
    for end in ends:
        if len(plain[start:end].rstrip()) > cap and last > start:   # overflow: break before
            offsets.append(last)
            start = last
        last = end
    lines = text.divide(offsets)
    for line in lines:
        line.rstrip()
    return Text("\n").join(lines)


# Where a line of prose must not break: before "%" ("6.5 %"), before "±" ("TTFT ±6.5"),
# before or inside a short parenthesis ("% (n 57)"): a figure stays with its unit and count.
_NO_BREAK = re.compile(r" (?=%|±)| (?=\([^()]{1,14}\))|(?<=\()[^()]{1,14}(?=\))")


@dataclass(frozen=True)
class Prose:
    """A paragraph wrapped to the console at spaces between tokens, never inside one
    (``±6.5 % (n 57)`` stays on one line; rich alone broke it after ``±6.5``); lines after
    the first are indented by ``indent`` columns. A token wider than the console stays
    whole (the terminal folds it)."""

    text: str
    indent: int = 2

    def lines(self, width: int) -> list[str]:
        """The paragraph as lines of at most ``width`` columns (but for overlong tokens)."""
        return wrap_prose(self.text, width, self.indent)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines(options.max_width):
            yield Text(line, no_wrap=True, overflow="ignore")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, options.max_width)


def wrap_prose(text: str, width: int, indent: int = 2) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken only at spaces
    :data:`_NO_BREAK` allows, lines after the first indented by ``indent``."""
    glue = "\x00"                  # a space that may not break, restored below
    kept = _NO_BREAK.sub(lambda m: m.group(0).replace(" ", glue), text)
    lines: list[str] = []
    current = ""
    for token in kept.split(" "):
        lead = " " * indent if lines else ""
        if current and len(lead) + len(current) + 1 + len(token) > width:
            lines.append(lead + current)
            current = token
        else:
            current = f"{current} {token}" if current else token
    lines.append((" " * indent if lines else "") + current)
    return [line.replace(glue, " ") for line in lines]
