"""The day view: windows, Little's law per window, violation minutes, the day's cost."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capsim.metrics.day import day_cost, day_windows, violation_minutes
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

DOC = {
    "name": "d", "seed": 4, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096, "max_num_seqs": 64},
    "cluster": {"num_replicas": 2, "router": "least_outstanding_tokens"},
    "workload": {"duration_s": 3600, "arrival": {"process": "poisson", "rate_per_s": 4.0},
                 "schedule": {"kind": "piecewise", "step_s": 900, "factors": [0.5, 1, 3, 1]},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "uniform", "min": 100, "max": 2000},
                              "output_tokens": {"dist": "uniform", "min": 20, "max": 400}}]},
    "slo": {"targets": {"itl_p99_ms": 20, "ttft_p99_ms": 1000}},
}


@pytest.fixture(scope="module")
def day(tmp_path_factory, write_scenario):
    path = write_scenario(tmp_path_factory.mktemp("day"), DOC)
    ls = load(path)
    run = ls.runs[0]
    res = simulate(run, build(run.workload, run.seed, path.parent))
    return ls, res, day_windows(res, ls.spec.slo)


def test_windows_follow_the_schedule(day):
    _, res, w = day
    # An hour's run: 5-minute windows over the whole run, the requests served after the
    # last arrival in the last one (a tail under half a window joins it).
    assert len(w) == 12
    assert (w.window_s[:11] == 300).all() and 300 <= w.window_s[11] < 450
    assert w.window_s.sum() == pytest.approx(max(res.sim_end_s,
                                                 np.nanmax(res.requests.arrival_s)))
    # 4 req/s × factors 0.5, 1, 3, 1 per quarter hour: 3 windows each.
    expected = np.repeat([2.0, 4.0, 12.0, 4.0], 3)
    assert np.all(np.abs(w.offered_rate_per_s[:12] - expected) < 4 * np.sqrt(expected / 300))
    assert (w.replicas_serving[:12] == 2).all()


def test_littles_law_holds_in_every_window(day):
    """L = λ·W per window: the time-average number of requests in the system (from the
    records' arrival → finish intervals, exactly) equals the window's arrivals per second
    × their mean time in system, within the boundary effect of requests that straddle an
    edge; the sampled queue + running batch agrees with L (sampling noise)."""
    _, res, w = day
    rec = res.requests
    a, f = np.asarray(rec.arrival_s), np.asarray(rec.finish_s)
    exact = []
    for k in range(12):
        lo, hi = k * 300.0, (k + 1) * 300.0
        in_system = (np.clip(f, lo, hi) - np.clip(a, lo, hi)).sum() / 300.0
        mine = (a >= lo) & (a < hi)
        lam, sojourn = mine.sum() / 300.0, (f[mine] - a[mine]).mean()
        assert in_system == pytest.approx(lam * sojourn, rel=0.08, abs=0.05)
        exact.append(in_system)
    # 20 samples per window: each window's mean is noisy (±20 % here); the hour's is not.
    sampled = (w.queue_mean[:12] + w.running_mean[:12]).to_numpy()
    assert sampled.mean() == pytest.approx(np.mean(exact), rel=0.1)
    assert np.corrcoef(sampled, exact)[0, 1] > 0.9


def test_the_surge_breaks_the_targets_and_is_counted_in_minutes(day):
    ls, res, w = day
    # The surge quarter (12 req/s on 2 replicas) is the only one whose ITL p99 passes 20 ms.
    surge = w.iloc[6:9]
    quiet = w.iloc[0:3]
    assert (surge.itl_p99_ms > quiet.itl_p99_ms.max()).all()
    assert w.violation[6:9].all() and not w.violation[0:3].any()
    full = w.window_s[w.violation] == 300                  # 5 minutes each, or the last
    assert violation_minutes(w) == pytest.approx(
        5.0 * full.sum() + w.window_s[w.violation][~full].sum() / 60)


def test_day_cost_of_a_fixed_fleet(day):
    _, res, _ = day
    c = day_cost(res)
    assert c["gpu_hours"] == pytest.approx(2 * res.sim_end_s / 3600)
    assert c["cost_usd"] == pytest.approx(6.88 * c["gpu_hours"])       # H100 $/GPU-h


#: The sampling test's run: the day's three loads (0.5, 1 and 3 × 4 req/s, the last the
#: surge that queues on 2 replicas) in 200-s steps, 600 s in all (the hour's run simulated
#: step by step was 25 s of the suite; the sampler's path is the same at any length).
SAMPLED_DOC = {**DOC, "workload": {**DOC["workload"], "duration_s": 600, "schedule": {
    "kind": "piecewise", "step_s": 200, "factors": [0.5, 1, 3]}}}


def test_sampling_changes_no_result(monkeypatch, tmp_path, write_scenario):
    """The sampler only reads (a decode run is committed up to the sample first): the same
    requests at the same times without it, and step by step."""
    import capsim.sim.day as day_module

    path = write_scenario(tmp_path, SAMPLED_DOC)
    run = load(path).runs[0]
    trace = build(run.workload, run.seed, path.parent)
    res = simulate(run, trace)
    assert res.day is not None and len(res.day.times_s) >= 12 * day_module.SAMPLES_PER_WINDOW
    assert max(res.day.queue) > 0                 # the surge queues while it is sampled
    step = simulate(run, trace, macro_steps=False)
    monkeypatch.setattr(day_module, "wants_day_view", lambda _run: False)
    plain = simulate(run, trace)
    assert plain.day is None
    for other in (plain, step):
        for col in ("replica", "first_token_s", "finish_s"):
            assert np.array_equal(np.asarray(getattr(res.requests, col)),
                                  np.asarray(getattr(other.requests, col)))
        assert np.array_equal(np.sort(np.asarray(res.itl.gap_s)),
                              np.sort(np.asarray(other.itl.gap_s)))


def _one_replica_failing(tmp_path, write_scenario, in_flight: str, output_tokens=None):
    """One H100 that fails at 310 s and is back at 1,210 s (repair 900 s), 2 req/s for
    20 minutes, an ITL target only (as a fleet sized for streaming would set)."""
    classes = DOC["workload"]["classes"]
    if output_tokens is not None:
        classes = [{**classes[0], "output_tokens": output_tokens}]
    doc = {**DOC, "cluster": {"num_replicas": 1, "failures": {
               "at": [{"replica": 0, "at_s": 310, "repair_s": 900}], "in_flight": in_flight}},
           "workload": {**DOC["workload"], "duration_s": 1200, "schedule": None,
                        "arrival": {"process": "poisson", "rate_per_s": 2.0},
                        "classes": classes},
           "slo": {"targets": {"itl_p99_ms": 100}}}
    path = write_scenario(tmp_path, doc)
    ls = load(path)
    run = ls.runs[0]
    res = simulate(run, build(run.workload, run.seed, path.parent))
    return res, day_windows(res, ls.spec.slo)


def test_a_window_with_demand_and_no_replica_up_violates(tmp_path, write_scenario):
    """310-1,210 s: requests arrive (and wait for the repair) but no token is sent: the p99
    ITL is infinite and the windows violate (before: NaN, not violating, so a fleet that
    served nothing for 5 minutes showed no violation). The windows run on past the last
    arrival (1,200 s) to the run's end: the repaired replica's tokens in windows of their
    own (issue 31 item 10: they were all folded into the last 5-minute window)."""
    res, w = _one_replica_failing(tmp_path, write_scenario, "retry")
    # A ~22-minute run: 1-minute windows (at least 12, round lengths).
    assert (w.window_s[:-1] == 60).all() and len(w) == round(res.sim_end_s / 60)
    down = w[(w.window_start_s >= 360) & (w.window_start_s + w.window_s <= 1200)]
    assert len(down) == 14
    assert (down.offered_rate_per_s > 0.5).all() and (down.replicas_serving == 0).all()
    assert np.isinf(down.itl_p99_ms).all() and down.violation.all()
    before = w[w.window_start_s + w.window_s <= 300]
    assert np.isfinite(before.itl_p99_ms).all() and not before.violation.any()
    after = w[w.window_start_s >= 1260]              # the repaired replica drains the queue
    assert len(after) >= 1 and np.isfinite(after.itl_p99_ms).all()
    assert (after.offered_rate_per_s == 0).all() and (after.replicas_serving == 1).all()
    # the waiting requests' first tokens came after the repair at 1,210 s: huge but
    # finite TTFTs, at least the wait from the window's end to the repair
    assert (down.ttft_p99_ms > (1210 - down.window_start_s - down.window_s) * 1e3).all()
    assert np.isfinite(down.ttft_p99_ms).all() and down.ttft_p99_ms.iloc[0] > 800e3
    assert violation_minutes(w) == pytest.approx(w.window_s[w.violation].sum() / 60)
    assert violation_minutes(w) >= 14


def test_requests_lost_with_their_replica_count_as_an_infinite_ttft(tmp_path, write_scenario):
    """in_flight: fail: what the replica held at 310 s is lost. Those requests never get a
    first token; in their arrival window they weigh in as infinite TTFTs (before: left out,
    and a window whose requests were all lost had a NaN p99)."""
    res, w = _one_replica_failing(tmp_path, write_scenario, "fail",
                                  {"dist": "fixed", "value": 2000})   # ~80 in flight
    rec = res.requests
    lost = np.asarray(rec.status) == "rejected"
    arrival = np.asarray(rec.arrival_s)
    assert lost.any() and (np.asarray(rec.replica)[lost] == 0).all()
    window_s = float(w.window_s[0])
    k = int(arrival[lost].max() // window_s)
    share = lost[(arrival >= window_s * k) & (arrival < window_s * (k + 1))].mean()
    assert share > 0.01 and np.isinf(w.ttft_p99_ms[k])


@pytest.mark.parametrize("values, lost", [([5.0, 1.0, 3.0], 0), (list(range(1, 201)), 1),
                                          (list(range(1, 201)), 3), ([], 2), ([7.0], 1)])
def test_p99_with_lost_requests_is_numpys_with_them_last(values, lost):
    """The same order statistics as np.percentile over the values and ``lost`` values above
    all of them: infinite where one of those weighs in."""
    from capsim.metrics.day import _p99_with_lost
    got = _p99_with_lost(np.asarray(values, dtype=float), lost)
    big = np.percentile(np.concatenate([values, np.full(lost, 1e300)]), 99)
    assert (math.isinf(got) and big > 1e299) or got == pytest.approx(big)
