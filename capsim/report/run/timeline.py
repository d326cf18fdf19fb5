"""Per-variant timeline: batch composition, KV-cache use and queues over simulated time.

Input is one :class:`~capsim.results.model.RunResult`: its ``timelines`` (one
:class:`~capsim.results.model.ReplicaTimeline` per replica, fixed-width bins from
t = 0 s, possibly a different ``bin_s`` per replica) and ``replicas`` (for
``num_gpu_blocks``). Bins are merged onto one display grid of at most
``DISPLAY_BINS`` bins so a long run stays readable: counts are summed (tokens
per step = Σ tokens / Σ steps) and per-bin maxima stay maxima.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from capsim.report.plotting import PLAIN, figure, log_axis, pinned_title, save
from capsim.report.run import disagg
from capsim.report.style import DECODE, PREFILL, RC, shades
from capsim.results.model import ReplicaTimeline, RunResult

MAX_REPLICA_LINES = 8   # above this, draw mean and max across replicas instead of one line each
DISPLAY_BINS = 240      # at most this many bins across the time axis
_LINESTYLES = ("-", "--", "-.", ":")


def display_grid(tls: list[ReplicaTimeline], end_s: float = 0.0,
                 max_bins: int = DISPLAY_BINS) -> tuple[float, int]:
    """(bin width in s, number of bins) covering every timeline and ``end_s``.

    The width is a whole multiple of the widest recorded ``bin_s``, so recorded
    bins are merged, never split.
    """
    if not tls:
        return 1.0, 0
    widest = max(t.bin_s for t in tls)
    span = max([end_s] + [len(t.steps) * t.bin_s for t in tls])
    width = widest * max(1, math.ceil(span / (max_bins * widest) - 1e-9))
    return width, max(1, math.ceil(span / width - 1e-9))


_GAUGES = ("kv_used_blocks_max", "queue_len_max", "running_max")


def gauge(t: ReplicaTimeline, field: str) -> np.ndarray:
    """A gauge field (KV, queue, running) with bins spanned by one long step filled in.

    Gauges are sampled when a step ends, so a bin inside a step longer than
    ``bin_s`` (a whole-batch prefill of the static scheduler, say) holds 0 although
    the replica was busy. Such a bin takes the value of the next bin with a step
    end, when that bin's busy time (its steps taken to end mid-bin) reaches back
    over it, or when the bin has busy time itself; bins of an idle replica stay 0.
    """
    v = np.asarray(getattr(t, field), np.float64)
    n = len(v)
    if n == 0:
        return v
    has = np.asarray(t.steps) > 0
    busy = np.asarray(t.busy_s, np.float64)
    k = np.arange(n)
    nxt = np.minimum.accumulate(np.where(has, k, n)[::-1])[::-1]   # next bin with a step end
    nxt_c = np.minimum(nxt, n - 1)
    # The step(s) ending in bin nxt, taken to end mid-bin, reach back over bin k's end?
    reach = busy[nxt_c] > (nxt_c - k - 0.5) * t.bin_s
    covered = (~has) & (nxt < n) & ((busy > 0) | reach)
    return np.where(covered, v[nxt_c], v)


def _grid(tls: list[ReplicaTimeline], field: str, width_s: float, n: int,
          how: str) -> np.ndarray:
    """One per-bin field of every replica on the display grid: (replicas × n), "sum" or "max"."""
    out = np.zeros((len(tls), n))
    for i, t in enumerate(tls):
        v = gauge(t, field) if field in _GAUGES else np.asarray(getattr(t, field), np.float64)
        idx = np.minimum((np.arange(len(v)) * t.bin_s / width_s + 1e-9).astype(np.int64), n - 1)
        (np.add if how == "sum" else np.maximum).at(out[i], idx, v)
    return out


def tokens_per_step(tls: list[ReplicaTimeline], width_s: float, n: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Mean prefill and decode tokens per engine step in each display bin, pooled over replicas.

    Σ prefill_tokens / Σ steps (and the same for decode); 0 in bins without steps.
    """
    steps = _grid(tls, "steps", width_s, n, "sum").sum(axis=0)
    pre = _grid(tls, "prefill_tokens", width_s, n, "sum").sum(axis=0)
    dec = _grid(tls, "decode_tokens", width_s, n, "sum").sum(axis=0)
    safe = np.where(steps > 0, steps, 1.0)
    return np.where(steps > 0, pre / safe, 0.0), np.where(steps > 0, dec / safe, 0.0)


def step_times_ms(tls: list[ReplicaTimeline], width_s: float, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Mean and longest engine step (ms) in each display bin, pooled over ``tls``.

    Mean = Σ busy_s / Σ steps (0 in bins without steps); longest = the largest
    ``step_max_s`` of any replica in the bin (0 where none was recorded). A mean over a
    bin hides a long step among many short ones; the longest shows it: a whole prompt
    prefilled in one step stalls every running decode for that long (seed 002 Q10).
    """
    steps = _grid(tls, "steps", width_s, n, "sum").sum(axis=0)
    busy = _grid(tls, "busy_s", width_s, n, "sum").sum(axis=0)
    mean = np.where(steps > 0, busy / np.where(steps > 0, steps, 1.0), 0.0) * 1e3
    recorded = [t for t in tls if len(t.step_max_s) == len(t.steps)]
    longest = _grid(recorded, "step_max_s", width_s, n, "max").max(axis=0, initial=0.0) * 1e3
    return mean, longest


def kv_percent(result: RunResult, tls: list[ReplicaTimeline], width_s: float, n: int
               ) -> np.ndarray:
    """KV blocks in use (max per display bin) as % of each replica's num_gpu_blocks.

    Shape (replicas × n), rows in the order of ``tls``; NaN for a replica
    without a known block count.
    """
    blocks = {r.replica: r.num_gpu_blocks for r in result.replicas}
    used = _grid(tls, "kv_used_blocks_max", width_s, n, "max")
    total = np.array([blocks.get(t.replica, 0) for t in tls], np.float64)
    safe = np.where(total > 0, total, 1.0)[:, None]
    return np.where(total[:, None] > 0, used / safe * 100.0, np.nan)


def _pad(a: np.ndarray) -> np.ndarray:
    """Repeat the last bin's value so a "steps-post" drawing gives the last bin its width."""
    return np.concatenate([a, a[..., -1:]], axis=-1)


def _bin_text(width_s: float) -> str:
    return f"{width_s * 1e3:.0f} ms" if width_s < 1 else f"{width_s:,.3g} s"


def _label(t: ReplicaTimeline) -> str:
    return f"replica {t.replica}" + ("" if t.pool == "colocated" else f" ({t.pool})")


def _lines(ax, t_s: np.ndarray, data: np.ndarray, tls: list[ReplicaTimeline], colour: str,
           what: str) -> None:
    """One line per replica, or mean and max across replicas when there are many."""
    if len(tls) > MAX_REPLICA_LINES:
        ax.plot(t_s, np.nanmean(data, axis=0), color=colour, lw=1.6,
                label=f"{what}: mean of {len(tls)} replicas")
        ax.plot(t_s, np.nanmax(data, axis=0), color=colour, lw=1.0, ls="--",
                label=f"{what}: max over replicas")
        return
    for i, (t, c) in enumerate(zip(tls, shades(colour, len(tls)))):
        label = f"{what} — {_label(t)}" if len(tls) > 1 else what
        ax.plot(t_s, data[i], color=c, lw=1.5, ls=_LINESTYLES[i % len(_LINESTYLES)], label=label)


def step_time_range_ms(results: list[RunResult],
                       stall_threshold_ms: float | None = None) -> tuple[float, float]:
    """(low, high) ms of the step-time panel shared by every variant's timeline: their
    shortest mean step to their longest step, so two variants' panels compare at a glance;
    widened to show ``stall_threshold_ms`` (its line is in the legend: off the axis, a
    reader could not tell how far below it the steps stay)."""
    lo, hi = math.inf, 0.0
    for r in results:
        if not r.timelines:
            continue
        width, n = display_grid(r.timelines, r.sim_end_s)
        mean, longest = step_times_ms(r.timelines, width, n)
        if (mean > 0).any():
            lo = min(lo, float(mean[mean > 0].min()))
        hi = max(hi, float(longest.max(initial=0.0)), float(mean.max(initial=0.0)))
    if hi <= 0:
        return 0.1, 1000.0
    lo = min(lo, hi) if lo < math.inf else hi / 10
    if stall_threshold_ms is not None and stall_threshold_ms > 0:
        lo, hi = min(lo, stall_threshold_ms), max(hi, stall_threshold_ms)
    return lo / 1.5, hi * 1.5


def plot_timeline_among(results: list[RunResult], index: int, colours: dict[str, str],
                        path: Path, stall_threshold_ms: float | None) -> None:
    """:func:`plot_timeline` of ``results[index]``, its step-time panel on the scale shared
    by every result of the report (:func:`step_time_range_ms`); ``colours`` by variant."""
    result = results[index]
    plot_timeline(result, colours[result.variant], path,
                  step_ms_range=step_time_range_ms(results, stall_threshold_ms),
                  stall_threshold_ms=stall_threshold_ms)


def plot_timeline(result: RunResult, colour: str, path: Path, *,
                  step_ms_range: tuple[float, float] | None = None,
                  stall_threshold_ms: float | None = None) -> None:
    """Four stacked panels over simulated time (s) for one variant.

    1. Mean tokens per engine step, prefill vs decode (stacked areas, all replicas pooled).
    2. Engine step time per bin: the mean and the longest step (ms; per pool in a split),
       so a head-of-line stall hidden by the mean stays visible.
    3. KV-cache blocks in use, % of num_gpu_blocks (max per bin), per replica.
    4. Waiting queue length (max per bin) per replica, with running sequences
       (Σ over replicas of the per-bin max) as a shaded area.
    A disaggregated variant adds a fifth panel: the KV link.

    ``step_ms_range``: the step-time panel's log-scale y range (ms), shared by the variants of
    one report (:func:`step_time_range_ms`); ``stall_threshold_ms`` draws the stall line there.
    """
    tls = sorted(result.timelines, key=lambda t: t.replica)
    split = result.disagg is not None      # prefill/decode pools: per-pool top panel + link panel
    with matplotlib.rc_context(RC):
        fig = figure(11.0, 13.2 if split else 10.6)
        axes = fig.subplots(5 if split else 4, 1, sharex=True,
                            height_ratios=[1, 0.8, 1, 1] + ([1] if split else []))
        ax_tok, ax_step, ax_kv, ax_q = axes[:4]
        title = fig.suptitle(f"Timeline — {result.variant}", fontsize=12,
                             fontweight="bold", color=colour)
        if not tls:
            ax_tok.text(0.5, 0.5, "no timeline recorded", ha="center", transform=ax_tok.transAxes)
            save(fig, path, centre_over_axes=title)
            return
        width, n = display_grid(tls, result.sim_end_s)
        t_s = np.arange(n + 1) * width          # bin edges; each series repeats its last value
        per = _bin_text(width)
        # A bin's value is drawn from its start and held for its width ("steps-post").
        _draw_tokens(ax_tok, tls, width, n, t_s, split, per)
        _draw_step_times(ax_step, tls, width, n, t_s, colour, split, per,
                         step_ms_range or step_time_range_ms([result], stall_threshold_ms),
                         stall_threshold_ms)
        _draw_kv(ax_kv, result, tls, width, n, t_s, colour, per)
        _draw_queue(ax_q, tls, width, n, t_s, colour, per)
        if split:
            disagg.draw_link(axes[4], result, width, n, t_s, _pad)
        axes[-1].set_xlabel("simulated time (s)")
        axes[-1].set_xlim(0, n * width)
        save(fig, path, centre_over_axes=title)


def _draw_tokens(ax, tls: list[ReplicaTimeline], width: float, n: int, t_s: np.ndarray,
                 split: bool, per: str) -> None:
    """Panel 1: mean prefill and decode tokens per engine step (stacked), per pool of a split."""
    if split:
        disagg.draw_pool_tokens(ax, tls, width, n, t_s, _pad, tokens_per_step)
        ax.set_title(f"Batch composition per pool: mean per engine step ({per} bins)",
                     loc="left")
        return
    pre, dec = tokens_per_step(tls, width, n)
    ax.stackplot(t_s, _pad(pre), _pad(dec), colors=[PREFILL, DECODE], step="post",
                 alpha=0.85, labels=["prefill tokens / step", "decode tokens / step"])
    ax.set_ylabel("tokens per step")
    ax.set_title(f"Batch composition: mean tokens per engine step ({per} bins, all "
                 "replicas)", loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)


def _draw_kv(ax, result: RunResult, tls: list[ReplicaTimeline], width: float, n: int,
             t_s: np.ndarray, colour: str, per: str) -> None:
    """Panel 3: KV blocks in use, % of num_gpu_blocks (max per bin), per replica."""
    _lines(ax, t_s, _pad(kv_percent(result, tls, width, n)), tls, colour, "KV used")
    ax.set_ylim(0, 105)
    ax.axhline(100, color="#C0392B", lw=0.8, ls=":", label="capacity (num_gpu_blocks)")
    ax.set_ylabel("KV cache used (%)")
    pinned_title(ax, f"KV-cache blocks in use, % of num_gpu_blocks (max per {per} bin)",
                 loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)
    _hold_each_bin(ax)


def _draw_queue(ax, tls: list[ReplicaTimeline], width: float, n: int, t_s: np.ndarray,
                colour: str, per: str) -> None:
    """Panel 4: waiting queue (max per bin) per replica, and the running sequences (Σ over
    replicas of the per-bin max) shaded on a right axis of their own."""
    running = _grid(tls, "running_max", width, n, "max")
    queue = _grid(tls, "queue_len_max", width, n, "max")
    ax_run = ax.twinx()         # running batch on its own scale, so a short queue stays visible
    ax_run.fill_between(t_s, _pad(running.sum(axis=0)), step="post", color="#BBBBBB", alpha=0.5,
                        lw=0)
    ax_run.set_ylim(bottom=0)
    ax_run.set_ylabel("running (Σ)", color="#666")
    ax_run.tick_params(axis="y", colors="#666")
    ax_run.grid(False)
    ax_run.spines["right"].set_visible(True)
    ax.set_zorder(ax_run.get_zorder() + 1)
    ax.patch.set_visible(False)
    _lines(ax, t_s, _pad(queue), tls, colour, "waiting")
    ax.set_ylim(0, max(1.0, float(queue.max(initial=0))) * 1.15)
    ax.set_ylabel("waiting requests")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))     # requests: whole numbers
    ax.set_title(f"Waiting queue per replica and running batch (max per {per} bin)",
                 loc="left")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Patch(color="#BBBBBB", alpha=0.5))
    labels.append("running sequences (Σ replicas, right axis)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)
    _hold_each_bin(ax)


def _hold_each_bin(ax) -> None:
    """Draw every line of ``ax`` "steps-post" (after its legend took the plain style)."""
    for line in ax.get_lines():
        line.set_drawstyle("steps-post")


def _draw_step_times(ax, tls: list[ReplicaTimeline], width: float, n: int, t_s: np.ndarray,
                     colour: str, split: bool, per: str, y_range: tuple[float, float],
                     stall_threshold_ms: float | None) -> None:
    """Panel 2: longest step (solid) and mean step (dotted) per bin on a log scale, one pair
    per pool of a split; the stall threshold as a dotted grey line."""
    pools = (("prefill", "#9A6A00"), ("decode", "#1F77B4")) if split else (("", colour),)
    for pool, c in pools:
        sel = [t for t in tls if t.pool == pool] if pool else tls
        mean, longest = step_times_ms(sel, width, n)
        name = f"{pool} pool: " if pool else ""
        # Bins without a step are left out (NaN), not drawn at 0 on the log axis.
        ax.step(t_s, _pad(np.where(longest > 0, longest, np.nan)), where="post", color=c,
                lw=1.6, label=f"{name}longest step in the bin")
        ax.step(t_s, _pad(np.where(mean > 0, mean, np.nan)), where="post", color=c, lw=1.0,
                ls=":", label=f"{name}mean step")
    if stall_threshold_ms is not None:
        ax.axhline(stall_threshold_ms, color="#7F7F7F", ls="--", lw=1.0,
                   label=f"stall threshold {stall_threshold_ms:g} ms")
    ax.set_yscale("log")
    ax.set_ylim(*y_range)
    log_axis(ax.yaxis, PLAIN, *y_range)
    ax.set_ylabel("step time (ms, log)")
    pinned_title(ax, f"Engine step time: longest and mean per {per} bin (same scale in "
                 "every timeline)", loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)
