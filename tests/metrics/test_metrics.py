"""Percentiles over weighted runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.metrics.summary import weighted_percentile


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
