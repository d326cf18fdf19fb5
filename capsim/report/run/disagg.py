"""The prefill/decode split's figures: a P:D ratio view and KV-transfer CDFs (its table,
figure names and captions: :mod:`capsim.report.run.split_table`, without matplotlib).

Drawn only when at least one variant is disaggregated
(``RunResult.disagg`` set). Co-located variants appear in the P:D view as
reference bars (hatched), so a reader sees at a glance whether a split beats
sharing the same GPUs. Inputs: summary rows (``cls == "all"``, ms and
fractions) and RunResults (seconds); outputs: PNGs at ``style.DPI``, drawn by the
report's chart process (:mod:`capsim.report.charts`).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from capsim.profiles.policies import label_holds_replies
from capsim.report.cells import fmt
from capsim.report.plotting import (PERCENT, PLAIN, bar_text, cdf_y, draw_cdf, figure, log_axis,
                                    mark, marker_handles, ms_axis, save, short, x_limits)
from capsim.report.run.cdf import distribution
from capsim.report.run.split_table import ordered
from capsim.report.style import DECODE, PREFILL, RC
from capsim.results.model import RunResult, SummaryRow


def _label(row: SummaryRow, result: RunResult) -> str:
    name = short(row.variant, 18)
    if result.disagg is None:
        return f"{name}\n(co-located, {row.num_gpus} GPU)"
    return f"{name}\n({result.disagg.label}, {row.num_gpus} GPU)"


def plot_ratio(rows: list[SummaryRow], results: list[RunResult], colours: dict[str, str],
               path: Path) -> None:
    """Three stacked panels over the variants: goodput, latency (log ms), pool utilisation."""
    by_name = {r.variant: r for r in results}
    rows = ordered(rows, results)
    x = np.arange(len(rows))
    with matplotlib.rc_context(RC):
        fig = figure(min(16.0, max(10.5, 1.6 * len(rows) + 3.5)), 10.5)
        ax_good, ax_lat, ax_pool = fig.subplots(3, 1, sharex=True)
        _goodput_panel(ax_good, rows, by_name, colours, x)
        _latency_panel(ax_lat, rows, by_name, x)
        _pool_panel(ax_pool, rows, by_name, x)
        ax_pool.set_xticks(x, [_label(r, by_name[r.variant]) for r in rows])
        for ax in (ax_good, ax_lat, ax_pool):
            ax.grid(axis="x", visible=False)
            ax.set_xlim(-0.6, len(rows) - 0.4)
        save(fig, path)


def _goodput_panel(ax, rows, by_name, colours, x) -> None:
    vals = np.array([r.goodput_req_per_s for r in rows], np.float64)
    clean = np.nan_to_num(vals)
    for i, r in enumerate(rows):
        colo = by_name[r.variant].disagg is None
        ax.bar(x[i], clean[i], 0.6, color=colours[r.variant], hatch="//" if colo else None,
               edgecolor="white" if colo else colours[r.variant], zorder=2)
        ax.annotate(f"{fmt(vals[i], 'rate')} req/s\n{fmt(r.goodput_fraction, 'frac')} good",
                    (x[i], clean[i]), xytext=(0, 3), textcoords="offset points", ha="center",
                    fontsize=8)
    ax.set_ylim(0, max(clean.max(initial=0.0), 1e-9) * 1.35)
    ax.set_ylabel("goodput (req/s)")
    ax.set_title("Goodput: requests per second meeting every per-request SLO", loc="left")
    ax.legend(handles=[Patch(facecolor="#999", hatch="//", edgecolor="white", label="co-located"),
                       Patch(facecolor="#999", label="disaggregated")], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


_LATENCIES = (("ttft_p99_ms", "TTFT p99", "#555555"), ("itl_p99_ms", "ITL p99", "#0072B2"),
              ("itl_max_ms", "ITL max", "#D55E00"),
              ("second_token_p99_ms", "token 1→2 p99", "#009E73"))


def latency_notes(rows: list[SummaryRow], by_name: dict[str, RunResult]) -> list[tuple[int, str]]:
    """(index, text) of each variant whose ITL bars the latency panel leaves out, saying
    why, as the ITL charts do: static batching holds each reply until its batch ends, so a
    client sees no gap between tokens (ITL n/a; the wait is in TTFT)."""
    return [(i, "ITL n/a: replies held\nuntil the batch ends\n(the wait is in TTFT)")
            for i, r in enumerate(rows) if label_holds_replies(by_name[r.variant].scheduler)]


def _latency_panel(ax, rows, by_name, x) -> None:
    width = 0.8 / len(_LATENCIES)
    finite = []
    for j, (key, label, colour) in enumerate(_LATENCIES):
        vals = np.array([getattr(r, key) for r in rows], np.float64)
        pos = x - 0.4 + width * (j + 0.5)
        ok = ~np.isnan(vals) & (vals > 0)
        ax.bar(pos[ok], vals[ok], width * 0.9, color=colour, label=label, zorder=2)
        for p, v in zip(pos[ok], vals[ok]):
            ax.annotate(bar_text(v), (p, v), xytext=(0, 2), textcoords="offset points",
                        ha="center", fontsize=7, rotation=90)
        finite += vals[ok].tolist()
    ax.set_yscale("log")
    lo, hi = min(finite, default=1.0) / 2, max(finite, default=10.0) * 20
    ax.set_ylim(lo, hi)
    log_axis(ax.yaxis, PLAIN, lo, hi)
    ax.set_ylabel("ms (log scale)")
    ax.set_title("Latency: TTFT p99, ITL p99 / max, token 1→2 gap p99 (splits only)", loc="left")
    for i, text in latency_notes(rows, by_name):      # n/a, with why, where bars are missing
        ax.text(x[i] + 0.05, 0.04, text, transform=ax.get_xaxis_transform(), rotation=90,
                ha="center", va="bottom", fontsize=7, color="#555555")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


_POOLS = (("prefill_busy_frac", "prefill busy", PREFILL, None),
          ("decode_busy_frac", "decode busy", DECODE, None),
          ("stranded_prefill_frac", "prefill stranded", PREFILL, "xx"),
          ("stranded_decode_frac", "decode stranded", DECODE, "xx"))


def _pool_panel(ax, rows, by_name, x) -> None:
    width = 0.8 / len(_POOLS)
    for j, (key, label, colour, hatch) in enumerate(_POOLS):
        for i, r in enumerate(rows):
            colo = by_name[r.variant].disagg is None
            v = r.gpu_busy_frac if colo and j == 0 else getattr(r, key)
            if colo and j > 0 or math.isnan(v):
                continue
            pos = x[i] - 0.4 + width * (j + 0.5) if not colo else x[i]
            ax.bar(pos, v, width * 0.9 if not colo else 0.3, zorder=2,
                   color="#BBBBBB" if colo else colour, hatch=hatch,
                   edgecolor="white" if hatch else None)
            ax.annotate(f"{v * 100:.0f}%", (pos, v), xytext=(0, 2), textcoords="offset points",
                        ha="center", fontsize=7)
    ax.set_ylim(0, 1.12)
    ax.yaxis.set_major_formatter(PERCENT)
    ax.set_ylabel("share of pool GPU time")
    ax.set_title("Pools: GPU busy and stranded (idle while the other pool is saturated)",
                 loc="left")
    _efficiency_marks(ax, rows, by_name, x, width)
    handles = [Patch(facecolor=c, hatch=h, edgecolor="white" if h else None, label=lab)
               for _, lab, c, h in _POOLS]
    handles.append(Line2D([], [], ls="", marker="D", color="#333", mfc="white",
                          label="on busy bars: prefill MFU / decode batch fill"))
    handles.append(Patch(facecolor="#BBBBBB", label="co-located: all GPUs busy"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              frameon=False)


def _efficiency_marks(ax, rows, by_name, x, width) -> None:
    """A diamond on each split's busy bars: prefill MFU, decode batch fill (seqs ÷ max_num_seqs)."""
    for i, r in enumerate(rows):
        if by_name[r.variant].disagg is None:
            continue
        for j, key in ((0, "prefill_mfu"), (1, "decode_slot_occupancy")):
            v = getattr(r, key)
            if not math.isnan(v):
                ax.plot([x[i] - 0.4 + width * (j + 0.5)], [v], ls="", marker="D", ms=6,
                        color="#333", mfc="white", mew=1.3, zorder=4)


def plot_transfers(results: list[RunResult], rows: list[SummaryRow], colours: dict[str, str],
                   path: Path) -> None:
    """Two CDF panels (log ms) per split: KV transfer time and token 1 → 2 gap."""
    splits = [r for r in results if r.disagg is not None]
    by_name = {r.variant: r for r in rows}
    with matplotlib.rc_context(RC):
        fig = figure(12.0, 5.2)
        ax_wire, ax_gap = fig.subplots(1, 2)
        wires, gaps, handles = [], [], []
        for r in splits:
            t = r.disagg.transfers
            handoff, reserved = np.asarray(t.handoff_s), np.asarray(t.reserved_s)
            wire = distribution((np.asarray(t.arrived_s) - reserved) * 1e3)
            gap = distribution((np.asarray(t.second_token_s) - handoff) * 1e3)
            c = colours[r.variant]
            for ax, d, store in ((ax_wire, wire, wires), (ax_gap, gap, gaps)):
                store.append(d)
                if not d.empty:
                    draw_cdf(ax, d, c)
                    mark(ax, d, c, ("p50", "p99", "max"), cdf_y)
            row = by_name.get(r.variant)
            extra = "" if row is None else (
                f": wait p99 {fmt(row.kv_backpressure_p99_ms, 'ms')} ms, "
                f"{fmt(row.kv_transfer_gib, 'num')} GiB over {r.disagg.link}")
            handles.append(Line2D([], [], color=c, lw=2,
                                  label=f"{short(r.variant)} ({r.disagg.label}){extra}"))
        for ax, dists, title, xlabel in (
                (ax_wire, wires, "KV transfer time on the link", "transfer time (ms, log scale)"),
                (ax_gap, gaps, "Token 1 → token 2 gap (as clients see it)",
                 "gap (ms, log scale)")):
            ms_axis(ax, xlabel, *x_limits(dists, []))
            ax.set_ylim(0, 1.04)
            ax.yaxis.set_major_formatter(PERCENT)
            ax.set_ylabel("share of transfers ≤ x")
            ax.set_title(title)
        ax_wire.legend(handles=marker_handles(("p50", "p99", "max")), loc="lower right",
                       framealpha=0.9)
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 2) or 1,
                   frameon=False)
        save(fig, path)


# ------------------------------------------------------------------------ timeline panels

def interval_occupancy(starts_s: np.ndarray, ends_s: np.ndarray, width_s: float,
                       n: int) -> np.ndarray:
    """Mean number of intervals [start, end) open in each of ``n`` bins of ``width_s`` seconds.

    Exact: each interval adds its overlap with a bin, divided by the bin width.
    Intervals with a NaN end are ignored.
    """
    out = np.zeros(n)
    for a, b in zip(np.asarray(starts_s, np.float64), np.asarray(ends_s, np.float64)):
        if not b > a:
            continue
        k0, k1 = int(a // width_s), min(int(b // width_s), n - 1)
        for k in range(k0, k1 + 1):
            lo, hi = max(a, k * width_s), min(b, (k + 1) * width_s)
            if hi > lo:
                out[k] += (hi - lo) / width_s
    return out


def draw_pool_tokens(ax, tls: list, width_s: float, n: int, t_s: np.ndarray, pad,
                     tokens_per_step) -> None:
    """Top timeline panel of a split: prefill tokens per prefill-pool step (left axis) and
    decode batch per decode-pool step (right axis); pooling them would mix two step kinds."""
    pre_tls = [t for t in tls if t.pool == "prefill"]
    dec_tls = [t for t in tls if t.pool == "decode"]
    pre, _ = tokens_per_step(pre_tls, width_s, n)
    _, dec = tokens_per_step(dec_tls, width_s, n)
    ax.fill_between(t_s, pad(pre), step="post", color=PREFILL, alpha=0.8, lw=0,
                    label="prefill pool: prompt tokens / step (left)")
    ax.set_ylabel("prompt tokens per step", color="#9A6A00")
    ax_dec = ax.twinx()
    ax_dec.step(t_s, pad(dec), where="post", color="#1F77B4", lw=1.2,
                label="decode pool: sequences / step (right)")
    ax_dec.set_ylim(bottom=0, top=max(1.0, float(dec.max(initial=0))) * 1.15)
    ax_dec.set_ylabel("decode batch", color="#1F77B4")
    ax_dec.grid(False)
    ax_dec.spines["right"].set_visible(True)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax_dec.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)


def draw_link(ax, result: RunResult, width_s: float, n: int, t_s: np.ndarray, pad) -> None:
    """Bottom timeline panel of a split: prefilled requests waiting for decode room and KV
    transfers on the link (mean number per bin)."""
    t = result.disagg.transfers
    waiting = interval_occupancy(t.handoff_s, t.reserved_s, width_s, n)
    moving = interval_occupancy(t.reserved_s, t.arrived_s, width_s, n)
    ax.fill_between(t_s, pad(waiting), step="post", color="#C0392B", alpha=0.35, lw=0,
                    label="waiting for decode room (back-pressure)")
    ax.step(t_s, pad(moving), where="post", color="#333333", lw=1.2,
            label=f"KV transfers on the link ({result.disagg.link})")
    ax.set_ylim(0, max(1.0, float(max(waiting.max(initial=0), moving.max(initial=0)))) * 1.15)
    ax.set_ylabel("requests (mean)")
    ax.set_title(f"KV handoff: prefilled requests waiting and transfers in flight (mean per "
                 f"{width_s * 1e3:.0f} ms bin)" if width_s < 1 else
                 f"KV handoff: prefilled requests waiting and transfers in flight (mean per "
                 f"{width_s:,.3g} s bin)", loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)
