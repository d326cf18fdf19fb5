"""results.json's figures: vllm bench serve's names and definitions (vllm/benchmarks/serve.py
at 009e6d4), recomputed here the way its ``calculate_metrics`` does, from the requests."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capsim.metrics.bench import bench_fields, peak_concurrency, traffic_fields
from capsim.metrics.summary import percentile_key, request_frame, summarize
from capsim.results.model import FINISHED
from capsim.scenario.load import load
from capsim.scenario.workload import WorkloadConfig
from capsim.sim.simulate import simulate
from capsim.workload import build


@pytest.mark.parametrize("q,metric,key", [
    (99.0, "itl", "p99_itl_ms"), (99.9, "itl", "p99.9_itl_ms"), (50.0, "ttft", "p50_ttft_ms"),
    (0.5, "e2el", "p0.5_e2el_ms"), (100.0, "tpot", "p100_tpot_ms")])
def test_percentile_names_are_vllms(q, metric, key):
    """``process_one_metric``: ``str(int(p)) if int(p) == p else str(p)``."""
    assert percentile_key(q, metric) == key


@pytest.fixture(scope="module")
def chunked(scenarios_dir):
    """rag_mix's chunked-512 variant, 40 s of traffic (two classes, ~270 requests)."""
    loaded = load(scenarios_dir / "rag_mix.yaml", ["workload.duration_s=40"])
    rc = next(r for r in loaded.runs if r.variant == "chunked-512")
    result = simulate(rc, build(rc.workload, rc.seed, loaded.base_dir))
    return loaded, rc, result


def test_fields_follow_calculate_metrics(chunked):
    loaded, rc, result = chunked
    frame = request_frame(result, loaded.spec.slo, loaded.class_slos)
    qs = (50.0, 90.0, 99.0, 99.9)
    got = bench_fields(result, frame, qs, 1.5, rc.workload)
    done = frame[frame["status"] == FINISHED]
    assert got["completed"] == len(done) > 200 and got["failed"] == 0
    assert got["num_prompts"] == len(frame)
    assert got["total_input_tokens"] == done["prompt_tokens"].sum()
    assert got["total_output_tokens"] == done["output_tokens"].sum()
    span = (done["arrival_s"] + done["e2el_ms"] / 1e3).max() - frame["arrival_s"].min()
    assert got["duration"] == pytest.approx(span, rel=1e-12)
    assert got["request_throughput"] == pytest.approx(len(done) / span, rel=1e-12)
    assert got["output_throughput"] == pytest.approx(done["output_tokens"].sum() / span,
                                                     rel=1e-12)
    assert got["request_goodput"] == 1.5
    # TTFT, TPOT (replies of two or more tokens), E2EL: np.mean / np.median / np.std.
    for metric, values in (("ttft", done["ttft_ms"]), ("e2el", done["e2el_ms"]),
                           ("tpot", done.loc[done["output_tokens"] > 1, "tpot_ms"])):
        x = values.to_numpy()
        assert got[f"mean_{metric}_ms"] == pytest.approx(np.mean(x), rel=1e-12)
        assert got[f"median_{metric}_ms"] == pytest.approx(np.median(x), rel=1e-12)
        assert got[f"std_{metric}_ms"] == pytest.approx(np.std(x), rel=1e-9)
        for q in qs:
            assert got[percentile_key(q, metric)] == pytest.approx(np.percentile(x, q),
                                                                   rel=1e-12)
    # ITL: every gap of every request, pooled (vLLM's ``itls += output.itl``).
    gaps = np.repeat(np.asarray(result.itl.gap_s), np.asarray(result.itl.count)) * 1e3
    assert got["mean_itl_ms"] == pytest.approx(np.mean(gaps), rel=1e-12)
    assert got["std_itl_ms"] == pytest.approx(np.std(gaps), rel=1e-9)
    assert got["median_itl_ms"] == pytest.approx(np.median(gaps), rel=1e-12)
    assert got["p99.9_itl_ms"] == pytest.approx(np.percentile(gaps, 99.9), rel=1e-12)
    # The summary's own columns agree exactly.
    row = summarize(result, loaded.spec.slo, loaded.class_slos, qs)[0]
    assert got["mean_itl_ms"] == row.itl_mean_ms and got["p99_ttft_ms"] == row.ttft_p99_ms
    assert row.percentiles["p99.9_tpot_ms"] == got["p99.9_tpot_ms"]
    assert list(row.percentiles) == [percentile_key(q, m) for m in ("ttft", "tpot", "itl", "e2el")
                                     for q in qs]


def test_a_class_has_its_own_figures(chunked):
    loaded, rc, result = chunked
    frame = request_frame(result, loaded.spec.slo, loaded.class_slos)
    rag = bench_fields(result, frame, (99.0,), None, cls="rag")
    mine = frame[(frame["cls"] == "rag") & (frame["status"] == FINISHED)]
    assert rag["completed"] == len(mine) > 0
    assert rag["p99_ttft_ms"] == pytest.approx(np.percentile(mine["ttft_ms"], 99), rel=1e-12)
    rows = {r.cls: r for r in summarize(result, loaded.spec.slo, loaded.class_slos)}
    assert rag["p99_itl_ms"] == rows["rag"].itl_p99_ms
    assert "request_rate" not in rag


def test_peak_concurrency_is_a_sweep_line():
    """[arrival, end) intervals; an end and a start at one instant do not overlap."""
    import pandas as pd

    done = pd.DataFrame({"arrival_s": [0.0, 1.0, 1.5, 3.0], "e2el_ms": [1000.0, 2000.0, 500.0,
                                                                          100.0]})
    # [0,1) [1,3) [1.5,2) [3,3.1): at most 2 at once.
    assert peak_concurrency(done) == 2
    assert peak_concurrency(done.iloc[:0]) == 0


@pytest.mark.parametrize("arrival,rate,burstiness,concurrency", [
    ({"process": "poisson", "rate_per_s": 4}, 4.0, 1.0, None),
    ({"process": "gamma", "rate_per_s": 4, "cv": 2.0}, 4.0, 0.25, None),   # shape 1 / cv²
    ({"process": "constant", "rate_per_s": 4}, 4.0, None, None),
    ({"process": "poisson", "rate_per_s": math.inf}, "inf", 1.0, None),   # vLLM: inf, 1.0
    ({"process": "concurrency", "users": 16}, "inf", None, 16),
])
def test_traffic_fields(arrival, rate, burstiness, concurrency):
    wl = WorkloadConfig.model_validate({
        "num_requests": 10, "arrival": arrival,
        "classes": [{"name": "c", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 10},
                     "output_tokens": {"dist": "fixed", "value": 10}}]})
    assert traffic_fields(wl) == {"request_rate": rate, "burstiness": burstiness,
                                  "max_concurrency": concurrency}
