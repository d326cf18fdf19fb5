"""The requests' side of one run: arrivals in, outcomes logged, next turns sent.

:class:`Traffic` builds requests as they arrive (:class:`~capsim.sim.request_source.
RequestSource`), marks the first ``warmup_requests`` as warm-up, hands each to the cluster
(:meth:`Cluster.admit <capsim.engine.cluster.Cluster.admit>`), logs every ended request
(:class:`~capsim.sim.request_log.RequestLog`), reports progress, and sends what an end
sets off: a conversation's next turn ``think_s`` later, a closed loop's next row
(:class:`~capsim.sim.closed_loop.ClosedLoopSender`).
"""

from __future__ import annotations

import math
from typing import Callable

import simpy

from capsim.engine.cluster import Cluster
from capsim.engine.request import REJECTED, Request
from capsim.engine.router import RouterGate
from capsim.sim.closed_loop import ClosedLoopSender, EveryFinishObserved, reply_lag_s
from capsim.sim.request_log import RequestLog
from capsim.sim.request_source import RequestSource
from capsim.workload import RequestTrace

Progress = Callable[[int, int], None]


class Traffic:
    """One run's requests over ``trace`` in ``env``.

    Args:
        env: the simulation.
        trace: the requests (a closed loop's rows are drawn as they are sent).
        progress: called as ``progress(done, total)`` while requests end (None: not).
        class_priority: each class's request priority (``workload.classes.N.priority``;
            empty: all 0).
        class_ignore_eos: each class's ``workload.classes.N.ignore_eos`` (empty: all False).

    Attributes:
        log: the run's :class:`RequestLog`.
        sender: a closed loop's :class:`ClosedLoopSender` (None: open loop).
        cluster: where admitted requests go (set by :meth:`start`).
        gate: the router's limits each arrival passes first (None: none; set by
            :meth:`start`).
    """

    def __init__(self, env: simpy.Environment, trace: RequestTrace, progress: Progress | None,
                 class_priority: tuple[int, ...] = (),
                 class_ignore_eos: tuple[bool, ...] = ()):
        self.env, self.trace, self.progress = env, trace, progress
        self.source = RequestSource(trace, class_priority, class_ignore_eos)
        self.log = RequestLog(len(trace))
        self.total = len(trace)
        self.tick = max(1, self.total // 200)
        self.warmup_left, self.num_classes = trace.warmup_requests, len(trace.class_names)
        self.sender: ClosedLoopSender | None = None
        self.cluster: Cluster | None = None
        self.gate: RouterGate | None = None

    def done(self) -> bool:
        """Whether every request has ended."""
        return self.log.written >= self.total

    def start(self, cluster: Cluster, gate: RouterGate | None = None) -> None:
        """Send requests to ``cluster`` from t = 0, through the router's limits ``gate``:
        first turns at their ``arrival_s``, or a closed loop's first rows (its replicas then
        observe every finish: :class:`EveryFinishObserved`)."""
        self.cluster, self.gate = cluster, gate
        if self.trace.closed_loop is None:
            self.env.process(self._arrivals())
            return
        self.sender = ClosedLoopSender(self.env, self.source, self.log, self.admit)
        for rep in cluster.replicas:
            rep.hooks = EveryFinishObserved(rep.hooks)
        self.env.process(self.sender.start())

    def sent_trace(self) -> RequestTrace:
        """The trace the run served: a closed loop's rows sent (the log cut to them), else
        the trace given."""
        if self.sender is None:
            return self.trace
        self.log.truncate(self.sender.sent)
        return self.source.trace.head(self.sender.sent)

    # ------------------------------------------------------------ in
    def _arrivals(self):
        """First turns, in trace order, each built and admitted at its arrival time."""
        env, source = self.env, self.source
        roots = source.roots
        for k in range(len(roots)):
            req = source.root(roots.item(k))
            delay = req.arrival_s - env.now
            if delay > 0:
                yield env.timeout(delay)
            self.admit(req)

    def admit(self, req: Request) -> None:
        """Send an arriving request to the cluster, unless the router's limits turn it away
        (rejected at once); the first ``warmup_requests`` through here are marked as
        warm-up: logged as such, their class id shifted by the number of classes (their ITL
        runs are recorded apart)."""
        if self.warmup_left:
            self.warmup_left -= 1
            req.class_id += self.num_classes
            self.log.mark_warmup(req.rid)
        gate, cluster = self.gate, self.cluster
        if gate is None:
            cluster.admit(req)
            return
        now = self.env.now
        reason = gate.refusal(now, cluster.serving, cluster.held,
                              req.class_id % self.num_classes)
        if reason:
            self.reject(req, reason)
            return
        cluster.admit(req)
        gate.passed(now, req)

    def _next_turn(self, req: Request, parent_rejected: bool, lag_s: float = 0.0):
        """A conversation's next turn arrives ``think_s`` after the previous reply completes,
        ``lag_s`` from now (rejected at once if the previous turn was rejected)."""
        if parent_rejected:
            self.reject(req, "the previous turn of its conversation was rejected")
            return
        yield self.env.timeout(lag_s + float(self.trace.think_s[req.rid]))
        req.arrival_s = self.env.now
        self.admit(req)

    # ------------------------------------------------------------ out
    def on_finish(self, req: Request) -> None:
        """``req`` ended (finished or rejected): log it, report progress, send what its
        end sets off."""
        log = self.log
        log.record(req)
        if self.progress is not None and log.written % self.tick == 0:
            self.progress(self._done_so_far(), self.total)
        if self.sender is not None:
            self.sender.ended(req)
        rejected = req.state == REJECTED
        lag_s = reply_lag_s(req, self.env.now)
        for child in self.source.next_turns(req):
            self.env.process(self._next_turn(child, rejected, lag_s))

    def reject(self, req: Request, reason: str) -> None:
        """``req`` ends now, rejected with ``reason`` (a later turn that never arrived
        arrives now)."""
        if req.arrival_s != req.arrival_s:
            req.arrival_s = self.env.now
        req.state = REJECTED
        req.reject_reason = reason
        self.on_finish(req)

    def _done_so_far(self) -> int:
        """Progress: requests ended, or for a closed loop bounded by time, its time elapsed
        (as a share of the total)."""
        loop, written = self.trace.closed_loop, self.log.written
        if loop is None or loop.stop_s == math.inf:
            return written
        return min(self.total, int(self.total * self.env.now / loop.stop_s))
