"""The router's load shedding (capsim.engine.router): the token bucket and the limit on the
requests waiting behind the router, driven directly."""

from __future__ import annotations

import math
from types import SimpleNamespace

from capsim.engine.request import REJECTED, Request
from capsim.engine.router import RouterGate, TokenBucket
from capsim.results.model import QUEUE_FULL, RATE_LIMITED, reject_kind
from capsim.scenario.admission import RateLimitConfig


def test_a_bucket_passes_burst_plus_rate_times_the_span():
    """Arrivals far faster than the rate: over T seconds exactly floor(burst + rate × T)
    pass (the bucket starts full, as Envoy's max_tokens does)."""
    bucket = TokenBucket(rate_per_s=10.0, burst=5)
    times = [k * 0.01 for k in range(1000)]                  # 100 per second for 9.99 s
    passed = sum(bucket.take(t) for t in times)
    assert passed == math.floor(5 + 10.0 * times[-1]) == 104


def test_arrivals_at_the_rate_all_pass_despite_float_rounding():
    """One arrival every 1 / rate seconds finds one whole token each time: ten refills of
    0.1 token sum to 0.9999999999999999 in floats, which must still pass."""
    bucket = TokenBucket(rate_per_s=10.0, burst=1)
    assert all(bucket.take(k * 0.1) for k in range(100))
    assert not bucket.take(99 * 0.1)                         # a second one at the same instant


def test_an_idle_bucket_refills_to_its_burst_only():
    bucket = TokenBucket(rate_per_s=1.0, burst=3)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]


def _replica(waiting: int):
    return SimpleNamespace(num_waiting=waiting)


def test_the_gate_rate_limits_first_then_counts_what_waits():
    gate = RouterGate(RateLimitConfig(rate_per_s=1.0, burst=2), max_queued=5)
    assert gate.refusal(0.0, [_replica(1), _replica(2)], held=1) == ""
    reason = gate.refusal(0.0, [_replica(3)], held=2)             # 5 waiting: full
    assert reason.startswith(f"{QUEUE_FULL}: 5 requests wait behind the router")
    reason = gate.refusal(0.0, [], held=0)                        # the bucket is empty now
    assert reason.startswith(f"{RATE_LIMITED}: ") and "1/s, burst 2" in reason
    assert reject_kind(reason) == RATE_LIMITED


def test_requests_in_the_server_path_count_as_waiting_until_a_replica_holds_them():
    """With a server path of 10 ms (SGLang's request_before_s), a burst at one instant
    reaches no replica before the next arrival: the gate counts the ones it passed."""
    gate = RouterGate(None, max_queued=3, before_s=0.01)
    reqs = [Request(i, 0, 0.0, 100, 10) for i in range(5)]
    outcomes = []
    for req in reqs:
        reason = gate.refusal(0.0, [], held=0)
        outcomes.append(reason[:len(QUEUE_FULL)])
        if not reason:
            gate.passed(0.0, req)
    assert outcomes == ["", "", "", QUEUE_FULL, QUEUE_FULL]
    reqs[0].replica = 0                       # reached a replica (now in its num_waiting)
    reqs[1].state = REJECTED                  # refused there
    assert gate.refusal(0.005, [], held=0) == ""
    assert gate.refusal(0.02, [], held=0) == ""      # past the server path: none on the way
