"""Advancing a planned decode run in one SimPy event (a macro-step).

Step times are the step-by-step path's, added in the same order, so the clock
lands on the same floats: one 2-D ``cumsum`` (which accumulates left to right,
unlike ``np.sum``) gives the running clock, busy time, timeline-bin busy time and
(when any step is compute-bound) compute-bound count at every step. An arrival
(``Replica.submit``, or a transfer's KV landing) moves the wait to an earlier end:
after the step in progress, exactly where the step-by-step loop would first see it,
or, for a request an engine that schedules ahead holds back to the step after next,
after the step that follows (still decoding as planned). Segments (the batch shrinking
at a finish) are then committed in order, each as the step loop would commit its
steps (:meth:`ReplicaAccount.account_steps
<capsim.engine.account.ReplicaAccount.account_steps>`). A disaggregated cluster reading
the replica mid-run first commits what has happened by then (:meth:`DecodeRunner.sync`).

The runner works on the replica's parts, not on the replica: its clock, scheduler, KV
allocator, pricer, accounting (:class:`~capsim.engine.account.ReplicaAccount`) and the
requests it holds for a later step (:class:`~capsim.engine.held.HeldRequests`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate

import numpy as np
import simpy

from capsim.cost.pricer import StepPricer
from capsim.engine.account import ReplicaAccount
from capsim.engine.clock import Environment
from capsim.engine.held import HeldRequests
from capsim.engine.macro.plan import RunBlocks, RunPlan
from capsim.engine.scheduler.base import Scheduler

# How far a run first plans through finishes, in mean gaps between arrivals at its
# replica: an arrival cuts most runs before (P = 1 − e^−2 for Poisson arrivals), and one
# that is not cut is planned on to twice its length two steps before its end
# (:meth:`DecodeRunner._extend`). On day_in_the_life at its peak, runs planned 13× the
# steps they committed at 32 gaps planned in one go, 2× at 2 gaps planned on.
HORIZON_GAPS = 2

_MAX = np.maximum.reduce   # ndarray.max without its Python wrapper (once per commit)


def _cumulated(first, secs: np.ndarray, bound: np.ndarray | None) -> np.ndarray:
    """Rows clock, busy seconds, busy seconds in the run's first timeline bin[, compute-bound
    steps] (the last with ``bound``), from ``first`` (column 0) on: column j + 1 adds step
    j's ``secs`` (and ``bound``) to column j."""
    acc = np.empty((3 if bound is None else 4, len(secs) + 1))
    if bound is None:                   # scalar stores: no tuple to convert
        acc[0, 0], acc[1, 0], acc[2, 0] = first
    else:
        acc[:, 0] = first
    acc[:3, 1:] = secs
    if bound is not None:
        acc[3, 1:] = bound
    acc.cumsum(axis=1, out=acc)         # the method: no dispatch wrapper
    return acc


class _Run:
    """A decode run in progress: its plan, the end time of every step (``clock[j + 1]``
    for step j; ``acc``: that and the other cumulated rows), step seconds, timeline-bin
    busy time (all as planned so far: an open plan grows), and how far it has been
    committed: steps ``0..done − 1`` are committed, the blocks of steps ``0..grown − 1``
    are taken (step 0's by ``schedule``); ``used_blocks`` were in use in step
    ``grown − 1`` (blocks reserved for a transfer since then come after it).
    ``done_tokens[i]``: prompt + output tokens of the requests that finished by
    ``done_times[i − 1]`` (what the router no longer counts as outstanding then)."""

    __slots__ = ("plan", "acc", "clock", "secs", "bin_busy", "bin_now", "bin_s", "queue0",
                 "done", "grown", "used_blocks", "done_times", "done_tokens", "end")

    def __init__(self, plan: RunPlan, acc: np.ndarray, secs: np.ndarray, bin_now: int,
                 bin_s: float, queue0: int, used_blocks: int):
        self.plan, self.bin_now, self.bin_s, self.queue0 = plan, bin_now, bin_s, queue0
        self.done, self.grown = 0, 1
        self.used_blocks = used_blocks
        self.set_clock(acc, secs)

    def set_clock(self, acc: np.ndarray, secs: np.ndarray) -> None:
        """The run's cumulated rows (clock, busy seconds, busy seconds in the first bin[,
        compute-bound steps]) and step seconds, as planned so far."""
        self.acc, self.clock, self.secs, self.bin_busy = acc, acc[0], secs, acc[2]
        ends = self.plan.ends
        self.end = ends[-1]             # the step count it ends after (cut: fewer)
        if len(ends) > 1:               # finishes inside the run (most runs have none)
            clock = self.clock
            self.done_times = [float(clock[e]) for e in ends[:-1]]
            self.done_tokens = [0, *accumulate(self.plan.done_tokens)]
        else:
            self.done_times = []

    def step_at(self, t_s: float) -> int:
        """The step in progress at ``t_s``: the first one ending at or after it."""
        return int(self.clock[1:].searchsorted(t_s))


class DecodeRunner:
    """Plans and advances one replica's decode runs.

    ``arrival_gap_s`` is an EMA of the gap between arrivals at the replica: the replica
    tries no run while arrivals come faster than ``MIN_RUN_STEPS`` steps (it would be
    cut at once), and a run plans through finishes only about as far as the next
    arrival (:meth:`horizon_steps`).

    Args:
        env: the simulation's clock.
        scheduler: the replica's scheduler (plans, extends and commits runs).
        alloc: its KV allocator (``num_used_blocks``: blocks in use).
        pricer: its roofline (``decode_costs``: a run's step seconds).
        account: its accounting (committed steps, busy time, KV peak, timeline).
        held: requests held for the step after the one in progress (an engine that
            schedules ahead).
    """

    def __init__(self, env: Environment, scheduler: Scheduler, alloc,
                 pricer: StepPricer, account: ReplicaAccount, held: HeldRequests):
        self.env, self.scheduler, self.alloc, self.pricer = env, scheduler, alloc, pricer
        self.account, self.held = account, held
        self.run: _Run | None = None    # the decode run in progress, until committed
        self.waiting = False            # waiting out a run an arrival may cut short
        self.failed = False             # the replica failed (:meth:`abort`)
        self._hooked = False            # a cluster watches the replica (runs cut as it ran)
        self._end: simpy.Event | None = None    # the event the replica's process waits for
        self.arrival_gap_s = math.inf
        self._last_arrival_s = math.nan

    # ------------------------------------------------------------ planning
    def horizon_steps(self, step_s: float) -> int:
        """Steps a run first plans through finishes: :data:`HORIZON_GAPS` × the mean steps
        between arrivals here. Planning past the arrival that cuts the run is wasted
        numpy work; stopping short of it costs an extension (an event and a pricing of
        the steps added), far less than a new run. (Planned in one go, the factor was
        32: on benchmark 1 factors 2 / 4 / 8 / 16 / 32 / 64 gave 27.0 / 23.8 / 21.2 /
        19.3 / 18.7 / 18.7 k runs for 3.7 / 3.9 / 4.1 / 4.8 / 5.2 / 5.2 M planned
        steps.)"""
        if self.arrival_gap_s == math.inf or not step_s:
            return 4096
        return min(4096, int(HORIZON_GAPS * self.arrival_gap_s / step_s))

    def arrived(self, now: float, late: bool = False) -> None:
        """New work at ``now`` (``late``: a request held back for the step after next,
        :class:`~capsim.engine.held.HeldRequests`): end the run in progress (:meth:`cut`); update the arrival-gap
        EMA."""
        self.cut(late)
        gap, self._last_arrival_s = now - self._last_arrival_s, now
        if gap == gap:                                  # not the first arrival (NaN)
            ema = self.arrival_gap_s
            self.arrival_gap_s = gap if ema == math.inf else ema + (gap - ema) / 8

    def cut(self, late: bool = False) -> None:
        """End the run in progress (if any) after the step in progress, or, for a request
        just submitted to an engine that schedules ahead (``late``), after the step that
        follows it (:meth:`_late_run_end`). The replica's process, waiting for the run's
        end, waits for the new end instead (:meth:`Environment.redirect
        <capsim.engine.clock.Environment.redirect>`: no interrupt, one event)."""
        if not self.waiting:
            return
        self.waiting = False
        run, env = self.run, self.env
        k = run.plan.ends[-1]
        now = env.now
        if now >= run.clock[k]:             # submitted as the run ends: it ends there
            return
        m = run.step_at(now) + 1            # the run ends with the step in progress
        if late and m < k and not self._hooked:
            m = min(k, self._late_run_end(run, now))
        # An open plan waits until two steps before its end (then plans on), so m <= k
        # here is where the whole run would be cut: it ends there too.
        if m < k or run.plan.more is not None:
            run.end = m
            env.redirect(self._end, env.timeout_at(float(run.clock[m])))

    def cut_through_finishes(self) -> None:
        """End a run that planned to go on through finishes (someone now waits for the
        room a finish frees)."""
        run = self.run
        if run is not None and (len(run.plan.ends) > 1 or run.plan.more is not None):
            self.cut()

    # ------------------------------------------------------------ running
    def advance(self, plan: RunPlan, hooked: bool):
        """Advance ``plan`` (its first step just scheduled) with one SimPy event, or one
        per extension of an open plan (:meth:`_extend`); a generator for the replica's
        process. ``hooked``: a cluster watches the replica (:class:`ReplicaHooks
        <capsim.engine.replica.ReplicaHooks>`). Returns (as ``yield from``'s value) the
        end time of step 0 and the duration of the last step committed."""
        env, account = self.env, self.account
        timeline = account.timeline
        ends = plan.ends
        k = ends[-1]
        lengths = [k] if len(ends) == 1 else [b - a for a, b in zip([0, *ends], ends)]
        secs, bound = self.pricer.decode_costs(plan.seqs, plan.ctx0, lengths)
        now = env.now
        bin_now = timeline.bin_of(now)
        rows = 3 if bound is None else 4
        acc = _cumulated((now, account.busy_s, timeline.busy_in(bin_now), 0.0)[:rows], secs,
                         bound)
        self.run = run = _Run(plan, acc, secs, bin_now, timeline.bin_s,
                              len(self.scheduler.waiting), self.alloc.num_used_blocks)
        self.waiting, self._hooked = True, hooked
        while True:
            # An open plan wakes two steps before its end to plan further: an arrival
            # until then cuts it where it would cut the whole run (:meth:`cut`).
            k = plan.ends[-1]
            self._end = env.timeout_at(float(run.clock[k if plan.more is None else k - 2]))
            yield self._end             # or the earlier end :meth:`cut` moved the wait to
            if self.failed or not self.waiting or plan.more is None:
                break
            self._extend(run)
        acc = run.acc
        m = run.end
        if self.failed:             # the replica failed mid-run: the steps it committed count
            m = run.done
        else:
            self.waiting = False
            self._commit(m, last=True)
            self.run = None
            if m > 1 and self.held.items:   # queued at a step end inside the run (late)
                self.held.release_before(float(run.clock[m - 1]))
        account.end_run(float(acc[1, m]), int(acc[3, m]) if len(acc) > 3 else 0)
        return (math.nan, 0.0) if self.failed else (float(run.clock[1]), float(run.secs[m - 1]))

    def _extend(self, run: _Run) -> None:
        """Plan an open run on to twice its length (:func:`~capsim.engine.macro.plan.extend_run`;
        a reader may have committed part of it: :meth:`sync`) and price the new segments,
        their clock going on from the run's (the same sums in the same order as one
        ``cumsum`` of the whole)."""
        plan = run.plan
        i, k = len(plan.ends), plan.ends[-1]
        self.scheduler.extend_decode_run(plan, 2 * k, run.done)
        if len(plan.ends) == i:
            return
        ends = plan.ends[i - 1:]
        secs, bound = self.pricer.decode_costs(plan.seqs[i:], plan.ctx0[i:],
                                              [b - a for a, b in zip(ends, ends[1:])])
        old = run.acc
        rows = 4 if bound is not None else len(old)
        acc = np.empty((rows, k + 1 + len(secs)))
        acc[:len(old), :k + 1] = old[:, :k + 1]
        if rows > len(old):                         # the compute-bound row starts here
            acc[3, :k + 1] = 0.0
        acc[:3, k + 1:] = secs
        if rows == 4:
            acc[3, k + 1:] = 0.0 if bound is None else bound
        # From step k − 1's sums on: the same sums in the same order as one cumsum.
        tail = acc[:, k:]
        tail.cumsum(axis=1, out=tail)
        run.set_clock(acc, np.concatenate((run.secs, secs)))

    @staticmethod
    def _late_run_end(run: _Run, t_s: float) -> int:
        """Where a run cut by a request submitted at ``t_s`` to an engine that schedules
        ahead (:meth:`Replica._release_held <capsim.engine.replica.Replica._release_held>`)
        ends: step by step, the step starting at the first step end after ``t_s`` was
        composed before the request was queued (it decodes as planned); the step after it
        is the first that may admit it. So the run goes on through that step, one event
        instead of two."""
        return int(run.clock.searchsorted(t_s, "right")) + 1

    def _commit(self, m: int, last: bool) -> None:
        """Commit steps ``done..m − 1`` of the run in progress, segment by segment, as the
        step loop would; ``last``: step m − 1 is the run's last (it saw the waiting queue
        as it is now). Earlier steps saw the queue as it was when the run began, plus the
        requests submitted to an engine that schedules ahead by their end (held back to a
        later step: :class:`~capsim.engine.held.HeldRequests`; at a tie the submission
        counts, as when the run ends there)."""
        run, late = self.run, self.held.items
        if late:
            times = [t for t, _ in late]
            i = max(run.done, run.step_at(times[0]))    # the first step that saw one queued
            clock, bin_of = run.clock, self.account.timeline.bin_of
            while i < m - 1 or (i < m and not last):
                end = float(clock[i + 1])
                # A step ending in the bin of the next one needs no queue of its own: the
                # bin keeps the largest, and the queue only grows.
                if i + 1 == m or bin_of(end) != bin_of(float(clock[i + 2])):
                    self._commit_to(i + 1, run.queue0 + bisect_right(times, end))
                i += 1
        if m > run.done:
            self._commit_to(m, len(self.scheduler.waiting) + len(late) if last
                            else run.queue0)

    def _commit_to(self, m: int, last_queue: int) -> None:
        """Commit steps ``done..m − 1`` (m > done), step m − 1 having seen ``last_queue``
        requests waiting, the others ``run.queue0``. When they all end in the timeline bin
        the run started in, the timeline takes them in one entry (the same sums and maxima
        as one entry per segment: :meth:`TimelineRecorder.add_in_bin
        <capsim.engine.recorder.TimelineRecorder.add_in_bin>`), its maxima kept as the
        segments commit (no per-segment entries to gather)."""
        run = self.run
        plan, lo, seg_start, queue0 = run.plan, run.done, 0, run.queue0
        timeline = self.account.timeline
        one_bin = (timeline.bin_s == run.bin_s and run.bin_now < timeline.max_bins
                   and timeline.bin_of(float(run.clock[m])) == run.bin_now)
        tokens = kv = queue = running = 0
        for n, ctx0, end in zip(plan.seqs, plan.ctx0, plan.ends):
            if end > lo:
                hi = min(end, m)
                if hi <= lo:
                    break
                lq = last_queue if hi == m else queue0
                top = self._commit_segment(run, lo, hi, n, ctx0 + n * (lo - seg_start), lq,
                                           one_bin)
                if one_bin:              # the entry's sums and maxima, as the step loop's
                    steps = hi - lo
                    tokens += n * steps
                    kv = max(kv, top[0])
                    queue = max(queue, max(queue0, lq) if steps > 1 else lq)
                    running = max(running, max(top[1], top[2]) if steps > 1 else top[2])
                lo = hi
            seg_start = end
        if one_bin:
            timeline.add_in_bin(run.bin_now, m - run.done, 0, tokens, float(run.bin_busy[m]),
                                float(_MAX(run.secs[run.done:m])), kv, queue, running)
        run.done = max(run.done, m)
        run.grown = max(run.grown, m)

    def _commit_segment(self, run: _Run, start: int, stop: int, n: int, ctx0: int,
                        last_queue: int, one_bin: bool) -> tuple[int, int, int] | None:
        """Commit steps ``start``..``stop − 1`` of a run, within one segment where ``n``
        decode over ``ctx0`` tokens in step ``start``; step j ends at ``run.clock[j + 1]``.
        The waiting queue was ``run.queue0`` long in every step but the last one, which saw
        ``last_queue``. ``one_bin``: the caller records the timeline entry; this returns
        (KV blocks in use in the last step, batch before, batch after), as
        :meth:`TimelineRecorder.record <capsim.engine.recorder.TimelineRecorder.record>`
        takes them; else the steps are recorded now (None)."""
        sched, account = self.scheduler, self.account
        m = stop - start
        running0 = sched.num_running
        if start < run.grown:                    # its blocks were taken before
            blocks = sched.grow_for_run(m, 1)
            blocks.used0 = run.used_blocks
        else:
            blocks = sched.grow_for_run(m, 0)
        account.note_run_peak(blocks, n)  # a peak already noted (a synced step's) is kept
        sched.commit_decode_run(run.clock[start:stop + 1])
        ctx = m * ctx0 + n * (m * (m - 1) // 2)     # Σ context: +n per step
        if one_bin:
            account.add_decode(n * m, (m, n * m, n * m, ctx, ctx, m))
            return blocks.at(m - 1), running0, sched.num_running
        timeline = account.timeline
        ends = run.clock[start + 1:stop + 1]
        # Steps ending in the bin the run started in: their busy time is the run's sum.
        in_first_bin = timeline.bin_of(ends[0]) == run.bin_now and timeline.bin_s == run.bin_s
        account.account_steps(
            ends, run.secs[start:stop], 0, n, (m, n * m, n * m, ctx, ctx, m),
            blocks.at if m > 1 else blocks.at(0), run.queue0, running0,
            last_queue,
            busy_s=float(run.bin_busy[stop]) if in_first_bin else None)
        return None

    # ------------------------------------------------------------ readers mid-run
    def sync(self) -> None:
        """Bring the run in progress up to now, for readers of the replica's state (a
        disaggregated cluster placing a transfer): commit the steps that ended before now
        and take the blocks of the step in progress, as the step loop would have by now.
        The run goes on."""
        run = self.run
        if run is None:
            return
        j = run.step_at(self.env.now)
        self._commit(j, last=False)
        if run.grown <= j:
            seg = bisect_right(run.plan.ends, j)
            self.account.note_run_peak(self.scheduler.grow_for_run(1, 0), run.plan.seqs[seg])
            run.grown = j + 1
            run.used_blocks = self.alloc.num_used_blocks

    def kv_load(self) -> tuple[int, int] | None:
        """(KV blocks in use, running sequences) as of now inside a run, in closed form
        while no finish has happened since the last commit (else after :meth:`sync`);
        None outside a run."""
        run = self.run
        if run is None:
            return None
        sched = self.scheduler
        j = run.step_at(self.env.now)
        ends = run.plan.ends
        if j < ends[bisect_right(ends, run.done)]:    # no finish since step `done`
            first = max(run.grown, run.done)
            taken = sched.decode_blocks_ahead(first - run.done, j + 1 - first)
            return self.alloc.num_used_blocks + taken, sched.num_running
        self.sync()
        return self.alloc.num_used_blocks, sched.num_running

    def finished_tokens(self, now: float) -> int:
        """Prompt + output tokens of the requests whose step in the run in progress ended by
        ``now`` (not yet reported: the run commits its finishes at its end); 0 outside a
        run."""
        run = self.run
        if run is None or not run.done_times:
            return 0
        return run.done_tokens[bisect_right(run.done_times, now)]

    def finished_count(self, now: float) -> int:
        """Requests whose step in the run in progress ended by ``now`` (not yet reported,
        as :meth:`finished_tokens`); 0 outside a run. Each segment boundary is a finish
        that shrinks the batch by its sequences, one per request: a run stops at the finish
        of a forked sample instead (:func:`~capsim.engine.macro.plan.plan_run`)."""
        run = self.run
        if run is None or not run.done_times:
            return 0
        seqs = run.plan.seqs
        return seqs[0] - seqs[bisect_right(run.done_times, now)]

    def abort(self) -> None:
        """The replica fails now: commit the run in progress up to now (its finishes are
        then reported by the replica) and drop the rest; a run being advanced ends at its
        next wake-up with the steps committed."""
        self.failed = True
        if self.run is not None:
            self.sync()
            self.run = None
            self.waiting = False


__all__ = ["DecodeRunner", "RunBlocks"]
