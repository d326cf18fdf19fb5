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


@settings(max_examples=50, deadline=None)
@given(
    runs=st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.5, 4.0, 7.25]), st.integers(1, 6)),
                  min_size=1, max_size=40),
    block=st.integers(1, 8),
)
def test_sorted_percentiles_read_per_block_equal_numpy_on_the_expanded_data(runs, block):
    """Percentile positions found block by block (runs of equal values in any order across
    the block edges) are those of one running sum over all runs."""
    from capsim.metrics.summary import _sorted_percentiles

    values = np.array(sorted(v for v, _ in runs))
    counts = np.array([c for _, c in sorted(runs, key=lambda r: r[0])], dtype=np.uint32)
    qs = (0.0, 50.0, 90.0, 99.0, 99.9, 100.0)
    expected = np.percentile(np.repeat(values, counts), qs)
    got = _sorted_percentiles(values, counts, qs, block=block)
    assert got == pytest.approx(list(expected), rel=1e-12, abs=1e-12)


def test_itl_columns_equal_the_expanded_gaps_over_several_blocks():
    """The summary's ITL columns, read from 150,000 sorted runs (three blocks and three
    chunks of 65,536) without expanding them, equal numpy's figures on the expanded gaps in
    ms; equal gaps (rounded to 0.1 ms) come in any order."""
    from capsim.metrics.summary import _itl_stats

    rng = np.random.default_rng(7)
    gaps_s = np.round(rng.lognormal(np.log(0.012), 0.4, 150_000), 4)
    counts = rng.integers(1, 9, len(gaps_s)).astype(np.uint32)
    order = np.argsort(gaps_s)
    got = _itl_stats(gaps_s[order], counts[order], stall_ms=30.0)
    expanded_ms = np.repeat(gaps_s * 1e3, counts)
    assert got["itl_max_ms"] == expanded_ms.max()
    assert got["itl_stalls"] == int((expanded_ms > 30.0).sum()) > 0
    assert got["itl_mean_ms"] == pytest.approx(expanded_ms.mean(), rel=1e-12)
    for key, q in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9)):
        assert got[f"itl_{key}_ms"] == pytest.approx(np.percentile(expanded_ms, q), rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    runs=st.lists(st.tuples(st.sampled_from([0.004, 0.0061, 0.0061 + 1e-12, 0.007, 0.25]),
                            st.integers(1, 9), st.integers(0, 2)), min_size=1, max_size=200),
    spread=st.booleans(),
)
def test_sorted_runs_keep_every_class_s_samples_merged_or_not(runs, spread):
    """Merged (few distinct values: at least 8 runs each) or argsorted (``spread``: every
    value distinct), each class's runs come back sorted with the same expanded samples,
    hence the same percentiles; with ``distinct`` the values are strictly increasing."""
    from capsim.metrics.summary import sorted_runs

    values = np.array([v for v, _, _ in runs])
    if spread:
        values = values + np.arange(len(values)) * 1e-9
    counts = np.array([c for _, c, _ in runs], dtype=np.int64)
    groups = np.array([g for _, _, g in runs], dtype=np.uint8)
    got_v, got_c, got_g = sorted_runs(values, counts, groups, 3)
    assert (np.diff(got_v) >= 0).all()
    merged = 8 * len(set(values.tolist())) <= len(values)
    assert len(got_v) == (len({(v, g) for v, g in zip(values.tolist(), groups.tolist())})
                          if merged else len(values))
    for g in range(3):
        want = np.sort(np.repeat(values[groups == g], counts[groups == g]))
        mine = got_g == g
        assert np.array_equal(np.repeat(got_v[mine], got_c[mine]), want)
    x, per_x, none = sorted_runs(values, counts, distinct=True)
    assert none is None and (np.diff(x) > 0).all()
    assert np.array_equal(np.repeat(x, per_x), np.sort(np.repeat(values, counts)))
