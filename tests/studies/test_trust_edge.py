"""capsim size --trust-edge: SLO bounds moved to the pessimistic edge of the measured error."""

from __future__ import annotations

import pytest

from capsim.profiles.trust import Coverage, FamilyError
from capsim.scenario.slo import RequestSlo, SloConfig
from capsim.studies.trust_edge import edged_slo, target_family


def _err(median: float, max_: float) -> FamilyError:
    return FamilyError(n=4, cases=1, median_abs_err_pct=median, max_abs_err_pct=max_,
                       median_err_pct=-median)


COV = Coverage("vllm-v1", "h100-sxm", True, ("case",), {
    "ttft": _err(10.0, 40.0), "tpot_itl": _err(5.0, 20.0), "e2el": _err(8.0, 8.0),
    "throughput": _err(20.0, 50.0), "kv_capacity": _err(2.0, 4.0)})

SLO = SloConfig(ttft_ms=1000, tpot_ms=50, targets={
    "ttft_p99_ms": 2000, "queue_p99_ms": 500, "itl_p99_ms": 60, "tpot_p50_ms": 30,
    "e2el_p90_ms": 10_000, "output_throughput_tok_per_s": 800, "goodput_fraction": 0.95,
    "cost_per_million_output_tokens_usd": 2.0, "kv_peak_frac": 0.9, "itl_stalls": 3,
    "num_rejected": 0})


def test_latency_bounds_shrink_and_throughput_bounds_grow_by_the_edge():
    e = edged_slo(SLO, {"rag": RequestSlo(ttft_ms=3000, e2el_ms=9000)}, COV, "median")
    t = e.slo.targets
    assert t["ttft_p99_ms"] == pytest.approx(2000 / 1.10)
    assert t["queue_p99_ms"] == pytest.approx(500 / 1.10)          # queueing is TTFT's
    assert t["itl_p99_ms"] == pytest.approx(60 / 1.05)
    assert t["tpot_p50_ms"] == pytest.approx(30 / 1.05)
    assert t["e2el_p90_ms"] == pytest.approx(10_000 / 1.08)
    assert t["output_throughput_tok_per_s"] == pytest.approx(800 / 0.80)
    assert t["cost_per_million_output_tokens_usd"] == pytest.approx(2.0 * 0.80)
    assert t["kv_peak_frac"] == pytest.approx(0.9 * 0.98)
    # Counts and the goodput fraction stay; the fraction moves through the request limits.
    assert (t["goodput_fraction"], t["itl_stalls"], t["num_rejected"]) == (0.95, 3, 0)
    assert (e.slo.ttft_ms, e.slo.tpot_ms, e.slo.e2el_ms) == \
        (pytest.approx(1000 / 1.10), pytest.approx(50 / 1.05), None)
    rag = e.class_slos["rag"]
    assert (rag.ttft_ms, rag.tpot_ms, rag.e2el_ms) == \
        (pytest.approx(3000 / 1.10), None, pytest.approx(9000 / 1.08))
    assert e.note == ("SLO bounds moved by the median |error| of vllm-v1 on h100-sxm: TTFT "
                      "10.0 %, TPOT/ITL 5.0 %, E2EL 8.0 %, throughput 20.0 %, KV capacity 2.0 %")


def test_max_edge_and_none():
    assert edged_slo(SLO, {}, COV, "max").slo.targets["ttft_p99_ms"] == pytest.approx(2000 / 1.4)
    none = edged_slo(SLO, {}, COV, "none")
    assert none.slo is SLO and none.note == "" and none.errors_pct == {}


def test_note_names_only_the_families_used_and_an_uncalibrated_pair():
    slo = SloConfig(targets={"itl_p99_ms": 50})
    cov = Coverage("tgi", "l40s", False, (), COV.families)
    e = edged_slo(slo, {}, cov, "median")
    assert e.errors_pct == {"tpot_itl": 5.0}
    assert "all measured cases (tgi on l40s is uncalibrated)" in e.note


@pytest.mark.parametrize("name, family", [
    ("ttft_p999_ms", "ttft"), ("itl_max_ms", "tpot_itl"), ("itl_stalls", None),
    ("goodput_req_per_s", "throughput"), ("request_throughput_per_s", "throughput"),
    ("preemptions", None), ("goodput_fraction", None)])
def test_target_families(name, family):
    assert target_family(name) == family
