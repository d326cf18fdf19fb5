"""The closed loop: a fixed number of requests in flight, each end sending the next one.

This is how benchmark clients sweep concurrency (``vllm bench serve --max-concurrency``,
genai-perf / AIPerf ``--concurrency``, GuideLLM's ``concurrent`` profile): N users, each
sending its next request when its previous one ends. :class:`ClosedLoopSender` sends the
rows of a closed-loop :class:`~capsim.workload.RequestTrace` in row order — the first
``users`` at t = 0, then one ``think_time_s`` after each end (finished or rejected) — until
the rows run out or the clock reaches ``stop_s``. Which user sends a row does not matter
(every user is alike), so only the count in flight is kept.

Every end is observed (it sends the next request), so a replica's decode runs must stop
at their first finish, as the step loop would see it: :class:`EveryFinishObserved` tells
the replicas so through their :class:`~capsim.engine.replica.ReplicaHooks`.
"""

from __future__ import annotations

from typing import Callable

import simpy

from capsim.common.errors import ScenarioError
from capsim.engine.request import REJECTED, Request
from capsim.sim.request_log import RequestLog
from capsim.sim.request_source import RequestSource

#: Requests rejected in a row (none finishing) after which a closed loop bounded only by
#: time gives up: it would otherwise send rows forever without the clock moving much.
MAX_REJECTED_IN_A_ROW = 100_000


def reply_lag_s(req: Request, now: float) -> float:
    """Seconds from ``now`` (when its engine reports it ended) until ``req``'s client has its
    whole reply: the engine's output delay (vLLM V0's asynchronous output processing,
    :attr:`capsim.scenario.run_config.Pool.output_delay_s`); 0 for a rejected request and
    for every engine without one."""
    lag_s = req.finish_s - now
    return lag_s if req.state != REJECTED and lag_s > 0.0 else 0.0


class ClosedLoopSender:
    """Sends a closed loop's rows (``source.trace.closed_loop``) into the run.

    Args:
        env: the simulation.
        source: builds each row's :class:`Request` (its trace is replaced when the loop
            draws more rows).
        log: the run's request log (grown with the rows).
        admit: sends one request to the cluster (or rejects it at once).

    Attributes:
        sent: rows sent so far (rows ``0 … sent − 1``).
    """

    def __init__(self, env: simpy.Environment, source: RequestSource, log: RequestLog,
                 admit: Callable[[Request], None]):
        self.env, self.source, self.log, self.admit = env, source, log, admit
        self.spec = source.trace.closed_loop
        self.sent = 0
        self._rejected_in_a_row = 0

    def start(self):
        """A SimPy process: the first ``users`` requests, at t = 0."""
        for _ in range(self.spec.users):
            if not self._send():
                break
        return
        yield                                               # a generator: env.process(start())

    def ended(self, req: Request) -> None:
        """``req`` finished or was rejected: its user sends the next row ``think_time_s``
        later (not if that is at or after ``stop_s``, or no row is left)."""
        spec = self.spec
        if req.state == REJECTED:
            self._rejected_in_a_row += 1
            if self._rejected_in_a_row >= MAX_REJECTED_IN_A_ROW and spec.more is not None:
                raise ScenarioError(
                    f"the closed loop's last {MAX_REJECTED_IN_A_ROW:,} requests were all "
                    f"rejected (at t = {self.env.now:.6g} s), e.g. because {req.reject_reason}; "
                    "with duration_s it would send rows forever: fix the workload's lengths "
                    "or the engine", path="workload.arrival")
        else:
            self._rejected_in_a_row = 0
        wait_s = reply_lag_s(req, self.env.now) + spec.think_time_s
        if self.env.now + wait_s >= spec.stop_s or not self._rows_left():
            return
        self.env.timeout(wait_s).callbacks.append(self._release)

    def _release(self, _event) -> None:
        self._send()

    def _rows_left(self) -> bool:
        return self.sent < len(self.source.trace) or self.spec.more is not None

    def _send(self) -> bool:
        """Send the next row now; False if none is left or the time is up."""
        if self.env.now >= self.spec.stop_s:
            return False
        i = self.sent
        if i >= len(self.source.trace):
            if self.spec.more is None:
                return False
            self.source.use(self.spec.more(i + 1))
            self.log.grow(len(self.source.trace))
        req = self.source.root(i)
        req.arrival_s = self.env.now
        self.sent = i + 1
        self.admit(req)
        return True


class EveryFinishObserved:
    """:class:`~capsim.engine.replica.ReplicaHooks` of a replica in a closed loop: every
    finish here sends the next request, so a decode run ends at its first finish (as
    ``transfers_waiting`` makes it for a disaggregated decode pool with transfers
    waiting). The hooks a disaggregated cluster set (``inner``) still see every call.

    Args:
        inner: the replica's hooks so far (None for a co-located replica).
    """

    __slots__ = ("inner",)

    def __init__(self, inner=None):
        self.inner = inner

    def __getattr__(self, name: str):
        if name == "inner":                       # not set yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self.inner, name)          # the cluster's own bookkeeping on its hooks

    def scheduled(self, busy: bool, queue_changed: bool) -> None:
        if self.inner is not None:
            self.inner.scheduled(busy, queue_changed)

    def stepped(self, step, step_s: float) -> None:
        if self.inner is not None:
            self.inner.stepped(step, step_s)

    def ran(self, first_end_s: float) -> None:
        if self.inner is not None:
            self.inner.ran(first_end_s)

    def changed(self) -> None:
        if self.inner is not None:
            self.inner.changed()

    def transfers_waiting(self) -> bool:
        return True
