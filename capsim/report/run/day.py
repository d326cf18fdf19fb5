"""The day view of the run report: offered rate, replicas, queue and p99 ITL per window
(5 minutes, shorter for a run under an hour: :mod:`capsim.metrics.day`), windows that
broke a target shaded, and the fleet table (GPU-hours, cost of the day, $/M tokens,
violation minutes, failures).

Drawn when at least one variant has day samples (time-varying load, autoscaling or
failures); ``day.csv`` holds every windowed figure of every such variant.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.metrics.day import day_cost, day_windows, violation_minutes, window_label
from capsim.report.cells import fmt
from capsim.report.style import RC
from capsim.results.model import RunResult
from capsim.scenario.slo import SloConfig

FIG = "day.png"
CSV = "day.csv"
CAPTION = (
    "Day view",
    "Per {window} window: offered load (requests arriving per second; one grey line when "
    "every variant replays the same trace), replicas serving (one panel per variant: an "
    "autoscaled fleet's steps, a failure's dip), requests waiting (mean of 15-s samples) "
    "and p99 inter-token latency (ms; grey dashed: the itl_p99_ms target; a triangle at the "
    "top: a window with demand and no token sent, an infinite p99), one colour and "
    "line style per variant. Shaded: windows of that variant whose p99 ITL or p99 TTFT "
    "broke its target (violation minutes in the table). Every figure is in day.csv.")
COLUMNS = ["policy", "GPU-hours", "cost $", "$/M out tok", "peak replicas", "mean GPUs",
           "scale ups/downs", "failures", "retried", "failed", "timed out", "violation min"]
UTILISATION_NOTE = (
    "GPU busy, MFU and MBU of a fleet that changes (autoscaling, failures) are over the "
    "GPU-hours it paid for (mean GPUs here), not its peak; a fixed fleet's over all its "
    "GPUs from the first arrival to the last completion.")


def has_day(results: list[RunResult]) -> bool:
    return any(r.day is not None for r in results)


def windows_text(frames: dict[str, pd.DataFrame]) -> str:
    """The windows' length for people ("5-minute", "1-second"; "1-second / 5-minute"
    when the variants' runs differ in length)."""
    lengths = dict.fromkeys(float(f.window_s.iloc[0]) for f in frames.values() if len(f))
    return " / ".join(window_label(w) for w in lengths) or window_label(300.0)


def caption(frames: dict[str, pd.DataFrame]) -> tuple[str, str]:
    """The day figure's title and caption, naming the windows' length."""
    return CAPTION[0], CAPTION[1].format(window=windows_text(frames))


def windows(results: list[RunResult], slo: SloConfig) -> dict[str, pd.DataFrame]:
    """The day windows of each variant that has day samples."""
    return {r.variant: day_windows(r, slo) for r in results if r.day is not None}


def write_csv(frames: dict[str, pd.DataFrame], path: Path) -> None:
    rows = [f.assign(variant=v) for v, f in frames.items()]
    out = pd.concat(rows, ignore_index=True)
    out[["variant", *[c for c in out.columns if c != "variant"]]].to_csv(path, index=False)


#: Line styles of the variants in the overlaid panels, widest first: where two variants'
#: curves coincide (the same fleet before a failure) the one drawn later shows on top of
#: the wider one underneath instead of hiding it.
_STYLES = ("-", "--", "-.", ":")


def plot(frames: dict[str, pd.DataFrame], colours: dict[str, str], slo: SloConfig,
         path: Path) -> None:
    """Stacked panels over the run, hours on the x axis: offered load (one grey line when
    every variant replays the same trace), replicas serving in one small panel per variant
    (their steps coincide for hours: overlaid, one hid the other), requests waiting and p99
    ITL overlaid with a line style per variant."""
    from capsim.report.plotting import figure, rc_context, save   # matplotlib: here only
    names = list(frames)
    n = len(names)
    same_load = all(np.array_equal(frames[v].offered_rate_per_s.to_numpy(),
                                   frames[names[0]].offered_rate_per_s.to_numpy(),
                                   equal_nan=True) for v in names)
    ratios = [1.0, *([0.42] * n), 1.0, 1.2]
    unit, unit_s = _time_unit(frames)
    with rc_context(RC):
        fig = figure(10.0, 6.9 + 0.55 * n)
        axes = fig.subplots(len(ratios), 1, sharex=True, gridspec_kw={"height_ratios": ratios})
        load_ax, fleet_axes, queue_ax, itl_ax = axes[0], axes[1:1 + n], axes[-2], axes[-1]
        most = max(float(np.nanmax(f.replicas_serving.to_numpy(), initial=0.0))
                   for f in frames.values())
        handles, no_token = [], False
        for i, variant in enumerate(names):
            w, c = frames[variant], colours.get(variant, "#777")
            style = {"color": c, "ls": _STYLES[i % len(_STYLES)],
                     "lw": 2.4 - 1.2 * i / max(n - 1, 1)}
            x = (w.window_start_s.to_numpy() + w.window_s.to_numpy() / 2) / unit_s
            if not same_load:
                load_ax.plot(x, w.offered_rate_per_s, **style)
            _draw_fleet(fleet_axes[i], x, w, variant, c, most)
            queue_ax.plot(x, w.queue_mean, **style)
            handles.append(itl_ax.plot(x, w.itl_p99_ms, label=variant, **style)[0])
            no_token |= _mark_no_token(itl_ax, x, w, c)
            _shade_violations((load_ax, queue_ax, itl_ax), fleet_axes[i], w, i, n, c, unit_s)
        if same_load:
            _draw_one_load(load_ax, frames[names[0]], n, unit_s)
        _notes(load_ax, itl_ax, frames, slo, no_token)
        for ax, label in ((load_ax, "offered req/s"), (queue_ax, "requests waiting"),
                          (itl_ax, "p99 ITL (ms)")):
            ax.set_ylabel(label)
        for ax in axes:
            ax.grid(alpha=0.3)
        fleet_axes[n // 2].set_ylabel("replicas serving")
        itl_ax.set_xlabel(f"{unit} of the run")
        # Above the panels: inside the first, the legend hid the curves' start.
        fig.legend(handles=handles, loc="outside upper left", fontsize=8, ncol=min(n, 4),
                   frameon=False)
        save(fig, path)


def _time_unit(frames: dict[str, pd.DataFrame]) -> tuple[str, float]:
    """The x axis's unit for the longest run: (name, seconds): seconds up to 10 minutes,
    minutes up to 3 hours, else hours."""
    end = max((float(f.window_start_s.iloc[-1] + f.window_s.iloc[-1])
               for f in frames.values() if len(f)), default=0.0)
    if end <= 600.0:
        return "second", 1.0
    return ("minute", 60.0) if end <= 3 * 3600.0 else ("hour", 3600.0)


def _draw_fleet(ax, x_h: np.ndarray, w: pd.DataFrame, variant: str, colour: str,
                most: float) -> None:
    """One variant's replicas-serving panel: its steps at window midpoints ``x_h`` (the
    x axis's unit),
    on a y scale shared by every variant (``most``: the largest count of any)."""
    from matplotlib.ticker import MaxNLocator

    ax.step(x_h, w.replicas_serving, where="mid", color=colour, lw=1.4)
    ax.fill_between(x_h, w.replicas_serving.fillna(0), step="mid", color=colour, alpha=0.25,
                    lw=0)
    ax.set_ylim(0, max(most, 1.0) * 1.25)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=3))   # whole replicas
    ax.text(0.005, 0.95, variant, transform=ax.transAxes, ha="left", va="top",
            fontsize=8, color=colour)


def _mark_no_token(itl_ax, x_h: np.ndarray, w: pd.DataFrame, colour: str) -> bool:
    """Mark the windows whose p99 ITL is infinite; True when there is one."""
    # An infinite p99 ITL (demand, no token sent: every replica down) cannot be
    # drawn as a value: a triangle at the panel's top edge marks the window.
    dark = np.isinf(w.itl_p99_ms.to_numpy())
    if not dark.any():
        return False
    itl_ax.plot(x_h[dark], np.full(dark.sum(), 0.97), "v", color=colour, ms=6,
                transform=itl_ax.get_xaxis_transform(), clip_on=False)
    return True


def _shade_violations(overlaid: tuple, fleet_ax, w: pd.DataFrame, i: int, n: int,
                      colour: str, unit_s: float) -> None:
    """Variant ``i`` of ``n``'s windows that broke a target: a band of its own along the
    top of the ``overlaid`` panels (load, queue, ITL), the ITL panel lightly shaded, and
    its own replicas panel shaded; x in units of ``unit_s`` seconds."""
    itl_ax = overlaid[-1]
    bad = w.violation.to_numpy(dtype=bool)
    for start, length in zip(w.window_start_s.to_numpy()[bad], w.window_s.to_numpy()[bad]):
        span = (start / unit_s, (start + length) / unit_s)
        for a in overlaid:
            a.axvspan(*span, ymin=1 - (i + 1) / (n * 6), ymax=1 - i / (n * 6),
                      color=colour, alpha=0.5, lw=0)
        itl_ax.axvspan(*span, color=colour, alpha=0.06, lw=0)
        fleet_ax.axvspan(*span, color=colour, alpha=0.15, lw=0)


def _draw_one_load(load_ax, first: pd.DataFrame, n: int, unit_s: float) -> None:
    """The offered load every variant shares (they replay one trace), as one grey line."""
    load_ax.plot((first.window_start_s.to_numpy() + first.window_s.to_numpy() / 2) / unit_s,
                 first.offered_rate_per_s, color="#555",
                 label="every variant (one trace)")
    if n > 1:
        load_ax.legend(loc="upper left", fontsize=8, frameon=False)


def _notes(load_ax, itl_ax, frames: dict[str, pd.DataFrame], slo: SloConfig,
           no_token: bool) -> None:
    """The p99 ITL target line, and the notes that explain the bars and the triangles."""
    if "itl_p99_ms" in slo.targets:
        itl_ax.axhline(slo.targets["itl_p99_ms"], color="#555", ls="--", lw=1)
    if any(f.violation.any() for f in frames.values()):
        load_ax.text(1.0, 1.01, "bars at the top, shading: a variant's windows that "
                     "broke a target", transform=load_ax.transAxes, ha="right",
                     va="bottom", fontsize=7, color="#555")
    if no_token:
        itl_ax.text(0.995, 0.97, "▼ no token sent (every replica down): infinite p99",
                    transform=itl_ax.transAxes, ha="right", va="top", fontsize=7,
                    color="#555")
    itl_ax.set_ylim(bottom=0)


def table(results: list[RunResult], frames: dict[str, pd.DataFrame],
          colours: dict[str, str]) -> dict:
    """The fleet table: one row per variant with day samples."""
    body = []
    for r in results:
        if r.variant not in frames:
            continue
        c, f = day_cost(r), r.fleet
        cells = [f.policy if f else
                 f"fixed, {r.num_replicas} replica{'' if r.num_replicas == 1 else 's'}",
                 fmt(c["gpu_hours"], "num"), fmt(c["cost_usd"], "usd"),
                 fmt(c["cost_per_million_output_tokens_usd"], "usd"),
                 str(max(f.serving) if f else r.num_replicas),
                 fmt(c["gpu_hours"] * 3600.0 / r.sim_end_s if r.sim_end_s > 0 else math.nan,
                     "num"),
                 f"{f.scale_ups}/{f.scale_downs}" if f else "—",
                 str(len(f.failures)) if f else "0",
                 str(f.retried_requests) if f else "0", str(f.failed_requests) if f else "0",
                 str(f.timed_out_requests) if f else "0",
                 f"{violation_minutes(frames[r.variant]):g}"]
        body.append({"variant": r.variant, "colour": colours.get(r.variant, "#777"),
                     "cells": cells})
    groups = [{"name": "fleet", "span": 8}, {"name": "requests", "span": 3},
              {"name": "SLO", "span": 1}]
    return {"groups": groups, "columns": COLUMNS, "rows": body,
            "blocks": [{"groups": groups, "start": 0, "stop": len(COLUMNS)}],
            "note": UTILISATION_NOTE, "window": windows_text(frames)}
