"""Plotting helpers shared by every report figure: run, disaggregation, sweep and calibration.

Only ``capsim.report`` imports matplotlib, and only through the object API
(``matplotlib.figure.Figure`` rendered by the Agg canvas): no pyplot, no global
state, safe to call from any thread. Callers draw inside
``matplotlib.rc_context(style.RC)``, create the figure with :func:`figure` and
write it with :func:`save` (PNG at ``style.DPI``, no software stamp, so the
same inputs give the same bytes). Axes are labelled in ms.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from capsim.report.style import DPI, PNG_COMPRESS_LEVEL, STAT_MARKERS

if TYPE_CHECKING:
    from matplotlib.text import Text

    from capsim.report.run.cdf import Distribution

NAME_CHARS = 40

#: Tick labels: plain numbers (thousands separators, no 10^k) and shares as percent.
PLAIN = FuncFormatter(lambda v, _: f"{v:,.10g}")
PERCENT = FuncFormatter(lambda v, _: f"{v * 100:.10g} %")


def short(name: str, limit: int = NAME_CHARS) -> str:
    """Shorten long variant names for legends and tick labels."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def figure(width_in: float, height_in: float) -> Figure:
    """An empty ``width_in`` × ``height_in`` inch figure at ``style.DPI``, constrained layout."""
    return Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")


def save(fig: Figure, path: Path, centre_over_axes: Text | None = None) -> None:
    """Write ``fig`` to ``path`` as a PNG at ``style.DPI`` without the Software metadata.

    ``centre_over_axes``: a figure title (``fig.suptitle``'s artist) moved, once the layout
    is solved, to the middle of the axes' span instead of the figure's, which a legend
    column to the right of the panels would pull off-centre.

    The constrained layout is solved once here and then removed, so ``savefig`` draws the
    figure once instead of a trial draw of every artist before the real one (the same
    pixels: the trial draw only runs the layout). Removed, not ``"none"``: matplotlib 3.11's
    ``print_figure`` still makes the trial draw for the placeholder engine that ``"none"``
    leaves (``backend_bases.FigureCanvasBase.print_figure``). The PNG is compressed at
    ``style.PNG_COMPRESS_LEVEL``.
    """
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
        # None means "from the rc" to matplotlib: with both keys off it means no engine.
        with rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
            fig.set_layout_engine(None)
    if centre_over_axes is not None and fig.axes:
        boxes = [ax.get_position() for ax in fig.axes]
        centre_over_axes.set_x((min(b.x0 for b in boxes) + max(b.x1 for b in boxes)) / 2)
    fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None},
                pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})


def pinned_title(ax, text: str, **kwargs) -> None:
    """``ax.set_title(text, **kwargs)`` where matplotlib puts it by default (``y`` 1.0,
    ``axes.titlepad`` above the axes), pinned there.

    Unpinned, every layout pass and every draw checks whether the title clashes with an x
    axis on top or a y axis's offset text ("1e6"), through the tight bbox of the y axis of
    every axes sharing it: about a tenth of the azure_conv_replay report's chart time, for
    the same pixels. Only for axes where neither can be: x ticks at the bottom, and a y axis
    labelled by a ``FuncFormatter`` (:data:`PLAIN`, :data:`PERCENT`), by fixed labels, or
    over a fixed range (no offset text).
    """
    ax.set_title(text, y=1.0, **kwargs)


class InViewLogLocator(LogLocator):
    """A :class:`~matplotlib.ticker.LogLocator` that leaves out the ticks it places beyond
    the view (up to a decade past each end), which matplotlib draws no part of.

    matplotlib makes a tick object for every location a locator gives, drawn or not, and
    in 3.11 making one (three lines, each deep-copying its marker) is most of a log axis's
    layout and drawing time; about a third of a report's log-axis ticks lie beyond the
    view. The ticks kept are a superset of those drawn (matplotlib draws a tick within
    1e-10 of the view's span in log space; this keeps any within a relative 1e-6), so the
    pixels are the same.
    """

    _SLACK = 1e-6

    def __call__(self):
        locs = np.asarray(super().__call__())
        if self.axis is None or not len(locs):
            return locs
        lo, hi = sorted(self.axis.get_view_interval())
        return locs[(locs >= lo / (1 + self._SLACK)) & (locs <= hi * (1 + self._SLACK))]


def log_axis(axis, formatter: FuncFormatter, lo: float | None = None,
             hi: float | None = None) -> None:
    """Plain tick labels on a log axis (style.RC turns mathtext off, so no 10^k labels);
    matplotlib's ticks (minor: 2–9 in each decade), those beyond the view left out
    (:class:`InViewLogLocator`).

    When ``lo``..``hi`` spans at most three decades, ticks at 1-2-5 steps so a
    narrow range still gets several labels.
    """
    narrow = lo is not None and hi is not None and 0 < lo < hi and hi / lo <= 1e3
    axis.set_major_locator(InViewLogLocator(base=10,
                                            subs=(1.0, 2.0, 5.0) if narrow else (1.0,)))
    axis.set_minor_locator(InViewLogLocator(base=10, subs="auto"))
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(NullFormatter())


def ms_axis(ax, label: str, lo: float, hi: float) -> None:
    """Log-scale x axis in ms over ``lo``..``hi`` with plain-number tick labels."""
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    log_axis(ax.xaxis, PLAIN, lo, hi)
    ax.set_xlabel(label)


def x_limits(dists: list[Distribution], extra: list[float]) -> tuple[float, float]:
    """x range (ms) of CDF panels: every distribution and the positive ``extra`` values, padded."""
    lo = [d.x_ms[0] for d in dists if not d.empty and d.x_ms[0] > 0]
    hi = [d.x_ms[-1] for d in dists if not d.empty] + [v for v in extra if v > 0]
    lo_v = min(lo + [v for v in extra if v > 0], default=1.0)
    hi_v = max(hi, default=10.0)
    return lo_v / 1.6, hi_v * 1.8


def reference_lines(ax, lines: list[tuple[float, str, str, str]]) -> list[Line2D]:
    """Draw vertical reference lines (value, label, colour, style); return legend handles.

    Lines at the same value (a class limit equal to an SLO target) are drawn once, in the
    first one's colour and style, with their labels joined: two lines on top of each other
    would show only the one drawn last."""
    merged: dict[float, list] = {}
    for value, label, colour, ls in lines:
        if value in merged:
            merged[value][0] += f" = {label}"
        else:
            merged[value] = [label, colour, ls]
    handles = []
    for value, (label, colour, ls) in merged.items():
        ax.axvline(value, color=colour, ls=ls, lw=1.3, zorder=1)
        handles.append(Line2D([], [], color=colour, ls=ls, lw=1.3, label=label))
    return handles


def marker_handles(stats: tuple[str, ...]) -> list[Line2D]:
    """Legend entries explaining the statistic markers (``style.STAT_MARKERS``) in grey."""
    return [Line2D([], [], ls="", marker=STAT_MARKERS[s], color="#444", mfc="white",
                   mew=1.3, ms=8 if s == "max" else 6, label=s) for s in stats]


def mark(ax, dist: Distribution, colour: str, stats: tuple[str, ...], y_of) -> None:
    """Mark each statistic of ``dist`` on its curve; ``y_of(stat, dist)`` gives the height."""
    for s in stats:
        x = dist.markers.get(s, math.nan)
        if math.isnan(x) or x <= 0:
            continue
        ax.plot([x], [y_of(s, dist)], ls="", marker=STAT_MARKERS[s], color=colour,
                mfc="white", mew=1.6, ms=11 if s == "max" else 7, zorder=5)


def cdf_y(stat: str, dist: Distribution) -> float:
    """Height of a statistic's marker on a CDF curve (for :func:`mark`)."""
    return dist.cdf_at(dist.markers[stat])


def ccdf_y(stat: str, dist: Distribution) -> float:
    """Height of a statistic's marker on a CCDF (tail) curve (for :func:`mark`)."""
    return dist.ccdf_at(dist.markers[stat])


def draw_cdf(ax, d: Distribution, colour: str) -> None:
    """F(x) = P(X ≤ x) as a right-continuous step, rising from 0 at the smallest value."""
    ax.step(np.r_[d.x_ms[0], d.x_ms], np.r_[0.0, d.cdf], where="post", color=colour, lw=2)


def draw_ccdf(ax, d: Distribution, colour: str) -> None:
    """S(x) = P(X ≥ x) as a left-continuous step, from 1 down to P(X = max)."""
    ax.step(np.r_[d.x_ms[0], d.x_ms], np.r_[1.0, d.ccdf], where="pre", color=colour, lw=2)


def bar_text(v: float) -> str:
    """Short label of a latency bar (ms): "1,234", "12.3", "1.23"; NaN → "—"."""
    if math.isnan(v):
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"
