"""Comparison charts across variants: ITL and TTFT distributions, ITL bars, throughput/cost.

Only ``capsim.report`` imports matplotlib, and only through the object API
(``matplotlib.figure.Figure`` rendered by the Agg canvas): no pyplot, no global
state, safe to call from any thread. Every function writes one PNG at
``style.DPI`` and returns nothing; inputs are in seconds (results) or
milliseconds (summary rows), axes are labelled in ms.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from capsim.report.cdf import Distribution, distribution, itl_distribution
from capsim.report.columns import fmt
from capsim.report.style import DPI, RC, STAT_MARKERS
from capsim.results.model import RunResult, SummaryRow
from capsim.scenario.slo import RequestSlo, SloConfig

_NAME_CHARS = 40


def short(name: str, limit: int = _NAME_CHARS) -> str:
    """Shorten long variant names for legends and tick labels."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _figure(width_in: float, height_in: float) -> Figure:
    return Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None})


_PLAIN = FuncFormatter(lambda v, _: f"{v:,.10g}")
_PERCENT = FuncFormatter(lambda v, _: f"{v * 100:.10g} %")


def _log_axis(axis, formatter: FuncFormatter, lo: float | None = None,
              hi: float | None = None) -> None:
    """Plain tick labels on a log axis (style.RC turns mathtext off, so no 10^k labels).

    When ``lo``..``hi`` spans at most three decades, ticks at 1-2-5 steps so a
    narrow range still gets several labels.
    """
    narrow = lo is not None and hi is not None and 0 < lo < hi and hi / lo <= 1e3
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if narrow else (1.0,)))
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(NullFormatter())


def _ms_axis(ax, label: str, lo: float, hi: float) -> None:
    """Log-scale x axis in ms over ``lo``..``hi`` with plain-number tick labels."""
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    _log_axis(ax.xaxis, _PLAIN, lo, hi)
    ax.set_xlabel(label)


def _x_limits(dists: list[Distribution], extra: list[float]) -> tuple[float, float]:
    lo = [d.x_ms[0] for d in dists if not d.empty and d.x_ms[0] > 0]
    hi = [d.x_ms[-1] for d in dists if not d.empty] + [v for v in extra if v > 0]
    lo_v = min(lo + [v for v in extra if v > 0], default=1.0)
    hi_v = max(hi, default=10.0)
    return lo_v / 1.6, hi_v * 1.8


def _reference_lines(ax, lines: list[tuple[float, str, str, str]]) -> list[Line2D]:
    """Draw vertical reference lines (value, label, colour, style); return legend handles."""
    handles = []
    for value, label, colour, ls in lines:
        ax.axvline(value, color=colour, ls=ls, lw=1.3, zorder=1)
        handles.append(Line2D([], [], color=colour, ls=ls, lw=1.3, label=label))
    return handles


def _marker_handles(stats: tuple[str, ...]) -> list[Line2D]:
    return [Line2D([], [], ls="", marker=STAT_MARKERS[s], color="#444", mfc="white",
                   mew=1.3, ms=8 if s == "max" else 6, label=s) for s in stats]


def _mark(ax, dist: Distribution, colour: str, stats: tuple[str, ...], y_of) -> None:
    for s in stats:
        x = dist.markers.get(s, math.nan)
        if math.isnan(x) or x <= 0:
            continue
        ax.plot([x], [y_of(s, dist)], ls="", marker=STAT_MARKERS[s], color=colour,
                mfc="white", mew=1.6, ms=11 if s == "max" else 7, zorder=5)


def _cdf_y(stat: str, dist: Distribution) -> float:
    return dist.cdf_at(dist.markers[stat])


def _ccdf_y(stat: str, dist: Distribution) -> float:
    return dist.ccdf_at(dist.markers[stat])


def _draw_cdf(ax, d: Distribution, colour: str) -> None:
    """F(x) = P(X ≤ x) as a right-continuous step, rising from 0 at the smallest value."""
    ax.step(np.r_[d.x_ms[0], d.x_ms], np.r_[0.0, d.cdf], where="post", color=colour, lw=2)


def _draw_ccdf(ax, d: Distribution, colour: str) -> None:
    """S(x) = P(X ≥ x) as a left-continuous step, from 1 down to P(X = max)."""
    ax.step(np.r_[d.x_ms[0], d.x_ms], np.r_[1.0, d.ccdf], where="pre", color=colour, lw=2)


def plot_itl_cdf(results: list[RunResult], colours: dict[str, str], slo: SloConfig,
                 path: Path) -> None:
    """Two panels: ITL CDF (linear y) and its tail P(gap ≥ x) (log y), all variants.

    Markers: p50 ○, p99 △, p99.9 ◇, max ★ (from the exact weighted percentiles).
    Vertical lines: every ``itl_*_ms`` SLO target (red, one dash pattern each) and the stall
    threshold (dotted grey).
    """
    with matplotlib.rc_context(RC):
        fig = _figure(12.0, 5.4)
        ax_cdf, ax_tail = fig.subplots(1, 2)
        dists = [itl_distribution(r) for r in results]
        # One dash pattern per target, so two ITL targets can be told apart.
        itl_targets = [(k, v) for k, v in slo.targets.items()
                       if k.startswith("itl_") and k.endswith("_ms")]
        refs = [(v, f"target {k} ≤ {v:g} ms", "#C0392B", dash)
                for (k, v), dash in zip(itl_targets, ("--", (0, (6, 2, 1, 2)), (0, (1, 1.5)),
                                                      (0, (8, 3))))]
        refs.append((slo.stall_threshold_ms, f"stall threshold {slo.stall_threshold_ms:g} ms",
                     "#7F7F7F", ":"))
        variant_handles = []
        for r, d in zip(results, dists):
            c = colours[r.variant]
            if d.empty:
                variant_handles.append(Line2D([], [], color=c, lw=2,
                                              label=f"{short(r.variant)} (no tokens)"))
                continue
            _draw_cdf(ax_cdf, d, c)
            _draw_ccdf(ax_tail, d, c)
            _mark(ax_cdf, d, c, ("p50", "p99", "max"), _cdf_y)
            _mark(ax_tail, d, c, ("p50", "p99", "p99.9", "max"), _ccdf_y)
            stalls = _stalls(r, slo.stall_threshold_ms)
            variant_handles.append(Line2D([], [], color=c, lw=2, label=(
                f"{short(r.variant)}: max {d.markers['max']:,.1f} ms, {_plural(stalls, 'stall')}")))
        ref_handles = _reference_lines(ax_cdf, refs)
        _reference_lines(ax_tail, refs)
        lo, hi = _x_limits(dists, [v for v, *_ in refs])
        for ax in (ax_cdf, ax_tail):
            _ms_axis(ax, "inter-token latency (ms, log scale)", lo, hi)
        ax_cdf.set_ylim(0, 1.04)
        ax_cdf.yaxis.set_major_formatter(_PERCENT)
        ax_cdf.set_ylabel("share of gaps ≤ x")
        ax_cdf.set_title("ITL CDF (all token gaps, pooled)")
        _tail_axis(ax_tail, dists)
        ax_cdf.legend(handles=_marker_handles(("p50", "p99", "max")) + ref_handles,
                      loc="best", title="markers / lines", framealpha=0.9)
        fig.legend(handles=variant_handles, loc="outside lower center",
                   ncol=min(len(variant_handles), 2) or 1, frameon=False)
        _save(fig, path)


def _tail_axis(ax, dists: list[Distribution]) -> None:
    floor = min((d.ccdf[-1] for d in dists if not d.empty), default=1e-3)
    ax.set_yscale("log")
    ax.set_ylim(min(floor, 1e-3) / 3, 1.5)
    _log_axis(ax.yaxis, _PERCENT)
    ax.set_ylabel("share of gaps ≥ x (log scale)")
    ax.set_title("ITL tail: where p99 stops looking")
    for y, text in ((1e-2, "1 %: p99 is blind below this line"), (1e-3, "0.1 %: p99.9")):
        ax.axhline(y, color="#999", lw=0.8, ls="-.", zorder=0)
        ax.annotate(text, xy=(1.0, y), xycoords=("axes fraction", "data"), ha="right",
                    xytext=(-4, 3), textcoords="offset points", fontsize=8, color="#555",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    ax.legend(handles=_marker_handles(("p50", "p99", "p99.9", "max")), loc="lower left",
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
        fig = _figure(9.0, 5.2)
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
            _draw_cdf(ax, d, c)
            _mark(ax, d, c, ("p50", "p99", "max"), _cdf_y)
            handles.append(Line2D([], [], color=c, lw=2, label=(
                f"{short(r.variant)}: p99 {d.markers['p99']:,.0f} ms{note}")))
        ref_handles = _reference_lines(ax, refs)
        _ms_axis(ax, "time to first token (ms, log scale)",
                 *_x_limits(dists, [v for v, *_ in refs]))
        ax.set_ylim(0, 1.04)
        ax.yaxis.set_major_formatter(_PERCENT)
        ax.set_ylabel("share of finished requests ≤ x")
        ax.set_title("TTFT CDF (arrival → first token)")
        ax.legend(handles=_marker_handles(("p50", "p99", "max")) + ref_handles,
                  loc="best", framealpha=0.9)
        fig.legend(handles=handles, loc="outside lower center",
                   ncol=min(len(handles), 2) or 1, frameon=False)
        _save(fig, path)


def plot_itl_bars(rows: list[SummaryRow], colours: dict[str, str], slo: SloConfig,
                  path: Path) -> None:
    """Grouped bars per statistic (p50, p99, p99.9, max ITL), one bar per variant; log y, ms.

    ``rows``: the ``cls == "all"`` summary rows. ``itl_*`` targets are drawn as
    a dashed red tick over their statistic's group; the legend gives each
    variant's stall count.
    """
    stats = (("p50", "itl_p50_ms"), ("p99", "itl_p99_ms"), ("p99.9", "itl_p999_ms"),
             ("max", "itl_max_ms"))
    n = max(len(rows), 1)
    width = 0.8 / n
    vertical = n > 3
    with matplotlib.rc_context(RC):
        fig = _figure(min(16.0, max(9.0, 1.2 * n + 5.0)), 5.4)
        ax = fig.subplots()
        x0 = np.arange(len(stats))
        for i, row in enumerate(rows):
            vals = np.array([getattr(row, key) for _, key in stats], np.float64)
            pos = x0 - 0.4 + width * (i + 0.5)
            bars = ax.bar(pos, np.where(np.isnan(vals), 0, vals), width * 0.9,
                          color=colours[row.variant], zorder=2, label=(
                              f"{short(row.variant)}: {_plural(row.itl_stalls, 'stall')} "
                              f"> {slo.stall_threshold_ms:g} ms"))
            ax.bar_label(bars, [_bar_text(v) for v in vals], padding=2, zorder=4,
                         fontsize=8, rotation=90 if vertical else 0,
                         bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none",
                               "alpha": 0.85})
        ticks = []
        for j, (name, key) in enumerate(stats):
            ticks.append(f"ITL {name}")
            if key in slo.targets:
                v = slo.targets[key]
                ax.hlines(v, j - 0.46, j + 0.46, colors="#C0392B", linestyles="--", lw=1.5,
                          zorder=3)
                ticks[-1] += f"\n(target ≤ {v:g} ms)"
        finite = [getattr(r, k) for r in rows for _, k in stats
                  if getattr(r, k) > 0 and not math.isnan(getattr(r, k))]
        finite += [slo.targets[k] for _, k in stats if k in slo.targets]
        ax.set_yscale("log")
        lo, hi = min(finite, default=1.0) / 2.5, max(finite, default=10.0) * (5 if vertical else 2.5)
        ax.set_ylim(lo, hi)
        _log_axis(ax.yaxis, _PLAIN, lo, hi)
        ax.set_xticks(x0, ticks)
        ax.grid(axis="x", visible=False)
        ax.set_ylabel("inter-token latency (ms, log scale)")
        ax.set_title("ITL percentiles and maximum per variant")
        handles, _ = ax.get_legend_handles_labels()
        if any(k in slo.targets for _, k in stats):
            handles.append(Line2D([], [], color="#C0392B", ls="--", lw=1.5, label="SLO target"))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 2),
                   frameon=False)
        _save(fig, path)


def _bar_text(v: float) -> str:
    if math.isnan(v):
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


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
         lambda r, v: f"{v:.3g} ({fmt(r.goodput_fraction, 'frac')})"),
        ("Cost", "$ per million output tokens",
         lambda r: r.cost_per_million_output_tokens_usd,
         lambda r, v: (f"{fmt(v, 'usd3')} ({_plural(r.num_gpus, 'GPU')}, "
                       f"{fmt(r.cost_per_hour_usd, 'usd')}/h)")),
    )
    with matplotlib.rc_context(RC):
        fig = _figure(13.0, 1.4 + 0.55 * max(len(rows), 2))
        axes = fig.subplots(1, 3, sharey=True)
        for ax, (title, unit, get, text) in zip(axes, panels):
            vals = np.array([get(r) for r in rows], np.float64)
            clean = np.where(np.isnan(vals), 0, vals)
            bars = ax.barh(y, clean, 0.65, color=[colours[r.variant] for r in rows])
            ax.bar_label(bars, ["—" if math.isnan(v) else text(r, v) for r, v in zip(rows, vals)],
                         padding=3, fontsize=8)
            ax.set_xlim(0, (clean.max() if len(clean) and clean.max() > 0 else 1) * 1.65)
            ax.set_title(title)
            ax.set_xlabel(unit)
            ax.xaxis.set_major_formatter(_PLAIN)
            ax.grid(axis="y", visible=False)
        axes[0].set_yticks(y, names)
        axes[0].invert_yaxis()
        _save(fig, path)
