"""The terminal summary the CLI prints after a run (rich table, cls == "all" rows only)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from capsim.report.cells import fmt, target_status
from capsim.report.run.table import DISAGG_COLUMNS, console_columns, failed_list
from capsim.results.model import SummaryRow
from capsim.scenario.slo import SloConfig

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


# The report's disaggregation columns a terminal has room for.
_SPLIT_KEYS = ("disagg", "prefill_busy_frac", "decode_busy_frac", "decode_slot_occupancy",
               "stranded_prefill_frac", "stranded_decode_frac", "kv_transfer_p99_ms",
               "kv_backpressure_p99_ms", "second_token_p99_ms")


def disagg_table(rows: list[SummaryRow]) -> Table | None:
    """One line per disaggregated variant: its split, pool busy / batch fill / stranded
    fractions, KV transfer and back-pressure p99 and token 1→2 p99 (ms); None when no
    variant is disaggregated. The report's table has the rest."""
    split = [r for r in rows if r.cls == "all" and r.disagg]
    if not split:
        return None
    cols = [c for c in DISAGG_COLUMNS if c.key in _SPLIT_KEYS]
    table = Table(title="prefill / decode pools (disaggregated variants; latencies in ms)",
                  title_justify="left", header_style="bold")
    table.add_column("variant", no_wrap=True, overflow="fold")
    for c in cols:
        group = c.group.removesuffix(" ms")
        table.add_column(c.label if group == "Pools" else f"{group} {c.label}",
                         justify="left" if c.kind == "text" else "right")
    for row in split:
        table.add_row(row.variant, *(getattr(row, c.key) if c.kind == "text"
                                     else fmt(getattr(row, c.key), c.kind) for c in cols))
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
