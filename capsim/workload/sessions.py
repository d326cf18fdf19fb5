"""Conversations read from a trace's session ids (the Mooncake format's ``session_id``).

AIPerf's ``mooncake_trace`` dataset (github:ai-dynamo/aiperf
``aiperf/dataset/loader/mooncake_trace.py`` and ``aiperf/dataset/loader/models.py`` at
db4f639) reads an optional ``session_id`` (a string) and ``delay`` (ms to wait before
sending the turn) per line: lines with the same id are one conversation's turns in file
order. A later turn's ``input_length`` (and ``hash_ids``) is its **new** user message:
AIPerf's ``docs/reference/conversation-context-mode.md`` (at 0109a64) replays Mooncake
traces with ``hash_ids`` as ``deltas_without_responses`` (each turn a user-only delta; the
live replies threaded into the history), and ``docs/tutorials/multi-turn.md`` (at a99b8fe)
sends every later turn with the whole history, the delay applied after the previous
reply. (At db4f639 its worker still sent each turn alone; the docstring's example, 300
then 150 tokens, is already a delta.) So a later turn's prompt is its previous turn's
prompt + reply + its own tokens, counted once (:class:`~capsim.sim.request_source.
RequestSource` builds it from the previous turn's tokens), sent ``delay`` after the
previous turn's last token. A delta turn's ``hash_ids`` name blocks that follow its own
conversation's history, which no other request's prefix holds, so they are checked but
not replayed. Dynamo's exporter writes the other form, each turn's whole context
(:func:`_holds_history`): a turn whose ids start with its previous turn's full blocks is
replayed as its ``input_length`` under its own ids. A later turn's ``timestamp`` orders it
(never before its previous turn) and is not replayed: the turn is sent when its previous
turn ends plus ``delay``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.common.schema import MAX_TOKENS
from capsim.scenario.workload import MAX_TURNS
YAML_PATH = "workload.trace.path"
log = logging.getLogger(__name__)
_WARNED: set[str] = set()      # files warned about: a sweep reads one trace once per rate


@dataclass(frozen=True)
class Turn:
    """One line of a trace with session ids (times in ms as the file gives them)."""

    line: int
    session: str | int
    stamp_ms: float | None
    new_tokens: int
    output_tokens: int
    delay_ms: float
    ids: list[int]


def _fail(path: Path, line: int, message: str) -> ScenarioError:
    return ScenarioError(f"line {line}: {message}", file=str(path), path=YAML_PATH)


def check_session_id(value: object, path: Path, line: int) -> str | int:
    """``value`` if it is a string or an integer (a JSON number without a fraction)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _fail(path, line, f"session_id must be a string or an integer, got {value!r:.60}")
    return value


def conversations(turns: list[Turn], path: Path, block_tokens: int) -> dict[str, np.ndarray]:
    """The conversations' rows: first turns by timestamp (stable), each followed by its
    later turns in file order; ``block_tokens``: tokens per hash id.

    Returns:
        Columns of shape ``(N,)``: ``arrival_s`` (s since the earliest first turn; NaN for
        a later turn), ``prompt_tokens`` (a later turn's: previous prompt + reply + new
        tokens, or its ``input_length`` where its ids hold the history: :func:`_holds_history`),
        ``output_tokens``, ``parent`` (row of the previous turn, -1 for a first),
        ``think_s`` (``delay`` / 1000) and ``block_ids`` / ``block_start`` (the ``hash_ids``
        of first turns and of later turns that hold their history; none for the others).

    Raises:
        ScenarioError: a first turn without ``timestamp``, a later turn whose timestamp is
            before its previous turn's, a context above ``MAX_TOKENS`` or a session of more
            than ``MAX_TURNS`` turns (line and key).
    """
    groups: dict[str | int, list[Turn]] = {}
    for t in turns:
        groups.setdefault(t.session, []).append(t)
    for sid, group in groups.items():
        _check_order(sid, group, path)
        if len(group) > MAX_TURNS:      # as for classes[i].conversation: prompts grow per turn
            raise _fail(path, group[MAX_TURNS].line, f"session_id {sid!r} has more than "
                                                     f"{MAX_TURNS:,} turns (turn T's prompt "
                                                     "holds the T - 1 turns before it)")
    _warn_timestamps(groups, path)
    firsts = sorted(groups.values(), key=lambda g: g[0].stamp_ms)    # stable: file order on ties
    t0 = firsts[0][0].stamp_ms
    arrival, prompt, output, parent, think, ids, lengths = [], [], [], [], [], [], []
    for group in firsts:
        named = None                        # the previous turn, where its ids name its prompt
        for k, t in enumerate(group):
            row = len(prompt)
            whole = k == 0 or _holds_history(named, t, block_tokens)
            context = 0 if whole else prompt[row - 1] + output[row - 1]
            if context + t.new_tokens > MAX_TOKENS:
                raise _fail(path, t.line, f"input_length {t.new_tokens} after the {context:,} "
                                          f"tokens of session_id {t.session!r} so far exceeds "
                                          f"{MAX_TOKENS:,} tokens")
            arrival.append((t.stamp_ms - t0) / 1000.0 if k == 0 else np.nan)
            prompt.append(context + t.new_tokens)
            output.append(t.output_tokens)
            parent.append(-1 if k == 0 else row - 1)
            think.append(0.0 if k == 0 else t.delay_ms / 1000.0)
            own = t.ids if whole else []
            named = t if whole and own else None
            ids.extend(own)
            lengths.append(len(own))
    return {"arrival_s": np.array(arrival), "prompt_tokens": np.array(prompt, dtype=np.int64),
            "output_tokens": np.array(output, dtype=np.int64),
            "parent": np.array(parent, dtype=np.int32), "think_s": np.array(think),
            "block_ids": np.array(ids, dtype=np.int64),
            "block_start": np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)}


def _holds_history(previous: Turn | None, turn: Turn, block_tokens: int) -> bool:
    """Whether ``turn``'s ``input_length`` already holds its conversation's history: its
    ``hash_ids`` start with every full block of ``previous``'s prompt (``previous``: the
    turn before, where its ids name its whole prompt), as Dynamo's trace exporter writes
    them (``benchmarks/coding/mooncake.py`` at 20f9cbf hashes each turn's whole context,
    ``benchmarks/coding/claude_parser.py`` at a1ed71e). Otherwise the turn is a delta,
    as AIPerf reads it; so is one after a previous turn of less than one block, whose ids
    cannot tell."""
    if previous is None:
        return False
    full = min(previous.new_tokens // block_tokens, len(previous.ids))
    return full > 0 and turn.ids[:full] == previous.ids[:full]


def _check_order(sid: str | int, group: list[Turn], path: Path) -> None:
    if group[0].stamp_ms is None:
        raise _fail(path, group[0].line, f"the first turn of session_id {sid!r} needs a "
                                         "timestamp (ms); later turns may give delay instead")
    last = group[0]
    for t in group[1:]:
        if t.stamp_ms is not None:
            if t.stamp_ms < last.stamp_ms:
                raise _fail(path, t.line, f"timestamp {t.stamp_ms:g} is before the previous "
                                          f"turn of session_id {sid!r} (line {last.line}, "
                                          f"{last.stamp_ms:g}); a conversation's turns are in "
                                          "file order")
            last = t


def _warn_timestamps(groups: dict[str | int, list[Turn]], path: Path) -> None:
    """Warns once per file where a later turn has a timestamp and no delay."""
    if str(path) in _WARNED:
        return
    for sid, group in groups.items():
        t = next((t for t in group[1:] if t.stamp_ms is not None and t.delay_ms == 0), None)
        if t is not None:
            _WARNED.add(str(path))
            log.warning(f"{path}: line {t.line}: a later turn of session_id {sid!r} is sent "
                        "when its previous turn ends plus delay (ms, 0 when absent); its "
                        "timestamp only orders it")
            return
