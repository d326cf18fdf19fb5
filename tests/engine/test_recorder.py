"""The recorders: inter-token gaps kept as compact (gap, count, class) runs; a replica's
timeline bins."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.engine.recorder import ItlRecorder, TimelineRecorder


def test_itl_recorder_hands_over_compact_arrays():
    itl = ItlRecorder(num_classes=2)
    itl.add(0.02, [3, 0])
    itl.add(np.array([0.01, 0.03]), [1, 2])
    itl.add_one(0.5, 1)
    assert itl.total_gaps() == 3 + 2 * 3 + 1
    runs = itl.result()
    assert (runs.gap_s.dtype, runs.count.dtype, runs.class_id.dtype) == (
        np.float64, np.uint32, np.uint8)
    assert runs.gap_s.tolist() == [0.02, 0.01, 0.01, 0.03, 0.03, 0.5]
    assert runs.count.tolist() == [3, 1, 2, 1, 2, 1]
    assert runs.class_id.tolist() == [0, 0, 1, 0, 1, 1]
    assert itl.total_gaps() == 0 and len(itl.result().gap_s) == 0      # handed over


def test_many_classes_get_a_wider_class_column():
    itl = ItlRecorder(num_classes=300)
    itl.add_one(0.1, 299)
    assert itl.result().class_id.tolist() == [299]


@settings(max_examples=150, deadline=None)
@given(secs=st.lists(st.floats(1e-4, 0.3), min_size=2, max_size=300),
       start=st.floats(0.0, 30.0), max_bins=st.sampled_from([8, 64, 2048]),
       queue=st.integers(0, 5), last_queue=st.integers(0, 9))
def test_a_run_is_binned_as_its_steps_one_by_one(secs, start, max_bins, queue, last_queue):
    """A decode run recorded in one call (bins found by bisection across a few bin edges,
    by numpy across many, coarsened past ``max_bins``) fills the same bins, with the same
    float sums, as its steps recorded one at a time by the step loop."""
    ends = np.cumsum([start, *secs])[1:]
    kv = [3 + j // 7 for j in range(len(secs))]             # blocks in use: non-decreasing
    run = TimelineRecorder(0, "colocated", 0.1, max_bins)
    run.record(ends, np.array(secs), 0, 5, kv.__getitem__, queue, 7, last_queue, 6)
    steps = TimelineRecorder(0, "colocated", 0.1, max_bins)
    for j, (end, sec) in enumerate(zip(ends.tolist(), secs)):
        last = j == len(secs) - 1
        steps.record_step(end, sec, 0, 5, kv[j], last_queue if last else queue, 6 if last else 7)
    assert run.bin_s == steps.bin_s
    assert run.bins == steps.bins
