"""Per-variant timeline: batch composition, KV-cache use and queues over simulated time.

Input is one :class:`~capsim.results.RunResult`: its ``timelines`` (one
:class:`~capsim.results.ReplicaTimeline` per replica, fixed-width bins from
t = 0 s) and ``replicas`` (for ``num_gpu_blocks``). Replicas are assumed to
share one ``bin_s``; the pooled panels use the first replica's.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from capsim.report.style import DPI, RC, shades
from capsim.results import ReplicaTimeline, RunResult

MAX_REPLICA_LINES = 8   # above this, draw mean and max across replicas instead of one line each
_PREFILL, _DECODE = "#E69F00", "#56B4E9"
_LINESTYLES = ("-", "--", "-.", ":")


def _series(tls: list[ReplicaTimeline], field: str) -> np.ndarray:
    """Stack one per-bin field of every replica into a (replicas × bins) float array, 0-padded."""
    n = max((len(getattr(t, field)) for t in tls), default=0)
    out = np.zeros((len(tls), n))
    for i, t in enumerate(tls):
        v = np.asarray(getattr(t, field), np.float64)
        out[i, : len(v)] = v
    return out


def tokens_per_step(tls: list[ReplicaTimeline]) -> tuple[np.ndarray, np.ndarray]:
    """Mean prefill and decode tokens per engine step in each bin, pooled over replicas.

    Σ prefill_tokens / Σ steps (and the same for decode); 0 in bins without steps.
    """
    steps = _series(tls, "steps").sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pre = np.where(steps > 0, _series(tls, "prefill_tokens").sum(axis=0) / steps, 0.0)
        dec = np.where(steps > 0, _series(tls, "decode_tokens").sum(axis=0) / steps, 0.0)
    return pre, dec


def kv_percent(result: RunResult) -> np.ndarray:
    """KV blocks in use (max per bin) as % of each replica's num_gpu_blocks; (replicas × bins)."""
    blocks = {r.replica: r.num_gpu_blocks for r in result.replicas}
    used = _series(result.timelines, "kv_used_blocks_max")
    total = np.array([blocks.get(t.replica, 0) for t in result.timelines], np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total[:, None] > 0, used / total[:, None] * 100.0, np.nan)


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
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(11.0, 8.2), dpi=DPI, layout="constrained")
        ax_tok, ax_kv, ax_q = fig.subplots(3, 1, sharex=True)
        fig.suptitle(f"Timeline — {result.variant}", fontsize=12, fontweight="bold",
                     color=colour)
        if not tls:
            ax_tok.text(0.5, 0.5, "no timeline recorded", ha="center", transform=ax_tok.transAxes)
            fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None})
            return
        bin_s = tls[0].bin_s
        # Values of a bin are drawn at its start and held for bin_s ("steps-post").
        pre, dec = tokens_per_step(tls)
        t_s = np.arange(len(pre)) * bin_s
        ax_tok.stackplot(t_s, pre, dec, colors=[_PREFILL, _DECODE], step="post", alpha=0.85,
                         labels=["prefill tokens / step", "decode tokens / step"])
        ax_tok.set_ylabel("tokens per step")
        ax_tok.set_title("Batch composition (mean per step in each bin, all replicas)", loc="left")
        ax_tok.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)

        kv = kv_percent(result)
        _lines(ax_kv, np.arange(kv.shape[1]) * bin_s, kv, tls, colour, "KV used")
        ax_kv.set_ylim(0, 105)
        ax_kv.axhline(100, color="#C0392B", lw=0.8, ls=":")
        ax_kv.set_ylabel("KV cache used (%)")
        ax_kv.set_title("KV-cache blocks in use (max per bin, % of num_gpu_blocks)", loc="left")
        ax_kv.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)

        running = _series(tls, "running_max")
        queue = _series(tls, "queue_len_max")
        ax_run = ax_q.twinx()       # running batch on its own scale, so a short queue stays visible
        ax_run.fill_between(np.arange(running.shape[1]) * bin_s, running.sum(axis=0),
                            step="post", color="#BBBBBB", alpha=0.5, lw=0)
        ax_run.set_ylim(bottom=0)
        ax_run.set_ylabel("running (Σ)", color="#666")
        ax_run.tick_params(axis="y", colors="#666")
        ax_run.grid(False)
        ax_run.spines["right"].set_visible(True)
        ax_q.set_zorder(ax_run.get_zorder() + 1)
        ax_q.patch.set_visible(False)
        _lines(ax_q, np.arange(queue.shape[1]) * bin_s, queue, tls, colour, "waiting")
        ax_q.set_ylim(0, max(1.0, float(queue.max(initial=0))) * 1.15)
        ax_q.set_ylabel("waiting requests")
        ax_q.set_title("Waiting queue per replica and running batch (max per bin)", loc="left")
        handles, labels = ax_q.get_legend_handles_labels()
        handles.append(Patch(color="#BBBBBB", alpha=0.5))
        labels.append("running sequences (Σ replicas, right axis)")
        ax_q.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False)
        ax_q.set_xlabel("simulated time (s)")
        ax_q.set_xlim(0, max(result.sim_end_s, len(pre) * bin_s))
        for ax in (ax_kv, ax_q):
            for line in ax.get_lines():
                line.set_drawstyle("steps-post")
        fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None})
