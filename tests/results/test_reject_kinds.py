"""Kinds of rejection (capsim.results.model.reject_kind): every reason capsim writes falls in
the kind its column counts."""

from __future__ import annotations

import pytest

from capsim.results.model import REJECT_KINDS, ROUTER_TIMEOUT_REASON, reject_kind


@pytest.mark.parametrize("reason,kind", [
    # engine/cluster.py colocated_reject_reason, engine/disagg.py reject_reason,
    # engine/pooled.py: what no replica could ever serve
    ("prompt + output = 5020 tokens exceeds max_model_len 4096", "never_fits"),
    ("its 9000-token prompt exceeds max_num_batched_tokens 8192 without chunked prefill",
     "never_fits"),
    ("reserves 2048 KV tokens; the whole cache has 1024", "never_fits"),
    ("needs 700 KV blocks; the whole cache has 512", "never_fits"),
    ("parallel sampling (n > 1) needs the paged KV allocator", "never_fits"),
    ("its prompt needs 90 KV blocks; a prefill replica has 64", "never_fits"),
    ("no pool serving this request's model has a replica", "never_fits"),
    # engine/replica.py Replica.refusal, engine/router.py RouterGate.refusal
    ("queue_full: 8 requests wait at replica 0 (engine.max_waiting_requests 8)", "queue_full"),
    ("queue_full: 4 requests in flight at replica 2 (engine.max_inflight_requests 4)",
     "queue_full"),
    ("queue_full: 10 requests wait behind the router (cluster.router_max_queued_requests 10)",
     "queue_full"),
    ("rate_limited: the router's token bucket is empty (cluster.router_rate_limit: 5/s, "
     "burst 10)", "rate_limited"),
    # engine/fleet.py: a failure (in_flight: fail) and the router's timeout
    ("its replica 0 failed at 200.0 s", "lost"),
    (f"{ROUTER_TIMEOUT_REASON} after 60 s (no replica serving; cluster.router_queue_timeout_s)",
     "timed_out"),
    # sim/traffic.py: a later turn of a rejected conversation
    ("the previous turn of its conversation was rejected", "previous_turn"),
    ("", ""),
])
def test_each_reason_has_its_kind(reason, kind):
    assert reject_kind(reason) == kind
    assert kind in REJECT_KINDS or not reason
