"""An autoscaled fleet: provisioning delay, draining, GPU-hours, counting, determinism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from capsim.profiles.models import load_model
from capsim.profiles.startup import load_startup
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "uniform", "min": 100, "max": 1500},
        "output_tokens": {"dist": "uniform", "min": 20, "max": 300}}
DAY = {  # 40 minutes: quiet, a 10-minute surge at 8× the rate, quiet again
    "duration_s": 2400, "arrival": {"process": "poisson", "rate_per_s": 1.0},
    "schedule": {"kind": "piecewise", "step_s": 600, "factors": [1, 1, 16, 1]},
    "classes": [CHAT]}


def _fleet_run(directory: Path, write_scenario, cluster: dict, workload: dict = DAY,
               router: str = "round_robin"):
    """(run, trace, result) of the fleet tests' scenario, written in ``directory``."""
    doc = {"name": "f", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 4096, "max_num_seqs": 32},
           "cluster": {"router": router, **cluster}, "workload": workload}
    path = write_scenario(directory, doc)
    run = load(path).runs[0]
    trace = build(run.workload, run.seed, path.parent)
    return run, trace, simulate(run, trace)


@pytest.fixture
def fleet_run(tmp_path, write_scenario):
    """``fleet_run(cluster, workload=DAY)`` → (run, trace, result)."""
    def go(cluster: dict, workload: dict = DAY, router: str = "round_robin"):
        return _fleet_run(tmp_path, write_scenario, cluster, workload, router)
    return go


SCALING = {"num_replicas": 1, "autoscaling": {"signal": "running", "target": 12,
                                              "min_replicas": 1, "max_replicas": 6,
                                              "scale_down_cooldown_s": 120}}


@pytest.fixture(scope="module")
def scaling_run(tmp_path_factory, write_scenario):
    """(run, trace, result) of ``fleet_run(SCALING)`` over DAY, simulated once for the
    tests that only read it (the tests do not change results)."""
    return _fleet_run(tmp_path_factory.mktemp("scaling"), write_scenario, SCALING)


def test_provisioning_delay_is_weights_over_storage_plus_startup_phases(fleet_run):
    """Llama-3.1-8B bf16: 16.06e9 B / 4.07e9 B/s = 3.9 s + 24 + 17.1 + 17 s (vLLM issue
    #20264's logged phases, capsim/profiles/data/startup/vllm-v1.yaml) = 62.0 s."""
    run, _, _ = fleet_run(SCALING, workload={**DAY, "duration_s": 60})
    weights = load_model("llama-3.1-8b").weight_bytes(2)
    assert run.provisioning_delay_s == pytest.approx(
        24.0 + weights / 4.07e9 + 17.1 + 17.0, abs=1e-9)
    assert run.provisioning_delay_s == pytest.approx(62.0, abs=0.1)
    assert load_startup().delay_s(weights) == run.provisioning_delay_s


def test_scale_up_never_serves_before_its_provisioning_delay(scaling_run):
    _, trace, res = scaling_run
    f = res.fleet
    assert f.scale_ups >= 2 and max(f.serving) >= 3
    delay = f.provisioning_delay_s
    for k, (asked, ready) in enumerate(zip(f.requested_s, f.ready_s)):
        if asked > 0:
            assert ready - asked == pytest.approx(delay)
    # No request reached a replica before that replica was serving.
    rec = res.requests
    replica = np.asarray(rec.replica)
    first_token = np.asarray(rec.first_token_s)
    ready = np.asarray(f.ready_s)
    served = replica >= 0
    assert np.all(first_token[served] >= ready[replica[served]])
    # The surge starts at 1200 s: nothing is serving beyond the first replica before
    # 1200 s + one interval + the delay.
    first_new = min(r for a, r in zip(f.requested_s, f.ready_s) if a > 0)
    assert first_new >= 1200 + delay


def test_scale_down_drains_before_stopping_and_routes_nothing_new(scaling_run):
    _, trace, res = scaling_run
    f = res.fleet
    assert f.scale_downs >= 1
    rec = res.requests
    replica, finish = np.asarray(rec.replica), np.asarray(rec.finish_s)
    arrival = np.asarray(rec.arrival_s)
    for k in range(len(f.stopped_s)):
        mine = replica == k
        if not mine.any():
            continue
        # It stops after its last request ends (a replica still up stops at the run's end).
        assert f.stopped_s[k] >= finish[mine].max() - 1e-9
    # After the surge the fleet returns to min_replicas; GPU-hours are the lifetimes' sum.
    assert f.serving[-1] == 1
    hours = sum(s - a for a, s in zip(f.requested_s, f.stopped_s)) / 3600
    assert f.gpu_hours == pytest.approx(hours)
    assert f.cost_usd == pytest.approx(hours * f.price_per_gpu_hour_usd)


def test_every_request_is_counted_once_and_runs_are_deterministic(scaling_run, fleet_run):
    _, trace, a = scaling_run
    _, _, b = fleet_run(SCALING)                          # simulated again here
    status = np.asarray(a.requests.status)
    assert len(status) == len(trace)
    assert set(status) <= {"finished", "rejected"}
    assert (status == "finished").sum() + (status == "rejected").sum() == len(trace)
    assert a.fleet == b.fleet
    assert np.array_equal(np.asarray(a.requests.finish_s), np.asarray(b.requests.finish_s))


def test_a_fleet_that_never_changes_serves_as_the_fixed_cluster(fleet_run):
    """signal: schedule at a constant 3, min = max = 3: the same requests on the same
    replicas at the same times as cluster: {num_replicas: 3}. DAY's quiet-surge-quiet
    shape in 150-s steps (10 minutes, not 40: four runs of it were 30 s of the suite)."""
    day = {**DAY, "duration_s": 600, "schedule": {**DAY["schedule"], "step_s": 150}}
    for router in ("round_robin", "least_outstanding_tokens"):
        _, _, fixed = fleet_run({"num_replicas": 3}, workload=day, router=router)
        _, _, same = fleet_run({"num_replicas": 3, "autoscaling": {
            "signal": "schedule", "schedule": {"replicas": [3]},
            "min_replicas": 3, "max_replicas": 3}}, workload=day, router=router)
        for col in ("replica", "first_token_s", "finish_s"):
            assert np.array_equal(np.asarray(getattr(fixed.requests, col)),
                                  np.asarray(getattr(same.requests, col)))
        assert same.fleet.serving == [3] and same.fleet.scale_ups == 0


def test_schedule_signal_follows_the_schedule(fleet_run):
    """replicas [1, 3] per 600 s, delay 30 s: two replicas asked at the first tick at or
    after 600 s (615 s: ticks every 15 s from 15 s), serving at 645 s; back to 1 after the
    300 s window once the schedule drops at 1200 s."""
    _, _, res = fleet_run({"num_replicas": 1, "autoscaling": {
        "signal": "schedule", "schedule": {"step_s": 600, "replicas": [1, 3]},
        "min_replicas": 1, "max_replicas": 3, "provisioning": {"delay_s": 30}}},
        workload={**DAY, "schedule": None})
    f = res.fleet
    assert f.requested_s[1:3] == [600.0, 600.0]
    assert f.ready_s[1:3] == [630.0, 630.0]
    i = f.times_s.index(630.0)
    assert f.serving[i] == 3
    # Scale-down: recommendations of 1 from 1200 s; the 300 s window holds 3 until 1500 s.
    drop = next(t for t, n in zip(f.times_s, f.serving) if t > 630 and n < 3)
    assert drop == pytest.approx(1500.0)


STEADY = {"duration_s": 600, "arrival": {"process": "poisson", "rate_per_s": 6.0},
          "classes": [CHAT]}


def _counts(res):
    status = np.asarray(res.requests.status)
    return (status == "finished").sum(), (status == "rejected").sum(), len(status)


def test_a_failure_retries_its_in_flight_requests_elsewhere(fleet_run):
    """Replica 1 of 3 fails at 300 s for 120 s: what it held is sent again (prefill
    redone: more prefill tokens than the same run without the failure), every request
    finishes once, and a replacement (replica 3) serves from 420 s."""
    _, trace, base = fleet_run({"num_replicas": 3}, workload=STEADY)
    _, _, res = fleet_run({"num_replicas": 3, "failures": {
        "at": [{"replica": 1, "at_s": 300, "repair_s": 120}]}}, workload=STEADY)
    f = res.fleet
    assert f.failures == [[1.0, 300.0, 420.0]]
    assert f.retried_requests > 0 and f.retries == f.retried_requests
    finished, rejected, total = _counts(res)
    assert (finished, rejected) == (total, 0) == (len(trace), 0)
    rec = res.requests
    replica, first = np.asarray(rec.replica), np.asarray(rec.first_token_s)
    # Nothing finishes on the failed replica after it failed.
    assert np.all(np.asarray(rec.finish_s)[replica == 1] <= 300.0)
    assert f.ready_s[3] == 420.0 and f.requested_s[3] == 420.0
    assert np.all(first[replica == 3] >= 420.0)
    # The failed replica is paid for until its repair.
    assert f.stopped_s[1] == 420.0
    # The retries' prefills are redone.
    prefill = sum(r.prefill_tokens for r in res.replicas)
    assert prefill > sum(r.prefill_tokens for r in base.replicas)
    i = f.times_s.index(300.0)
    assert (f.serving[i], f.down[i]) == (2, 1)


def test_failed_in_flight_requests_are_counted_not_lost(fleet_run):
    _, trace, res = fleet_run({"num_replicas": 3, "failures": {
        "at": [{"replica": 0, "at_s": 200, "repair_s": 60}], "in_flight": "fail"}},
        workload=STEADY)
    f = res.fleet
    finished, rejected, total = _counts(res)
    assert f.failed_requests > 0 and f.retried_requests == 0
    assert rejected == f.failed_requests and finished + rejected == total == len(trace)
    reasons = np.asarray(res.requests.reject_reason)
    assert (np.char.find(reasons.astype(str), "replica 0 failed at 200.0 s") >= 0).sum() \
        == f.failed_requests


def test_random_failures_reproduce_with_the_seed(fleet_run):
    """MTBF 200 s, MTTR 60 s on 3 replicas for 600 s: several failures, the same ones
    for the same seed, all requests served."""
    cluster = {"num_replicas": 3, "failures": {"mtbf_s": 200, "mttr_s": 60}}
    _, trace, a = fleet_run(cluster, workload=STEADY)
    _, _, b = fleet_run(cluster, workload=STEADY)
    assert len(a.fleet.failures) >= 3
    assert a.fleet.failures == b.fleet.failures
    assert np.array_equal(np.asarray(a.requests.finish_s), np.asarray(b.requests.finish_s))
    assert _counts(a)[0] == len(trace)
    for _, failed, repaired in a.fleet.failures:
        assert 0 < failed < repaired


def test_step_by_step_and_macro_steps_agree_with_failures(fleet_run, tmp_path):
    run, trace, res = fleet_run({"num_replicas": 2, "failures": {
        "at": [{"replica": 1, "at_s": 150, "repair_s": 30}]}}, workload=STEADY)
    ref = simulate(run, trace, macro_steps=False)
    for col in ("replica", "first_token_s", "finish_s"):
        assert np.array_equal(np.asarray(getattr(ref.requests, col)),
                              np.asarray(getattr(res.requests, col)))


def test_step_by_step_and_macro_steps_agree_when_autoscaled(scaling_run):
    """The autoscaler reads the running batch mid-run (a decode run is committed up to
    the tick first): the same decisions and requests step by step."""
    run, trace, res = scaling_run
    ref = simulate(run, trace, macro_steps=False)
    assert ref.fleet == res.fleet
    for col in ("replica", "first_token_s", "finish_s"):
        assert np.array_equal(np.asarray(getattr(ref.requests, col)),
                              np.asarray(getattr(res.requests, col)))


def test_a_failure_after_the_last_request_does_not_happen_and_costs_nothing(fleet_run):
    """A failure timed after every request ended (at_s 1e6 s on a 60-s workload) is
    skipped and said so: before, it fired on the idle fleet and kept the replica paid for
    until its repair, a $115,528/h fleet of 2 H100s. An autoscaled fleet that never
    started replica 3 skips its failure too."""
    from capsim.report.run.html import skipped_failure_notes

    short = {**STEADY, "duration_s": 60}
    _, _, fixed = fleet_run({"num_replicas": 2}, workload=short)
    _, _, late = fleet_run({"num_replicas": 2, "failures": {
        "at": [{"replica": 1, "at_s": 1e6, "repair_s": 60}]}}, workload=short)
    f = late.fleet
    assert f.failures == [] and f.skipped_failures == ["replica 1 at 1e+06 s: every request "
                                                       "had ended by then"]
    assert late.price_per_hour_usd == pytest.approx(fixed.price_per_hour_usd)
    assert np.array_equal(np.asarray(late.requests.finish_s), np.asarray(fixed.requests.finish_s))
    _, _, never = fleet_run({**SCALING, "failures": {
        "at": [{"replica": 5, "at_s": 30, "repair_s": 60}]}}, workload=short)
    assert never.fleet.failures == [] and len(never.fleet.skipped_failures) == 1
    assert never.fleet.skipped_failures[0].startswith("replica 5 at 30 s: the fleet had started ")
    assert skipped_failure_notes([fixed, late]) == [
        "default: 1 of the failures in cluster.failures.at did not happen: replica 1 at 1e+06 "
        "s: every request had ended by then."]


def test_a_repair_that_would_end_after_the_run_is_paid_for_until_the_run_ends(fleet_run):
    """Replica 0 fails at 20 s of a 60-s workload with a 10-hour repair; replica 1 serves
    the rest. The failed replica is paid for until the run's end, as the one still up:
    before, its whole repair was billed (10.0 GPU-hours, a mean of 600 GPUs)."""
    short = {**STEADY, "duration_s": 60}
    _, _, res = fleet_run({"num_replicas": 2, "failures": {
        "at": [{"replica": 0, "at_s": 20, "repair_s": 36000}]}}, workload=short)
    f = res.fleet
    assert f.failures == [[0, 20.0, 36020.0]]          # the repair as scheduled
    end = float(np.nanmax(np.asarray(res.requests.finish_s)))
    assert 60 < end < 120
    assert f.stopped_s == [pytest.approx(end), pytest.approx(end)]
    assert f.gpu_hours == pytest.approx(2 * end / 3600)


def _by_schedule(replicas: list[int], initial: int, **more) -> dict:
    """A fleet scaled by schedule (replicas per 300 s), start-up 30 s, failing as ``more``."""
    return {"num_replicas": initial, "autoscaling": {
        "signal": "schedule", "schedule": {"step_s": 300, "replicas": replicas},
        "min_replicas": 1, "max_replicas": 3, "provisioning": {"delay_s": 30},
        **more.pop("autoscaling", {})}, **more}


def test_the_autoscaler_does_not_undo_a_failure_before_its_repair(fleet_run):
    """HPA compares its recommendation with the scale target's replicas, which keep the
    failed pod (kubernetes pkg/controller/podautoscaler): 2 wanted, replica 0 down from
    200 s to 500 s → one replica serves until the replacement at 500 s, none is started
    at the next sync (the old model served a new one 30 s after 215 s)."""
    _, trace, res = fleet_run(_by_schedule([2], 2, failures={
        "at": [{"replica": 0, "at_s": 200, "repair_s": 300}]}), workload=STEADY)
    f = res.fleet
    assert f.scale_ups == 0
    assert f.requested_s == [0.0, 0.0, 500.0] and f.ready_s == [0.0, 0.0, 500.0]
    during = [n for t, n in zip(f.times_s, f.serving) if 200 <= t < 500]
    assert during and set(during) == {1}
    finished, rejected, total = _counts(res)
    assert (finished, rejected, total) == (len(trace), 0, len(trace))


def test_a_scale_up_during_a_failure_stays_within_max_replicas(fleet_run):
    """3 wanted from 300 s, max_replicas 3, replica 0 down from 100 s to 500 s: the
    autoscaler starts one replica at 300 s (2 + the failed one = 3), the repair brings the
    third at 500 s; never more than 3 serving, starting or awaiting their replacement."""
    _, _, res = fleet_run(_by_schedule([2, 3], 2, failures={
        "at": [{"replica": 0, "at_s": 100, "repair_s": 400}]}), workload=STEADY)
    f = res.fleet
    assert f.requested_s == [0.0, 0.0, 300.0, 500.0]
    assert f.ready_s == [0.0, 0.0, 330.0, 500.0]
    assert f.scale_ups == 1 and max(f.serving) == 3
    for s, p, d in zip(f.serving, f.provisioning, f.down):
        assert s + p + d <= 3


def test_a_scale_down_cancels_a_due_replacement_first(fleet_run):
    """3 replicas, 1 wanted from 300 s (no stabilization window), replica 0 down from
    100 s to 500 s: the scale-down calls off the failed replica's replacement (the
    ReplicaSet deletes not-ready pods first) and drains one serving replica; nothing
    starts at 500 s."""
    _, trace, res = fleet_run(_by_schedule([3, 1, 1, 1], 3, autoscaling={
        "scale_down_cooldown_s": 0}, failures={
        "at": [{"replica": 0, "at_s": 100, "repair_s": 400}]}), workload=STEADY)
    f = res.fleet
    assert len(f.requested_s) == 3 and f.scale_ups == 0 and f.scale_downs == 2
    after = [n for t, n in zip(f.times_s, f.serving) if t >= 300]
    assert after and set(after) == {1}
    assert f.stopped_s[0] == 500.0          # the failed replica is paid for until its repair
    finished, _, total = _counts(res)
    assert finished == total == len(trace)


def test_no_ready_replica_gives_no_recommendation(fleet_run):
    """The only replica is down from 100 s to 400 s. HPA sizes from the ready pods' metrics
    (vllm:num_requests_waiting is a pod metric; replica_calculator.go
    calcPlainMetricReplicas: 'did not receive metrics for any ready pods' at kubernetes
    0006726): with none ready it recommends nothing, so no replica is started and the
    repair brings the capacity back. Before, the queue signal read the requests held in
    front of the down fleet (1 replica per 4 of them: 3 more started at 120 s)."""
    _, trace, res = fleet_run({"num_replicas": 1, "autoscaling": {
        "signal": "queue", "target": 4, "min_replicas": 1, "max_replicas": 4,
        "scale_down_cooldown_s": 0, "provisioning": {"delay_s": 30}},
        "failures": {"at": [{"replica": 0, "at_s": 100, "repair_s": 300}]}},
        workload={**STEADY, "duration_s": 300, "arrival": {"process": "poisson",
                                                           "rate_per_s": 1.0}})
    f = res.fleet
    assert f.failures == [[0, 100.0, 400.0]]
    # the replacement first, at the repair; scale-ups only after it, from its own metrics
    # (the requests held meanwhile reach it at once)
    assert f.requested_s[:2] == [0.0, 400.0] and min(f.requested_s[1:]) == 400.0
    finished, rejected, total = _counts(res)
    assert (finished, rejected, total) == (len(trace), 0, len(trace))


@pytest.mark.parametrize("signal", ["queue", "running", "kv_use"])
def test_every_pod_signal_recommends_nothing_without_a_ready_replica(signal):
    """running and kv_use read 0 off no replica: a scale-down to min_replicas that would
    call off due replacements; queue read the held requests. None of it is HPA's."""
    from capsim.engine.fleet import desired_replicas
    from capsim.scenario.fleet import AutoscalingConfig
    cfg = AutoscalingConfig(signal=signal, target=0.5, min_replicas=1, max_replicas=4)
    assert desired_replicas(cfg, 100.0, []) is None
    by_schedule = AutoscalingConfig(signal="schedule", schedule={"step_s": 60,
                                                                  "replicas": [3]},
                                    min_replicas=1, max_replicas=4)
    assert desired_replicas(by_schedule, 100.0, []) == 3


def test_a_router_queue_timeout_fails_requests_held_while_no_replica_serves(fleet_run):
    """The one replica fails at 200 s for 300 s: nothing serves until 500 s. Without a
    timeout the router holds every request until then (TTFT up to ~300 s); with
    ``router_queue_timeout_s: 60`` (ingress-nginx's default proxy-read-timeout) a request
    held 60 s fails as timed out: counted once, with its reason, never lost; those held
    less than 60 s at 500 s are served by the replacement."""
    failing = {"num_replicas": 1, "failures": {
        "at": [{"replica": 0, "at_s": 200, "repair_s": 300}], "in_flight": "retry"}}
    quiet = {**STEADY, "arrival": {"process": "poisson", "rate_per_s": 1.0}}
    _, trace, held = fleet_run(failing, workload=quiet)
    assert _counts(held)[:2] == (len(trace), 0)
    ttft = np.asarray(held.requests.first_token_s) - np.asarray(held.requests.arrival_s)
    assert ttft.max() > 240.0                       # held from ~200 s to the repair at 500 s
    assert held.fleet.timed_out_requests == 0

    _, _, res = fleet_run({**failing, "router_queue_timeout_s": 60}, workload=quiet)
    f = res.fleet
    finished, rejected, total = _counts(res)
    assert f.timed_out_requests == rejected > 0 and finished + rejected == total == len(trace)
    rec = res.requests
    arrival = np.asarray(rec.arrival_s)
    timed_out = np.char.find(np.asarray(rec.reject_reason).astype(str),
                             "timed out at the router after 60 s") >= 0
    assert timed_out.sum() == rejected
    # Held from arrival (or from the failure, for the retried in-flight ones) until
    # arrival + 60 s < 500 s: those arriving in [200, 440) s time out, the rest are served.
    assert np.all(arrival[timed_out] < 440.0) and np.all(arrival[timed_out] >= 140.0)
    late = (arrival >= 200.0) & (arrival < 440.0)
    assert np.all(timed_out[late])
    served_after = (arrival >= 441.0) & (arrival < 500.0)
    assert served_after.any() and not timed_out[served_after].any()
    ttft = np.asarray(rec.first_token_s) - arrival
    assert np.nanmax(ttft[~timed_out]) < 61.0 + 5.0
    # The day view: a request timed out at the router never got a first token (infinite
    # TTFT), so the outage windows still violate the TTFT target (2 s here); without that
    # the timeouts would leave those windows with no TTFT at all and hide the outage.
    from capsim.metrics.day import day_windows
    from capsim.scenario.slo import SloConfig

    frame = day_windows(res, SloConfig(targets={"ttft_p99_ms": 2000}))
    # A 10-minute run: 30-s windows (issue 31 item 10); those of 300–420 s hold arrivals
    # that all time out.
    outage = frame[(frame.window_start_s >= 300) & (frame.window_start_s < 400)]
    assert (outage.window_s == 30).all() and len(outage) == 4
    assert np.isinf(outage.ttft_p99_ms).all() and outage.violation.all()
