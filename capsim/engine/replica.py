"""One replica (a tensor-parallel engine) as a SimPy process.

The loop is DESIGN.md's step model: schedule → price with the roofline →
``yield env.timeout(seconds)`` → complete. With nothing runnable it waits on
an event that the next submitted request triggers; it never busy-polls.
Decode-only stretches are advanced in one event (``Replica._decode_run``), in
co-located replicas and in a disaggregated variant's decode pool alike.

In a disaggregated variant (:mod:`capsim.engine.disagg`) a replica also
reports, through optional hooks, prefilled requests to hand off
(``on_handoff``), the time a transferred request emits token 2
(``on_second_token``) and every change of its busy / idle state or its
waiting queue (``observer``).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from itertools import accumulate
from typing import Callable

import numpy as np
import simpy
from simpy.events import NORMAL

from capsim.scenario.resolve import RunConfig
from capsim.engine.recorder import ItlRecorder, TimelineRecorder
from capsim.engine.request import Request
from capsim.engine.step import Step
from capsim.engine.scheduler.continuous import (MIN_RUN_STEPS, ContiguousScheduler, ContinuousScheduler,
                                     RunPlan)
from capsim.engine.scheduler.static import StaticScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.kv.contiguous import ContiguousAllocator
from capsim.results.model import ReplicaStats
from capsim.cost.pricer import StepPricer, WorkTally

GIB = 2**30


def timeout_at(env: simpy.Environment, when: float) -> simpy.Event:
    """An event that fires at exactly ``when``.

    ``env.timeout(when - env.now)`` can land one ulp off (``now + (when − now)`` is
    not always ``when`` in floating point); nudging the delay by an ulp makes the
    macro-step clock identical to the step-by-step one. Some instants cannot be
    reached from ``now`` by adding any float (round-half-even steps over them); then
    the event goes on SimPy's queue at ``when`` itself, as ``Environment.schedule``
    puts a timeout at ``now + delay`` (its internals: ``_queue``, ``_eid``).
    """
    delay = when - env.now
    while env.now + delay < when:
        delay = math.nextafter(delay, math.inf)
    while env.now + delay > when:
        delay = math.nextafter(delay, -math.inf)
    if env.now + delay == when:
        return env.timeout(delay)
    event = simpy.Event(env)
    event._ok, event._value = True, None
    heapq.heappush(env._queue, (when, NORMAL, next(env._eid), event))
    return event


def make_kv(run: RunConfig) -> BlockAllocator | ContiguousAllocator:
    """The replica's KV pool: paged blocks (vLLM), or a contiguous baseline."""
    eng = run.engine
    if eng.kv_allocator != "paged":
        return ContiguousAllocator(run.kv.num_gpu_blocks * eng.block_size, eng.block_size)
    return BlockAllocator(run.kv.num_gpu_blocks, eng.block_size,
                          enable_caching=eng.enable_prefix_caching
                          and eng.scheduler == "continuous")


def make_scheduler(run: RunConfig, alloc: BlockAllocator | ContiguousAllocator,
                   num_classes: int, itl: ItlRecorder, role: str = "colocated"):
    """The scheduler named by ``engine.scheduler`` for one replica in ``role``."""
    eng = run.engine
    if eng.scheduler == "static":
        if role != "colocated":
            raise ValueError("static batching cannot be disaggregated")
        return StaticScheduler(max_num_seqs=eng.max_num_seqs, allocator=alloc,
                               num_classes=num_classes, itl=itl)
    if eng.kv_allocator != "paged":
        return ContiguousScheduler(
            reserve=eng.kv_allocator.removeprefix("contiguous_"),
            max_model_len=eng.max_model_len, max_num_seqs=eng.max_num_seqs,
            max_num_batched_tokens=eng.max_num_batched_tokens, chunked=eng.chunked,
            allocator=alloc, num_classes=num_classes, itl=itl, role=role)
    return ContinuousScheduler(max_num_seqs=eng.max_num_seqs,
                               max_num_batched_tokens=eng.max_num_batched_tokens,
                               chunked=eng.chunked, allocator=alloc,
                               num_classes=num_classes, itl=itl, role=role,
                               swap_space_bytes=int(eng.swap_space_gib * GIB)
                               * eng.tensor_parallel_size if eng.preemption_mode == "swap" else 0,
                               kv_bytes_per_token=run.kv.kv_bytes_per_token)


class _Run:
    """A decode run in progress (see :meth:`Replica._decode_run`): its plan, the end time of
    every step (``clock[j + 1]`` for step j), step seconds, timeline-bin busy time, and
    how far it has been committed: steps ``0..done − 1`` are committed, the blocks of steps
    ``0..grown − 1`` are taken (step 0's by ``schedule``); ``used_blocks`` were in use in
    step ``grown − 1`` (blocks reserved for a transfer since then come after it). ``done_tokens[i]``: prompt + output tokens
    of the requests that finished by ``done_times[i − 1]`` (what the router no longer
    counts as outstanding then)."""

    __slots__ = ("plan", "clock", "secs", "bin_busy", "bin_now", "bin_s", "queue0", "done",
                 "grown", "used_blocks", "done_times", "done_tokens")

    def __init__(self, plan: RunPlan, clock: np.ndarray, secs: np.ndarray,
                 bin_busy: np.ndarray, bin_now: int, bin_s: float, queue0: int,
                 used_blocks: int):
        self.plan, self.clock, self.secs, self.bin_busy = plan, clock, secs, bin_busy
        self.bin_now, self.bin_s, self.queue0 = bin_now, bin_s, queue0
        self.done, self.grown = 0, 1
        self.used_blocks = used_blocks
        ends = plan.ends
        self.done_times = clock[ends[:-1]].tolist() if len(ends) > 1 else []
        self.done_tokens = [0, *accumulate(plan.done_tokens)]

    def step_at(self, t_s: float) -> int:
        """The step in progress at ``t_s``: the first one ending at or after it."""
        return int(self.clock[1:].searchsorted(t_s))


class Replica:
    """A SimPy process that runs one engine; ``submit`` hands it a request.

    ``on_finish(req)`` is called for every finished request.
    """

    def __init__(self, env: simpy.Environment, index: int, run: RunConfig, pricer: StepPricer,
                 itl: ItlRecorder, num_classes: int, on_finish: Callable[[Request], None],
                 pool: str = "colocated", macro_steps: bool = True, timeline_bin_s: float = 0.1):
        self.env, self.index, self.run_cfg, self.pool = env, index, run, pool
        # Advance decode-only stretches in one event (identical results; see _decode_run).
        self.macro_steps = macro_steps
        self._in_run = False            # waiting out a decode run an arrival may cut short
        self._run: _Run | None = None   # the decode run in progress, until committed
        # EMA of the gap between arrivals here: runs are not tried while arrivals come
        # faster than MIN_RUN_STEPS steps (they would be cut at once), and a run plans
        # through finishes only about as far as the next arrival (see _horizon_steps).
        self._arrival_gap_s = math.inf
        self._last_submit_s = math.nan
        self._step_s = 0.0              # the last step's duration
        self.pricer = pricer
        self.alloc = make_kv(run)
        self.scheduler = make_scheduler(run, self.alloc, num_classes, itl, pool)
        self.timeline = TimelineRecorder(index, pool, timeline_bin_s)
        self.on_finish = on_finish
        self._outstanding = 0           # Σ prompt + output tokens of unreported requests
        self.busy_s = 0.0
        self.work = WorkTally()         # FLOPs and bytes follow from it (StepPricer.work)
        self.compute_bound_steps = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.peak_kv_used_blocks = 0
        self.kv_written_at_peak = 0
        self.table_entries_at_peak = 0
        self.busy = False               # running a step now
        # Disaggregation hooks (capsim.engine.disagg); None for a co-located replica.
        self.on_handoff: Callable[[Request, float], None] | None = None   # (req, last step s)
        self.on_second_token: Callable[[Request, float], None] | None = None
        self.observer: Callable[[], None] | None = None
        # Decode pool: True while prefilled requests wait for room on a decode replica
        # (then every finish here is observed: runs stop at their first finish).
        self.transfers_waiting: Callable[[], bool] | None = None
        self._joining: list[tuple[Request, int]] = []    # KV arrived, joins at next schedule
        self._awaiting: list[tuple[Request, int]] = []   # joined, token 2 not yet emitted
        self._wake: simpy.Event | None = None
        self._process = env.process(self._loop())

    @property
    def outstanding_tokens(self) -> int:
        """Σ prompt + output tokens of requests submitted here and not finished by now
        (what ``least_outstanding_tokens`` routing compares). Inside a decode run that
        goes on through finishes, those whose step ended by now count as finished, as
        they would step by step."""
        run = self._run
        if run is None or not run.done_times:
            return self._outstanding
        return self._outstanding - run.done_tokens[bisect_right(run.done_times, self.env.now)]

    @outstanding_tokens.setter
    def outstanding_tokens(self, value: int) -> None:
        self._outstanding += value - self.outstanding_tokens

    def submit(self, req: Request) -> None:
        self._arrived()
        req.replica = self.index
        self._outstanding += req.prompt_tokens + req.output_tokens
        self.scheduler.add(req)
        self.wake()

    def _arrived(self) -> None:
        """New work: end a decode run at the step in progress; update the arrival-gap EMA."""
        self.cut_run()
        now = self.env.now
        gap, self._last_submit_s = now - self._last_submit_s, now
        if gap == gap:                                  # not the first arrival (NaN)
            ema = self._arrival_gap_s
            self._arrival_gap_s = gap if ema == math.inf else ema + (gap - ema) / 8

    def cut_run(self) -> None:
        """End the decode run in progress (if any) after the step in progress."""
        if self._in_run:
            self._in_run = False
            self._process.interrupt()

    def sync_run(self) -> None:
        """Bring a decode run in progress up to now, for readers of this replica's state
        (a disaggregated cluster placing a transfer): commit the steps that ended before
        now and take the blocks of the step in progress, as the step loop would have by
        now. The run goes on."""
        run = self._run
        if run is None:
            return
        j = run.step_at(self.env.now)
        self._commit_run(j, last=False)
        if run.grown <= j:
            seg = bisect_right(run.plan.ends, j)
            self._note_run_peak(self.scheduler.grow_for_run(1, 0), run.plan.seqs[seg])
            run.grown = j + 1
            run.used_blocks = self.alloc.num_used_blocks

    def kv_load(self) -> tuple[int, int]:
        """(KV blocks in use, running sequences) as of now, what a disaggregated cluster's
        ``least_kv`` placement compares. Inside a decode run these count the blocks its
        steps have taken by now (in closed form while no finish has happened since the
        last commit; else the run is synced first)."""
        run = self._run
        if run is not None:
            j = run.step_at(self.env.now)
            ends = run.plan.ends
            if j < ends[bisect_right(ends, run.done)]:    # no finish since step `done`
                first = max(run.grown, run.done)
                taken = self.scheduler.decode_blocks_ahead(first - run.done, j + 1 - first)
                return self.alloc.num_used_blocks + taken, self.scheduler.num_running
            self.sync_run()
        return self.alloc.num_used_blocks, self.scheduler.num_running

    def reserve_transfer(self, req: Request) -> bool:
        """Decode pool: hold a slot and blocks for ``req``'s KV if both are free now
        (:meth:`ContinuousScheduler.reserve_transfer`); a run in progress ends after its
        step in progress (the blocks it planned to take may be gone)."""
        self.sync_run()
        if not self.scheduler.reserve_transfer(req):
            return False
        self.cut_run()
        return True

    def cut_run_through_finishes(self) -> None:
        """End a run that planned to go on through finishes (someone now waits for the
        room a finish frees: see ``transfers_waiting``)."""
        if self._run is not None and len(self._run.plan.ends) > 1:
            self.cut_run()

    def wake(self) -> None:
        """Resume the loop if it is idle (new work arrived by another path than submit)."""
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def admit_transferred(self, req: Request) -> None:
        """Decode role: ``req``'s KV has arrived; it decodes from the next scheduled step."""
        self._arrived()
        self.scheduler.admit_transfer(req)
        if self.on_second_token is not None:
            self._joining.append((req, req.num_preemptions))
        self.wake()

    @property
    def _hooked(self) -> bool:
        return self.observer is not None or self.on_handoff is not None \
            or self.on_second_token is not None

    def _loop(self):
        env, sched, pricer = self.env, self.scheduler, self.pricer
        hooked = self._hooked
        while True:
            if self._joining:
                self._awaiting.extend(self._joining)
                self._joining.clear()
            queued = len(sched.waiting)
            step = sched.schedule(env.now)
            if step is None:
                if hooked:
                    self._set_busy(False)
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if hooked:
                self._set_busy(True)
                if len(sched.waiting) != queued and self.observer is not None:
                    self.observer()             # admissions changed the queue others watch
            if (self.macro_steps and self.on_handoff is None
                    and self._arrival_gap_s > MIN_RUN_STEPS * self._step_s):
                waiting = self.transfers_waiting is not None and self.transfers_waiting()
                plan = sched.plan_decode_run(
                    step, horizon_steps=0 if waiting else self._horizon_steps())
                if plan is not None:
                    first_end_s = yield from self._decode_run(plan)
                    if self._awaiting:          # joined decoders emitted token 2 in step 0
                        for req, _ in self._awaiting:
                            self.on_second_token(req, first_end_s)
                        self._awaiting.clear()
                    self._report_finished()
                    if hooked and self.observer is not None:
                        self.observer()
                    continue
            logits = step.logits_seqs          # before complete() moves the prefills on
            cost = self._price(step, logits)
            used = self.alloc.num_used_blocks
            if used > self.peak_kv_used_blocks:
                self._note_kv_peak(used, step)
            seconds = cost.seconds + (self._swap_s(step.swap_bytes) if step.swap_bytes else 0.0)
            self._step_s = seconds
            yield env.timeout(seconds)
            sched.complete(step, env.now)
            self._account(step, cost, used, seconds, logits)
            if hooked:
                self._after_step(step, cost.seconds)
            self._report_finished()
            if hooked and self.observer is not None:
                self.observer()

    def _report_finished(self) -> None:
        sched = self.scheduler
        if sched.finished:
            for req in sched.finished:
                self._outstanding -= req.prompt_tokens + req.output_tokens
                self.on_finish(req)
            sched.finished.clear()

    def _price(self, step, logits_seqs: int):
        return self.pricer.cost(prefill_tokens=step.prefill_tokens,
                                prefill_attn_pairs=step.prefill_attn_pairs,
                                prefill_kv_tokens=step.prefill_kv_tokens,
                                decode_seqs=step.decode_seqs,
                                decode_ctx_tokens=step.decode_ctx_tokens,
                                logits_seqs=logits_seqs)

    def _horizon_steps(self) -> int:
        """Steps a run plans through finishes: 32 × the mean steps between arrivals here.
        Planning past the arrival that cuts the run is wasted numpy work, stopping short
        of it costs a new run (an event, a plan, a pricing); on benchmark 1, factors
        2 / 4 / 8 / 16 / 32 / 64 gave 27.0 / 23.8 / 21.2 / 19.3 / 18.7 / 18.7 k runs for
        3.7 / 3.9 / 4.1 / 4.8 / 5.2 / 5.2 M planned steps (32 ran 3 % faster than 8: a
        planned step costs far less than a run)."""
        if self._arrival_gap_s == math.inf or not self._step_s:
            return 4096
        return min(4096, int(32 * self._arrival_gap_s / self._step_s))

    def _decode_run(self, plan: RunPlan):
        """Advance a planned decode run (:class:`~capsim.engine.scheduler.continuous.RunPlan`, its
        first step just scheduled) with one SimPy event (macro-step).

        Step times are the step-by-step path's, added in the same order, so the clock
        lands on the same floats: one 2-D ``cumsum`` (which accumulates left to right,
        unlike ``np.sum``) gives the running clock, busy time, timeline-bin busy time
        and (when any step is compute-bound) compute-bound count at every step, and the
        run takes column m. An arrival (``submit``, or a transfer's KV landing) interrupts
        the wait; the run then ends after the step in progress, exactly where the
        step-by-step loop would first see it. Segments (the batch shrinking at a finish)
        are then committed in order, each as the step loop would: blocks taken, ITL runs,
        finishes, timeline. A disaggregated cluster reading this replica mid-run first
        commits what has happened by then (:meth:`sync_run`); placing a transfer here
        ends the run too (:meth:`reserve_transfer`). Returns the end time of step 0.
        """
        env, sched, timeline = self.env, self.scheduler, self.timeline
        ends, seqs = plan.ends, plan.seqs
        k = ends[-1]
        lengths = [b - a for a, b in zip([0, *ends], ends)]
        secs, bound = self.pricer.decode_costs(seqs, plan.ctx0, lengths)
        now = env.now
        bin_now, bin_s = timeline.bin_of(now), timeline.bin_s
        # Rows: clock, busy seconds, busy seconds in the current timeline bin[, bound].
        acc = np.empty((3 if bound is None else 4, k + 1))
        acc[:, 0] = (now, self.busy_s, timeline.busy_in(bin_now), 0.0)[:len(acc)]
        acc[:3, 1:] = secs
        if bound is not None:
            acc[3, 1:] = bound
        np.cumsum(acc, axis=1, out=acc)
        clock = acc[0]
        t_end = float(clock[k])
        m = k
        self._run = _Run(plan, clock, secs, acc[2], bin_now, bin_s, len(sched.waiting),
                         self.alloc.num_used_blocks)
        self._in_run = True
        try:
            yield timeout_at(env, t_end)
        except simpy.Interrupt:                     # a request arrived mid-run
            if env.now < t_end:
                m = self._run.step_at(env.now) + 1      # the run ends with the step in progress
                yield timeout_at(env, float(clock[m]))
        self._in_run = False
        self._commit_run(m, last=True)
        self._run = None
        self._step_s = float(secs[m - 1])
        self.busy_s = float(acc[1, m])
        if bound is not None:
            self.compute_bound_steps += int(acc[3, m])
        return float(clock[1])

    def _commit_run(self, m: int, last: bool) -> None:
        """Commit steps ``done..m − 1`` of the run in progress, segment by segment, as the
        step loop would; ``last``: step m − 1 is the run's last (it saw the waiting queue
        as it is now; earlier steps saw it as it was when the run began)."""
        run = self._run
        plan, lo, seg_start = run.plan, run.done, 0
        for n, ctx0, end in zip(plan.seqs, plan.ctx0, plan.ends):
            if end > lo:
                hi = min(end, m)
                if hi <= lo:
                    break
                self._commit_segment(run, lo, hi, n, ctx0 + n * (lo - seg_start),
                                     last and hi == m)
                lo = hi
            seg_start = end
        run.done = max(run.done, m)
        run.grown = max(run.grown, m)

    def _commit_segment(self, run: _Run, start: int, stop: int, n: int, ctx0: int,
                        last: bool) -> None:
        """Commit steps ``start``..``stop − 1`` of a run, within one segment where ``n``
        decode over ``ctx0`` tokens in step ``start``; step j ends at ``run.clock[j + 1]``:
        blocks, KV peak, scheduler bookkeeping, work, timeline. The waiting queue was
        ``run.queue0`` long in every step but the run's ``last`` one."""
        sched, timeline, clock = self.scheduler, self.timeline, run.clock
        bin_now, queue0 = run.bin_now, run.queue0
        m = stop - start
        running0 = sched.num_running
        if start < run.grown:                    # its blocks were taken before
            blocks = sched.grow_for_run(m, 1)
            blocks.used0 = run.used_blocks
        else:
            blocks = sched.grow_for_run(m, 0)
        self._note_run_peak(blocks, n)    # a peak already noted (a synced step's) is kept
        sched.commit_decode_run(clock[start:stop + 1])
        self.decode_tokens += n * m
        ctx = m * ctx0 + n * (m * (m - 1) // 2)     # Σ context: +n per step
        self.work.add(m, n * m, n * m, ctx, ctx, m)
        ends = clock[start + 1:stop + 1]
        last_queue = len(sched.waiting) if last else queue0
        queue, running = last_queue, sched.num_running
        if m > 1:
            queue, running = max(queue, queue0), max(running, running0)
        b = timeline.bin_of(ends[0])
        if b == timeline.bin_of(ends[-1]) and b < timeline.max_bins:
            if b == bin_now and timeline.bin_s == run.bin_s:
                busy = float(run.bin_busy[stop])   # the run's running sum in its first bin
            else:                                  # a later bin: add its steps in order
                busy = timeline.busy_in(b)
                for x in run.secs[start:stop].tolist():
                    busy += x
            timeline.one_bin(b, m, busy, n * m, blocks.at(m - 1), queue, running)
        else:
            timeline.steps(ends, run.secs[start:stop].tolist(), n, blocks.at, queue0, running0,
                           last_queue, sched.num_running)

    def _set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            if self.observer is not None:
                self.observer()

    def _after_step(self, step, step_s: float) -> None:
        """Disaggregation hooks after a step: token 2 of newly joined decoders, handoffs."""
        if self._awaiting and step.decode_seqs:
            for req, preemptions in self._awaiting:
                if req.num_preemptions == preemptions:     # it decoded in this step
                    self.on_second_token(req, self.env.now)
            self._awaiting.clear()
        handoff = getattr(self.scheduler, "handoff", None)
        if handoff and self.on_handoff is not None:
            for req in handoff:
                self.on_handoff(req, step_s)
            handoff.clear()

    def _swap_s(self, nbytes: int) -> float:
        """Host↔GPU copy time: each GPU moves its KV shard over its own PCIe link."""
        hw, tp = self.run_cfg.hardware, self.run_cfg.engine.tensor_parallel_size
        return hw.pcie_latency_s + nbytes / tp / hw.pcie_bandwidth_bytes_per_s

    def _note_run_peak(self, blocks, n: int) -> None:
        """The step loop's KV-peak check over a decode run (before it is committed): the
        last new peak is the first step that reaches the run's highest block count
        (``blocks``: :class:`~capsim.engine.scheduler.continuous.RunBlocks`, non-decreasing)."""
        top = blocks.at(blocks.m - 1)
        if top <= self.peak_kv_used_blocks:
            return
        j = blocks.first_reaching(top)
        sched = self.scheduler
        self.peak_kv_used_blocks = top
        self.kv_written_at_peak = sched.kv_tokens + n * (j + 1)
        # Nothing is allocated after the peak step j, so the tables then hold what they hold now.
        self.table_entries_at_peak = sum(len(r.blocks) for r in sched.running.values())

    def _account(self, step, cost, kv_used_blocks: int, seconds: float, logits: int) -> None:
        self.busy_s += seconds
        self.work.add(1, step.batch_tokens, logits, int(step.prefill_attn_pairs)
                      + step.decode_ctx_tokens, step.prefill_kv_tokens + step.decode_ctx_tokens,
                      1 if logits else 0)
        self.compute_bound_steps += cost.compute_bound
        self.prefill_tokens += step.prefill_tokens
        self.decode_tokens += step.decode_seqs
        self.timeline.step(self.env.now, seconds, step.prefill_tokens, step.decode_seqs,
                           kv_used_blocks, len(self.scheduler.waiting), self.scheduler.num_running)

    def _note_kv_peak(self, used_blocks: int, step) -> None:
        """At a new KV peak (blocks held for the step about to run): tokens written by then
        and block-table entries (seed 000's block-size sweep reports waste and table entries
        at peak). O(running), only at new peaks."""
        sched = self.scheduler
        self.peak_kv_used_blocks = used_blocks
        self.kv_written_at_peak = getattr(sched, "kv_tokens", 0) + step.batch_tokens
        self.table_entries_at_peak = sum(len(r.blocks) for r in sched.running.values())

    def stats(self) -> ReplicaStats:
        eng, sched = self.run_cfg.engine, self.scheduler
        flops, hbm_bytes = self.pricer.work(self.work)
        tp = eng.tensor_parallel_size
        return ReplicaStats(
            replica=self.index, pool=self.pool, hardware=self.run_cfg.hardware.name,
            tensor_parallel_size=eng.tensor_parallel_size,
            num_gpu_blocks=self.alloc.num_blocks, block_size=eng.block_size,
            kv_cache_tokens=self.alloc.num_blocks * eng.block_size, steps=sched.steps,
            busy_s=self.busy_s, flops=flops * tp, hbm_bytes=hbm_bytes * tp,
            compute_bound_steps=self.compute_bound_steps, prefill_tokens=self.prefill_tokens,
            decode_tokens=self.decode_tokens, preemptions=sched.preemptions,
            peak_kv_used_blocks=self.peak_kv_used_blocks,
            slot_steps_held=sched.slot_steps_held, slot_steps_useful=sched.slot_steps_useful,
            slot_capacity=sched.steps * eng.max_num_seqs,
            recomputed_tokens=sched.recomputed_tokens,
            swap_out_bytes=getattr(sched, "swap_out_bytes", 0),
            swap_in_bytes=getattr(sched, "swap_in_bytes", 0),
            prefix_queried_tokens=getattr(sched, "prefix_queried_tokens", 0),
            prefix_hit_tokens=getattr(sched, "prefix_hit_tokens", 0),
            prefix_queried_blocks=getattr(sched, "prefix_queried_blocks", 0),
            prefix_hit_blocks=getattr(sched, "prefix_hit_blocks", 0),
            prefix_evictions=self.alloc.num_evictions,
            kv_written_tokens_at_peak=self.kv_written_at_peak,
            block_table_entries_at_peak=self.table_entries_at_peak,
            peak_running=max(self.timeline.bins["running_max"], default=0),
            admission_blocked=getattr(sched, "admission_blocked", 0),
            first_blocked=list(getattr(sched, "first_blocked", None) or []))
