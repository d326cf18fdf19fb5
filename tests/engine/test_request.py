"""A request's state: plain numbers the schedulers move along."""

from __future__ import annotations

from capsim.engine.request import Request


def test_request_state_is_plain():
    r = Request(0, 0, 0.0, 10, 5)
    assert r.total_tokens == 14 and r.remaining_to_compute == 10
