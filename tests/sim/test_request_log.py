"""Requests built from the trace on demand; their outcomes logged in numpy columns."""

from __future__ import annotations

import math

import numpy as np

from capsim.engine.request import FINISHED, REJECTED, Request
from capsim.kv.prefix import OUTPUT, PREFIX, USER
from capsim.sim.request_log import RequestLog
from capsim.sim.request_source import RequestSource
from capsim.results.model import RequestRecords
from capsim.workload import RequestTrace


def conversation_trace() -> RequestTrace:
    """Rows: 0 a first turn with a 300-token shared prefix, 1 a plain first turn with
    n = 2, 2 the next turn after 0, 3 the next after 2, 4 a second next turn after 0."""
    return RequestTrace(
        arrival_s=np.array([0.0, 0.5, np.nan, np.nan, np.nan]),
        prompt_tokens=np.array([340, 80, 340 + 64 + 20, 424 + 32 + 10, 340 + 64 + 5]),
        output_tokens=np.array([64, 16, 32, 8, 4]),
        class_id=np.array([0, 1, 0, 0, 0], np.int32),
        prefix_id=np.array([7, -1, 7, 7, 7], np.int32),
        prefix_tokens=np.array([300, 0, 300, 300, 300]),
        parent=np.array([-1, -1, 0, 2, 0], np.int32),
        think_s=np.array([0.0, 0.0, 1.5, 2.0, 0.5]),
        n=np.array([1, 2, 1, 1, 1], np.int32),
        class_names=("chat", "rag"))


def test_roots_are_built_with_their_prefix_and_marked_shareable_when_they_have_turns():
    src = RequestSource(conversation_trace())
    assert src.roots.tolist() == [0, 1]
    assert src.has_children.tolist() == [True, False, True, False, False]
    first = src.root(0)
    assert (first.rid, first.class_id, first.arrival_s, first.prompt_tokens,
            first.output_tokens, first.n) == (0, 0, 0.0, 340, 64, 1)
    assert first.segments == ((PREFIX, 7, 300), (USER, 0, 40), (OUTPUT, 0, 64))
    assert first.shareable                         # row 0 has later turns
    plain = src.root(1)
    assert plain.segments == ((USER, 1, 80), (OUTPUT, 1, 16))
    assert plain.n == 2 and plain.shareable        # n > 1 shares the prompt's blocks
    assert type(first.prompt_tokens) is int and type(first.arrival_s) is float


def test_later_turns_extend_the_previous_turns_tokens():
    src = RequestSource(conversation_trace())
    first = src.root(0)
    turns = src.next_turns(first)
    assert [t.rid for t in turns] == [2, 4]        # rows ascending
    two, four = turns
    assert two.segments == ((PREFIX, 7, 300), (USER, 0, 40), (OUTPUT, 0, 64), (USER, 2, 20),
                            (OUTPUT, 2, 32))
    assert four.segments[-2:] == ((USER, 4, 5), (OUTPUT, 4, 4))
    assert math.isnan(two.arrival_s) and two.shareable and four.shareable
    three, = src.next_turns(two)
    assert three.segments[-2:] == ((USER, 3, 10), (OUTPUT, 3, 8))
    assert src.next_turns(three) == [] and src.next_turns(src.root(1)) == []


def ended(rid: int, state: str, out: int, generated: int, **kw) -> Request:
    req = Request(rid, 0, 1.0 + rid, 100, out)
    req.state, req.num_generated = state, generated
    for k, v in kw.items():
        setattr(req, k, v)
    return req


def test_log_writes_each_outcome_by_rid_and_builds_the_records():
    trace = conversation_trace()
    log = RequestLog(len(trace))
    log.record(ended(3, FINISHED, 8, 8, replica=1, first_scheduled_s=4.1, first_token_s=4.2,
                     finish_s=4.9, num_preemptions=2, max_itl_s=0.15))
    log.record(ended(1, REJECTED, 16, 0, n=2, reject_reason="too long"))
    for rid in (0, 2, 4):
        log.record(ended(rid, FINISHED, int(trace.output_tokens[rid]),
                         int(trace.output_tokens[rid]), replica=0, first_token_s=1.0,
                         finish_s=2.0, max_itl_s=0.5))
    assert log.problems() == []
    assert log.written == 5
    assert log.gaps_expected == 63 + 31 + 7 + 3    # finished: output − 1 each (n = 1)
    rec = log.records(trace)
    assert isinstance(rec, RequestRecords)
    assert rec.request_id.tolist() == [0, 1, 2, 3, 4]
    assert rec.status.tolist() == ["finished", "rejected", "finished", "finished", "finished"]
    assert rec.reject_reason.tolist() == ["", "too long", "", "", ""]
    assert rec.replica.tolist() == [0, -1, 0, 1, 0]
    assert rec.arrival_s.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert (rec.first_token_s[3], rec.finish_s[3], rec.max_itl_s[3]) == (4.2, 4.9, 0.15)
    assert np.isnan(rec.first_token_s[1]) and rec.num_preemptions.tolist() == [0, 0, 0, 2, 0]
    assert rec.prompt_tokens.tolist() == [340, 80, 424, 466, 409]       # the trace's columns
    assert rec.n.tolist() == [1, 2, 1, 1, 1] and rec.class_id.tolist() == [0, 1, 0, 0, 0]


def test_log_reports_lost_tokens_double_ends_and_requests_that_never_ended():
    log = RequestLog(4)
    log.record(ended(0, FINISHED, 10, 9))
    log.record(ended(0, FINISHED, 10, 10))
    log.record(ended(2, "running", 10, 3))
    assert log.problems() == ["request 0 emitted 9 of 10 tokens", "request 0 ended twice",
                              "request 2 ended running, neither finished nor rejected",
                              "request 1 neither finished nor rejected (1 of 4 requests ended)"]
    assert log.gaps_expected == 9


def test_parallel_samples_count_their_gaps():
    log = RequestLog(1)
    log.record(ended(0, FINISHED, 50, 50, n=4, first_token_s=1.0, finish_s=2.0, max_itl_s=0.1))
    assert log.gaps_expected == 4 * 49


def test_a_longest_gap_outside_tpot_and_e2el_minus_ttft_is_reported():
    """A request's gaps, timed at the client, add up to E2EL − TTFT (first token at 1 s, last
    at 2 s, 11 tokens: TPOT 0.1 s), so its longest is in [0.1, 1] s. 1.2 s is what a V0
    first gap timed from the engine's step instead of the client would give a 2-token reply
    whose first token waited 0.2 s (capsim/engine/first_token.py); 0.05 s: below its TPOT;
    a finished reply with no recorded gap is reported too."""
    log = RequestLog(5)
    log.record(ended(0, FINISHED, 11, 11, first_token_s=1.0, finish_s=2.0, max_itl_s=0.1))
    log.record(ended(1, FINISHED, 2, 2, first_token_s=1.0, finish_s=2.0, max_itl_s=1.0))
    log.record(ended(2, FINISHED, 2, 2, first_token_s=1.0, finish_s=2.0, max_itl_s=1.2))
    log.record(ended(3, FINISHED, 11, 11, first_token_s=1.0, finish_s=2.0, max_itl_s=0.05))
    log.record(ended(4, FINISHED, 11, 11, first_token_s=1.0, finish_s=2.0))
    assert log.problems() == [
        "request 2: longest gap 1.2 s outside [TPOT 1 s, E2EL − TTFT 1 s]",
        "request 3: longest gap 0.05 s outside [TPOT 0.1 s, E2EL − TTFT 1 s]",
        "request 4: longest gap nan s outside [TPOT 0.1 s, E2EL − TTFT 1 s]"]


def test_a_one_token_reply_has_no_gap_to_check():
    log = RequestLog(1)
    log.record(ended(0, FINISHED, 1, 1, first_token_s=1.0, finish_s=1.0))
    assert log.problems() == []
