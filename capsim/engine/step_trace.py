"""``--trace-events START:END``: every replica's engine steps in a window of simulated time.

A run asks for it by setting :attr:`Environment.step_trace
<capsim.engine.clock.Environment.step_trace>` to a :class:`StepTracer` before its
replicas are built; each :class:`~capsim.engine.replica.Replica` made before the window
ends then takes a :class:`TracingTimeline` (a :class:`~capsim.engine.recorder.TimelineRecorder`
that also keeps each step in the window) instead of the plain recorder. Nothing else
changes, so a run without the flag does no work for it, not even a test per step.

Every step a replica commits reaches its timeline as one step (``record_step``: the step
loop) or as m steps with their end times (``record``: a speculative step, a pipelined
batch, a decode run's segment); a decode run committed in one timeline bin
(``add_in_bin``) has no per-step times. So a traced replica takes no decode run until
its first step ending after the window (``Replica.macro_steps`` off until then): the
window's steps all come one by one, and the results are the same, since a decode run
gives what its steps give one by one (tests/engine/test_macro*.py hold the two paths
equal). The price is simulating up to the window's end step by step.
"""

from __future__ import annotations

from array import array

import numpy as np

from capsim.engine.recorder import TimelineRecorder
from capsim.results.model import StepTrace, TracedReplica, TracedSteps

_COLUMNS = (("replica", "l"), ("lane", "l"), ("start_s", "d"), ("end_s", "d"),
            ("prefill_tokens", "q"), ("decode_tokens", "q"), ("running", "l"), ("queue", "l"),
            ("kv_used_blocks", "q"), ("preemptions", "l"))


class StepTracer:
    """The steps of every replica that overlap ``[start_s, end_s]`` (simulated seconds).

    Args:
        start_s, end_s: the window, 0 <= start_s < end_s.
    """

    def __init__(self, start_s: float, end_s: float):
        self.start_s, self.end_s = start_s, end_s
        self.replicas: list = []                 # the traced replicas, by trace index
        self.columns = {name: array(code) for name, code in _COLUMNS}

    def timeline(self, replica, bin_s: float) -> TimelineRecorder:
        """The timeline for ``replica`` (being built: its scheduler exists): a
        :class:`TracingTimeline` with its decode runs off until the window has passed, or
        the plain recorder for a replica built after the window (an autoscaler's)."""
        if replica.env.now > self.end_s:
            return TimelineRecorder(replica.index, replica.pool, bin_s)
        self.replicas.append(replica)
        return TracingTimeline(self, len(self.replicas) - 1, replica, bin_s)

    def add(self, rid: int, lane: int, start_s: float, end_s: float, prefill: int,
            decode: int, running: int, queue: int, kv_used_blocks: int, preempted: int) -> None:
        """One step of traced replica ``rid``."""
        for (name, _), value in zip(_COLUMNS, (rid, lane, start_s, end_s, prefill, decode,
                                               running, queue, kv_used_blocks, preempted)):
            self.columns[name].append(value)

    def result(self, pool_names: dict[int, str] | None = None) -> StepTrace:
        """The trace for the run's result. ``pool_names``: a pooled fleet's pool name by
        ``id()`` of each pool's :class:`~capsim.scenario.run_config.Pool`."""
        names = pool_names or {}
        cols = {name: np.frombuffer(arr, dtype=arr.typecode) if arr else
                np.empty(0, dtype=np.float64 if code == "d" else np.int64)
                for (name, code), arr in ((c, self.columns[c[0]]) for c in _COLUMNS)}
        return StepTrace(
            start_s=self.start_s, end_s=self.end_s,
            replicas=[TracedReplica(replica=r.index, pool=r.pool,
                                    pool_name=names.get(id(r.pool_cfg), ""),
                                    num_gpu_blocks=r.alloc.num_blocks) for r in self.replicas],
            steps=TracedSteps(**cols))


class TracingTimeline(TimelineRecorder):
    """A replica's timeline that also hands its steps in the window to the tracer.

    Args:
        tracer: the run's :class:`StepTracer`.
        rid: the replica's index in the trace.
        replica: the replica (its scheduler's preemption counter; its ``macro_steps``,
            turned off here until a step ends after the window).
        bin_s: the timeline's first bin width.
    """

    def __init__(self, tracer: StepTracer, rid: int, replica, bin_s: float):
        super().__init__(replica.index, replica.pool, bin_s)
        self.tracer, self.rid, self.owner = tracer, rid, replica
        self.counters = replica.scheduler.counters
        self.preempted = self.counters.preemptions
        self.steps = 0
        self.macro_steps, replica.macro_steps = replica.macro_steps, False
        self.tracing = True

    def record_step(self, end_s: float, sec_s: float, prefill_tokens: int, decode_tokens: int,
                    kv_used_blocks: int, queue_len: int, running: int) -> None:
        super().record_step(end_s, sec_s, prefill_tokens, decode_tokens, kv_used_blocks,
                            queue_len, running)
        if self.tracing:
            self._trace(end_s, sec_s, prefill_tokens, decode_tokens, kv_used_blocks,
                        queue_len, running)

    def record(self, ends_s, secs_s, prefill_tokens: int, decode_tokens: int,
               kv_used_blocks, queue_len: int, running: int, last_queue_len: int,
               last_running: int, busy_s: float | None = None) -> None:
        super().record(ends_s, secs_s, prefill_tokens, decode_tokens, kv_used_blocks,
                       queue_len, running, last_queue_len, last_running, busy_s)
        m = len(ends_s)
        for j in range(m if self.tracing else 0):
            kv = kv_used_blocks(j) if callable(kv_used_blocks) else kv_used_blocks
            last = j == m - 1
            self._trace(float(ends_s[j]), float(secs_s[j]), prefill_tokens, decode_tokens, kv,
                        last_queue_len if last else queue_len, last_running if last else running)

    def _trace(self, end_s: float, sec_s: float, prefill: int, decode: int, kv: int,
               queue: int, running: int) -> None:
        tracer = self.tracer
        total = self.counters.preemptions
        preempted, self.preempted = total - self.preempted, total
        lane = self.steps % getattr(self.owner, "batches", 1)   # pipelined batches in flight
        self.steps += 1
        start_s = end_s - sec_s
        if start_s > tracer.end_s:                 # past the window: decode runs again
            self.tracing = False
            self.owner.macro_steps = self.macro_steps
            return
        if end_s >= tracer.start_s:
            tracer.add(self.rid, lane, start_s, end_s, prefill, decode, running, queue, kv,
                       preempted)
