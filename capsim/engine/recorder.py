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

    def add(self, gap_s: float, class_counts: list[int]) -> None:
        """``class_counts[c]`` sequences of class c each saw one gap of ``gap_s``."""
        for cid, n in enumerate(class_counts):
            if n:
                self.gap_s.append(gap_s)
                self.count.append(n)
                self.class_id.append(cid)

    def add_steps(self, gaps_s: np.ndarray, class_counts: list[int]) -> None:
        """``add(gap, class_counts)`` for each gap of the float64 array ``gaps_s``, in order
        (one run per step and class)."""
        k = len(gaps_s)
        if not k:
            return
        classes = [(cid, n) for cid, n in enumerate(class_counts) if n]
        if not classes:
            return
        counts = array(self.count.typecode, [n for _, n in classes])
        ids = array(self.class_id.typecode, [cid for cid, _ in classes])
        if len(classes) == 1:
            self.gap_s.frombytes(gaps_s.tobytes())
        else:
            self.gap_s.frombytes(np.repeat(gaps_s, len(classes)).tobytes())
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
    _MAXES = ("kv_used_blocks_max", "queue_len_max", "running_max")

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

    def step(self, t_end_s: float, busy_s: float, prefill_tokens: int, decode_tokens: int,
             kv_used_blocks: int, queue_len: int, running: int) -> None:
        """Account one engine step that ended at ``t_end_s`` and took ``busy_s``."""
        idx = int(t_end_s / self.bin_s)
        while idx >= self.max_bins:
            self._coarsen()
            idx = int(t_end_s / self.bin_s)
        b = self.bins
        if idx >= len(b["steps"]):
            grow = idx + 1 - len(b["steps"])
            for lst in b.values():
                lst.extend([0] * grow)
        b["steps"][idx] += 1
        b["busy_s"][idx] += busy_s
        b["batch_tokens"][idx] += prefill_tokens + decode_tokens
        b["prefill_tokens"][idx] += prefill_tokens
        b["decode_tokens"][idx] += decode_tokens
        self._raise_maxes(idx, kv_used_blocks, queue_len, running)

    def steps(self, t_end_s: np.ndarray, busy_s: list[float], decode_tokens: int,
              kv_used_blocks: Callable[[int], int], queue_len: int, running: int,
              last_queue_len: int, last_running: int) -> None:
        """:meth:`step` for a run of decode-only steps ending at ``t_end_s`` (non-decreasing):
        the same bins and the same float sums, in the same order.

        Every step but the last saw ``queue_len`` / ``running``; the last one saw
        ``last_queue_len`` / ``last_running`` (requests that arrived during it, sequences
        that finished in it). ``kv_used_blocks(j)`` (blocks in use in step j) is
        non-decreasing along the run, so a bin's maximum is its last step's value. Work is O(steps) in numpy plus O(bins
        touched) in Python.
        """
        m, start = len(t_end_s), 0
        b = self.bins
        steps_b, busy_b, batch_b, dec_b = b["steps"], b["busy_s"], b["batch_tokens"], b["decode_tokens"]
        kv_b, queue_b, run_b = b["kv_used_blocks_max"], b["queue_len_max"], b["running_max"]
        while start < m:
            idx = (t_end_s[start:] / self.bin_s).astype(np.int64)
            stop = m
            if idx[-1] >= self.max_bins:                       # idx is non-decreasing
                fits = int(np.searchsorted(idx, self.max_bins))
                if fits == 0:
                    self._coarsen()
                    b = self.bins
                    steps_b, busy_b, batch_b, dec_b = (b["steps"], b["busy_s"],
                                                       b["batch_tokens"], b["decode_tokens"])
                    kv_b, queue_b, run_b = (b["kv_used_blocks_max"], b["queue_len_max"],
                                            b["running_max"])
                    continue
                idx, stop = idx[:fits], start + fits
            grow = int(idx[-1]) + 1 - len(steps_b)
            if grow > 0:
                for lst in b.values():
                    lst.extend([0] * grow)
            cuts = (np.flatnonzero(idx[1:] != idx[:-1]) + (start + 1)).tolist()
            for lo, hi in zip([start] + cuts, cuts + [stop]):
                i, cnt = int(idx[lo - start]), hi - lo
                steps_b[i] += cnt
                batch_b[i] += decode_tokens * cnt
                dec_b[i] += decode_tokens * cnt
                acc = busy_b[i]
                for s in busy_s[lo:hi]:
                    acc += s
                busy_b[i] = acc
                kv = kv_used_blocks(hi - 1)
                if kv > kv_b[i]:
                    kv_b[i] = kv
                if hi == m:
                    q, r = (max(queue_len, last_queue_len), max(running, last_running)) \
                        if cnt > 1 else (last_queue_len, last_running)
                else:
                    q, r = queue_len, running
                if q > queue_b[i]:
                    queue_b[i] = q
                if r > run_b[i]:
                    run_b[i] = r
            start = stop

    def bin_of(self, t_s: float) -> int:
        """Index of the bin a step ending at ``t_s`` goes to (at the current width)."""
        return int(t_s / self.bin_s)

    def busy_in(self, i: int) -> float:
        """Busy seconds accounted so far in bin ``i`` (0 for a bin not yet reached)."""
        busy = self.bins["busy_s"]
        return busy[i] if i < len(busy) else 0

    def one_bin(self, i: int, steps: int, busy_s: float, tokens: int, kv_used_blocks: int,
                queue_len: int, running: int) -> None:
        """Account ``steps`` decode steps that all end in bin ``i < max_bins``, which now
        holds ``busy_s`` busy seconds (the caller added their times in order)."""
        b = self.bins
        grow = i + 1 - len(b["steps"])
        if grow > 0:
            for lst in b.values():
                lst.extend([0] * grow)
        b["steps"][i] += steps
        b["busy_s"][i] = busy_s
        b["batch_tokens"][i] += tokens
        b["decode_tokens"][i] += tokens
        self._raise_maxes(i, kv_used_blocks, queue_len, running)

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
            queue_len_max=b["queue_len_max"], running_max=b["running_max"])
