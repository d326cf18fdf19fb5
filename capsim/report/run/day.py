"""The day view of the run report: offered rate, replicas, queue and p99 ITL per
5-minute window (:mod:`capsim.metrics.day`), windows that broke a target shaded, and
the fleet table (GPU-hours, cost of the day, $/M tokens, violation minutes, failures).

Drawn when at least one variant has day samples (time-varying load, autoscaling or
failures); ``day.csv`` holds every windowed figure of every such variant.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
from matplotlib.ticker import MaxNLocator
import numpy as np
import pandas as pd

from capsim.metrics.day import WINDOW_S, day_cost, day_windows, violation_minutes
from capsim.report.cells import fmt
from capsim.report.plotting import figure, save
from capsim.report.style import RC
from capsim.results.model import RunResult
from capsim.scenario.slo import SloConfig

FIG = "day.png"
CSV = "day.csv"
CAPTION = (
    "Day view",
    "Per 5-minute window, one line per variant: offered load (requests arriving per second), "
    "replicas serving (an autoscaled fleet's steps; a failure's dip), requests waiting "
    "(mean of 15-s samples) and p99 inter-token latency (ms; dashed: the itl_p99_ms "
    "target). Shaded: windows of that variant whose p99 ITL or p99 TTFT broke its target "
    "(violation minutes in the table). Every figure is in day.csv.")
COLUMNS = ["policy", "GPU-hours", "cost $", "$/M out tok", "peak replicas", "mean GPUs",
           "scale ups/downs", "failures", "retried", "failed", "violation min"]
UTILISATION_NOTE = (
    "GPU busy, MFU and MBU of a fleet that changes (autoscaling, failures) are over the "
    "GPU-hours it paid for (mean GPUs here), not its peak; a fixed fleet's over all its "
    "GPUs from the first arrival to the last completion.")


def has_day(results: list[RunResult]) -> bool:
    return any(r.day is not None for r in results)


def windows(results: list[RunResult], slo: SloConfig) -> dict[str, pd.DataFrame]:
    """The day windows of each variant that has day samples."""
    return {r.variant: day_windows(r, slo) for r in results if r.day is not None}


def write_csv(frames: dict[str, pd.DataFrame], path: Path) -> None:
    rows = [f.assign(variant=v) for v, f in frames.items()]
    out = pd.concat(rows, ignore_index=True)
    out[["variant", *[c for c in out.columns if c != "variant"]]].to_csv(path, index=False)


def plot(frames: dict[str, pd.DataFrame], colours: dict[str, str], slo: SloConfig,
         path: Path) -> None:
    """Four stacked panels over the run, hours on the x axis."""
    with matplotlib.rc_context(RC):
        fig = figure(10.0, 9.0)
        axes = fig.subplots(4, 1, sharex=True)
        n = len(frames)
        for i, (variant, w) in enumerate(frames.items()):
            c = colours.get(variant, "#777")
            x = (w.window_start_s.to_numpy() + WINDOW_S / 2) / 3600.0
            axes[0].plot(x, w.offered_rate_per_s, color=c, label=variant)
            axes[1].step(x, w.replicas_serving, where="mid", color=c)
            axes[2].plot(x, w.queue_mean, color=c)
            axes[3].plot(x, w.itl_p99_ms, color=c)
            # Violations: a band per variant along the top of each panel.
            bad = w.violation.to_numpy()
            for ax in axes:
                for start in w.window_start_s.to_numpy()[bad]:
                    ax.axvspan(start / 3600.0, (start + WINDOW_S) / 3600.0,
                               ymin=1 - (i + 1) / (n * 6), ymax=1 - i / (n * 6),
                               color=c, alpha=0.5, lw=0)
                    if ax is axes[3]:
                        ax.axvspan(start / 3600.0, (start + WINDOW_S) / 3600.0, color=c,
                                   alpha=0.06, lw=0)
        if "itl_p99_ms" in slo.targets:
            axes[3].axhline(slo.targets["itl_p99_ms"], color="#555", ls="--", lw=1)
        axes[3].set_ylim(bottom=0)
        for ax, label in zip(axes, ("offered req/s", "replicas serving", "requests waiting",
                                    "p99 ITL (ms)")):
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        axes[1].set_ylim(bottom=0)
        axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))   # whole replicas
        axes[3].set_xlabel("hour of the run")
        # Above the first panel: inside it, the legend hid the curves' start.
        axes[0].legend(loc="lower left", bbox_to_anchor=(0.0, 1.01), fontsize=8,
                       ncol=min(n, 4), frameon=False)
        save(fig, path)


def table(results: list[RunResult], frames: dict[str, pd.DataFrame],
          colours: dict[str, str]) -> dict:
    """The fleet table: one row per variant with day samples."""
    body = []
    for r in results:
        if r.variant not in frames:
            continue
        c, f = day_cost(r), r.fleet
        cells = [f.policy if f else f"fixed, {r.num_replicas} replicas",
                 fmt(c["gpu_hours"], "num"), fmt(c["cost_usd"], "usd"),
                 fmt(c["cost_per_million_output_tokens_usd"], "usd"),
                 str(max(f.serving) if f else r.num_replicas),
                 fmt(c["gpu_hours"] * 3600.0 / r.sim_end_s if r.sim_end_s > 0 else math.nan,
                     "num"),
                 f"{f.scale_ups}/{f.scale_downs}" if f else "—",
                 str(len(f.failures)) if f else "0",
                 str(f.retried_requests) if f else "0", str(f.failed_requests) if f else "0",
                 f"{violation_minutes(frames[r.variant]):g}"]
        body.append({"variant": r.variant, "colour": colours.get(r.variant, "#777"),
                     "cells": cells})
    groups = [{"name": "fleet", "span": 8}, {"name": "requests", "span": 2},
              {"name": "SLO", "span": 1}]
    return {"groups": groups, "columns": COLUMNS, "rows": body,
            "blocks": [{"groups": groups, "start": 0, "stop": len(COLUMNS)}],
            "note": UTILISATION_NOTE}
