"""Recorders filled during a run; constant work per engine step.

- :class:`ItlRecorder`: inter-token gaps as weighted runs (gap, count, class),
  one run per cohort of sequences sharing a gap, so memory grows with steps,
  never with tokens (DESIGN.md "Metrics").
- :class:`TimelineRecorder`: per-replica activity in at most ``max_bins`` time
  bins; when the run outlasts them, adjacent bins merge and the width doubles,
  so memory stays bounded however long the run.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Callable

import numpy as np

from capsim.results.model import ItlRuns, ReplicaTimeline


class ItlRecorder:
    """Collects inter-token gaps for a whole run (all replicas).

    Storage per run (one per engine step and class): the gap as a float64, the
    count as a uint32 (sequences of one class in one step) and the class id as a
    uint8 (``num_classes`` ≤ 256; uint16 or int32 for more classes) — 13 bytes.

    Args:
        num_classes: request classes; class ids are ``0 … num_classes − 1``.
    """

    def __init__(self, num_classes: int = 256) -> None:
        self.gap_s = array("d")
        self.count = array("I")
        self.class_id = array(self._class_typecode(num_classes))
        self._runs_of: dict[tuple[int, ...], tuple[array, array]] = {}   # cohort → one gap's runs

    def add(self, gaps_s, class_counts: list[int]) -> None:
        """``class_counts[c]`` sequences of class c each saw every gap of ``gaps_s``, in order:
        one run per gap and class. ``gaps_s`` is one gap (a float: the step loop) or a
        float64 array (a decode run's steps)."""
        if isinstance(gaps_s, float):
            for cid, n in enumerate(class_counts):
                if n:
                    self.gap_s.append(gaps_s)
                    self.count.append(n)
                    self.class_id.append(cid)
            return
        k = len(gaps_s)
        if not k:
            return
        key = tuple(class_counts)
        runs = self._runs_of.get(key)
        if runs is None:                # a cohort's runs per gap: (counts, class ids) arrays
            if len(self._runs_of) >= 4096:
                self._runs_of.clear()
            classes = [(cid, n) for cid, n in enumerate(class_counts) if n]
            runs = self._runs_of[key] = (array(self.count.typecode, [n for _, n in classes]),
                                         array(self.class_id.typecode, [c for c, _ in classes]))
        counts, ids = runs
        if not counts:
            return
        if len(counts) == 1:
            self.gap_s.frombytes(gaps_s.tobytes())
        else:
            self.gap_s.frombytes(gaps_s.repeat(len(counts)).tobytes())
        self.count.extend(counts * k)
        self.class_id.extend(ids * k)

    def add_one(self, gap_s: float, class_id: int) -> None:
        self.gap_s.append(gap_s)
        self.count.append(1)
        self.class_id.append(class_id)

    def total_gaps(self) -> int:
        """Σ count: gaps recorded so far."""
        if not self.count:
            return 0
        return int(np.frombuffer(self.count, dtype=self.count.typecode).sum(dtype=np.int64))

    def result(self) -> ItlRuns:
        """The runs, handed over as numpy arrays over the recorder's own buffers (no copy):
        the recorder is empty afterwards. Built unvalidated: the types are right by
        construction."""
        out = {}
        for name in ("gap_s", "count", "class_id"):
            arr = getattr(self, name)
            out[name] = np.frombuffer(arr, dtype=arr.typecode) if arr else \
                np.empty(0, dtype=arr.typecode)
            setattr(self, name, array(arr.typecode))
        return ItlRuns.model_construct(**out)

    @staticmethod
    def _class_typecode(num_classes: int) -> str:
        """The narrowest array typecode holding class ids ``0 … num_classes − 1``."""
        if num_classes <= 256:
            return "B"
        return "H" if num_classes <= 65536 else "i"


class TimelineRecorder:
    """One replica's step activity binned in time (bin k covers [k·bin_s, (k+1)·bin_s))."""

    _SUMS = ("steps", "busy_s", "batch_tokens", "prefill_tokens", "decode_tokens")
    _MAXES = ("kv_used_blocks_max", "queue_len_max", "running_max", "step_max_s")

    def __init__(self, replica: int, pool: str, bin_s: float = 0.1, max_bins: int = 2048):
        self.replica, self.pool = replica, pool
        self.bin_s, self.max_bins = bin_s, max_bins
        self.bins: dict[str, list] = {k: [] for k in self._SUMS + self._MAXES}

    @staticmethod
    def start_width_s(span_s: float, base_s: float = 0.1, max_bins: int = 2048) -> float:
        """The width ``base_s · 2^j`` a run reaching ``span_s`` seconds coarsens to anyway
        (the smallest that holds it in ``max_bins`` bins). Starting there skips the merges
        and lets decode runs land in one bin more often; the bins' edges are the same."""
        width = base_s
        while span_s == span_s and int(span_s / width) >= max_bins:
            width *= 2
        return width

    def record(self, ends_s, secs_s, prefill_tokens: int, decode_tokens: int,
               kv_used_blocks: int | Callable[[int], int], queue_len: int, running: int,
               last_queue_len: int, last_running: int, busy_s: float | None = None) -> None:
        """Account m ≥ 1 consecutive engine steps that ended at ``ends_s`` and took
        ``secs_s`` seconds — one step: 1-tuples of floats; a decode run: float64 arrays
        (non-decreasing ends) — with the same bins and the same float sums, in the same
        order, however they are grouped.

        Each step computed ``prefill_tokens`` prompt tokens and ``decode_tokens`` decode
        tokens. Every step but the last saw ``queue_len`` / ``running``; the last one saw
        ``last_queue_len`` / ``last_running`` (requests that arrived during it, sequences
        that finished in it). ``kv_used_blocks``: blocks in use (an int for one step; for
        a run, a function of the step j, non-decreasing along the steps, so a bin's
        maximum is its last step's value). ``busy_s``, when given, is the busy seconds of the bin the steps all
        end in after adding them (the caller's running sum). Steps that all end in one bin
        cost O(m) Python float additions at most; others O(m) in numpy plus O(bins
        touched) in Python.
        """
        m, bin_s = len(ends_s), self.bin_s
        i = int(ends_s[0] / bin_s)
        if (m == 1 or i == int(ends_s[-1] / bin_s)) and i < self.max_bins:
            b = self.bins
            if m == 1:
                kv, queue, run = kv_used_blocks, last_queue_len, last_running
                longest = secs_s[0]
                if busy_s is None:
                    busy_s = (b["busy_s"][i] if i < len(b["busy_s"]) else 0) + longest
            else:
                kv = kv_used_blocks(m - 1)
                queue, run = max(queue_len, last_queue_len), max(running, last_running)
                secs = secs_s.tolist()
                longest = max(secs)
                if busy_s is None:
                    busy_s = self.busy_in(i)
                    for x in secs:
                        busy_s += x
            self.add_in_bin(i, m, prefill_tokens * m, decode_tokens * m, busy_s, longest, kv,
                            queue, run)
        else:
            kv_at = (lambda _: kv_used_blocks) if m == 1 else kv_used_blocks
            self._bins(np.asarray(ends_s, dtype=np.float64),
                       list(secs_s) if m == 1 else secs_s.tolist(), prefill_tokens,
                       decode_tokens, kv_at, queue_len, running, last_queue_len, last_running)

    def add_in_bin(self, i: int, steps: int, prefill_tokens: int, decode_tokens: int,
                   busy_s: float, longest_s: float, kv_used_blocks: int, queue_len: int,
                   running: int) -> None:
        """Account ``steps`` steps that all ended in bin ``i`` (< ``max_bins``): Σ prompt
        and decode tokens, the bin's busy seconds after them (the caller's running sum,
        added in step order), the longest step and the largest KV blocks in use, waiting
        queue and running batch any of them saw. Steps grouped in any way give the
        same bin."""
        b = self.bins
        grow = i + 1 - len(b["steps"])
        if grow > 0:
            for lst in b.values():
                lst.extend([0] * grow)
        b["steps"][i] += steps
        b["busy_s"][i] = busy_s
        b["batch_tokens"][i] += prefill_tokens + decode_tokens
        b["prefill_tokens"][i] += prefill_tokens
        b["decode_tokens"][i] += decode_tokens
        if longest_s > b["step_max_s"][i]:
            b["step_max_s"][i] = longest_s
        self._raise_maxes(i, kv_used_blocks, queue_len, running)

    def record_step(self, end_s: float, sec_s: float, prefill_tokens: int, decode_tokens: int,
                    kv_used_blocks: int, queue_len: int, running: int) -> None:
        """:meth:`record` of one step (the step loop's: no tuples to build and unpack),
        the same sums in the same order."""
        i = int(end_s / self.bin_s)
        if i >= self.max_bins:
            self.record((end_s,), (sec_s,), prefill_tokens, decode_tokens, kv_used_blocks,
                        0, 0, queue_len, running)
            return
        b = self.bins
        steps = b["steps"]
        grow = i + 1 - len(steps)
        if grow > 0:
            for lst in b.values():
                lst.extend([0] * grow)
        steps[i] += 1
        b["busy_s"][i] += sec_s
        b["batch_tokens"][i] += prefill_tokens + decode_tokens
        b["prefill_tokens"][i] += prefill_tokens
        b["decode_tokens"][i] += decode_tokens
        longest = b["step_max_s"]
        if sec_s > longest[i]:
            longest[i] = sec_s
        self._raise_maxes(i, kv_used_blocks, queue_len, running)

    def _bins(self, t_end_s: np.ndarray, busy_s: list[float], prefill_tokens: int,
              decode_tokens: int, kv_used_blocks: Callable[[int], int], queue_len: int,
              running: int, last_queue_len: int, last_running: int) -> None:
        """:meth:`record` for steps spread over several bins (or past ``max_bins``, which
        coarsens the bins first)."""
        m, start = len(t_end_s), 0
        b = self.bins
        while start < m:
            pieces = self._pieces(t_end_s, start)
            if not pieces:                                     # step `start` is past max_bins
                self._coarsen()
                b = self.bins
                continue
            grow = pieces[-1][0] + 1 - len(b["steps"])
            if grow > 0:
                for lst in b.values():
                    lst.extend([0] * grow)
            steps_b, busy_b, batch_b = b["steps"], b["busy_s"], b["batch_tokens"]
            pre_b, dec_b, long_b = b["prefill_tokens"], b["decode_tokens"], b["step_max_s"]
            for i, lo, hi in pieces:
                cnt = hi - lo
                steps_b[i] += cnt
                batch_b[i] += (prefill_tokens + decode_tokens) * cnt
                pre_b[i] += prefill_tokens * cnt
                dec_b[i] += decode_tokens * cnt
                acc = busy_b[i]
                for s in busy_s[lo:hi]:
                    acc += s
                busy_b[i] = acc
                longest = max(busy_s[lo:hi])
                if longest > long_b[i]:
                    long_b[i] = longest
                if hi == m:
                    q, r = (max(queue_len, last_queue_len), max(running, last_running)) \
                        if cnt > 1 else (last_queue_len, last_running)
                else:
                    q, r = queue_len, running
                self._raise_maxes(i, kv_used_blocks(hi - 1), q, r)
            start = pieces[-1][2]

    def _pieces(self, t_end_s: np.ndarray, start: int) -> list[tuple[int, int, int]]:
        """(bin, first step, end step) of each bin that steps ``start``.. (non-decreasing
        ends) end in, up to the last bin below ``max_bins``; each step's bin is
        ``int(t / bin_s)`` (:meth:`bin_of`). A few bins are found by bisection (a decode run
        crossing a bin edge or two: a handful of Python divisions, no numpy calls)."""
        bin_s, m = self.bin_s, len(t_end_s)
        first, last = int(t_end_s[start] / bin_s), int(t_end_s[-1] / bin_s)
        if last < self.max_bins and last - first <= 8:
            ends = t_end_s.tolist()

            def bin_of(t: float) -> int:
                return int(t / bin_s)

            pieces, lo = [], start
            for i in range(first, last + 1):
                hi = bisect_right(ends, i, lo, m, key=bin_of) if i < last else m
                if hi > lo:
                    pieces.append((i, lo, hi))
                    lo = hi
            return pieces
        idx = (t_end_s[start:] / bin_s).astype(np.int64)
        stop = m
        if idx[-1] >= self.max_bins:                       # idx is non-decreasing
            fits = int(np.searchsorted(idx, self.max_bins))
            if fits == 0:
                return []
            idx, stop = idx[:fits], start + fits
        cuts = (np.flatnonzero(idx[1:] != idx[:-1]) + (start + 1)).tolist()
        return [(int(idx[lo - start]), lo, hi) for lo, hi in zip([start] + cuts, cuts + [stop])]

    def bin_of(self, t_s: float) -> int:
        """Index of the bin a step ending at ``t_s`` goes to (at the current width)."""
        return int(t_s / self.bin_s)

    def busy_in(self, i: int) -> float:
        """Busy seconds accounted so far in bin ``i`` (0 for a bin not yet reached)."""
        busy = self.bins["busy_s"]
        return busy[i] if i < len(busy) else 0

    def _raise_maxes(self, i: int, kv_used_blocks: int, queue_len: int, running: int) -> None:
        """Bin ``i``'s maxima of KV blocks in use, waiting queue and running batch."""
        b = self.bins
        if kv_used_blocks > b["kv_used_blocks_max"][i]:
            b["kv_used_blocks_max"][i] = kv_used_blocks
        if queue_len > b["queue_len_max"][i]:
            b["queue_len_max"][i] = queue_len
        if running > b["running_max"][i]:
            b["running_max"][i] = running

    def _coarsen(self) -> None:
        self.bin_s *= 2
        for key, lst in self.bins.items():
            merge = sum if key in self._SUMS else max
            self.bins[key] = [merge(lst[i:i + 2]) for i in range(0, len(lst), 2)]

    def result(self) -> ReplicaTimeline:
        b = self.bins
        mean = [t / s if s else 0.0 for t, s in zip(b["batch_tokens"], b["steps"])]
        return ReplicaTimeline(
            replica=self.replica, pool=self.pool, bin_s=self.bin_s, steps=b["steps"],
            busy_s=b["busy_s"], batch_tokens_mean=mean, prefill_tokens=b["prefill_tokens"],
            decode_tokens=b["decode_tokens"], kv_used_blocks_max=b["kv_used_blocks_max"],
            queue_len_max=b["queue_len_max"], running_max=b["running_max"],
            step_max_s=[float(x) for x in b["step_max_s"]])
