"""Percentiles over weighted runs and per-request metric definitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.metrics.summary import weighted_percentile
from capsim.scenario.slo import SloConfig, failed_targets


@settings(max_examples=200, deadline=None)
@given(
    runs=st.lists(st.tuples(st.floats(0.0, 1e3, allow_nan=False), st.integers(0, 50)),
                  min_size=1, max_size=30),
    q=st.sampled_from([0.0, 50.0, 90.0, 99.0, 99.9, 100.0]),
)
def test_weighted_percentile_equals_numpy_on_the_expanded_data(runs, q):
    values = np.array([v for v, _ in runs])
    counts = np.array([c for _, c in runs])
    if counts.sum() == 0:
        assert np.isnan(weighted_percentile(values, counts, q))
        return
    expected = np.percentile(np.repeat(values, counts), q)
    assert weighted_percentile(values, counts, q) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_p99_is_blind_to_rare_stalls_but_max_is_not():
    """Seed 002 Q10: 4 stalls of 96 ms among ~3,940 gaps of 10 ms: p99 stays 10 ms."""
    values, counts = np.array([10.0, 96.0]), np.array([3936, 4])
    assert weighted_percentile(values, counts, 99.0) == 10.0
    assert weighted_percentile(values, counts, 99.99) > 10.0
    assert values[counts > 0].max() == 96.0


def test_failed_targets_direction_and_nan():
    slo = SloConfig(targets={"itl_p99_ms": 50, "goodput_fraction": 0.9})
    assert failed_targets({"itl_p99_ms": 40.0, "goodput_fraction": 0.95}, slo.targets) == []
    failed = failed_targets({"itl_p99_ms": 60.0, "goodput_fraction": 0.5}, slo.targets)
    assert failed == ["itl_p99_ms 60 > 50", "goodput_fraction 0.5 < 0.9"]
    assert failed_targets({"itl_p99_ms": float("nan"), "goodput_fraction": 1.0}, slo.targets)


def test_unknown_slo_metric_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown SLO metric 'itl_p98_ms'; valid: .*itl_p99_ms"):
        SloConfig(targets={"itl_p98_ms": 1})
