"""results.json's and the ITL CDF's ITL runs, read from the summary's one sort
(``capsim.metrics.summary.sorted_itl``), are the very arrays sorting the runs again gives."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from capsim.metrics import bench, summary
from capsim.metrics.summary import _nonempty, sorted_itl, sorted_runs
from capsim.report.run import cdf
from capsim.results.model import ItlRuns
from tests.report.test_report import make_result


def _with_runs(gaps_s: np.ndarray, counts: np.ndarray, classes: np.ndarray, **update):
    r = make_result("v", stall_s=0.45)
    itl = ItlRuns(gap_s=gaps_s, count=counts.astype(np.uint32), class_id=classes.astype(np.uint8))
    return r.model_copy(update={"itl": itl, **update})


def _runs(repeats: bool, seed: int = 3):
    """20,000 runs of two classes: with ``repeats`` 40 distinct gaps (the summary's sort
    merges them per gap), else nearly all distinct (it argsorts them); some counts 0."""
    rng = np.random.default_rng(seed)
    n = 20_000
    gaps = (rng.integers(1, 41, n) * 1e-3 if repeats else rng.lognormal(-4.0, 0.5, n))
    return gaps, rng.integers(0, 5, n), rng.integers(0, 2, n)


def _expected_bench(gaps, counts, classes):
    values, weights, _ = sorted_runs(*_nonempty(gaps, counts, classes)[:2])
    return values, weights


@pytest.mark.parametrize("repeats", [True, False])
def test_bench_itl_runs_are_the_resorted_ones(repeats):
    gaps, counts, classes = _runs(repeats)
    r = _with_runs(gaps, counts, classes)
    assert sorted_itl(r).merged is repeats
    got = bench._itl_runs(r, None)
    want = _expected_bench(gaps, counts, classes)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    assert len(got[0]) == (40 if repeats else len(want[0]))


@pytest.mark.parametrize("repeats", [True, False])
def test_itl_cdf_is_the_resorted_one(repeats):
    gaps, counts, classes = _runs(repeats, seed=5)
    d = cdf.itl_distribution(_with_runs(gaps, counts, classes))
    want = cdf.distribution(gaps * 1e3, counts)
    assert d.total == want.total == counts.sum()
    assert d.markers == want.markers
    for a, b in ((d.x_ms, want.x_ms), (d.cdf, want.cdf), (d.ccdf, want.ccdf)):
        assert np.array_equal(a, b)


def test_held_replies_leave_every_gap_out_everywhere():
    # Static batching holds every reply: its client sees each reply in one chunk, so the
    # summary, the CDF and results.json's runs (vllm bench serve adds no ITL for a
    # one-chunk reply) all leave every gap out; the runs themselves are still there.
    gaps, counts, classes = _runs(True)
    r = _with_runs(gaps, counts, classes, scheduler="static")
    assert sorted_itl(r).held and len(sorted_itl(r).gaps_s) == 0
    assert cdf.itl_distribution(r).empty
    got_gaps, got_counts = bench._itl_runs(r, None)
    assert len(got_gaps) == len(got_counts) == 0
    assert _expected_bench(gaps, counts, classes)[1].sum() > 0


def test_kept_for_the_same_result_only():
    gaps, counts, classes = _runs(True)
    r = _with_runs(gaps, counts, classes)
    first = sorted_itl(r)
    assert sorted_itl(r) is first
    assert not first.gaps_s.flags.writeable            # shared: nobody may change it
    other = r.model_copy(update={"itl": ItlRuns(gap_s=[0.5], count=[2], class_id=[0])})
    assert sorted_itl(other).gaps_s.tolist() == [0.5]
    assert sorted_itl(r) is not first and np.array_equal(sorted_itl(r).gaps_s, first.gaps_s)


def test_dropped_with_its_result():
    # A sweep's worker must not keep one task's runs while it simulates the next.
    r = _with_runs(*_runs(True))
    gaps = weakref.ref(sorted_itl(r).gaps_s)
    assert summary._LAST_ITL and gaps() is not None
    del r
    gc.collect()
    assert summary._LAST_ITL == [] and gaps() is None
