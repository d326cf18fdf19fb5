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

from capsim.report.plotting import figure, save
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


def plot_timeline(result: RunResult, colour: str, path: Path) -> None:
    """Three stacked panels over simulated time (s) for one variant.

    1. Mean tokens per engine step, prefill vs decode (stacked areas, all replicas pooled).
    2. KV-cache blocks in use, % of num_gpu_blocks (max per bin), per replica.
    3. Waiting queue length (max per bin) per replica, with running sequences
       (Σ over replicas of the per-bin max) as a shaded area.
    """
    tls = sorted(result.timelines, key=lambda t: t.replica)
    split = result.disagg is not None      # prefill/decode pools: per-pool top panel + link panel
    with matplotlib.rc_context(RC):
        fig = figure(11.0, 10.8 if split else 8.2)
        axes = fig.subplots(4 if split else 3, 1, sharex=True)
        ax_tok, ax_kv, ax_q = axes[:3]
        fig.suptitle(f"Timeline — {result.variant}", fontsize=12, fontweight="bold",
                     color=colour)
        if not tls:
            ax_tok.text(0.5, 0.5, "no timeline recorded", ha="center", transform=ax_tok.transAxes)
            save(fig, path)
            return
        width, n = display_grid(tls, result.sim_end_s)
        t_s = np.arange(n + 1) * width          # bin edges; each series repeats its last value
        per = _bin_text(width)
        # A bin's value is drawn from its start and held for its width ("steps-post").
        if split:
            disagg.draw_pool_tokens(ax_tok, tls, width, n, t_s, _pad, tokens_per_step)
            ax_tok.set_title(f"Batch composition per pool: mean per engine step ({per} bins)",
                             loc="left")
        else:
            pre, dec = tokens_per_step(tls, width, n)
            ax_tok.stackplot(t_s, _pad(pre), _pad(dec), colors=[PREFILL, DECODE], step="post",
                             alpha=0.85, labels=["prefill tokens / step", "decode tokens / step"])
            ax_tok.set_ylabel("tokens per step")
            ax_tok.set_title(f"Batch composition: mean tokens per engine step ({per} bins, all "
                             "replicas)", loc="left")
            ax_tok.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)

        _lines(ax_kv, t_s, _pad(kv_percent(result, tls, width, n)), tls, colour, "KV used")
        ax_kv.set_ylim(0, 105)
        ax_kv.axhline(100, color="#C0392B", lw=0.8, ls=":")
        ax_kv.set_ylabel("KV cache used (%)")
        ax_kv.set_title(f"KV-cache blocks in use, % of num_gpu_blocks (max per {per} bin)",
                        loc="left")
        ax_kv.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)

        running = _grid(tls, "running_max", width, n, "max")
        queue = _grid(tls, "queue_len_max", width, n, "max")
        ax_run = ax_q.twinx()       # running batch on its own scale, so a short queue stays visible
        ax_run.fill_between(t_s, _pad(running.sum(axis=0)), step="post", color="#BBBBBB", alpha=0.5,
                            lw=0)
        ax_run.set_ylim(bottom=0)
        ax_run.set_ylabel("running (Σ)", color="#666")
        ax_run.tick_params(axis="y", colors="#666")
        ax_run.grid(False)
        ax_run.spines["right"].set_visible(True)
        ax_q.set_zorder(ax_run.get_zorder() + 1)
        ax_q.patch.set_visible(False)
        _lines(ax_q, t_s, _pad(queue), tls, colour, "waiting")
        ax_q.set_ylim(0, max(1.0, float(queue.max(initial=0))) * 1.15)
        ax_q.set_ylabel("waiting requests")
        ax_q.set_title(f"Waiting queue per replica and running batch (max per {per} bin)",
                       loc="left")
        handles, labels = ax_q.get_legend_handles_labels()
        handles.append(Patch(color="#BBBBBB", alpha=0.5))
        labels.append("running sequences (Σ replicas, right axis)")
        ax_q.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)
        for ax in (ax_kv, ax_q):
            for line in ax.get_lines():
                line.set_drawstyle("steps-post")
        if split:
            disagg.draw_link(axes[3], result, width, n, t_s, _pad)
        axes[-1].set_xlabel("simulated time (s)")
        axes[-1].set_xlim(0, n * width)
        save(fig, path)
