"""Queueing theory against the simulator: M/D/1 waiting time and Little's law."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from capsim import workload
from capsim.studies import sweep
from capsim.scenario.load import load
from capsim.studies.parallel import ExecutorSpec, open_runner
from capsim.studies.queueing import little_check, md1_mean_wait_s
from capsim.sim.simulate import simulate

PROMPT_TOKENS = 256


def md1_doc(**extra) -> dict:
    """One H100 replica serving one request at a time (max_num_seqs 1), every request a
    256-token prompt and a single output token: each request is exactly one prefill step of
    the same length, so service is deterministic (D) and arrivals are Poisson — M/D/1."""
    return {
        "name": "md1", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
        "engine": {"max_model_len": 2048, "max_num_seqs": 1, "max_num_batched_tokens": 2048},
        "workload": {"num_requests": 20000, "arrival": {"process": "poisson", "rate_per_s": 50},
                     "classes": [{"name": "c", "weight": 1,
                                  "prompt_tokens": {"dist": "fixed", "value": PROMPT_TOKENS},
                                  "output_tokens": {"dist": "fixed", "value": 1}}]},
        **extra,
    }


def service_time_s(path: Path) -> float:
    """D: the time the simulator takes to serve one request alone."""
    loaded = load(path, ["workload.num_requests=1"])
    trace = workload.build(loaded.runs[0].workload, 1, loaded.base_dir)
    r = simulate(loaded.runs[0], trace).requests
    return float(r.finish_s[0] - r.first_scheduled_s[0])


def test_md1_formula():
    """Pollaczek–Khinchine with deterministic service: W_q = ρD / (2(1 − ρ))."""
    assert md1_mean_wait_s(0.5 / 0.01, 0.01) == pytest.approx(0.005)       # ρ = 0.5 → D/2
    assert md1_mean_wait_s(0.8 / 0.01, 0.01) == pytest.approx(0.02)        # ρ = 0.8 → 2D
    with pytest.raises(ValueError, match="grows without bound"):
        md1_mean_wait_s(100.0, 0.01)


def test_service_time_is_deterministic(tmp_path, write_scenario):
    path = write_scenario(tmp_path, md1_doc(), "md1.yaml")
    d = service_time_s(path)
    assert 3e-3 < d < 20e-3          # one 256-token prefill of Llama-3.1-8B on an H100: ms
    loaded = load(path, ["workload.num_requests=2000", f"workload.arrival.rate_per_s={0.7 / d}"])
    trace = workload.build(loaded.runs[0].workload, 1, loaded.base_dir)
    r = simulate(loaded.runs[0], trace).requests
    service = np.asarray(r.finish_s) - np.asarray(r.first_scheduled_s)
    np.testing.assert_allclose(service, d, rtol=1e-9)


@pytest.fixture(scope="module")
def md1_sweep(tmp_path_factory, write_scenario):
    """ρ = 0.3, 0.5, 0.7 × 3 seeds of 20,000 requests each, through the sweep machinery."""
    tmp = tmp_path_factory.mktemp("md1")
    path = write_scenario(tmp, md1_doc(), "md1.yaml")
    d = service_time_s(path)
    rhos = (0.3, 0.5, 0.7)
    doc = yaml.safe_load(path.read_text())
    doc["sweep"] = {"workload.arrival.rate_per_s": [rho / d for rho in rhos]}
    write_scenario(tmp, doc, "md1.yaml")
    plan = sweep.plan(path)
    with open_runner(ExecutorSpec("process", workers=2)) as runner:
        result = sweep.run(plan, sweep.replication_seeds(1, 3), runner)
    return d, rhos, result


def test_mean_wait_matches_md1_within_a_few_percent(md1_sweep):
    d, rhos, result = md1_sweep
    points = result.points.sort_values("offered_rate_per_s")
    for rho, (_, row) in zip(rhos, points.iterrows()):
        theory_ms = md1_mean_wait_s(rho / d, d) * 1e3
        assert row["queue_mean_ms"] == pytest.approx(theory_ms, rel=0.04), rho
        # Time in system = wait + D; the measured utilisation is ρ.
        assert row["e2el_mean_ms"] == pytest.approx(theory_ms + d * 1e3, rel=0.03)
        assert row["gpu_busy_frac"] == pytest.approx(rho, rel=0.02)


def test_littles_law_on_every_md1_run(md1_sweep):
    """L (time-average in system, from an event sweep) = λ W on every run; with 20,000
    requests λ is the offered rate to within a few per cent."""
    _, _, result = md1_sweep
    runs = result.runs[result.runs["cls"] == "all"]
    assert len(runs) == 9
    lam_w = runs["arrival_rate_per_s"] * runs["mean_time_in_system_s"]
    np.testing.assert_allclose(runs["mean_in_system"], lam_w, rtol=1e-9)
    np.testing.assert_allclose(runs["arrival_rate_per_s"], runs["offered_rate_per_s"], rtol=0.03)
    np.testing.assert_allclose(runs["mean_time_in_system_s"] * 1e3, runs["e2el_mean_ms"],
                               rtol=1e-9)


def test_little_check_by_hand():
    """Arrivals 0, 1, 2 s; departures 2, 2, 3 s: N(t) = 1, 2, 1 over [0, 3) → L = 4/3,
    λ = 3 / 3 s, W = (2 + 1 + 1) / 3 s."""
    c = little_check(np.array([0.0, 1.0, 2.0]), np.array([2.0, 2.0, 3.0]))
    assert c.mean_in_system == pytest.approx(4 / 3)
    assert c.arrival_rate_per_s == pytest.approx(1.0)
    assert c.mean_time_in_system_s == pytest.approx(4 / 3)
    assert c.relative_error == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="departs before"):
        little_check(np.array([1.0]), np.array([0.5]))


def test_littles_law_holds_with_batching_and_replicas(tmp_path, write_scenario):
    """Continuous batching, static batching and several replicas: L = λW on each run."""
    doc = md1_doc()
    doc["engine"] = {"max_model_len": 4096, "max_num_seqs": 16}
    doc["workload"]["num_requests"] = 300
    doc["workload"]["classes"][0]["prompt_tokens"] = {"dist": "uniform", "min": 50, "max": 2000}
    doc["workload"]["classes"][0]["output_tokens"] = {"dist": "uniform", "min": 2, "max": 200}
    doc["variants"] = [{"name": "chunked"}, {"name": "static", "engine": {"scheduler": "static"}},
                       {"name": "two", "cluster": {"num_replicas": 2}}]
    doc["sweep"] = {"workload.arrival.rate_per_s": [5, 20]}
    path = write_scenario(tmp_path, doc, "batch.yaml")
    with open_runner(ExecutorSpec("serial")) as runner:
        result = sweep.run(sweep.plan(path), [1], runner)
    runs = result.runs[result.runs["cls"] == "all"]
    assert len(runs) == 6 and (runs["num_finished"] == 300).all()
    np.testing.assert_allclose(runs["mean_in_system"],
                               runs["arrival_rate_per_s"] * runs["mean_time_in_system_s"],
                               rtol=1e-9)
    # More load, more requests in the system, on every variant.
    by = runs.set_index(["variant", "offered_rate_per_s"])["mean_in_system"]
    for v in ("chunked", "static", "two"):
        assert by[(v, 20.0)] > by[(v, 5.0)]
