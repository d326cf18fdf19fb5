"""The ITL recorder: inter-token gaps kept as compact (gap, count, class) runs."""

from __future__ import annotations

import numpy as np

from capsim.engine.recorder import ItlRecorder


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
