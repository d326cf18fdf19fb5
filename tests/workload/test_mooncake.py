"""The Mooncake trace format (kvcache-ai/Mooncake FAST25-release, ``*_trace.jsonl``: timestamp
ms, input_length, output_length, hash_ids of 512-token blocks), read from a small sample written
here: its requests carry their blocks, so two requests share KV exactly where their leading
hash ids agree."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.engine.cache_router import prompt_hashes
from capsim.scenario.workload import WorkloadConfig
from capsim.sim.request_source import RequestSource
from capsim.workload.build import build

#: The README's two samples (FAST25-release/README.md at 40ea55f), a third request sharing
#: nothing, and one out of order (replayed by its timestamp).
SAMPLE = [
    {"timestamp": 27482, "input_length": 6955, "output_length": 52,
     "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]},
    {"timestamp": 30535, "input_length": 6472, "output_length": 26,
     "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2366]},
    {"timestamp": 31000, "input_length": 600, "output_length": 0, "hash_ids": [9000, 9001]},
    {"timestamp": 28000, "input_length": 1024, "output_length": 10, "hash_ids": [46, 47]},
]


def _write(tmp_path: Path, rows, name="trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows))
    return path


def _wl(path: Path, **kw) -> WorkloadConfig:
    return WorkloadConfig.model_validate({"trace": {"path": str(path), "format": "mooncake",
                                                    **kw}})


def test_rows_arrive_by_timestamp_with_their_blocks(tmp_path):
    trace = build(_wl(_write(tmp_path, SAMPLE)), 0, tmp_path)
    assert trace.arrival_s.tolist() == pytest.approx([0.0, 0.518, 3.053, 3.518])
    assert trace.prompt_tokens.tolist() == [6955, 1024, 6472, 600]
    assert trace.output_tokens.tolist() == [52, 10, 26, 1]           # 0 replayed as 1
    assert trace.block_start.tolist() == [0, 14, 16, 29, 31]
    assert trace.block_ids[14:16].tolist() == [46, 47]
    half = build(_wl(_write(tmp_path, SAMPLE), rate_scale=2.0), 0, tmp_path)
    assert half.arrival_s.tolist() == pytest.approx([0.0, 0.259, 1.5265, 1.759])


def test_requests_share_kv_where_their_hash_ids_agree(tmp_path):
    """The README's two requests share 12 ids = 6,144 tokens = 384 blocks of 16; the third
    shares none; the 1,024-token request matches the first's first 64 blocks."""
    trace = build(_wl(_write(tmp_path, SAMPLE)), 0, tmp_path)
    source = RequestSource(trace)
    a, short, b, other = (prompt_hashes(source.root(i), 16) for i in range(4))
    assert (len(a), len(b)) == (6955 // 16, 6472 // 16)
    assert sum(x == y for x, y in zip(a, b)) == 384 and a[:384] == b[:384]
    assert short == a[:64]
    assert not set(other) & set(a)
    assert source.root(0).shareable


def test_num_requests_and_duration_keep_the_first_rows(tmp_path):
    path = _write(tmp_path, SAMPLE)
    wl = WorkloadConfig.model_validate({"trace": {"path": str(path), "format": "mooncake"},
                                        "num_requests": 2})
    two = build(wl, 0, tmp_path)
    assert len(two) == 2 and two.block_start.tolist() == [0, 14, 16]
    assert len(two.block_ids) == 16


@pytest.mark.parametrize("line, words", [
    ('{"timestamp": 1, "input_length": 10, "output_length": 2}', "line 2: missing hash_ids"),
    ('{"timestamp": 1, "input_length": 0, "output_length": 2, "hash_ids": []}',
     "line 2: input_length must be a whole number of tokens in [1,"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 2, "hash_ids": [1]}',
     "line 2: timestamp must be milliseconds in [0, 1e+12], got -5"),
    # 1e300 ms passed and ended a run in an IndexError; an id past int64 in an OverflowError.
    ('{"timestamp": 1e300, "input_length": 10, "output_length": 2, "hash_ids": [1]}',
     "line 2: timestamp must be milliseconds in [0, 1e+12], got 1e+300"),
    ('{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [%d]}' % 2**63,
     "line 2: hash_ids must be a list of integers in [-9223372036854775808, "
     "9223372036854775807], got [9223372036854775808]"),
    ('{"timestamp": 1, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}',
     "line 2: 3 hash_ids for input_length 600: at most 2 blocks of 512 tokens"),
    ('{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": "1"}',
     "line 2: hash_ids must be a list of integers"),
    ("timestamp,input_length", "line 2: not JSON"),
    # a delay without a session_id was dropped unread (AIPerf's key for a turn's think time)
    ('{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1], "delay": 50}',
     "line 2: delay is the think time before a conversation's next turn: it needs a "
     "session_id"),
])
def test_a_bad_line_is_one_error_naming_file_line_and_key(tmp_path, line, words):
    path = _write(tmp_path, [SAMPLE[0], line])
    with pytest.raises(ScenarioError) as err:
        build(_wl(path), 0, tmp_path)
    assert err.value.path == "workload.trace.path" and err.value.file == str(path)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_line_that_is_not_utf8_is_named_not_a_traceback(tmp_path):
    """A bad-input sweep's trace with a Latin-1 byte ended in a UnicodeDecodeError."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(json.dumps(SAMPLE[0]).encode() + b'\n{"timestamp": 1, "x": "\xff"}\n')
    with pytest.raises(ScenarioError) as err:
        build(_wl(path), 0, tmp_path)
    assert err.value.path == "workload.trace.path"
    assert str(err.value).endswith("line 2: not UTF-8 text (byte 0xff at column 24); a "
                                   "Mooncake trace is UTF-8 JSON Lines")


def test_columns_do_not_apply_to_a_mooncake_trace(tmp_path):
    with pytest.raises(ValueError, match="format: mooncake reads its own keys"):
        _wl(tmp_path / "t.jsonl", columns={"arrival": "a", "prompt_tokens": "p",
                                            "output_tokens": "o"})


def test_a_key_capsim_does_not_read_is_warned_once(tmp_path, caplog):
    """A misspelt key (``delay_ms`` for ``delay``) was dropped without a word (a new user's
    bad-input sweep): warned once per file, naming the line, the key and the keys read."""
    extra = '{"timestamp": 300, "input_length": 600, "output_length": 50, "hash_ids": [3, 4], ' \
            '"delay_ms": 500}'
    path = _write(tmp_path, [SAMPLE[0], extra, extra])
    build(_wl(path), 0, tmp_path)
    assert caplog.text.count("not read") == 1
    assert f"{path}: line 2: delay_ms not read (a Mooncake line's keys: delay, hash_ids, " \
           "input_length, output_length, session_id, timestamp)" in caplog.text
