"""The terminal summary the CLI prints after a run (rich table, cls == "all" rows only)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from capsim.report.columns import console_columns, failed_list, fmt, target_status
from capsim.results import SummaryRow
from capsim.slo import SloConfig

_STYLE = {"pass": "green", "fail": "bold red"}


def summary_table(rows: list[SummaryRow], slo: SloConfig) -> Table:
    """One line per variant: GPUs, req/s, out tok/s, goodput %, TTFT p99, TPOT p50,
    ITL p50/p99/max (ms), stalls, preemptions, rejected and the SLO verdict.

    Cells bounded by an SLO target are green (met) or red (missed); a stall
    count above zero is yellow when no target bounds it.
    """
    cols = console_columns(slo)
    table = Table(title="capsim summary (latencies in ms)", title_justify="left",
                  header_style="bold", show_lines=False)
    table.add_column("variant", no_wrap=True, overflow="fold")
    for c in cols:
        table.add_column(c.title, justify="right")
    table.add_column("SLO", justify="left", min_width=14, overflow="fold")
    for row in rows:
        if row.cls != "all":
            continue
        cells = []
        for c in cols:
            value = getattr(row, c.key)
            style = _STYLE.get(target_status(c.key, value, slo) or "", "")
            if not style and c.key == "itl_stalls" and value > 0:
                style = "yellow"
            if c.key in ("itl_max_ms", "itl_stalls"):
                style = f"bold {style}".strip()
            cells.append(Text(fmt(value, c.kind), style=style))
        table.add_row(Text(row.variant), *cells, _verdict(row, slo))
    return table


def _verdict(row: SummaryRow, slo: SloConfig) -> Text:
    if not slo.targets:
        return Text("n/a", style="dim")
    if row.slo_pass:
        return Text("PASS", style="bold green")
    text = Text("FAIL", style="bold red")
    failed = failed_list(row)
    if failed:
        text.append(" " + "; ".join(failed), style="red")
    return text
