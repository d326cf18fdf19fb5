"""The day view's windows follow the run's length (issue 31 item 10): a 12-s run had one
5-minute window (0.2 req/s offered for a 5 req/s load), and a run held far past its
arrivals wrote whole-run means into its only window."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.metrics.day import day_windows, run_length_s, violation_minutes, window_label
from capsim.scenario.load import load
from capsim.sim.day import SAMPLE_S, day_window_s, sample_period_s
from capsim.sim.simulate import simulate
from capsim.workload import build


def _doc(duration_s: float, cluster: dict) -> dict:
    return {
        "name": "w", "seed": 42, "model": "llama-3.1-8b", "hardware": "h100-sxm",
        "engine": {"max_model_len": 4096, "max_num_seqs": 64},
        "cluster": cluster,
        "workload": {"duration_s": duration_s, "arrival": {"process": "poisson",
                                                           "rate_per_s": 5.0},
                     "schedule": {"kind": "piecewise", "step_s": duration_s / 2,
                                  "factors": [1, 2]},
                     "classes": [{"name": "chat", "weight": 1,
                                  "prompt_tokens": {"dist": "fixed", "value": 500},
                                  "output_tokens": {"dist": "fixed", "value": 60}}]},
        "slo": {"targets": {"itl_p99_ms": 60}},
    }


def _run(tmp_path, write_scenario, doc):
    path = write_scenario(tmp_path, doc)
    ls = load(path)
    run = ls.runs[0]
    res = simulate(run, build(run.workload, run.seed, path.parent))
    return res, day_windows(res, ls.spec.slo)


@pytest.mark.parametrize("length_s, window_s", [
    (12.0, 1.0), (12.4, 1.0), (30.0, 2.0), (119.0, 5.0), (1200.0, 60.0), (3599.0, 120.0),
    (3600.0, 300.0), (86_400.0, 300.0), (180_000.0, 300.0), (1e6, 1800.0), (1e8, 172_800.0),
    (0.5, 0.1), (0.05, 0.05)])
def test_window_lengths_are_round_and_give_12_to_600_windows(length_s, window_s):
    assert day_window_s(length_s) == window_s
    assert window_s <= length_s                          # never longer than the run
    if length_s >= 1.2:
        assert 12 <= length_s / window_s <= 600 or window_s == 300.0


def test_sampling_keeps_pace_with_the_windows():
    assert sample_period_s(12.0) == pytest.approx(1.0 / 20)     # 20 samples per window
    assert sample_period_s(3600.0) == SAMPLE_S == 15.0          # an hour and more: 15 s
    assert sample_period_s(86_400.0) == SAMPLE_S


def test_window_labels_read_as_lengths():
    assert [window_label(w) for w in (300.0, 1.0, 60.0, 0.5, 7200.0, 86400.0, 90.0)] == [
        "5-minute", "1-second", "1-minute", "0.5-second", "2-hour", "1-day", "90-second"]


def test_a_12_second_run_gets_twelve_1_second_windows(tmp_path, write_scenario):
    """5 req/s then 10 req/s (a schedule, so the run has a day view): each window's offered
    rate is its arrivals over its own length — about 5 and 10, not 0.2 as over 300 s."""
    res, w = _run(tmp_path, write_scenario, _doc(12, {"num_replicas": 1}))
    assert len(w) == 12 and (w.window_s[:11] == 1.0).all()
    assert w.window_s.sum() == pytest.approx(run_length_s(res))
    arrivals = np.asarray(res.requests.arrival_s)
    assert (w.offered_rate_per_s * w.window_s).sum() == pytest.approx(len(arrivals))
    assert w.offered_rate_per_s[:6].mean() == pytest.approx(5.0, rel=0.35)
    assert w.offered_rate_per_s[6:].mean() == pytest.approx(10.0, rel=0.35)
    assert (w.replicas_serving == 1).all()              # samples in every window
    assert np.isfinite(w.itl_p99_ms[w.offered_rate_per_s > 0]).all()
    assert violation_minutes(w) == 0


def test_a_run_held_past_its_arrivals_has_windows_to_its_end(tmp_path, write_scenario):
    """The only replica fails at 6 s and is back after an hour; the 12 s of arrivals wait.
    The windows cover the whole hour: nobody serving in the middle ones, the requests
    waiting there, served in the last (before, one window held the hour's means)."""
    cluster = {"num_replicas": 1, "failures": {
        "at": [{"replica": 0, "at_s": 6, "repair_s": 3600}], "in_flight": "retry"}}
    res, w = _run(tmp_path, write_scenario, _doc(12, cluster))
    assert res.sim_end_s > 3600
    assert len(w) == 12 and (w.window_s[:11] == 300.0).all()
    # every request not done by 6 s waits for the repair (in the queue: retried)
    waiting = int((np.asarray(res.requests.finish_s) > 3600).sum())
    assert waiting > 0.7 * len(res.requests.arrival_s)
    middle = w.iloc[1:11]
    assert (middle.replicas_serving == 0).all() and (middle.offered_rate_per_s == 0).all()
    assert (middle.queue_mean == waiting).all()
    assert np.isinf(middle.itl_p99_ms).all() and middle.violation.all()
    assert w.offered_rate_per_s[0] == pytest.approx(len(res.requests.arrival_s) / 300.0)
    assert w.replicas_serving.iloc[-1] > 0 and np.isfinite(w.itl_p99_ms.iloc[-1])
    assert violation_minutes(w) >= 50


def test_a_fixed_fleets_policy_reads_one_replica(tmp_path, write_scenario):
    """A fleet changed only by failures is labelled "fixed, N replicas": "1 replica"."""
    from capsim.report.run.day import table

    cluster = {"num_replicas": 1, "failures": {
        "at": [{"replica": 0, "at_s": 6, "repair_s": 1}]}}
    res, w = _run(tmp_path, write_scenario, _doc(12, cluster))
    assert res.fleet.policy == "fixed, 1 replica"
    assert table([res], {res.variant: w}, {})["rows"][0]["cells"][0] == "fixed, 1 replica"
