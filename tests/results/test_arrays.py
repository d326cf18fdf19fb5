"""Result columns: numpy arrays that round-trip through JSON and compare by value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capsim.results.model import ItlRuns, RequestRecords


def test_columns_round_trip_through_json_with_nan_and_compare_by_value():
    runs = ItlRuns.model_construct(gap_s=np.array([0.1, 0.2]), count=np.array([3, 1], np.uint32),
                                   class_id=np.array([0, 1], np.uint8))
    again = ItlRuns.model_validate_json(runs.model_dump_json())
    assert again == runs and again.count.dtype == np.int64
    rec = RequestRecords(request_id=[0], class_id=[0], replica=[-1], arrival_s=[1.0],
                         prompt_tokens=[10], output_tokens=[5], status=["rejected"],
                         reject_reason=["too long"], first_scheduled_s=[math.nan],
                         first_token_s=[math.nan], finish_s=[math.nan], num_preemptions=[0],
                         max_itl_s=[math.nan])
    text = rec.model_dump_json()
    assert '"first_token_s":[NaN]' in text and '"n":[]' in text
    back = RequestRecords.model_validate_json(text)
    assert back == rec                              # NaN equals NaN, column by column
    assert back.reject_reason.dtype == object and back.status.tolist() == ["rejected"]
    assert back != rec.model_copy(update={"arrival_s": np.array([2.0])})


def test_columns_keep_arrays_and_reject_bad_input():
    gaps = np.array([0.1, 0.2])
    runs = ItlRuns(gap_s=gaps, count=np.array([1, 2], np.uint32), class_id=[0, 0])
    assert runs.gap_s is gaps and runs.count.dtype == np.uint32        # no copy
    with pytest.raises(ValueError, match="1-D"):
        ItlRuns(gap_s=[[0.1]], count=[1], class_id=[0])
    with pytest.raises(ValueError, match="expected integers"):
        ItlRuns(gap_s=[0.1], count=[1.5], class_id=[0])
