"""Load shedding in whole runs: a replica's waiting-queue and in-flight limits, the router's
queue limit and token bucket. Each request is counted once (finished + rejected = offered,
in the summary and in the per-request table) and a shed one says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.metrics.summary import request_frame, summarize, summary_frame
from capsim.results.model import QUEUE_FULL, RATE_LIMITED, reject_kind
from capsim.scenario.load import load
from capsim.sim.simulate import simulate


@pytest.fixture
def scenario(tmp_path, write_scenario):
    """``scenario(engine=..., cluster=...)`` → the path of a scenario: Llama-3.1-8B on H100s,
    the engine and cluster sections given (the requests come from ``trace_of``)."""
    def write(engine: dict | None = None, cluster: dict | None = None, **top) -> Path:
        doc = {"name": "shed", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": {"max_model_len": 4096, **(engine or {})},
               "cluster": cluster or {},
               "workload": {"num_requests": 10, "arrival": {"process": "poisson",
                                                            "rate_per_s": 1},
                            "classes": [{"name": "chat", "weight": 1,
                                         "prompt_tokens": {"dist": "fixed", "value": 100},
                                         "output_tokens": {"dist": "fixed", "value": 10}}]},
               **top}
        return write_scenario(tmp_path, doc)
    return write


def _counted_once(loaded, result) -> tuple:
    """(finished, rejected) of the run, after checking the summary and the per-request
    table agree and add up to the requests offered."""
    row = summarize(result, loaded.spec.slo)[0]
    frame = request_frame(result)
    assert row.num_requests == len(frame) == len(result.requests.request_id)
    assert row.num_finished + row.num_rejected == row.num_requests
    assert (frame.status == "finished").sum() == row.num_finished
    assert (frame.status == "rejected").sum() == row.num_rejected
    return row.num_finished, row.num_rejected


def test_a_burst_above_the_waiting_limit_sheds_exactly_the_excess(scenario, trace_of):
    """30 requests at one instant to one idle replica that may queue 8: the 8 first wait
    and are served, the 22 after them find the queue full (SGLang's
    len(waiting_queue) + 1 > max_queued_requests)."""
    path = scenario(engine={"max_waiting_requests": 8})
    loaded = load(path)
    result = simulate(loaded.runs[0], trace_of([(0.0, 100, 10)] * 30))
    assert _counted_once(loaded, result) == (8, 22)
    status = result.requests.status.tolist()
    assert status == ["finished"] * 8 + ["rejected"] * 22
    reason = result.requests.reject_reason[8]
    assert reason == f"{QUEUE_FULL}: 8 requests wait at replica 0 (engine.max_waiting_requests 8)"
    assert result.requests.replica[8] == 0                   # the replica that refused it
    row = summarize(result, loaded.spec.slo)[0]
    assert (row.rejected_queue_full, row.rejected_never_fits) == (22, 0)


def test_requests_arriving_after_the_queue_drains_are_served(scenario, trace_of):
    """The limit sheds a burst, not a load the engine keeps up with: one request every
    second, each done in well under a second, never finds anyone waiting."""
    path = scenario(engine={"max_waiting_requests": 1})
    loaded = load(path)
    result = simulate(loaded.runs[0], trace_of([(float(i), 100, 10) for i in range(20)]))
    assert _counted_once(loaded, result) == (20, 0)


def test_the_inflight_limit_counts_running_requests_too(scenario, trace_of):
    """TGI's max_concurrent_requests: 4 requests in flight (here all running after the
    first step) turn the fifth away even though none waits; once they finish, new ones
    pass."""
    path = scenario(engine={"max_inflight_requests": 4})
    loaded = load(path)
    rows = [(0.0, 100, 200)] * 4 + [(0.5, 100, 10)] + [(30.0, 100, 10)] * 2
    result = simulate(loaded.runs[0], trace_of(rows))
    assert result.requests.status.tolist() == ["finished"] * 4 + ["rejected"] + ["finished"] * 2
    assert result.requests.reject_reason[4] == (
        f"{QUEUE_FULL}: 4 requests in flight at replica 0 (engine.max_inflight_requests 4)")
    assert _counted_once(loaded, result) == (6, 1)


def test_the_inflight_limit_sees_finishes_inside_a_decode_run(scenario, trace_of):
    """Macro-steps advance many decode steps in one event: a request arriving after some
    of them finished must see them gone, as step by step (the same outcome both ways)."""
    path = scenario(engine={"max_inflight_requests": 3})
    loaded = load(path)
    # Arrivals 0.5 s apart let runs go on through finishes; the third request finishes
    # about 0.2 s into one, long before the arrivals at 3 s cut it.
    rows = [(0.0, 100, 1000), (0.5, 100, 1000), (1.0, 100, 30), (3.0, 100, 10),
            (3.0, 100, 10)]
    fast = simulate(loaded.runs[0], trace_of(rows))
    slow = simulate(loaded.runs[0], trace_of(rows), macro_steps=False)
    assert fast.requests.status.tolist() == slow.requests.status.tolist() == \
        ["finished"] * 4 + ["rejected"]


def test_the_router_queue_limit_counts_every_replicas_queue(scenario, trace_of):
    """Two replicas behind a router that lets 10 wait: of 30 at one instant, 10 pass."""
    path = scenario(cluster={"num_replicas": 2, "router_max_queued_requests": 10})
    loaded = load(path)
    result = simulate(loaded.runs[0], trace_of([(0.0, 100, 10)] * 30))
    assert _counted_once(loaded, result) == (10, 20)
    reasons = set(result.requests.reject_reason[10:])
    assert reasons == {f"{QUEUE_FULL}: 10 requests wait behind the router "
                       "(cluster.router_max_queued_requests 10)"}
    assert set(result.requests.replica[10:]) == {-1}               # never routed


def test_the_router_queue_limit_counts_requests_in_the_server_path(scenario, trace_of):
    """SGLang's preset spends 8.3 ms in its server path before a request reaches the
    engine: a burst at one instant is still counted there."""
    path = scenario(engine={"preset": "sglang"}, cluster={"router_max_queued_requests": 5})
    loaded = load(path)
    result = simulate(loaded.runs[0], trace_of([(0.0, 100, 10)] * 12))
    assert _counted_once(loaded, result) == (5, 7)


def test_the_token_bucket_passes_burst_plus_rate_times_the_span(scenario, trace_of):
    """20 requests/s for 10 s into a bucket of 5/s and burst 10: floor(10 + 5 × 9.95) = 59
    pass (Envoy's token bucket, full at the start), the other 141 are rate limited."""
    path = scenario(cluster={"router_rate_limit": {"rate_per_s": 5, "burst": 10}})
    loaded = load(path)
    result = simulate(loaded.runs[0], trace_of([(k * 0.05, 100, 10) for k in range(200)]))
    assert _counted_once(loaded, result) == (59, 141)
    row = summarize(result, loaded.spec.slo)[0]
    assert row.rejected_rate_limited == 141
    assert all(reject_kind(r) == RATE_LIMITED
               for r, s in zip(result.requests.reject_reason, result.requests.status)
               if s == "rejected")


def test_kinds_are_counted_apart_and_only_the_kinds_seen_get_columns(scenario, trace_of):
    """A request too long for max_model_len (never_fits) and requests shed (queue_full) in
    one run: summary.csv gets their two columns, which add up to num_rejected; a run that
    rejects nothing adds none."""
    path = scenario(engine={"max_waiting_requests": 2})
    loaded = load(path)
    rows = [(0.0, 5000, 10)] + [(0.0, 100, 10)] * 5
    result = simulate(loaded.runs[0], trace_of(rows))
    row = summarize(result, loaded.spec.slo)[0]
    assert (row.num_rejected, row.rejected_never_fits, row.rejected_queue_full) == (4, 1, 3)
    frame = summary_frame(summarize(result, loaded.spec.slo))
    assert [c for c in frame.columns if c.startswith("rejected_")] == \
        ["rejected_never_fits", "rejected_queue_full"]
    quiet = simulate(loaded.runs[0], trace_of([(0.0, 100, 10)]))
    frame = summary_frame(summarize(quiet, loaded.spec.slo))
    assert not [c for c in frame.columns if c.startswith("rejected_")]


def test_tgi_sheds_past_its_128_requests_in_flight(scenario, trace_of):
    """The TGI preset's router refuses requests beyond max_concurrent_requests 128 (its
    launcher's default, HTTP 429); engine.max_inflight_requests: null lifts the limit."""
    path = scenario(engine={"preset": "tgi"})
    loaded = load(path)
    assert loaded.runs[0].pool().engine.max_inflight_requests == 128
    result = simulate(loaded.runs[0], trace_of([(0.0, 100, 10)] * 130))
    assert _counted_once(loaded, result) == (128, 2)
    path = scenario(engine={"preset": "tgi", "max_inflight_requests": None})
    assert load(path).runs[0].pool().engine.max_inflight_requests is None


def test_a_failing_fleet_counts_lost_timed_out_and_shed_apart(tmp_path, write_scenario):
    """One replica fails at 20 s for 30 s (its in-flight requests fail: lost); the router
    holds arrivals while none serves, 5 s at most (timed_out); the replacement queues 4 and
    sheds the rest of the held ones it is handed at once (queue_full). Each kind has its
    column, they add up, and the day view counts every rejection in its window."""
    from capsim.metrics.day import day_windows
    from capsim.workload import build

    doc = {"name": "f", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 4096, "max_waiting_requests": 4},
           "cluster": {"num_replicas": 1, "router_queue_timeout_s": 5,
                       "failures": {"at": [{"replica": 0, "at_s": 20, "repair_s": 30}],
                                    "in_flight": "fail"}},
           "workload": {"duration_s": 80, "arrival": {"process": "poisson", "rate_per_s": 3},
                        "classes": [{"name": "chat", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 100},
                                     "output_tokens": {"dist": "fixed", "value": 200}}]}}
    loaded = load(write_scenario(tmp_path, doc))
    run = loaded.runs[0]
    trace = build(run.workload, run.seed, tmp_path)
    result = simulate(run, trace)
    row = summarize(result, loaded.spec.slo)[0]
    kinds = (row.rejected_lost, row.rejected_timed_out, row.rejected_queue_full)
    assert all(k > 0 for k in kinds), kinds
    assert sum(kinds) == row.num_rejected and row.rejected_never_fits == 0
    assert _counted_once(loaded, result)[1] == row.num_rejected
    assert day_windows(result, loaded.spec.slo)["rejected"].sum() == row.num_rejected
