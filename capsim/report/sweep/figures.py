"""Charts of a sweep or sizing search: latency curves against load, cost vs tail-latency Pareto.

Inputs are configuration-level frames (one row per configuration, metrics
averaged over replications, ``<metric>_ci95`` half-widths; see
:func:`capsim.studies.confidence.aggregate`) split into :class:`Series` — one line per
variant (plus whatever else the sweep varies besides the load). Latencies
are milliseconds. Same style as the run report's figures (helpers of
:mod:`capsim.report.plotting`, ``style.RC``); filled markers meet every SLO target in every
replication, hollow ones miss at least one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from capsim.studies.confidence import CI_SUFFIX
from capsim.report.plotting import PLAIN, figure, log_axis, save, short
from capsim.report.style import RC
from capsim.scenario.slo import SloConfig

_TARGET = "#C0392B"

#: (column, panel title) of the latency curves, in panel order.
CURVE_METRICS = (("itl_p50_ms", "ITL p50"), ("itl_p99_ms", "ITL p99"),
                 ("itl_max_ms", "ITL max"), ("ttft_p99_ms", "TTFT p99"))
#: Tail latencies the Pareto panels put against cost.
PARETO_METRICS = (("itl_p99_ms", "ITL p99"), ("itl_max_ms", "ITL max"),
                  ("ttft_p99_ms", "TTFT p99"))
COST = "cost_per_million_output_tokens_usd"


@dataclass(frozen=True)
class Series:
    """One line: its legend label, colour and rows (sorted by the x column)."""

    label: str
    colour: str
    rows: pd.DataFrame


def _log_y(ax, values: list[float]) -> None:
    """Log y axis over the positive finite ``values``, with plain labels (1-2-5 ticks when the
    data span ≤ 3 decades)."""
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    ax.set_yscale("log")
    if not vals:
        log_axis(ax.yaxis, PLAIN)
        return
    lo, hi = min(vals) / 1.5, max(vals) * 1.5
    ax.set_ylim(lo, hi)
    log_axis(ax.yaxis, PLAIN, lo, hi)


def _column(rows: pd.DataFrame, name: str) -> np.ndarray:
    return rows[name].to_numpy(np.float64) if name in rows else np.full(len(rows), np.nan)


def _draw_series(ax, s: Series, x_col: str, metric: str) -> None:
    rows = s.rows
    x, y = _column(rows, x_col), _column(rows, metric)
    ci = _column(rows, metric + CI_SUFFIX)
    ax.plot(x, y, color=s.colour, lw=1.8, zorder=3)
    if np.isfinite(ci).any():
        lo, hi = y - np.nan_to_num(ci), y + np.nan_to_num(ci)
        ax.fill_between(x, np.maximum(lo, y * 1e-3), hi, color=s.colour, alpha=0.18, lw=0,
                        zorder=2)
    ok = rows["slo_pass_all"].to_numpy(bool)
    ax.plot(x[ok], y[ok], ls="", marker="o", color=s.colour, ms=6, zorder=4)
    ax.plot(x[~ok], y[~ok], ls="", marker="o", color=s.colour, mfc="white", mew=1.6, ms=6,
            zorder=4)


def _target_line(ax, slo: SloConfig, metric: str) -> bool:
    if metric not in slo.targets:
        return False
    ax.axhline(slo.targets[metric], color=_TARGET, ls="--", lw=1.3, zorder=1)
    return True


def _marker_legend(has_target: bool) -> list[Line2D]:
    out = [Line2D([], [], ls="", marker="o", color="#444", label="meets every SLO target"),
           Line2D([], [], ls="", marker="o", color="#444", mfc="white", mew=1.6,
                  label="misses a target (in ≥ 1 replication)")]
    if has_target:
        out.append(Line2D([], [], color=_TARGET, ls="--", lw=1.3, label="SLO target"))
    return out


def plot_latency_curves(series: list[Series], x_col: str, x_label: str, slo: SloConfig,
                        path: Path) -> None:
    """2 × 2 panels (ITL p50, ITL p99, ITL max, TTFT p99) against ``x_col``, one line per series.

    Shaded bands: 95 % confidence interval of the mean over replications
    (absent with one seed). Dashed red: the metric's SLO target, if any.
    """
    with matplotlib.rc_context(RC):
        fig = figure(12.0, 8.4)
        axes = fig.subplots(2, 2, sharex=True).ravel()
        any_target = False
        for ax, (metric, title) in zip(axes, CURVE_METRICS):
            for s in series:
                _draw_series(ax, s, x_col, metric)
            any_target |= _target_line(ax, slo, metric)
            values = [v for s in series for v in _column(s.rows, metric)]
            values += [slo.targets[metric]] if metric in slo.targets else []
            _log_y(ax, values)
            ax.set_title(title + (f" (target ≤ {slo.targets[metric]:g} ms)"
                                  if metric in slo.targets else ""))
            ax.set_ylabel("ms (log scale)")
        for ax in axes[2:]:
            ax.set_xlabel(x_label)
        handles = [Line2D([], [], color=s.colour, lw=2, label=short(s.label, 48)) for s in series]
        fig.legend(handles=handles + _marker_legend(any_target), loc="outside lower center",
                   ncol=min(3, len(handles) + 2), frameon=False)
        save(fig, path)


def pareto_front(cost: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (lower cost and lower latency are better).

    A point is on the front when no other point is at most as costly and at
    most as slow, and strictly better in one. NaN points are never on it.
    Returns indices sorted by cost.
    """
    c, lat = np.asarray(cost, np.float64), np.asarray(latency, np.float64)
    order = np.lexsort((lat, c))                      # by cost, ties by latency
    idx = [i for i in order if np.isfinite(c[i]) and np.isfinite(lat[i])]
    front, best = [], math.inf
    for i in idx:
        if lat[i] < best:
            front.append(i)
            best = lat[i]
    return np.array(front, dtype=np.int64)


def plot_pareto(series: list[Series], slo: SloConfig, path: Path) -> None:
    """Cost ($ per million output tokens) against tail latency, every configuration.

    One panel per tail metric (ITL p99, ITL max, TTFT p99); the grey step
    line joins the Pareto front (no other configuration is both cheaper and
    faster); dashed red is the metric's SLO target.
    """
    rows = pd.concat([s.rows.assign(_colour=s.colour) for s in series], ignore_index=True)
    cost = _column(rows, COST)
    with matplotlib.rc_context(RC):
        fig = figure(14.0, 5.0)
        axes = fig.subplots(1, len(PARETO_METRICS))
        any_target = False
        for ax, (metric, title) in zip(axes, PARETO_METRICS):
            lat = _column(rows, metric)
            ok = rows["slo_pass_all"].to_numpy(bool)
            colours = rows["_colour"].tolist()
            for i in range(len(rows)):
                ax.plot([cost[i]], [lat[i]], ls="", marker="o", color=colours[i], ms=6,
                        mfc=colours[i] if ok[i] else "white", mew=1.5, zorder=3)
            front = pareto_front(cost, lat)
            if len(front):
                ax.step(cost[front], lat[front], where="post", color="#555", lw=1.2, zorder=2)
            any_target |= _target_line(ax, slo, metric)
            _log_y(ax, list(lat) + ([slo.targets[metric]] if metric in slo.targets else []))
            ax.set_xlabel("$ per million output tokens")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:,.3g}"))
            ax.set_ylabel(f"{title} (ms, log scale)")
            ax.set_title(f"Cost vs {title}")
        handles = [Line2D([], [], ls="", marker="o", color=s.colour, label=short(s.label, 48))
                   for s in series]
        handles.append(Line2D([], [], color="#555", lw=1.2, label="Pareto front"))
        fig.legend(handles=handles + _marker_legend(any_target), loc="outside lower center",
                   ncol=min(3, len(handles) + 2), frameon=False)
        save(fig, path)
