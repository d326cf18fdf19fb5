"""Exact empirical distributions from weighted samples, for the CDF charts.

ITL is recorded as weighted runs (DESIGN.md "Metrics"): ``count[i]`` gaps of
``gap_s[i]`` seconds. :func:`distribution` turns such runs into a CDF and a
complementary CDF without expanding them, and computes the p50/p99/p99.9/max
markers with :func:`capsim.metrics.summary.weighted_percentile` so the charts show
exactly the numbers of the summary table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capsim.metrics.summary import (held_runs, merge_equal, sorted_itl, sorted_runs,
                                    weighted_percentiles)
from capsim.results.model import RunResult

QUANTILES = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}
_MAX_POINTS = 1500          # per probability axis when thinning a long distribution


@dataclass
class Distribution:
    """An exact empirical distribution built from weighted samples (ms).

    Attributes:
        x_ms: distinct values, ascending (possibly thinned for plotting).
        cdf: P(X ≤ x) at each x.
        ccdf: P(X ≥ x) at each x (never 0, so it can be drawn on a log axis).
        markers: {"p50", "p99", "p99.9", "max"} → value in ms, from
            :func:`capsim.metrics.summary.weighted_percentile` (numpy linear interpolation).
        total: number of samples (Σ counts).
    """

    x_ms: np.ndarray
    cdf: np.ndarray
    ccdf: np.ndarray
    markers: dict[str, float] = field(default_factory=dict)
    total: int = 0

    @property
    def empty(self) -> bool:
        return self.total == 0

    def cdf_at(self, x: float) -> float:
        """P(X ≤ x) as drawn (right-continuous step)."""
        i = int(np.searchsorted(self.x_ms, x, side="right")) - 1
        return float(self.cdf[i]) if i >= 0 else 0.0

    def ccdf_at(self, x: float) -> float:
        """P(X ≥ x) as drawn (left-continuous step)."""
        i = int(np.searchsorted(self.x_ms, x, side="left"))
        return float(self.ccdf[i]) if i < len(self.ccdf) else 0.0


def distribution(values_ms: np.ndarray, counts: np.ndarray | None = None,
                 max_points: int = _MAX_POINTS) -> Distribution:
    """Sort weighted values and accumulate counts into CDF and CCDF (ms in, ms out).

    ``counts`` defaults to one per value. Values that are NaN or have a count
    ≤ 0 are ignored. Long distributions are thinned to about ``2 × max_points``
    points (a grid in linear probability for the body and in log probability
    for the tail); the markers are always computed from the full data.
    """
    values = np.asarray(values_ms, dtype=np.float64)
    counts = np.ones(len(values), np.int64) if counts is None else np.asarray(counts, np.int64)
    keep = (counts > 0) & ~np.isnan(values)
    if not keep.all():
        values, counts = values[keep], counts[keep]
    total = int(counts.sum())
    if total == 0:
        empty = np.empty(0)
        return Distribution(empty, empty, empty, {}, 0)
    x, per_x, _ = sorted_runs(values, counts, distinct=True)
    return _from_distinct(x, per_x, total, max_points)


def _from_distinct(x: np.ndarray, per_x: np.ndarray, total: int,
                   max_points: int) -> Distribution:
    """:func:`distribution` of distinct values ``x`` (ascending) × counts ``per_x`` > 0
    (``total`` their sum, > 0)."""
    cum = np.cumsum(per_x)
    cdf = cum / total
    ccdf = (total - cum + per_x) / total
    # From the distinct values (already sorted) and their counts: the same values at the
    # same ranks as from every run, without sorting the runs again for each quantile.
    markers = dict(zip(QUANTILES, weighted_percentiles(x, per_x, tuple(QUANTILES.values()))))
    markers["max"] = float(x[-1])
    if len(x) > 2 * max_points:
        idx = np.unique(np.concatenate([
            np.searchsorted(cdf, np.linspace(0.0, 1.0, max_points)),
            len(x) - 1 - np.searchsorted(ccdf[::-1], np.geomspace(ccdf[-1], 1.0, max_points)),
            [0, len(x) - 1]]).clip(0, len(x) - 1))
        x, cdf, ccdf = x[idx], cdf[idx], ccdf[idx]
    return Distribution(x, cdf, ccdf, markers, total)


def itl_distribution(result: RunResult) -> Distribution:
    """ITL distribution (ms) of one run from its weighted gap runs, held replies' left out
    as in the summary (:func:`capsim.metrics.summary.held_runs`: no gap reaches the
    client); empty when every reply is held.

    Read from the summary's sorted runs (:func:`~capsim.metrics.summary.sorted_itl`) when
    that sort merged them per gap: the distinct gaps in ms (``x * 1e3`` rounds
    monotonically, so they stay sorted) with their counts, equal ones merged, are what
    sorting the runs in ms gives."""
    shared = sorted_itl(result)
    if shared.merged:
        gaps_s, per_gap = merge_equal(shared.gaps_s, shared.counts)
        x, per_x = merge_equal(gaps_s * 1e3, per_gap)
        total = int(per_x.sum())
        if total == 0:
            empty = np.empty(0)
            return Distribution(empty, empty, empty, {}, 0)
        return _from_distinct(x, per_x, total, _MAX_POINTS)
    counts = np.asarray(result.itl.count, np.int64)
    return distribution(np.asarray(result.itl.gap_s, np.float64) * 1e3,
                        np.where(held_runs(result), 0, counts))
