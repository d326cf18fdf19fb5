"""Request objects built from the trace only when the run needs them.

A first turn (``trace.parent < 0``) is built when it arrives; a later turn of
a conversation when the turn before it ends (finished or rejected), from that
turn's token identity. So only the requests in flight exist as objects, not
the whole trace.

Token identity (segments, :mod:`capsim.kv.prefix`): a first turn with a shared
prefix is ``(PREFIX, prefix_id, prefix_tokens), (USER, rid, rest)`` (``(QUESTION,
question_id, rest)`` when it repeats one of its template's questions); a replayed
trace's named blocks are one ``(BLOCK, hash_id, tokens)`` each (the Mooncake trace); a later
turn is its parent's segments (prompt + reply) plus its own new user tokens, or its own
named blocks where a replayed trace names its whole context
(:mod:`capsim.workload.sessions`).
A request that has later turns is marked ``shareable`` from the start (its
prompt + reply are registered in the prefix cache when it finishes).
"""

from __future__ import annotations

import numpy as np

from capsim.engine.request import Request
from capsim.kv.prefix import BLOCK, PREFIX, QUESTION, USER
from capsim.workload import RequestTrace
from capsim.workload.mooncake import block_segments


class RequestSource:
    """Builds the :class:`Request` of trace row ``rid`` on demand.

    Attributes:
        roots: int64 array, the rows of first turns in trace order (non-decreasing
            ``arrival_s``).
        has_children: bool array of length N: row ``i`` has later turns.

    Memory: 1 byte per request, 8 per first turn and 12 per later turn.
    """

    def __init__(self, trace: RequestTrace, class_priority: tuple[int, ...] = (),
                 class_ignore_eos: tuple[bool, ...] = ()):
        self.class_priority = class_priority      # per class id (workload.classes.N.priority)
        self.class_ignore_eos = class_ignore_eos  # per class id (workload.classes.N.ignore_eos)
        self.use(trace)

    def use(self, trace: RequestTrace) -> None:
        """Build requests from ``trace`` (at first, or the same rows and more: a closed loop
        bounded by time drew more rows)."""
        self.trace = trace
        parent = trace.parent
        kids = np.flatnonzero(parent >= 0)
        self._kids = kids[np.argsort(parent[kids], kind="stable")]   # grouped by parent, rows ascending
        self._kid_parent = parent[self._kids]
        self.has_children = np.zeros(len(trace), dtype=bool)
        self.has_children[self._kid_parent] = True
        self.roots = np.flatnonzero(parent < 0)

    def root(self, rid: int) -> Request:
        """The first turn in row ``rid`` (its ``arrival_s`` from the trace)."""
        t = self.trace
        prompt = t.prompt_tokens.item(rid)
        prefix_id = t.prefix_id.item(rid)
        if t.block_start is not None:               # a replayed trace's named blocks
            ids = t.block_ids[t.block_start.item(rid):t.block_start.item(rid + 1)]
            segments = block_segments(ids, prompt, rid, BLOCK, USER) if len(ids) else None
        elif prefix_id >= 0:
            prefix = t.prefix_tokens.item(rid)
            question = t.question_id.item(rid)
            own = (QUESTION, question, prompt - prefix) if question >= 0 else \
                (USER, rid, prompt - prefix)
            segments = ((PREFIX, prefix_id, prefix), own)
        else:
            segments = None
        return self._build(rid, prompt, segments)

    def next_turns(self, parent: Request) -> list[Request]:
        """The later turns whose previous turn is ``parent`` (rows ascending); their
        ``arrival_s`` is NaN until they arrive."""
        if not self.has_children[parent.rid]:
            return []
        lo, hi = np.searchsorted(self._kid_parent, [parent.rid, parent.rid + 1]).tolist()
        out = []
        t = self.trace
        for rid in self._kids[lo:hi].tolist():
            prompt = t.prompt_tokens.item(rid)
            if t.block_start is not None and t.block_start.item(rid + 1) > t.block_start.item(rid):
                # a trace turn whose hash ids name its whole context (history included)
                ids = t.block_ids[t.block_start.item(rid):t.block_start.item(rid + 1)]
                segments = block_segments(ids, prompt, rid, BLOCK, USER)
            else:
                own = prompt - parent.prompt_tokens - parent.output_tokens
                segments = parent.segments + ((USER, rid, own),)
            req = self._build(rid, prompt, segments)
            req.conversation = parent.conversation
            out.append(req)
        return out

    def _build(self, rid: int, prompt: int, segments) -> Request:
        t = self.trace
        req = Request(rid, t.class_id.item(rid), t.arrival_s.item(rid), prompt,
                      t.output_tokens.item(rid), segments, t.n.item(rid))
        if self.has_children[rid]:
            req.shareable = True            # its prompt + reply are the next turn's prefix
        if self.class_priority:
            req.priority = self.class_priority[req.class_id]
        if self.class_ignore_eos:
            req.ignore_eos = self.class_ignore_eos[req.class_id]
        return req
