"""The sequences of one replica that decode a token per step, kept implicitly.

A decoding request records the replica's decode *epoch* (decode steps completed)
when it joined, plus its counters then (``dec_epoch0``, ``dec_computed0``,
``dec_generated0``); its progress is the epochs since. A decode step therefore
updates O(1) aggregates instead of touching every sequence:

- Σ context of the next step is ``size · (epoch + 1) + offset`` with
  ``offset = Σ (computed0 − epoch0)``;
- the sequences whose next token starts a new KV block are one *bucket*, keyed
  by ``(epoch0 − computed0) mod block_size``: bucket ``(epoch + j) mod block_size``
  crosses a block boundary in step j from now;
- finishes come off a heap keyed by the epoch of the last token (lazy deletion:
  an entry is stale once its request left the set, ``dec_version``);
- inter-token gaps are recorded per *cohort* (every sequence that emitted in the
  same step shares the next gap), as weighted runs (DESIGN.md "Metrics").

:meth:`DecodeSet.advance` commits any number of decode steps, one (the step loop)
or a run (macro-steps), with the same bookkeeping: per-step cost does not grow with
tokens or running sequences. The scheduler owns the policy (who joins, who is
preempted, which blocks are taken); this class owns the decode state.
"""

from __future__ import annotations

import heapq
import math
from array import array

import numpy as np

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request

_MAX = np.maximum.reduce   # ndarray.max without its Python wrapper (hot: a finish, a commit)


class DecodeSet:
    """The decoding sequences of one replica and their epoch bookkeeping.

    Args:
        block_size: KV block size in tokens (the bucket period).
        num_classes: request classes (cohort counts per class).
        itl: the run's ITL recorder; gaps are recorded as steps are advanced.

    Attributes read by the scheduler: ``epoch`` (decode steps completed),
    ``size`` (sequences decoding), ``shareable`` (of which shareable: they register
    prefix-cache blocks as they grow), ``offset`` and ``buckets``.
    """

    trim_epochs = 1 << 16  # epochs' end times kept before forgetting the unneeded ones
    merged_tokens = 0      # tokens streamed after a chunk's first: every token is its own chunk
    buffered_tokens = 0    # tokens computed, not yet streamed: none, each streams at its step
    window_end = True      # every step streams (multi-step windows: only a window's last)
    ghost_seqs = 0         # finished members still computed (multi-step windows only)
    ghost_ctx_tokens = 0   # Σ context those attend over in the next step

    def __init__(self, block_size: int, num_classes: int, itl: ItlRecorder):
        self.bs = block_size
        self.itl = itl
        self.num_classes = num_classes
        self.buckets: list[dict[int, Request]] = [{} for _ in range(block_size)]
        self.finish_heap: list[tuple[int, int, int, Request]] = []
        self.epoch = 0                 # decode steps completed
        self.size = 0
        self.shareable = 0
        self.offset = 0                # Σ (computed0 − epoch0) over decoding sequences
        self._epoch_end = array("d")   # end time of each decode step since _epoch_base
        self._epoch_gap = array("d")   # gap seen at each decode step by the previous step's cohort
        self._epoch_base = 0           # first epoch still kept (older ones: _trim)
        self._trim_at = self.trim_epochs
        self._cohort_t = math.nan      # when the sequences of the last decode step emitted
        self._cohort = [0] * num_classes
        self._pending: dict[float, list[int]] = {}   # joined since: emit time → class counts
        self.in_flight = False         # PP > 1: a batch carrying these sequences is in the pipeline

    # ------------------------------------------------------------ membership
    def join(self, req: Request, now: float) -> None:
        """``req`` decodes from the next step; it emitted its last token at ``now``."""
        e0, c0 = self.epoch, req.num_computed
        req.dec_epoch0, req.dec_computed0, req.dec_generated0 = e0, c0, req.num_generated
        req.dec_bucket = (e0 - c0) % self.bs
        self.buckets[req.dec_bucket][req.rid] = req
        self.size += 1
        self.shareable += req.shareable
        self.offset += c0 - e0
        done_epoch = e0 + req.output_tokens - req.num_generated
        heapq.heappush(self.finish_heap, (done_epoch, req.admit_order, req.dec_version, req))
        counts = self._pending.get(now)
        if counts is None:
            counts = self._pending[now] = [0] * self.num_classes
        counts[req.class_id] += 1

    def leave(self, req: Request) -> None:
        """Materialise ``req``'s counters and take it out of the set (finish or preemption)."""
        steps = self.epoch - req.dec_epoch0
        req.num_computed = req.dec_computed0 + steps
        req.num_generated = req.dec_generated0 + steps
        del self.buckets[req.dec_bucket][req.rid]
        self.size -= 1
        self.shareable -= req.shareable
        self.offset -= req.dec_computed0 - req.dec_epoch0
        self._note_leaving(req, steps)

    def _note_leaving(self, req: Request, steps: int) -> None:
        """Note ``req``'s gaps since it joined (the first, then the longest of the rest:
        one per step) and take it out of its cohort or pending group."""
        if steps:
            base = self._epoch_base
            req.note_gap(self._epoch_end[req.dec_epoch0 - base] - req.last_token_s)
            if steps > 1:
                req.note_gap(self._max_gap(req.dec_epoch0 + 1 - base, self.epoch - base))
            req.last_token_s = self._epoch_end[self.epoch - 1 - base]
            self._cohort[req.class_id] -= 1
        else:
            self._pending[req.last_token_s][req.class_id] -= 1
        req.dec_epoch0 = -1
        req.dec_version += 1

    def delay_last_token(self, req: Request, later_s: float) -> bool:
        """``req`` joined at ``req.last_token_s`` and has not decoded since; its client got
        that token at ``later_s`` instead (a V0 first token: capsim/engine/first_token.py),
        so its next gap, as the client measures it, runs from there. ``req`` must be a member
        of this set or of none. False (nothing done): it is not waiting here for its first
        decode step."""
        counts = self._pending.get(req.last_token_s)
        if req.dec_epoch0 < 0 or counts is None or not counts[req.class_id]:
            return False
        counts[req.class_id] -= 1
        moved = self._pending.get(later_s)
        if moved is None:
            moved = self._pending[later_s] = [0] * self.num_classes
        moved[req.class_id] += 1
        req.last_token_s = later_s
        return True

    def sync(self) -> None:
        """Materialise every member's counters (for inspection in tests)."""
        for bucket in self.buckets:
            for req in bucket.values():
                steps = self.epoch - req.dec_epoch0
                req.num_computed = req.dec_computed0 + steps
                req.num_generated = req.dec_generated0 + steps

    # ------------------------------------------------------------ the steps ahead
    @property
    def ctx_tokens(self) -> int:
        """Σ context the members attend over in the next step."""
        return self.size * (self.epoch + 1) + self.offset

    def crossing(self, j: int = 0) -> dict[int, Request]:
        """The members whose token in step ``j`` from now starts a new KV block."""
        return self.buckets[(self.epoch + j) % self.bs]

    def crossings(self, first: int, m: int) -> list[dict[int, Request]]:
        """The crossing buckets of steps ``first``..``min(m, first + block_size) − 1``: one
        cycle at most (the buckets repeat with period ``block_size``)."""
        count, bs, buckets = m - first, self.bs, self.buckets
        if count <= 0:
            return []
        rot = (self.epoch + first) % bs
        if rot + count <= bs:               # no wrap: one slice
            return buckets[rot:rot + count]
        return buckets[rot:] + buckets[:min(count, bs) - (bs - rot)]

    def blocks_ahead(self, start: int, count: int) -> int:
        """Blocks the members take in steps ``start``..``start + count − 1`` from now, the
        set unchanged: whole cycles of ``block_size`` steps take one per member (each
        crosses a boundary once per cycle), plus the buckets of the partial cycle.
        O(block_size)."""
        if count <= 0:
            return 0
        q, r = divmod(count, self.bs)
        buckets, e, bs = self.buckets, self.epoch + start, self.bs
        return q * self.size + sum(len(buckets[(e + i) % bs]) for i in range(r))

    def drop_stale(self) -> None:
        """Pop heap entries of requests that already left the set."""
        heap = self.finish_heap
        while heap and (heap[0][2] != heap[0][3].dec_version or heap[0][3].dec_epoch0 < 0):
            heapq.heappop(heap)

    def steps_to_finish(self) -> int | None:
        """Steps from now until the next member's last token (None: the set is empty)."""
        self.drop_stale()
        heap = self.finish_heap
        return heap[0][0] - self.epoch if heap else None

    def pop_finishing(self, epoch: int, popped: list) -> list[Request]:
        """The members whose last token is at ``epoch``, popped off the heap; their entries
        are appended to ``popped`` (push them back with :meth:`push_back`)."""
        heap, leavers = self.finish_heap, []
        while heap and heap[0][0] == epoch:
            entry = heapq.heappop(heap)
            req = entry[3]
            if entry[2] == req.dec_version and req.dec_epoch0 >= 0:
                popped.append(entry)
                leavers.append(req)
        return leavers

    def push_back(self, popped: list) -> None:
        for entry in popped:
            heapq.heappush(self.finish_heap, entry)

    # ------------------------------------------------------------ advance
    def advance(self, clock_s) -> list[Request]:
        """Commit m ≥ 1 decode steps: inter-token gaps, epochs, finishes. ``clock_s`` holds
        m + 1 non-decreasing times: the start of the first step, then the end of each
        step (a float64 array for a run; for one step, ``(start, end)``, whose start is
        not read).

        Every member emits one token per step. The first step's gap runs from the
        previous decode step's emission (NaN for the replica's first), and the sequences
        that joined since (pending cohorts) emit their first decode gap from their own
        last token and join the cohort. Returns the members whose last token it was,
        already out of the set, in (epoch, admission) order.
        """
        m = len(clock_s) - 1
        itl, cohort = self.itl, self._cohort
        had_epoch = self.epoch > 0
        if m == 1:
            now = clock_s[1]
            gap = now - self._cohort_t if had_epoch else math.nan
            if had_epoch:
                itl.add(gap, cohort)
            if self._pending:
                self._merge_pending(now)
            self._epoch_end.append(now)
            self._epoch_gap.append(gap)
        else:
            ends = clock_s[1:]
            gaps = ends - clock_s[:-1]
            if not had_epoch:
                gaps[0] = math.nan
            elif self._cohort_t != float(clock_s[0]):   # the step before decoded nothing
                gaps[0] = float(ends[0]) - self._cohort_t
            if self._pending:                    # the first step merges the new cohorts
                if had_epoch:
                    itl.add(float(gaps[0]), cohort)
                self._merge_pending(float(ends[0]))
                itl.add(gaps[1:], cohort)
            else:
                itl.add(gaps if had_epoch else gaps[1:], cohort)
            self._epoch_end.frombytes(ends.tobytes())
            self._epoch_gap.frombytes(gaps.tobytes())
            now = float(ends[-1])
        self._cohort_t = now
        self.epoch += m
        heap = self.finish_heap
        if (heap and heap[0][0] <= self.epoch) or len(self._epoch_end) >= self._trim_at:
            return self._finished()
        return []

    def _merge_pending(self, t: float) -> None:
        """Cohorts that joined since the last decode step emit their first gap at ``t``."""
        cohort = self._cohort
        for t0, counts in self._pending.items():
            self.itl.add(t - t0, counts)
            for c, k in enumerate(counts):
                cohort[c] += k
        self._pending.clear()

    def _finished(self) -> list[Request]:
        heap, out = self.finish_heap, []
        while heap and heap[0][0] <= self.epoch:
            _, _, version, req = heapq.heappop(heap)
            if version == req.dec_version and req.dec_epoch0 >= 0:
                self.leave(req)
                out.append(req)
        if len(self._epoch_end) >= self._trim_at:
            self._trim()
        return out

    def _trim(self) -> None:
        """Forget the end times and gaps of epochs before the oldest member joined: no one
        reads them again, so this memory follows the running batch, not the steps.
        O(members + kept epochs), at most once per doubling of the kept epochs."""
        oldest = min((req.dec_epoch0 for req in self._members()), default=self.epoch)
        cut = oldest - self._epoch_base
        if cut > 0:
            del self._epoch_end[:cut]
            del self._epoch_gap[:cut]
            self._epoch_base = oldest
        self._trim_at = max(self.trim_epochs, 2 * len(self._epoch_end))

    def _members(self):
        """Every member request (in no particular order)."""
        return (req for bucket in self.buckets for req in bucket.values())

    def _max_gap(self, lo: int, hi: int) -> float:
        """The longest gap of kept epochs lo..hi−1 (never NaN: only epoch 0's is)."""
        if hi - lo < 32:
            return max(self._epoch_gap[lo:hi])
        # On a copy of the slice (one memcpy): a numpy view of the growing array itself
        # could outlive this call (a profiler, Dask's, holding the frame) and make the
        # next append raise BufferError, as it did once in a Dask sweep.
        return float(_MAX(np.frombuffer(self._epoch_gap[lo:hi], dtype=np.float64)))
