"""The terminal summary the CLI prints after a run (cls == "all" rows only).

Both tables are :class:`~capsim.report.terminal.FoldedTable`: in a narrow terminal
their column groups fold into several tables, each repeating the variant, and no
figure is ever cut.
"""

from __future__ import annotations

from itertools import groupby

from rich.text import Text

from capsim.report.cells import fmt, target_status
from capsim.metrics.summary import HELD_TEXT
from capsim.report.run.table import (DISAGG_COLUMNS, Column, console_columns, failed_list,
                                     held_cell)
from capsim.report.terminal import FoldColumn, FoldedTable
from capsim.results.model import SummaryRow
from capsim.scenario.slo import SloConfig, quantity_text

#: Header groups that share one folded table when they fit (latencies together).
_FOLD_GROUP = {"Fleet": "Throughput", "TTFT ms": "Latency", "TPOT ms": "Latency"}


def _header(c: Column) -> str:
    """Two short lines, e.g. "TTFT\np99", "out\ntok/s", "stalls\n>200 ms"."""
    if c.group.endswith(" ms") and not c.key.endswith("_stalls"):
        return f"{c.group.removesuffix(' ms')}\n{c.label}"
    return c.label.replace(" ", "\n", 1)


def _groups(cols: list[Column]) -> list[list[Column]]:
    return [list(g) for _, g in groupby(cols, key=lambda c: _FOLD_GROUP.get(c.group, c.group))]


_STYLE = {"pass": "green", "fail": "bold red"}


def summary_table(rows: list[SummaryRow], slo: SloConfig,
                  percentiles: tuple[float, ...] | None = None,
                  held: frozenset[str] = frozenset()) -> FoldedTable:
    """One line per variant: GPUs, req/s, out tok/s, goodput %, TTFT p99, TPOT p50,
    ITL p50/p99/max (ms), stalls, preemptions, rejected and the SLO verdict; with
    ``percentiles`` (``--percentiles``) TTFT, TPOT and ITL at each of them.

    Cells bounded by an SLO target are green (met) or red (missed); a stall
    count above zero is yellow when no target bounds it. The ITL of a variant in
    ``held`` (replies held whole: :func:`~capsim.report.run.table.held_variants`) reads
    "n/a", red where a target bounds it (the verdict fails it), never green;
    :func:`held_reply_lines` says why under the table.
    """
    cols = console_columns(slo, percentiles)
    table = FoldedTable("capsim summary (latencies in ms)", [FoldColumn("variant", text=True)],
                        [[FoldColumn(_header(c)) for c in g] for g in _groups(cols)]
                        + [[FoldColumn("SLO", text=True)]])
    for row in rows:
        if row.cls != "all":
            continue
        cells = []
        for c in cols:
            value = row.value(c.key)
            style = _STYLE.get(target_status(c.key, value, slo) or "", "")
            if held_cell(row, c.key, held):
                cells.append(Text("n/a", style=style or "dim"))
                continue
            if not style and c.key == "itl_stalls" and value > 0:
                style = "yellow"
            if c.key in ("itl_max_ms", "itl_stalls"):
                style = f"bold {style}".strip()
            cells.append(Text(fmt(value, c.kind), style=style))
        table.add_row(Text(row.variant), *cells, _verdict(row, slo))
    return table


def held_reply_lines(rows: list[SummaryRow], held: frozenset[str]) -> list[str]:
    """One line per variant whose replies are held whole (static batching): why its ITL
    reads n/a and where its wait shows instead (TTFT = E2EL)."""
    return [f"{r.variant}: ITL {HELD_TEXT}: static batching returns each reply whole when "
            f"its batch ends, so no gap between tokens reaches the client; the wait is in "
            f"TTFT = E2EL (p99 {quantity_text('ttft_p99_ms', r.ttft_p99_ms)}), and TPOT is 0 "
            "by vLLM's formula"
            for r in rows if r.cls == "all" and r.variant in held]


# The report's disaggregation columns a terminal has room for.
_SPLIT_KEYS = ("disagg", "prefill_busy_frac", "decode_busy_frac", "decode_slot_occupancy",
               "stranded_prefill_frac", "stranded_decode_frac", "kv_transfer_p99_ms",
               "kv_backpressure_p99_ms", "second_token_p99_ms")


def disagg_table(rows: list[SummaryRow]) -> FoldedTable | None:
    """One line per disaggregated variant: its split, pool busy / batch fill / stranded
    fractions, KV transfer and back-pressure p99 and token 1→2 p99 (ms); None when no
    variant is disaggregated. The report's table has the rest."""
    split = [r for r in rows if r.cls == "all" and r.disagg]
    if not split:
        return None
    cols = [c for c in DISAGG_COLUMNS if c.key in _SPLIT_KEYS]
    heads = [FoldColumn(c.label.replace(" ", "\n", 1) if c.group == "Pools"
                        else f"{c.group.removesuffix(' ms')}\n{c.label}", text=c.kind == "text")
             for c in cols]
    table = FoldedTable("prefill / decode pools (disaggregated variants; latencies in ms)",
                        [FoldColumn("variant", text=True)],
                        [[h for h, _ in g] for _, g in groupby(zip(heads, cols),
                                                               key=lambda hc: hc[1].group)])
    for row in split:
        table.add_row(row.variant, *(getattr(row, c.key) if c.kind == "text"
                                     else fmt(getattr(row, c.key), c.kind) for c in cols))
    return table


def day_table(results: list, frames: dict) -> FoldedTable | None:
    """One line per variant with a day view: the report's fleet table (policy, GPU-hours,
    cost of the day, $/M out tok, replicas, scale-ups, failures, requests retried / failed /
    timed out, SLO-violation minutes; :func:`capsim.report.run.day.table`); None when no
    variant has one."""
    from capsim.engine.fleet import policy_head
    from capsim.report.run import day     # the report's columns and cells

    table = day.table(results, frames, {})
    if not table["rows"]:
        return None
    # The policy as one line (its first clauses; the page has the sentence): a wrapping
    # column made the fold check pack more beside it than the terminal holds.
    heads = [FoldColumn("policy", justify="left")] + \
        [FoldColumn(c.replace(" ", "\n", 1)) for c in day.COLUMNS[1:]]
    out = FoldedTable(f"the day ({day.windows_text(frames)} windows; cost of the whole run)",
                      [FoldColumn("variant", text=True)],
                      [heads[:1], heads[1:4], heads[4:8], heads[8:11], heads[11:]])
    for row in table["rows"]:
        policy, *cells = row["cells"]
        out.add_row(row["variant"], policy_head(policy), *cells)
    return out


def day_verdict_lines(rows: list[SummaryRow], frames: dict, slo: SloConfig) -> list[str]:
    """A line for each variant that meets the run-level targets over the whole run (PASS)
    while some of its day-view windows broke them: the verdict is the whole run's
    percentiles, and a bad hour can hide in a day's."""
    from capsim.metrics.day import violation_minutes, window_label

    out = []
    for row in rows:
        frame = frames.get(row.variant)
        if row.cls != "all" or frame is None or not row.slo_pass or not slo.targets:
            continue
        minutes = violation_minutes(frame)
        if minutes > 0:
            n = int(frame["violation"].sum())
            label = window_label(float(frame["window_s"].iloc[0]))
            out.append(f"{row.variant}: PASS over the whole run, but its p99 ITL or TTFT broke "
                       f"the target in {n} of its {label} windows ({minutes:g} minutes; "
                       "day.csv)")
    return out


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


def pools_table(results, slo: SloConfig, class_slos) -> FoldedTable | None:
    """Pooled fleets (``cluster.pools``): one line per variant × pool and the variant's
    fleet total — GPU and TP (× PP), replicas, requests, TTFT / ITL p99, out tok/s, goodput, $/h
    and $/M out tok; None when no variant is pooled. The report's table has the rest."""
    from capsim.report.run import pools       # the report's columns and rows
    if not pools.has_pools(results):
        return None
    df = pools.frame(results, slo, class_slos)
    tab = pools.table(df, results, {})
    keep = ("GPU, parallel", "replicas", "requests", "TTFT p99", "ITL p99", "out tok/s", "goodput",
            "$/h", "$/M out tok")
    idx = [tab["columns"].index(k) for k in keep]
    table = FoldedTable("pools (pooled fleets; latencies in ms)",
                        [FoldColumn("variant", text=True), FoldColumn("pool", text=True)],
                        [[FoldColumn("GPU, parallel", text=True), FoldColumn("replicas"),
                          FoldColumn("requests")],
                         [FoldColumn("TTFT\np99"), FoldColumn("ITL\np99")],
                         [FoldColumn("out\ntok/s"), FoldColumn("goodput"), FoldColumn("$/h"),
                          FoldColumn("$/M\nout tok")]])
    for row in tab["rows"]:
        cells = [row["cells"][i] for i in idx]
        cells[0] = cells[0].replace(" + ", "+")
        table.add_row(row["variant"].rsplit(" · ", 1)[0], row["pool"], *cells)
    return table
