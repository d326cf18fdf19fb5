"""The sizing front: output tokens/s per GPU against output tokens/s per user.

The axes NVIDIA's aiconfigurator and SemiAnalysis' InferenceX plot: how much a GPU
produces (the fleet's output throughput ÷ its GPUs) against how fast one user's reply
streams (1000 ÷ the mean TPOT in ms — aiconfigurator's ``tokens/s/user``). Every
configuration a ``capsim size`` search ran is one point (its replications averaged);
``front.csv`` lists them and ``front.png`` draws them with the SLO-feasible points filled,
the front of the feasible ones (no other feasible point is better on both axes) shaded
beneath, and the chosen answer (rank 1) starred.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from capsim.report.plotting import figure, save, short
from capsim.report.style import RC
from capsim.studies.sizing import SizingResult, SizingRow

__all__ = ["FRONT_COLUMNS", "front_frame", "plot_front"]

#: front.csv's own columns, after the configuration's labels.
FRONT_COLUMNS = ("output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user",
                 "slo_feasible", "on_front", "sized", "chosen")

_FEASIBLE = "#1E8449"
_OTHER = "black"           # legend samples of filled / hollow (no series is black)
_CHOSEN = "#C0392B"


def _point_key(variant, hardware, tp, pools, pre, dec, replicas) -> tuple:
    pools = pools if isinstance(pools, str) else ""
    split = (int(pre), int(dec)) if pools else None
    return (variant, hardware, int(tp), pools, split, None if pools else int(replicas))


def _row_key(r: SizingRow) -> tuple:
    split = (r.prefill_replicas, r.decode_replicas) if r.pools else None
    return (r.variant, r.hardware, r.tensor_parallel_size, r.pools, split,
            None if r.pools else r.num_replicas)


def front_frame(result: SizingResult, points: pd.DataFrame) -> pd.DataFrame:
    """front.csv: one row per configuration the search ran (``points``, the replication
    means of :func:`capsim.report.sweep.page.sizing_points`).

    Columns: ``configuration`` (the option's label), ``split`` (``2P3D``, "" co-located),
    ``num_replicas``, ``num_gpus``, ``offered_rate_per_s``, ``output_throughput_tok_per_s``,
    ``tpot_mean_ms``, then :data:`FRONT_COLUMNS`: tokens/s per GPU and per user,
    ``slo_feasible`` (every replication met every target), ``on_front`` (feasible and no
    other feasible point at least as good on both axes and better on one), ``sized`` (an
    option's answer) and ``chosen`` (the rank-1 answer). Per user is NaN where no reply
    had a second token (TPOT undefined).
    """
    rows = {_row_key(r): r for r in result.rows if r.status == "met"}
    chosen = next((_row_key(r) for r in result.rows if r.rank == 1), None)
    labels = {(r.variant, r.hardware, r.tensor_parallel_size, r.pools): r.label
              for r in result.rows}
    out = []
    for p in points.itertuples(index=False):
        p = p._asdict()
        pools = p.get("pools") if isinstance(p.get("pools"), str) else ""
        key = _point_key(p["variant"], p["hardware"], p["tensor_parallel_size"], pools,
                         p.get("prefill_replicas", 0), p.get("decode_replicas", 0),
                         p["num_replicas"])
        tpot = float(p["tpot_mean_ms"])
        out.append({
            "configuration": labels.get(key[:4], p["variant"]),
            "split": f"{key[4][0]}P{key[4][1]}D" if key[4] else "",
            "num_replicas": int(p["num_replicas"]), "num_gpus": int(p["num_gpus"]),
            "offered_rate_per_s": p["offered_rate_per_s"],
            "output_throughput_tok_per_s": p["output_throughput_tok_per_s"],
            "tpot_mean_ms": tpot,
            "output_tokens_per_s_per_gpu": p["output_throughput_tok_per_s"] / p["num_gpus"],
            "output_tokens_per_s_per_user": 1e3 / tpot if tpot > 0 else math.nan,
            "slo_feasible": bool(p["slo_pass_all"]), "on_front": False,
            "sized": key in rows, "chosen": key == chosen})
    frame = pd.DataFrame(out, columns=["configuration", "split", "num_replicas", "num_gpus",
                                       "offered_rate_per_s", "output_throughput_tok_per_s",
                                       "tpot_mean_ms", *FRONT_COLUMNS])
    frame["on_front"] = _on_front(frame)
    return frame


def _on_front(frame: pd.DataFrame) -> np.ndarray:
    """Feasible points no other feasible point dominates (>= on both axes, > on one)."""
    gpu = frame["output_tokens_per_s_per_gpu"].to_numpy(np.float64)
    user = frame["output_tokens_per_s_per_user"].to_numpy(np.float64)
    ok = frame["slo_feasible"].to_numpy(bool) & np.isfinite(gpu) & np.isfinite(user)
    out = np.zeros(len(frame), bool)
    for i in np.flatnonzero(ok):
        better = ok & (gpu >= gpu[i]) & (user >= user[i]) & ((gpu > gpu[i]) | (user > user[i]))
        out[i] = not better.any()
    return out


def plot_front(frame: pd.DataFrame, path: Path) -> None:
    """``front.png``: tokens/s per GPU (y) against tokens/s per user (x), every point of
    ``frame`` (:func:`front_frame`); filled: SLO-feasible; shaded: the region the feasible
    front covers; star: the chosen answer."""
    with matplotlib.rc_context(RC):
        fig = figure(9.0, 6.0)
        ax = fig.subplots()
        names = list(dict.fromkeys(frame["configuration"]))
        colours = matplotlib.colormaps["tab10"].colors
        for i, name in enumerate(names):
            rows = frame[frame["configuration"] == name]
            c = colours[i % len(colours)]
            for r in rows.itertuples(index=False):
                ax.plot([r.output_tokens_per_s_per_user], [r.output_tokens_per_s_per_gpu],
                        ls="", marker="o", ms=6, color=c, mew=1.5,
                        mfc=c if r.slo_feasible else "white", zorder=3)
        front = frame[frame["on_front"]].sort_values("output_tokens_per_s_per_user")
        if len(front):
            x = [0.0, *front["output_tokens_per_s_per_user"]]
            y = [front["output_tokens_per_s_per_gpu"].iloc[0],
                 *front["output_tokens_per_s_per_gpu"]]
            ax.fill_between(x, y, step="pre", color=_FEASIBLE, alpha=0.12, zorder=1)
            ax.step(x, y, where="pre", color=_FEASIBLE, lw=1.2, zorder=2)
        star = frame[frame["chosen"]]
        ax.plot(star["output_tokens_per_s_per_user"], star["output_tokens_per_s_per_gpu"],
                ls="", marker="*", ms=18, color=_CHOSEN, mec="black", zorder=4)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("output tokens/s per user (1000 ÷ mean TPOT)")
        ax.set_ylabel("output tokens/s per GPU")
        ax.set_title("Throughput per GPU vs speed per user (every configuration tried)")
        handles = [Line2D([], [], ls="", marker="o", color=colours[i % len(colours)],
                          label=short(n, 56)) for i, n in enumerate(names)]
        handles += [Line2D([], [], ls="", marker="o", color=_OTHER, label="meets the SLOs"),
                    Line2D([], [], ls="", marker="o", color=_OTHER, mfc="white",
                           label="misses one"),
                    Patch(color=_FEASIBLE, alpha=0.25, label="SLO-feasible front"),
                    Line2D([], [], ls="", marker="*", ms=12, color=_CHOSEN, mec="black",
                           label="chosen")]
        fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False)
        save(fig, path)
