"""SLO targets: which way each one passes, and only known metrics."""

from __future__ import annotations

import pytest

from capsim.scenario.slo import SloConfig, failed_targets, quantity_text, target_label


def test_failed_targets_direction_and_nan():
    slo = SloConfig(targets={"itl_p99_ms": 50, "goodput_fraction": 0.9})
    assert failed_targets({"itl_p99_ms": 40.0, "goodput_fraction": 0.95}, slo.targets) == []
    failed = failed_targets({"itl_p99_ms": 60.0, "goodput_fraction": 0.5}, slo.targets)
    assert failed == ["ITL p99 60 ms > 50 ms", "goodput 50 % < 90 %"]
    assert failed_targets({"itl_p99_ms": float("nan"), "goodput_fraction": 1.0}, slo.targets) \
        == ["ITL p99 no data > 50 ms"]


def test_failure_text_is_readable_with_units():
    """Issue 16 item 8: no "4.667e+05 > 3000"; latencies of a second or more in seconds."""
    targets = {"e2el_p99_ms": 3000, "ttft_p99_ms": 3000, "itl_p999_ms": 60,
               "goodput_fraction": 0.9, "cost_per_million_output_tokens_usd": 0.1,
               "itl_stalls": 0, "output_throughput_tok_per_s": 2000,
               "request_throughput_per_s": 10, "kv_peak_frac": 0.9}
    values = {"e2el_p99_ms": 466_700.0, "ttft_p99_ms": 496_524.3, "itl_p999_ms": 59.0712 + 1,
              "goodput_fraction": 0.0009639, "cost_per_million_output_tokens_usd": 0.12345,
              "itl_stalls": 5130, "output_throughput_tok_per_s": 1615.2,
              "request_throughput_per_s": 6.8412, "kv_peak_frac": 0.95}
    assert failed_targets(values, targets) == [
        "E2EL p99 466.7 s > 3 s", "TTFT p99 496.5 s > 3 s", "ITL p99.9 60.07 ms > 60 ms",
        "goodput 0.09639 % < 90 %", "$/M output tokens $0.1235 > $0.1", "ITL stalls 5,130 > 0",
        "output throughput 1,615 tok/s < 2,000 tok/s", "request throughput 6.841 req/s < 10 req/s",
        "KV peak 95 % > 90 %"]
    assert not any("e+" in f or "e-" in f for f in failed_targets(values, targets))
    assert quantity_text("queue_p99_ms", 12_345_678.0) == "12,346 s"
    assert target_label("queue_mean_ms") == "queue mean" and target_label("num_rejected") == "rejected"


def test_unknown_slo_metric_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown SLO metric 'itl_p98_ms'; valid: .*itl_p99_ms"):
        SloConfig(targets={"itl_p98_ms": 1})
