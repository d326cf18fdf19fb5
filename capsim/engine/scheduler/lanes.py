"""Batches in flight for pipeline parallelism: one decode set per batch (a *lane*).

A mixin of :class:`~capsim.engine.scheduler.continuous.ContinuousScheduler` (listed before
it in the bases); off until :meth:`PipelineLanes.enable_pipeline` (``_lanes`` is None), so
the step loop of a one-stage replica pays one ``is None`` test per preemption victim.
"""

from __future__ import annotations

from capsim.engine.decode_set import DecodeSet
from capsim.engine.request import Request
from capsim.engine.step import Step


class PipelineLanes:
    """Up to PP batches in flight, as vLLM V1's batch queue keeps them."""

    _lanes: list[DecodeSet] | None     # PP > 1: one decode set per batch in flight (__init__)

    def can_pipeline(self) -> bool:
        """Whether :meth:`enable_pipeline` applies: the policy allows it
        (``capabilities.pipelining``) and no multi-step windows (vLLM 0.6's
        ``num_scheduler_steps`` > 1) are in use."""
        return self.capabilities.pipelining and self.num_scheduler_steps == 1

    def enable_pipeline(self, batches: int) -> None:
        """Schedule up to ``batches`` batches in flight (pipeline parallelism).

        As vLLM V1 with a batch queue (``EngineCore.step_with_batch_queue`` in
        vllm/v1/engine/core.py; ``Scheduler.schedule`` in vllm/v1/core/sched/scheduler.py,
        both at 00080ee / 00024d3): a new batch takes what is not in flight — decodes
        whose previous token has come back, the next chunk of a prompt whose earlier
        chunks are still in the pipeline (its ``num_computed_tokens`` was advanced when
        they were scheduled), waiting requests — and nothing in flight is scheduled
        again. The decoders are kept in one :class:`DecodeSet` per batch in flight (a
        *lane*): a sequence decodes in the lane of the batch that emitted its last
        token, so its next token waits for that batch to leave the last stage. A
        preemption never picks a request in flight (vLLM can, and drops its output on
        return; not modelled).
        """
        self.decoders.in_flight = False
        self._lanes = [self.decoders]
        self._max_lanes = batches

    def launch(self, step: Step) -> None:
        """``step`` (just scheduled and priced) enters the pipeline: its prompt chunks
        count as in flight until :meth:`complete`."""
        for req, n in step.prefills:
            req.num_inflight += n

    def _pick_lane(self) -> None:
        """Make ``self.decoders`` the lane of the batch about to be scheduled: the free
        lanes merged into one (the sequences of every batch that came back), or a new
        empty lane when every lane is in flight."""
        lanes = self._lanes
        if not self.decoders.in_flight and len(lanes) <= 2:
            other = lanes[0] if lanes[-1] is self.decoders else lanes[-1]
            if other is self.decoders or other.in_flight:
                return                      # the one free lane is the current one already
        free = [lane for lane in lanes if not lane.in_flight]
        if not free:
            lane = DecodeSet(self.bs, self.num_classes, self.itl)
            lanes.append(lane)
            self.decoders = lane
            return
        lane = max(free, key=lambda x: x.size)      # the first of the largest
        for other in free:
            if other is lane:
                continue
            if other.size:
                for req in [r for b in other.buckets for r in b.values()]:
                    other.leave(req)
                    lane.join(req, req.last_token_s)
            lanes.remove(other)
        self.decoders = lane

    def _land_lane(self, step: Step) -> None:
        """``step``'s batch left the last stage: its lane is free again, its prompt chunks
        out of the pipeline."""
        self.decoders = step.lane
        step.lane.in_flight = False
        for req, n in step.prefills:
            req.num_inflight -= n

    def _lane_of(self, req: Request) -> DecodeSet:
        """The decode set holding decoder ``req``."""
        if self._lanes is None:
            return self.decoders
        for lane in self._lanes:
            if lane.buckets[req.dec_bucket].get(req.rid) is req:
                return lane
        raise RuntimeError(f"request {req.rid} decodes in no lane")

    def _in_flight(self, req: Request) -> bool:
        return req.num_inflight > 0 or (req.dec_epoch0 >= 0 and self._lane_of(req).in_flight)

    def _victim(self) -> Request:
        """The request a decode-block shortage preempts: the newest running one (vLLM's
        ``self.running.pop()``), never one in flight; with priority scheduling the one of
        the lowest priority, latest arrival (vLLM's ``max(running, key=(priority,
        arrival_time))``)."""
        if self._lanes is None:
            if self.by_priority:
                return max(self.running.values(), key=lambda r: (r.priority, r.arrival_s))
            return next(reversed(self.running.values()))
        for req in reversed(self.running.values()):
            if not self._in_flight(req):
                return req
        raise RuntimeError("no running request outside the pipeline to preempt")

    def _prefill_victim(self) -> Request | None:
        """The newest running prefill (outside the pipeline), or None."""
        if self._lanes is None:
            return next(reversed(self.prefilling.values()))
        return next((r for r in reversed(self.prefilling.values()) if not r.num_inflight), None)

    def sync(self) -> None:
        """Materialise every decoder's counters (for inspection in tests, and before a
        failure hands the requests back)."""
        for lane in self._lanes or (self.decoders,):
            lane.sync()
