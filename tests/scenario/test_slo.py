"""SLO targets: which way each one passes, and only known metrics."""

from __future__ import annotations

import pytest

from capsim.scenario.slo import SloConfig, failed_targets


def test_failed_targets_direction_and_nan():
    slo = SloConfig(targets={"itl_p99_ms": 50, "goodput_fraction": 0.9})
    assert failed_targets({"itl_p99_ms": 40.0, "goodput_fraction": 0.95}, slo.targets) == []
    failed = failed_targets({"itl_p99_ms": 60.0, "goodput_fraction": 0.5}, slo.targets)
    assert failed == ["itl_p99_ms 60 > 50", "goodput_fraction 0.5 < 0.9"]
    assert failed_targets({"itl_p99_ms": float("nan"), "goodput_fraction": 1.0}, slo.targets)


def test_unknown_slo_metric_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown SLO metric 'itl_p98_ms'; valid: .*itl_p99_ms"):
        SloConfig(targets={"itl_p98_ms": 1})
