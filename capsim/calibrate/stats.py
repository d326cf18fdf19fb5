"""Error figures: absolute percentage error of predicted vs measured times.

APE = |predicted − measured| / measured × 100 per row; we report its median
and 90th percentile (numpy's default linear interpolation) per operator class.

Public API:
    ape_pct, error_figures, class_errors
"""

from __future__ import annotations

import numpy as np

from capsim.calibrate.observations import OP_CLASSES, Observations
from capsim.profiles.hardware import ErrorFigures


def ape_pct(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Absolute percentage error per row (%); shapes (N,) → (N,)."""
    return np.abs(predicted - measured) / measured * 100.0


def error_figures(predicted: np.ndarray, measured: np.ndarray) -> ErrorFigures:
    """Median and p90 APE over the rows (n = 0 gives zeros)."""
    if len(measured) == 0:
        return ErrorFigures(n=0, median_pct=0.0, p90_pct=0.0)
    ape = ape_pct(np.asarray(predicted, float), np.asarray(measured, float))
    return ErrorFigures(n=len(ape), median_pct=round(float(np.median(ape)), 2),
                        p90_pct=round(float(np.percentile(ape, 90)), 2))


def class_errors(obs: Observations, predicted: np.ndarray) -> dict[str, ErrorFigures]:
    """Error figures per operator class present in ``obs`` (OP_CLASSES order, then others)."""
    measured = obs.time_s.to_numpy()
    classes = [c for c in OP_CLASSES if (obs.op_class == c).any()]
    classes += sorted(set(obs.op_class) - set(classes))
    out = {}
    for c in classes:
        mask = (obs.op_class == c).to_numpy()
        out[c] = error_figures(predicted[mask], measured[mask])
    return out
