"""The Mooncake trace format: requests that carry their prompt's block hashes.

Mooncake's FAST '25 release (github:kvcache-ai/Mooncake, ``FAST25-release/traces/``
``conversation_trace.jsonl``, ``toolagent_trace.jsonl``, ``synthetic_trace.jsonl``; the
format is described in its ``FAST25-release/README.md`` and read by Dynamo's and AIPerf's
``mooncake_trace`` datasets) is JSON Lines, one request per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is milliseconds since the trace's start; ``hash_ids`` names the prompt's blocks
of :data:`MOONCAKE_BLOCK_TOKENS` tokens, the last one partial: two requests hold the same
tokens exactly where their leading ids agree (the ids are chained, as a prefix cache's
hashes are). capsim replays each id as a segment of that many tokens
(:data:`capsim.kv.prefix.BLOCK`), so prefix caches and routers see the trace's own sharing
at capsim's block size.

Optional ``session_id`` (string or integer, AIPerf's key) and ``delay`` (ms) make the
lines conversations: :mod:`capsim.workload.sessions`. Then ``hash_ids`` may be left out,
a later turn needs no ``timestamp``, and every line must carry an id.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.common.schema import MAX_SECONDS, MAX_TOKENS
from capsim.workload.sessions import Turn, check_session_id, conversations

#: Tokens per Mooncake hash id, the FAST '25 release's block size: its README's samples
#: (kvcache-ai/Mooncake ``FAST25-release/README.md`` at 40ea55f) carry ⌈input_length / 512⌉
#: ids (6,955 tokens → 14 ids, 6,472 → 13).
MOONCAKE_BLOCK_TOKENS = 512

_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
_SESSION_KEYS = ("session_id", "input_length", "output_length")   # AIPerf's multi-turn lines
YAML_PATH = "workload.trace.path"
#: Every key a line may carry: the Mooncake release's and AIPerf's multi-turn ones.
_KNOWN = frozenset(_KEYS + _SESSION_KEYS + ("delay",))
#: Trace files whose unread keys were already warned about (once per file and process).
_WARNED: set[str] = set()
log = logging.getLogger(__name__)
#: The hash ids capsim can hold: numpy int64's range (a larger id overflowed there).
_ID_RANGE = (-2**63, 2**63 - 1)
#: The latest ``timestamp`` or longest ``delay``, ms: the schema's :data:`MAX_SECONDS`.
_MAX_MS = MAX_SECONDS * 1000.0


def _fail(path: Path, line: int, message: str) -> ScenarioError:
    return ScenarioError(f"line {line}: {message}", file=str(path), path=YAML_PATH)


def _count(record: dict, key: str, lowest: int, path: Path, line: int) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= MAX_TOKENS:
        raise _fail(path, line, f"{key} must be a whole number of tokens in [{lowest}, "
                                f"{MAX_TOKENS:,}], got {value!r}")
    return value


def _row(text: str, path: Path, line: int) -> Turn:
    """One line; ``session`` None where it has no ``session_id``."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(path, line, f"not JSON ({err.msg}); a Mooncake trace holds one JSON "
                                "object per line") from None
    if not isinstance(record, dict):
        raise _fail(path, line, f"expected a JSON object with {', '.join(_KEYS)}")
    extra = sorted(set(record) - _KNOWN)
    if extra and str(path) not in _WARNED:
        # a misspelt key (delay_ms) would otherwise be dropped unread
        _WARNED.add(str(path))
        log.warning(f"{path}: line {line}: {', '.join(extra)} not read (a Mooncake line's "
                    f"keys: {', '.join(sorted(_KNOWN))})")
    session = record.get("session_id")
    if "session_id" in record:
        session = check_session_id(session, path, line)
    needed = _KEYS if session is None else _SESSION_KEYS
    missing = [k for k in needed if k not in record]
    if missing:
        raise _fail(path, line, f"missing {', '.join(missing)} (a Mooncake trace line has "
                                f"{', '.join(needed)})")
    stamp = _millis(record, "timestamp", path, line)
    delay = _millis(record, "delay", path, line)
    if delay is not None and session is None:
        # a think time between turns: without a conversation it would be dropped unread
        raise _fail(path, line, "delay is the think time before a conversation's next turn: "
                                "it needs a session_id (on every line of the trace)")
    prompt = _count(record, "input_length", 1, path, line)
    output = _count(record, "output_length", 0, path, line)
    ids = record.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                            and _ID_RANGE[0] <= h <= _ID_RANGE[1] for h in ids):
        raise _fail(path, line, f"hash_ids must be a list of integers in [{_ID_RANGE[0]}, "
                                f"{_ID_RANGE[1]}], got {ids!r:.60}")
    if len(ids) > -(-prompt // MOONCAKE_BLOCK_TOKENS):
        raise _fail(path, line, f"{len(ids)} hash_ids for input_length {prompt}: at most "
                                f"{-(-prompt // MOONCAKE_BLOCK_TOKENS)} blocks of "
                                f"{MOONCAKE_BLOCK_TOKENS} tokens")
    return Turn(line, session, stamp, prompt, max(output, 1), delay or 0.0, ids)


def _millis(record: dict, key: str, path: Path, line: int) -> float | None:
    """``record[key]`` as milliseconds >= 0, None where the line has no such key."""
    if key not in record:
        return None
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value <= _MAX_MS:
        raise _fail(path, line, f"{key} must be milliseconds in [0, {_MAX_MS:g}], got "
                                f"{value!r}")
    return float(value)


def read_mooncake(path: Path) -> dict[str, np.ndarray]:
    """The trace's columns, in arrival order: ``arrival_s`` (s since the earliest request,
    trace time: the caller applies ``rate_scale`` and ``schedule``), ``prompt_tokens``, ``output_tokens`` (0 replayed as 1, as a
    CSV trace's), ``block_ids`` (every request's hash ids, concatenated) and
    ``block_start`` (``(N + 1,)``: request i's ids are ``block_ids[block_start[i]:
    block_start[i + 1]]``); with ``session_id``: also ``parent`` and ``think_s``, later turns'
    ``arrival_s`` NaN (:func:`capsim.workload.sessions.conversations`).

    Raises:
        ScenarioError: the file missing, or a line that is not a Mooncake record (its
            1-based number and what is wrong: a ``session_id`` on some lines only, not a
            string or integer, a turn timestamped before its previous turn), or no request.
    """
    if not path.is_file():
        raise ScenarioError(f"trace file not found: {path}", file=str(path), path=YAML_PATH)
    rows = []
    try:
        with path.open("rb") as f:        # bytes: a line that is not UTF-8 is named
            for line, raw in enumerate(f, start=1):
                text = _utf8(raw, path, line)
                if text.strip():
                    rows.append(_row(text, path, line))
    except OSError as exc:
        raise ScenarioError(f"cannot read the trace: {exc.strerror or exc}", file=str(path),
                            path=YAML_PATH) from None
    if not rows:
        raise ScenarioError("the Mooncake trace holds no request", file=str(path),
                            path=YAML_PATH)
    if any(r.session is not None for r in rows):
        _all_or_none(rows, path)
        return conversations(rows, path, MOONCAKE_BLOCK_TOKENS)
    stamps = np.array([r.stamp_ms for r in rows])
    order = np.argsort(stamps, kind="stable")
    rows = [rows[i] for i in order]
    lengths = np.array([len(r.ids) for r in rows], dtype=np.int64)
    return {"arrival_s": (stamps[order] - stamps.min()) / 1000.0,
            "prompt_tokens": np.array([r.new_tokens for r in rows], dtype=np.int64),
            "output_tokens": np.array([r.output_tokens for r in rows], dtype=np.int64),
            "block_ids": np.array([h for r in rows for h in r.ids], dtype=np.int64),
            "block_start": np.concatenate(([0], np.cumsum(lengths)))}


def _utf8(raw: bytes, path: Path, line: int) -> str:
    """Line ``line``'s text, or ScenarioError naming it when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                            f"column {exc.start + 1}); a Mooncake trace is UTF-8 JSON Lines",
                            file=str(path), path=YAML_PATH) from None


def _all_or_none(rows: list[Turn], path: Path) -> None:
    """Refuses a trace where some lines carry ``session_id`` and others do not."""
    has = next(r for r in rows if r.session is not None)
    lacks = next((r for r in rows if r.session is None), None)
    if lacks is not None:
        raise _fail(path, lacks.line, f"no session_id, but line {has.line} has one; give "
                                      "every line a session_id (one per conversation) or none")


def block_segments(ids: np.ndarray, prompt: int, rid: int, block: int, user: int
                   ) -> tuple[tuple[int, int, int], ...]:
    """A request's prompt as segments: one ``(block, id, tokens)`` per hash id (512 tokens,
    the last what is left of ``prompt``), then ``(user, rid, rest)`` for prompt tokens past
    the ids (none in the release's traces)."""
    segs = []
    left = prompt
    for h in ids.tolist():
        n = min(MOONCAKE_BLOCK_TOKENS, left)
        segs.append((block, h, n))
        left -= n
    if left > 0:
        segs.append((user, rid, left))
    return tuple(segs)
