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

import numpy as np

from capsim.results import ItlRuns, ReplicaTimeline


class ItlRecorder:
    """Collects inter-token gaps for a whole run (all replicas)."""

    def __init__(self) -> None:
        self.gap_s = array("d")
        self.count = array("q")
        self.class_id = array("i")

    def add(self, gap_s: float, class_counts: list[int]) -> None:
        """``class_counts[c]`` sequences of class c each saw one gap of ``gap_s``."""
        for cid, n in enumerate(class_counts):
            if n:
                self.gap_s.append(gap_s)
                self.count.append(n)
                self.class_id.append(cid)

    def add_steps(self, gaps_s: list[float], class_counts: list[int]) -> None:
        """``add(gap, class_counts)`` for each gap in order (one run per step and class)."""
        classes = [(cid, n) for cid, n in enumerate(class_counts) if n]
        if len(classes) == 1:
            (cid, n), k = classes[0], len(gaps_s)
            self.gap_s.extend(gaps_s)
            self.count.extend([n] * k)
            self.class_id.extend([cid] * k)
            return
        for gap in gaps_s:
            self.add(gap, class_counts)

    def add_one(self, gap_s: float, class_id: int) -> None:
        self.gap_s.append(gap_s)
        self.count.append(1)
        self.class_id.append(class_id)

    def result(self) -> ItlRuns:
        return ItlRuns(gap_s=self.gap_s.tolist(), count=self.count.tolist(),
                       class_id=self.class_id.tolist())


class TimelineRecorder:
    """One replica's step activity binned in time (bin k covers [k·bin_s, (k+1)·bin_s))."""

    _SUMS = ("steps", "busy_s", "batch_tokens", "prefill_tokens", "decode_tokens")
    _MAXES = ("kv_used_blocks_max", "queue_len_max", "running_max")

    def __init__(self, replica: int, pool: str, bin_s: float = 0.1, max_bins: int = 2048):
        self.replica, self.pool = replica, pool
        self.bin_s, self.max_bins = bin_s, max_bins
        self.bins: dict[str, list] = {k: [] for k in self._SUMS + self._MAXES}

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
        if kv_used_blocks > b["kv_used_blocks_max"][idx]:
            b["kv_used_blocks_max"][idx] = kv_used_blocks
        if queue_len > b["queue_len_max"][idx]:
            b["queue_len_max"][idx] = queue_len
        if running > b["running_max"][idx]:
            b["running_max"][idx] = running

    def steps(self, t_end_s: np.ndarray, busy_s: np.ndarray, decode_tokens: int,
              kv_used_blocks: np.ndarray, queue_len: int, running: int) -> None:
        """:meth:`step` for many decode-only steps at once (same bins, same float sums:
        ``np.add.at`` accumulates in order onto the existing bin values)."""
        start = 0
        while start < len(t_end_s):
            idx = (t_end_s[start:] / self.bin_s).astype(np.int64)
            fits = int(np.searchsorted(idx >= self.max_bins, True))   # idx is non-decreasing
            if fits == 0:
                self._coarsen()
                continue
            idx = idx[:fits]
            b = self.bins
            grow = int(idx[-1]) + 1 - len(b["steps"])
            if grow > 0:
                for lst in b.values():
                    lst.extend([0] * grow)
            stop = start + fits
            lo, hi = int(idx[0]), int(idx[-1]) + 1
            for key, vals in (("steps", np.ones(fits)), ("busy_s", busy_s[start:stop]),
                              ("batch_tokens", np.full(fits, decode_tokens)),
                              ("decode_tokens", np.full(fits, decode_tokens))):
                acc = np.array(b[key][lo:hi], dtype=np.float64)
                np.add.at(acc, idx - lo, vals)
                b[key][lo:hi] = acc.astype(np.int64).tolist() if key != "busy_s" else acc.tolist()
            for key, vals in (("kv_used_blocks_max", kv_used_blocks[start:stop]),
                              ("queue_len_max", np.full(fits, queue_len)),
                              ("running_max", np.full(fits, running))):
                acc = np.array(b[key][lo:hi], dtype=np.int64)
                np.maximum.at(acc, idx - lo, vals)
                b[key][lo:hi] = acc.tolist()
            start = stop

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
