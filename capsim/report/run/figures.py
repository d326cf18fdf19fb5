"""Comparison charts across variants: ITL and TTFT distributions, ITL bars, throughput/cost.

Drawn with the helpers of :mod:`capsim.report.plotting` (object API, Agg
canvas). Every function writes one PNG at ``style.DPI`` and returns nothing;
inputs are in seconds (results) or milliseconds (summary rows), axes are
labelled in ms.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from capsim.profiles.policies import label_holds_replies
from capsim.report.cells import fmt
from capsim.report.plotting import (PERCENT, PLAIN, bar_text, ccdf_y, cdf_y, draw_ccdf, draw_cdf,
                                    figure, log_axis, mark, marker_handles, ms_axis,
                                    pinned_title, reference_lines, save, short, x_limits)
from capsim.report.run.cdf import Distribution, distribution, itl_distribution
from capsim.report.style import RC
from capsim.results.model import RunResult, SummaryRow
from capsim.scenario.slo import RequestSlo, SloConfig


def plot_itl_cdf(results: list[RunResult], colours: dict[str, str], slo: SloConfig,
                 path: Path, dists: list[Distribution] | None = None) -> None:
    """Two panels: ITL CDF (linear y) and its tail P(gap ≥ x) (log y), all variants.
    ``dists``: each result's :func:`~capsim.report.run.cdf.itl_distribution`, when the
    caller has them (a chart process would sort every ITL run again).

    Markers: p50 ○, p99 △, p99.9 ◇, max ★ (from the exact weighted percentiles).
    Vertical lines: every ``itl_*_ms`` SLO target (red, one dash pattern each) and the stall
    threshold (dotted grey).
    """
    with matplotlib.rc_context(RC):
        fig = figure(12.0, 5.4)
        ax_cdf, ax_tail = fig.subplots(1, 2)
        dists = dists if dists is not None else [itl_distribution(r) for r in results]
        refs = _itl_references(slo)
        variant_handles = [_draw_itl_variant(ax_cdf, ax_tail, r, d, colours[r.variant], slo)
                           for r, d in zip(results, dists)]
        ref_handles = reference_lines(ax_cdf, refs)
        reference_lines(ax_tail, refs)
        lo, hi = x_limits(dists, [v for v, *_ in refs])
        for ax in (ax_cdf, ax_tail):
            ms_axis(ax, "inter-token latency (ms, log scale)", lo, hi)
        ax_cdf.set_ylim(0, 1.04)
        ax_cdf.yaxis.set_major_formatter(PERCENT)
        ax_cdf.set_ylabel("share of gaps ≤ x")
        pinned_title(ax_cdf, "ITL CDF (a gap per streamed chunk, pooled)")
        _tail_axis(ax_tail, dists)
        ax_cdf.legend(handles=marker_handles(("p50", "p99", "max")) + ref_handles,
                      loc="best", title="markers / lines", framealpha=0.9)
        fig.legend(handles=variant_handles, loc="outside lower center",
                   ncol=min(len(variant_handles), 2) or 1, frameon=False)
        save(fig, path)


def _itl_references(slo: SloConfig) -> list[tuple]:
    """The vertical lines of the ITL charts, ``(ms, label, colour, dash)``: every ``itl_*_ms``
    target, then the stall threshold."""
    # One dash pattern per target, so two ITL targets can be told apart.
    itl_targets = [(k, v) for k, v in slo.targets.items()
                   if k.startswith("itl_") and k.endswith("_ms")]
    refs = [(v, f"target {k} ≤ {v:g} ms", "#C0392B", dash)
            for (k, v), dash in zip(itl_targets, ("--", (0, (6, 2, 1, 2)), (0, (1, 1.5)),
                                                  (0, (8, 3))))]
    refs.append((slo.stall_threshold_ms, f"stall threshold {slo.stall_threshold_ms:g} ms",
                 "#7F7F7F", ":"))
    return refs


def _draw_itl_variant(ax_cdf, ax_tail, r: RunResult, d: Distribution, c: str,
                      slo: SloConfig) -> Line2D:
    """One variant's ITL CDF and tail with their markers; its legend entry (max ITL and
    stalls, or why nothing is drawn: static batching's held replies, or no tokens)."""
    if d.empty and label_holds_replies(r.scheduler):   # replies arrive in one piece
        return Line2D([], [], color=c, lw=2, label=(
            f"{short(r.variant)}: ITL n/a, replies held until the batch ends "
            "(the wait is in TTFT)"))
    if d.empty:
        return Line2D([], [], color=c, lw=2, label=f"{short(r.variant)} (no tokens)")
    draw_cdf(ax_cdf, d, c)
    draw_ccdf(ax_tail, d, c)
    mark(ax_cdf, d, c, ("p50", "p99", "max"), cdf_y)
    mark(ax_tail, d, c, ("p50", "p99", "p99.9", "max"), ccdf_y)
    stalls = _stalls(r, slo.stall_threshold_ms)
    return Line2D([], [], color=c, lw=2, label=(
        f"{short(r.variant)}: max {d.markers['max']:,.1f} ms, {_plural(stalls, 'stall')}"))


def _tail_axis(ax, dists: list[Distribution]) -> None:
    floor = min((d.ccdf[-1] for d in dists if not d.empty), default=1e-3)
    ax.set_yscale("log")
    ax.set_ylim(min(floor, 1e-3) / 3, 1.5)
    log_axis(ax.yaxis, PERCENT)
    ax.set_ylabel("share of gaps ≥ x (log scale)")
    pinned_title(ax, "ITL tail: where p99 stops looking")
    for y, text in ((1e-2, "1 %: p99 is blind below this line"), (1e-3, "0.1 %: p99.9")):
        ax.axhline(y, color="#999", lw=0.8, ls="-.", zorder=0)
        ax.annotate(text, xy=(1.0, y), xycoords=("axes fraction", "data"), ha="right",
                    xytext=(-4, 3), textcoords="offset points", fontsize=8, color="#555",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    ax.legend(handles=marker_handles(("p50", "p99", "p99.9", "max")), loc="lower left",
              fontsize=8, framealpha=0.9, ncol=2)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _stalls(result: RunResult, threshold_ms: float) -> int:
    gaps = np.asarray(result.itl.gap_s, np.float64) * 1e3
    return int(np.asarray(result.itl.count, np.int64)[gaps > threshold_ms].sum())


def plot_ttft_cdf(results: list[RunResult], frames: dict[str, pd.DataFrame],
                  colours: dict[str, str], slo: SloConfig,
                  class_slos: dict[str, RequestSlo], path: Path) -> None:
    """TTFT CDF of finished requests per variant (log x, ms), p50/p99/max marked.

    ``frames`` maps variant → :func:`capsim.metrics.summary.request_frame`. Lines: the
    per-request TTFT limit (``slo.ttft_ms`` and per-class limits, dashed) and
    ``ttft_*_ms`` targets (dash-dot).
    """
    with matplotlib.rc_context(RC):
        fig = figure(9.0, 5.2)
        ax = fig.subplots()
        refs = []
        if slo.ttft_ms is not None:
            refs.append((slo.ttft_ms, f"TTFT limit {slo.ttft_ms:g} ms", "#C0392B", "--"))
        for cls, lim in sorted(class_slos.items()):
            if lim.ttft_ms is not None and lim.ttft_ms != slo.ttft_ms:
                refs.append((lim.ttft_ms, f"TTFT limit {cls} {lim.ttft_ms:g} ms", "#8E44AD", "--"))
        refs += [(v, f"target {k} ≤ {v:g} ms", "#C0392B", "-.")
                 for k, v in slo.targets.items() if k.startswith("ttft_")]
        dists, handles = [], []
        for r in results:
            df = frames[r.variant]
            d = distribution(df["ttft_ms"].to_numpy(np.float64))
            dists.append(d)
            c = colours[r.variant]
            rejected = int((df["status"] != "finished").sum())
            note = f", {rejected:,} rejected (not shown)" if rejected else ""
            if d.empty:
                handles.append(Line2D([], [], color=c, lw=2,
                                      label=f"{short(r.variant)}: no data{note}"))
                continue
            draw_cdf(ax, d, c)
            mark(ax, d, c, ("p50", "p99", "max"), cdf_y)
            handles.append(Line2D([], [], color=c, lw=2, label=(
                f"{short(r.variant)}: p99 {d.markers['p99']:,.0f} ms{note}")))
        ref_handles = reference_lines(ax, refs)
        ms_axis(ax, "time to first token (ms, log scale)",
                *x_limits(dists, [v for v, *_ in refs]))
        ax.set_ylim(0, 1.04)
        ax.yaxis.set_major_formatter(PERCENT)
        ax.set_ylabel("share of finished requests ≤ x")
        pinned_title(ax, "TTFT CDF (arrival → first token)")
        ax.legend(handles=marker_handles(("p50", "p99", "max")) + ref_handles,
                  loc="best", framealpha=0.9)
        fig.legend(handles=handles, loc="outside lower center",
                   ncol=min(len(handles), 2) or 1, frameon=False)
        save(fig, path)


def plot_itl_bars(rows: list[SummaryRow], colours: dict[str, str], slo: SloConfig,
                  path: Path, held: frozenset[str] = frozenset()) -> None:
    """Grouped bars per statistic (p50, p99, p99.9, max ITL), one bar per variant; log y, ms.

    ``rows``: the ``cls == "all"`` summary rows. ``itl_*`` targets are drawn as
    a dashed red tick over their statistic's group; the legend gives each
    variant's stall count, or that a variant in ``held`` holds its replies (ITL n/a).
    """
    n = max(len(rows), 1)
    width = 0.8 / n
    vertical = n > 3
    with matplotlib.rc_context(RC):
        fig = figure(min(16.0, max(9.0, 1.2 * n + 5.0)), 5.4)
        ax = fig.subplots()
        x0 = np.arange(len(_ITL_STATS))
        for i, row in enumerate(rows):
            _itl_bars(ax, row, x0 - 0.4 + width * (i + 0.5), width, colours[row.variant], slo,
                      vertical, held)
        ticks = _itl_targets(ax, slo)
        lo, hi = _itl_range(rows, slo, vertical)
        ax.set_ylim(lo, hi)             # first: with every request rejected no bar is > 0
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        log_axis(ax.yaxis, PLAIN, lo, hi)
        ax.set_xticks(x0, ticks)
        ax.grid(axis="x", visible=False)
        ax.set_ylabel("inter-token latency (ms, log scale)")
        pinned_title(ax, "ITL percentiles and maximum per variant")
        handles, _ = ax.get_legend_handles_labels()
        if any(k in slo.targets for _, k in _ITL_STATS):
            handles.append(Line2D([], [], color="#C0392B", ls="--", lw=1.5, label="SLO target"))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 2),
                   frameon=False)
        save(fig, path)


#: The groups of the ITL bar chart: (tick name, summary column).
_ITL_STATS = (("p50", "itl_p50_ms"), ("p99", "itl_p99_ms"), ("p99.9", "itl_p999_ms"),
              ("max", "itl_max_ms"))


def _itl_bars(ax, row: SummaryRow, pos: np.ndarray, width: float, colour: str, slo: SloConfig,
              vertical: bool, held: frozenset[str]) -> None:
    """One variant's bar in each group at x positions ``pos``, each labelled with its ms
    (turned upright when ``vertical``); the legend entry counts its stalls, or says its
    replies are held (a variant in ``held``: no bar, "n/a")."""
    vals = np.array([getattr(row, key) for _, key in _ITL_STATS], np.float64)
    label = (f"{short(row.variant)}: {_plural(row.itl_stalls, 'stall')} "
             f"> {slo.stall_threshold_ms:g} ms")
    if row.variant in held:      # static batching: the reply arrives in one piece
        label = f"{short(row.variant)}: ITL n/a, replies held until the batch ends"
    bars = ax.bar(pos, np.where(np.isnan(vals), 0, vals), width * 0.9,
                  color=colour, zorder=2, label=label)
    ax.bar_label(bars, ["n/a" if row.variant in held and np.isnan(v) else bar_text(v)
                        for v in vals], padding=2, zorder=4,
                 fontsize=8, rotation=90 if vertical else 0,
                 bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none",
                       "alpha": 0.85})


def _itl_targets(ax, slo: SloConfig) -> list[str]:
    """Each ``itl_*`` target as a dashed red tick over its group; the groups' tick labels
    (naming the target)."""
    ticks = []
    for j, (name, key) in enumerate(_ITL_STATS):
        ticks.append(f"ITL {name}")
        if key in slo.targets:
            v = slo.targets[key]
            ax.hlines(v, j - 0.46, j + 0.46, colors="#C0392B", linestyles="--", lw=1.5,
                      zorder=3)
            ticks[-1] += f"\n(target ≤ {v:g} ms)"
    return ticks


def _itl_range(rows: list[SummaryRow], slo: SloConfig, vertical: bool) -> tuple[float, float]:
    """(low, high) ms of the log y axis: every positive bar and target, with room above for
    the labels (more when they stand upright)."""
    finite = [getattr(r, k) for r in rows for _, k in _ITL_STATS
              if getattr(r, k) > 0 and not math.isnan(getattr(r, k))]
    finite += [slo.targets[k] for _, k in _ITL_STATS if k in slo.targets]
    return min(finite, default=1.0) / 2.5, max(finite, default=10.0) * (5 if vertical else 2.5)


def plot_throughput_cost(rows: list[SummaryRow], colours: dict[str, str], path: Path) -> None:
    """Three horizontal-bar panels per variant: output tok/s, goodput req/s (with % of
    requests), and $ per million output tokens (with GPUs × $/h). ``rows``: cls == "all"."""
    names = [short(r.variant, 28) for r in rows]
    y = np.arange(len(rows))
    panels = (
        ("Output throughput", "output tokens / s",
         lambda r: r.output_throughput_tok_per_s, lambda r, v: f"{v:,.0f}"),
        ("Goodput (meets every per-request SLO)", "requests / s",
         lambda r: r.goodput_req_per_s,
         lambda r, v: f"{fmt(v, 'rate')} req/s ({fmt(r.goodput_fraction, 'frac')} good)"),
        ("Cost", "$ per million output tokens",
         lambda r: r.cost_per_million_output_tokens_usd,
         lambda r, v: (f"{fmt(v, 'usd3')} ({_plural(r.num_gpus, 'GPU')}, "
                       f"{fmt(r.cost_per_hour_usd, 'usd')}/h)")),
    )
    with matplotlib.rc_context(RC):
        fig = figure(13.0, 1.4 + 0.55 * max(len(rows), 2))
        axes = fig.subplots(1, 3, sharey=True)
        for ax, (title, unit, get, text) in zip(axes, panels):
            vals = np.array([get(r) for r in rows], np.float64)
            clean = np.where(np.isnan(vals), 0, vals)
            bars = ax.barh(y, clean, 0.65, color=[colours[r.variant] for r in rows])
            ax.bar_label(bars, ["—" if math.isnan(v) else text(r, v) for r, v in zip(rows, vals)],
                         padding=3, fontsize=8)
            ax.set_xlim(0, (clean.max() if len(clean) and clean.max() > 0 else 1) * 1.65)
            pinned_title(ax, title)
            ax.set_xlabel(unit)
            ax.xaxis.set_major_formatter(PLAIN)
            ax.grid(axis="y", visible=False)
        axes[0].set_yticks(y, names)
        axes[0].invert_yaxis()
        save(fig, path)
