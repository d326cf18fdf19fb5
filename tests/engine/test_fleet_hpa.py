"""The autoscaler's recommendation (:func:`capsim.engine.fleet.desired_replicas`) against
Kubernetes HPA's ``calcPlainMetricReplicas`` (kubernetes pkg/controller/podautoscaler/
replica_calculator.go at 0006726): within tolerance it keeps the scale target's count,
which includes replicas still starting and failed ones awaiting their replacement."""

from __future__ import annotations

import pytest

from capsim.engine.fleet import desired_replicas
from capsim.scenario.fleet import AutoscalingConfig


class _Serving:
    """A serving replica as the autoscaler reads it: ``kv_load() -> (blocks, running)``."""

    def __init__(self, running: int):
        self.running = running

    def kv_load(self):
        return 0, self.running


CFG = AutoscalingConfig(signal="running", target=5, min_replicas=1, max_replicas=8)


def _want(running: list[int], current: int | None = None) -> int:
    return desired_replicas(CFG, 0.0, [_Serving(r) for r in running], current)


def test_no_replica_starting_ceil_of_the_signal_over_the_target():
    assert _want([9, 9]) == 4               # 18 / 5 → 3.6 → 4
    assert _want([3, 2]) == 1               # 5 / 5
    assert _want([5, 5.5]) == 2             # 10.5 / 10 = 1.05: within tolerance, keep 2
    assert _want([6, 6]) == 3               # 12 / 10 = 1.2


def test_within_tolerance_keeps_the_replicas_starting_or_awaiting_a_replacement():
    """2 serving at 5.25 each (ratio 1.05) while a third starts: HPA returns the scale
    target's 3, not the 2 ready (the old rule's 2 entered the scale-down window)."""
    assert _want([5, 5.5], current=3) == 3
    assert _want([5, 5.5]) == 2


def test_a_scale_up_with_replicas_not_ready_counts_them_as_using_nothing():
    """2 serving at 6 (ratio 1.2 over the ready ones), 3 more starting: over all 5 the
    ratio is 12 / 25 < 1, so HPA keeps 5 (the old rule recommended ceil(12 / 5) = 3); at
    10.5 each, 21 over 4 × 5 (1.05, within tolerance) keeps 4 rather than ask for
    ceil(21 / 5) = 5; at 12 each (1.2) it asks for ceil(24 / 5) = 5."""
    assert _want([6, 6], current=5) == 5
    assert _want([10.5, 10.5], current=4) == 4
    assert _want([12, 12], current=4) == 5


def test_a_scale_down_reads_only_the_ready_replicas():
    """Usage below the target with a replica starting: the ready replicas' ratio decides
    (HPA ignores Pending pods on a scale-down): 2 serving at 1 each → 1."""
    assert _want([1, 1], current=3) == 1


@pytest.mark.parametrize("running, current, want", [([40], 1, 8), ([0], 4, 1)])
def test_the_recommendation_stays_within_min_and_max(running, current, want):
    assert _want(running, current) == want
