"""A first token that reaches its client late starts its first gap late (vLLM V0's
asynchronous output processing, capsim/engine/first_token.py): ``vllm bench serve`` times
ITL between chunk arrivals at the client, so a token that left X s after its step makes the
next gap X s shorter. :meth:`DecodeSet.delay_last_token` moves a pending member; every
decode set (one token a step, multi-step windows, speculative chunks) records the shorter
gap. Steps here are 1 s long; nothing fitted."""

from __future__ import annotations

import pytest

from capsim.engine.decode_set import DecodeSet
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.spec_decode_set import SpecDecodeSet
from capsim.engine.window_decode_set import WindowDecodeSet


def prefilled(rid: int, output_tokens: int, token_s: float = 1.0) -> Request:
    """A 64-token prompt whose first token its step emitted at ``token_s``."""
    req = Request(rid, 0, 0.0, 64, output_tokens)
    req.num_computed, req.num_generated = 64, 1
    req.first_token_s = req.last_token_s = token_s
    return req


def runs(itl: ItlRecorder) -> list[tuple[float, int]]:
    r = itl.result()
    return [(round(float(g), 12), int(c)) for g, c in zip(r.gap_s, r.count)]


def test_one_token_a_step_the_delayed_member_alone_has_the_shorter_gap():
    """Two first tokens at t 1; one reached its client 0.3 s later. The decode step ending
    at t 2 gives the other a 1 s gap and it 0.7 s, its max_itl_s too (its last token)."""
    itl = ItlRecorder(1)
    ds = DecodeSet(16, 1, itl)
    late, other = prefilled(0, 2), prefilled(1, 3)
    ds.join(late, 1.0)
    ds.join(other, 1.0)
    assert ds.delay_last_token(late, 1.3) is True
    assert late.last_token_s == 1.3
    done = ds.advance((1.0, 2.0))
    assert runs(itl) == [(1.0, 1), (0.7, 1)]
    assert done == [late]
    assert late.max_itl_s == pytest.approx(0.7, abs=1e-12)


def test_a_member_leaving_before_its_first_decode_step_leaves_the_moved_group():
    """Preempted before it decoded: it leaves the pending group it was moved to."""
    itl = ItlRecorder(1)
    ds = DecodeSet(16, 1, itl)
    req = prefilled(0, 5)
    ds.join(req, 1.0)
    ds.delay_last_token(req, 1.25)
    ds.leave(req)
    ds.advance((1.0, 2.0))
    assert runs(itl) == []


def test_nothing_moves_for_a_request_not_pending_here():
    """Never joined, or already decoding (its gap from t 1 recorded at t 2): False, its
    last token time untouched."""
    ds = DecodeSet(16, 1, ItlRecorder(1))
    outsider = prefilled(0, 5)
    assert ds.delay_last_token(outsider, 1.5) is False
    assert outsider.last_token_s == 1.0
    member = prefilled(1, 5)
    ds.join(member, 1.0)
    ds.advance((1.0, 2.0))
    assert ds.delay_last_token(member, 1.5) is False
    assert member.last_token_s == 1.0


def test_a_window_first_chunk_is_shorter_by_the_wait():
    """Windows of 3 steps (ending t 2, 3, 4): the first chunk, 3 tokens at t 4, is 3 s after
    the step's first token and 2.75 s after its client got it 0.25 s late."""
    itl = ItlRecorder(1)
    ds = WindowDecodeSet(16, 1, itl)
    req = prefilled(0, 10)
    ds.join(req, 1.0)
    ds.delay_last_token(req, 1.25)
    for t, end in ((2.0, False), (3.0, False), (4.0, True)):
        ds.window_end = end
        ds.advance((t - 1.0, t))
    assert runs(itl) == [(2.75, 1)]
    assert ds.merged_tokens == 2


def test_a_speculative_chunk_gap_runs_from_the_late_first_token():
    """Verification of 1 + 2 drafts, none accepted (alpha 0): one token at t 2, 0.6 s after
    a first token its client got 0.4 s late."""
    itl = ItlRecorder(1)
    ds = SpecDecodeSet(16, 1, itl, alpha_by_class=(0.0,), seed=1)
    req = prefilled(0, 4)
    ds.join(req, 1.0)
    assert ds.delay_last_token(req, 1.4) is True
    ds.advance_spec(2.0, 3)
    assert runs(itl) == [(0.6, 1)]
