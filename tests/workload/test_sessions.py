"""Conversations read from a Mooncake-format trace's ``session_id`` (AIPerf's multi-turn
lines, ``aiperf/dataset/loader/mooncake_trace.py`` at db4f639), from samples written here:
a later turn's ``input_length`` is its new message, its prompt the previous turn's prompt
+ reply + that message, sent ``delay`` ms after the previous turn's last token."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.kv.prefix import OUTPUT, USER
from capsim.scenario.workload import WorkloadConfig
from capsim.sim.request_source import RequestSource
from capsim.workload.build import build

#: AIPerf's docstring example (300 then 150 tokens, delay 2 ms) as session "abc-123",
#: an integer session that starts first, and a third turn of "abc-123".
SAMPLE = [
    {"session_id": "abc-123", "timestamp": 1000, "input_length": 300, "output_length": 40},
    {"session_id": 7, "timestamp": 500, "input_length": 1100, "output_length": 10,
     "hash_ids": [1, 2, 3]},
    {"session_id": "abc-123", "delay": 2, "input_length": 150, "output_length": 20},
    {"session_id": 7, "delay": 1500, "timestamp": 4000, "input_length": 60, "output_length": 5},
    {"session_id": "abc-123", "input_length": 30, "output_length": 0},
]


def _write(tmp_path: Path, rows, name="trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows))
    return path


def _wl(path: Path, **kw) -> WorkloadConfig:
    return WorkloadConfig.model_validate({"trace": {"path": str(path), "format": "mooncake"},
                                          **kw})


def test_rows_of_one_session_are_a_conversation_in_file_order(tmp_path):
    """Session 7 starts first (500 ms): its rows, then abc-123's. Turn 2 of abc-123 holds
    300 + 40 + 150 = 490 tokens, turn 3 490 + 20 + 30 = 540; session 7's turn 2 holds
    1100 + 10 + 60."""
    trace = build(_wl(_write(tmp_path, SAMPLE)), 0, tmp_path)
    assert trace.parent.tolist() == [-1, 0, -1, 2, 3]
    assert trace.prompt_tokens.tolist() == [1100, 1170, 300, 490, 540]
    assert trace.output_tokens.tolist() == [10, 5, 40, 20, 1]        # 0 replayed as 1
    assert trace.think_s.tolist() == pytest.approx([0.0, 1.5, 0.0, 0.002, 0.0])
    assert trace.arrival_s[[0, 2]].tolist() == pytest.approx([0.0, 0.5])
    assert np.isnan(trace.arrival_s[[1, 3, 4]]).all()
    assert trace.block_start.tolist() == [0, 3, 3, 3, 3, 3]          # first turns' hash_ids


def test_a_later_turn_is_its_history_plus_its_new_message_counted_once(tmp_path):
    source = RequestSource(build(_wl(_write(tmp_path, SAMPLE)), 0, tmp_path))
    first = source.root(2)
    assert first.shareable                        # its prompt + reply are turn 2's prefix
    (second,) = source.next_turns(first)
    assert second.rid == 3 and second.conversation == 2
    assert second.segments == ((USER, 2, 300), (OUTPUT, 2, 40), (USER, 3, 150),
                               (OUTPUT, 3, 20))
    assert sum(n for _, _, n in second.segments[:-1]) == second.prompt_tokens == 490


def test_rate_scale_and_duration_apply_to_first_turns(tmp_path):
    """rate_scale 2 halves the gap between first turns, not the think time; duration_s
    0.4 s keeps session 7 whole (first turn at 0), num_requests 4 the first four rows."""
    path = _write(tmp_path, SAMPLE)
    fast = build(WorkloadConfig.model_validate(
        {"trace": {"path": str(path), "format": "mooncake", "rate_scale": 2.0}}), 0, tmp_path)
    assert fast.arrival_s[2] == pytest.approx(0.25) and fast.think_s[1] == pytest.approx(1.5)
    short = build(_wl(path, duration_s=0.4), 0, tmp_path)
    assert short.parent.tolist() == [-1, 0]
    four = build(_wl(path, num_requests=4), 0, tmp_path)
    assert four.parent.tolist() == [-1, 0, -1, 2]


@pytest.mark.parametrize("rows, words", [
    ([SAMPLE[0], {"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": []}],
     "line 2: no session_id, but line 1 has one"),
    ([{"session_id": 1.5, "timestamp": 5, "input_length": 10, "output_length": 2}],
     "line 1: session_id must be a string or an integer, got 1.5"),
    ([{"session_id": ["a"], "timestamp": 5, "input_length": 10, "output_length": 2}],
     "line 1: session_id must be a string or an integer"),
    ([{"session_id": True, "timestamp": 5, "input_length": 10, "output_length": 2}],
     "line 1: session_id must be a string or an integer, got True"),
    ([SAMPLE[0], dict(SAMPLE[2], timestamp=900)],
     "line 2: timestamp 900 is before the previous turn of session_id 'abc-123' (line 1"),
    ([SAMPLE[2]], "line 1: the first turn of session_id 'abc-123' needs a timestamp"),
    ([SAMPLE[0], dict(SAMPLE[2], delay=-1)], "line 2: delay must be milliseconds in [0, "
                                             "1e+12], got -1"),
    ([SAMPLE[0], dict(SAMPLE[2], delay=1e300)], "line 2: delay must be milliseconds in [0, "
                                                "1e+12], got 1e+300"),
    ([{"session_id": "s", "timestamp": 5, "output_length": 2}], "line 1: missing input_length"),
    # 100,000 turns of one session ran past a minute; classes[i].conversation caps turns.
    ([SAMPLE[0]] + [SAMPLE[2]] * 1000, "line 1001: session_id 'abc-123' has more than 1,000 "
                                       "turns"),
])
def test_bad_session_lines_are_one_error_naming_file_line_and_key(tmp_path, rows, words):
    path = _write(tmp_path, rows)
    with pytest.raises(ScenarioError) as err:
        build(_wl(path), 0, tmp_path)
    assert err.value.path == "workload.trace.path" and err.value.file == str(path)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_later_turns_timestamp_without_delay_is_warned_not_replayed(tmp_path, caplog):
    """The turn is sent when its previous turn ends (think time 0), not at 3 s."""
    path = _write(tmp_path, [SAMPLE[0], {"session_id": "abc-123", "timestamp": 3000,
                                         "input_length": 150, "output_length": 20}])
    trace = build(_wl(path), 0, tmp_path)
    assert trace.think_s.tolist() == [0.0, 0.0] and np.isnan(trace.arrival_s[1])
    assert "line 2: a later turn of session_id 'abc-123' is sent when its previous turn " \
           "ends plus delay" in caplog.text
    caplog.clear()
    build(_wl(path), 0, tmp_path)
    assert caplog.text == ""                                  # once per file


#: Dynamo's exporter's form (benchmarks/coding/mooncake.py at 20f9cbf): each turn's
#: input_length and hash_ids cover its whole context, so a later turn's ids start with the
#: previous turn's full blocks; a turn after one of less than a block is read as a delta.
WHOLE = [
    {"session_id": "d", "timestamp": 0, "input_length": 1100, "output_length": 50,
     "hash_ids": [1, 2, 3]},
    {"session_id": "d", "delay": 500, "input_length": 1300, "output_length": 50,
     "hash_ids": [1, 2, 4]},
    {"session_id": "d", "delay": 500, "input_length": 200, "output_length": 50,
     "hash_ids": [9]},
    {"session_id": "d", "delay": 500, "input_length": 100, "output_length": 50,
     "hash_ids": [9]},
]


def test_a_turn_whose_ids_start_with_the_previous_turns_holds_its_history(tmp_path):
    """Turn 2 holds 1,300 tokens (not 1,100 + 50 + 1,300) and shares the first two 512-token
    blocks with turn 1; turn 3's ids [9] do not start with [1, 2] (a delta, e.g. after a
    compaction: 1,300 + 50 + 200); turn 4 follows a delta turn, so it is one too."""
    trace = build(_wl(_write(tmp_path, WHOLE)), 0, tmp_path)
    assert trace.prompt_tokens.tolist() == [1100, 1300, 1550, 1700]
    assert trace.block_start.tolist() == [0, 3, 6, 6, 6]
    source = RequestSource(trace)
    first = source.root(0)
    (second,) = source.next_turns(first)
    assert [s[:2] for s in second.segments[:-1]] == [(first.segments[0][0], h)
                                                     for h in (1, 2, 4)]
    assert second.segments[:2] == first.segments[:2]              # 1,024 tokens shared
    (third,) = source.next_turns(second)
    assert third.segments[:-2] == second.segments                 # history + reply, then own
    assert third.segments[-2] == (USER, 2, 200)


def test_a_closed_loop_over_conversations_is_refused(tmp_path):
    wl = _wl(_write(tmp_path, SAMPLE), arrival={"process": "concurrency", "users": 2})
    with pytest.raises(ScenarioError) as err:
        build(wl, 0, tmp_path)
    assert err.value.path == "workload.arrival" and "carry session_id" in str(err.value)
