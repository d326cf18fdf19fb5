"""The page of ``capsim compare``: measured vs simulated latency distributions.

:func:`write` builds the directory (atomically, like every report, so ``-o`` follows
:func:`capsim.report.outdir.check_out_dir`): ``index.html`` (jinja2 ``compare.html``,
autoescaped, offline), ``compare_cdf.png`` (four CDF panels — TTFT, TPOT, ITL, E2E —
measured and simulated on each, log ms, p50 / p99 / max marked), ``summary.csv`` (the
error table), ``requests.csv`` (:func:`capsim.calibrate.compare.request_table`) and
``scenario.resolved.yaml``. :func:`error_table` is the same table for the terminal (rich).

Public API:
    write, error_table, FIGURE
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from rich.table import Table
from rich.text import Text

import capsim
from capsim.calibrate.compare import METRICS, Comparison, ErrorRow, Samples, request_table
from capsim.report.cells import fmt
from capsim.report.outdir import write_atomically
from capsim.report.pages import FigureRef, environment
from capsim.report.plotting import PERCENT, cdf_y, draw_cdf, figure, mark, ms_axis, save, x_limits
from capsim.report.run.cdf import distribution
from capsim.report.run.html import config_line
from capsim.report.style import RC

FIGURE = "compare_cdf.png"
MEASURED, SIMULATED = "#222222", "#0072B2"
#: Line style per side: the simulated curve dashed, so it shows where it covers the measured.
_STYLE = {"measured": "-", "simulated": (0, (4, 2))}
#: |error %| up to GOOD is green, up to FAIR amber, beyond red (terminal and page).
GOOD_PCT, FAIR_PCT = 10.0, 25.0

_TITLES = {"ttft": "TTFT (time to first token)", "tpot": "TPOT ((E2E − TTFT) ÷ (out − 1))",
           "itl": "ITL (every token gap, pooled)", "e2e": "E2E (send → last token)"}
_CAPTION = ("Share of requests (ITL: of token gaps) at or below x, log ms; measured in black, "
            "simulated in blue, over the same successful requests. Markers: ○ p50, △ p99, "
            "★ max. A simulated curve left of the measured one means the simulator is "
            "optimistic; a gap only in the tail points at stalls or queueing it does not model.")


def _tone(error_pct: float) -> str:
    if math.isnan(error_pct):
        return ""
    return "good" if abs(error_pct) <= GOOD_PCT else "fair" if abs(error_pct) <= FAIR_PCT \
        else "poor"


def _pct(error_pct: float) -> str:
    return "—" if math.isnan(error_pct) else f"{error_pct:+.1f} %"


def error_table(c: Comparison) -> Table:
    """The error table for the terminal: one line per metric × statistic, ms and error %."""
    table = Table(title="measured vs simulated (ms)",
                  title_justify="left", header_style="bold")
    for col in ("metric", "stat", "measured", "simulated", "error"):
        table.add_column(col, justify="left" if col in ("metric", "stat") else "right")
    style = {"good": "green", "fair": "yellow", "poor": "bold red", "": "dim"}
    previous = None
    for r in c.rows:
        table.add_row(METRICS[r.metric] if r.metric != previous else "", r.stat,
                      fmt(r.measured_ms, "ms"), fmt(r.simulated_ms, "ms"),
                      Text(_pct(r.error_pct), style=style[_tone(r.error_pct)]),
                      end_section=r.stat == "mean")
        previous = r.metric
    return table


def _frame(rows: list[ErrorRow]) -> pd.DataFrame:
    return pd.DataFrame([{"metric": r.metric, "stat": r.stat, "measured_ms": r.measured_ms,
                          "simulated_ms": r.simulated_ms, "error_pct": r.error_pct,
                          "n_measured": r.n_measured, "n_simulated": r.n_simulated}
                         for r in rows])


def _dist(samples: Samples | None):
    if samples is None:
        return distribution(np.empty(0))
    return distribution(np.asarray(samples.values_s, np.float64) * 1e3, samples.counts)


def plot_cdfs(c: Comparison, path: Path) -> None:
    """Four panels (TTFT, TPOT, ITL, E2E): measured and simulated CDFs, log ms."""
    with matplotlib.rc_context(RC):
        fig = figure(12.0, 8.4)
        for ax, (metric, (meas, sim)) in zip(fig.subplots(2, 2).ravel(), c.samples.items()):
            dm, ds = _dist(meas), _dist(sim)
            handles = []
            for d, colour, who, n in ((dm, MEASURED, "measured", meas), (ds, SIMULATED,
                                                                          "simulated", sim)):
                if d.empty:
                    text = "not in the file" if n is None else "no data"
                    handles.append(Line2D([], [], color=colour, lw=2, ls=_STYLE[who],
                                          label=f"{who}: {text}"))
                    continue
                draw_cdf(ax, d, colour)
                ax.get_lines()[-1].set_linestyle(_STYLE[who])
                mark(ax, d, colour, ("p50", "p99", "max"), cdf_y)
                handles.append(Line2D([], [], color=colour, lw=2, ls=_STYLE[who], label=(
                    f"{who}: p50 {fmt(d.markers['p50'], 'ms')}, p99 "
                    f"{fmt(d.markers['p99'], 'ms')} ms (n = {d.total:,})")))
            lo, hi = x_limits([dm, ds], [])
            ms_axis(ax, f"{METRICS[metric]} (ms, log scale)", lo, hi)
            ax.set_ylim(0, 1.04)
            ax.yaxis.set_major_formatter(PERCENT)
            ax.set_ylabel("share ≤ x")
            ax.set_title(_TITLES[metric])
            ax.legend(handles=handles, loc="lower right", fontsize=8, framealpha=0.9)
        save(fig, path)


def _context(c: Comparison, *, scenario_name: str, notes: list[str]) -> dict:
    m = c.measured
    rate = "—" if m.request_rate_per_s is None else (
        "inf (all at once)" if math.isinf(m.request_rate_per_s) else f"{m.request_rate_per_s:g}")
    concurrency = "none" if m.max_concurrency is None else f"{m.max_concurrency}"
    duration = "not saved" if m.duration_s is None else f"{m.duration_s:,.1f} s"
    requests = (f"{len(m):,} in the file, {int(m.success.sum()):,} successful, "
                f"{len(c.replay.rows):,} replayed, {int(c.replay.measured.sum()):,} compared")
    facts = [("file", m.path), ("format", f"{m.label} (schema: {m.source})"),
             ("run", m.run_label or "the only one"),
             ("model (as the client named it)", m.model or "not saved"),
             ("request rate (req/s)", rate), ("max concurrency", concurrency),
             ("measured duration", duration), ("requests", requests)]
    return {"scenario_name": scenario_name, "variant": c.result.variant,
            "config": config_line(c.result),
            "version": capsim.__version__,
            "generated": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "facts": facts, "arrivals": c.replay.note, "exact": c.replay.exact,
            "notes": notes, "figure": FigureRef(FIGURE, "Measured vs simulated", _CAPTION),
            "rows": [{"metric": METRICS[r.metric], "stat": r.stat, "first": r.stat == "p50",
                      "measured": fmt(r.measured_ms, "ms"),
                      "simulated": fmt(r.simulated_ms, "ms"),
                      "error": _pct(r.error_pct), "tone": _tone(r.error_pct)} for r in c.rows],
            "good_pct": f"{GOOD_PCT:g}", "fair_pct": f"{FAIR_PCT:g}"}


def write(out_dir: Path, c: Comparison, *, scenario_name: str, resolved_yaml: str,
          notes: list[str]) -> Path:
    """Write the comparison page into ``out_dir`` (replaced whole); return its index.html.

    Args:
        c: the comparison (:func:`capsim.calibrate.compare.compare`).
        scenario_name: shown in the header with the variant and its fleet.
        resolved_yaml: the resolved scenario, written as ``scenario.resolved.yaml``.
        notes: sentences shown under the header (what was derived, assumed, left out).
    """
    def build(d: Path) -> None:
        _frame(c.rows).to_csv(d / "summary.csv", index=False)
        request_table(c).to_csv(d / "requests.csv", index=False)
        (d / "scenario.resolved.yaml").write_text(resolved_yaml, encoding="utf-8")
        plot_cdfs(c, d / FIGURE)
        html = environment().get_template("compare.html").render(**_context(
            c, scenario_name=scenario_name, notes=notes))
        (d / "index.html").write_text(html, encoding="utf-8")

    return write_atomically(out_dir, build) / "index.html"
