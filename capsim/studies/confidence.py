"""Confidence intervals over independent replications (``--seeds K``).

Each replication runs the same configuration on an independent trace; a
metric's K values are treated as i.i.d. and summarised by their mean and a
two-sided Student-t confidence interval (e.g. Law, *Simulation Modeling and
Analysis*, 5th ed., §9.4.1: ``x̄ ± t_{K−1, 1−α/2} · s / √K``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

CONFIDENCE = 0.95
CI_SUFFIX = "_ci95"
"""Column suffix of a metric's half-width in :func:`aggregate`'s output."""


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Mean and half-width of the two-sided Student-t interval of ``values``.

    NaNs are ignored. Returns ``(nan, nan)`` for no value and ``(x, nan)``
    for a single value (one replication says nothing about the spread); a
    half-width of 0 when all values are equal.
    """
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    k = len(x)
    if k == 0:
        return math.nan, math.nan
    mean = float(x.mean())
    if k == 1:
        return mean, math.nan
    sd = float(x.std(ddof=1))
    from scipy import stats     # only here: importing SciPy costs more than all of `capsim validate`

    t = float(stats.t.ppf(0.5 + confidence / 2.0, df=k - 1))
    return mean, t * sd / math.sqrt(k)


def aggregate(runs: pd.DataFrame, by: list[str], metrics: list[str]) -> pd.DataFrame:
    """Mean and 95 % half-width of ``metrics`` over the replications in each ``by`` group.

    Args:
        runs: one row per run (replication), containing ``by`` and ``metrics``
            columns plus a boolean ``slo_pass``.
        by: columns identifying a configuration (everything but the seed).
        metrics: numeric columns to summarise.

    Returns:
        One row per group in first-seen order: the ``by`` columns,
        ``replications``, ``slo_pass_runs`` (replications meeting every
        target), ``slo_pass_all`` (all of them did), and for each metric
        ``m`` (mean) and ``m_ci95`` (half-width, NaN with one replication). An integer
        metric equal in every replication of every group (a count the configuration
        fixes, such as ``num_gpus``) stays an integer: 2, not 2.0.
    """
    out = []
    for key, grp in runs.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["replications"] = len(grp)
        row["slo_pass_runs"] = int(grp["slo_pass"].sum())
        row["slo_pass_all"] = bool(grp["slo_pass"].all())
        for m in metrics:
            row[m], row[m + CI_SUFFIX] = mean_ci(grp[m].to_numpy(dtype=np.float64))
        out.append(row)
    frame = pd.DataFrame(out)
    for m in metrics:
        if len(runs) and pd.api.types.is_integer_dtype(runs[m]) and \
                (runs.groupby(by, sort=False, dropna=False)[m].nunique() == 1).all():
            frame[m] = frame[m].astype(np.int64)
    return frame
