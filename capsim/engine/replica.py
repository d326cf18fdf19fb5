"""One replica (a tensor-parallel engine) as a SimPy process.

The loop is DESIGN.md's step model: schedule → price with the roofline →
``yield env.timeout(seconds)`` → complete. With nothing runnable it waits on
an event that the next submitted request triggers; it never busy-polls.
Decode-only stretches are advanced in one event (a macro-step:
:mod:`capsim.engine.macro`), in co-located replicas and in a disaggregated
variant's decode pool alike. What a replica has done (busy time, tokens, work, the KV
peak, the timeline) has one owner, its :class:`~capsim.engine.account.ReplicaAccount`:
one step through ``account_one``, a run's segments through ``account_steps``. The
decode runner gets that account and the replica's parts (clock, scheduler, allocator,
pricer, held requests), not the replica.

In a disaggregated variant (:mod:`capsim.engine.disagg`) the cluster watches a
replica through one :class:`ReplicaHooks` object: schedules (busy / idle, queue
changes), steps and runs (handoffs, token 2 of transferred requests), and
whether prefilled requests wait for room.
"""

from __future__ import annotations

import math
from itertools import chain
from typing import Callable, Protocol

import simpy

from capsim.cost.pricer import StepPricer
from capsim.cost.speculative import SpecPricer
from capsim.engine.account import ReplicaAccount
from capsim.engine.clock import Environment
from capsim.engine.first_token import FirstTokenDelay
from capsim.engine.held import HeldRequests
from capsim.engine.macro.plan import MIN_RUN_STEPS, RunPlan
from capsim.engine.macro.runner import DecodeRunner
from capsim.engine.recorder import ItlRecorder, TimelineRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler import make_kv, make_scheduler
from capsim.engine.step import Step
from capsim.results.model import QUEUE_FULL, ReplicaStats
from capsim.scenario.run_config import Pool


class ReplicaHooks(Protocol):
    """What a disaggregated cluster observes on one replica (co-located replicas have none)."""

    def scheduled(self, busy: bool, queue_changed: bool) -> None:
        """A schedule just ran: ``busy`` (a step starts) or idle; admissions changed the
        waiting queue."""

    def stepped(self, step: Step, step_s: float) -> None:
        """A single step of ``step_s`` seconds completed (before its finishes are reported)."""

    def ran(self, first_end_s: float) -> None:
        """A decode run was committed; its first step ended at ``first_end_s``."""

    def changed(self) -> None:
        """A step or run ended and its finishes were reported."""

    def transfers_waiting(self) -> bool:
        """Whether prefilled requests wait for room on a decode replica (then every finish
        here is observed: runs stop at their first finish)."""


class Replica:
    """A SimPy process that runs one engine; ``submit`` hands it a request.

    Args:
        env: the simulation (:class:`~capsim.engine.clock.Environment`).
        index: replica number in the run.
        pool: its pool (engine, hardware, KV cache, role: ``colocated``, ``prefill`` or
            ``decode``, the scheduler's role).
        pricer: the roofline of its pool.
        itl: the run's ITL recorder.
        num_classes: request classes.
        on_finish: called for every finished request.
        macro_steps: advance decode-only stretches in one event (identical results).
        timeline_bin_s: the timeline's first bin width.
    """

    def __init__(self, env: Environment, index: int, pool: Pool, pricer: StepPricer,
                 itl: ItlRecorder, num_classes: int, on_finish: Callable[[Request], None],
                 macro_steps: bool = True, timeline_bin_s: float = 0.1):
        self.env, self.index, self.pool_cfg, self.pool = env, index, pool, pool.role
        self.macro_steps = macro_steps
        self.pricer = pricer
        self.alloc = make_kv(pool.engine, pool.kv.num_gpu_blocks, pool.kv.kv_bytes_per_token)
        self.scheduler = make_scheduler(pool.engine, self.alloc, pool.kv.kv_bytes_per_token,
                                        num_classes, itl, pool.role, pool.preset.scheduler.knobs,
                                        pool.spec)
        if pool.spec is not None:       # speculative steps: priced and accounted their own way
            self.spec_pricer = SpecPricer(pricer, pool.draft_pricer(), pool.spec.k,
                                          pool.draft_host())
            self._start_step, self._complete_step = self._start_spec_step, self._complete_spec_step
        tracer = getattr(env, "step_trace", None)    # --trace-events (engine/step_trace.py)
        timeline = (TimelineRecorder(index, pool.role, timeline_bin_s) if tracer is None
                    else tracer.timeline(self, timeline_bin_s))
        self.account = ReplicaAccount(self.scheduler, pricer.new_tally(), timeline)
        # An async engine composes the next step while this one runs: requests submitted
        # meanwhile (submit time, request) wait here for the step after it.
        self.schedules_ahead = pool.host_overhead.overlap == "async"
        self._held = HeldRequests(self.scheduler.add)
        self._late = self._held.items   # the same list for the replica's life
        self.runner = DecodeRunner(env, self.scheduler, self.alloc, pricer, self.account,
                                   self._held)
        self.on_finish = on_finish
        # vLLM V0's asynchronous output processing: tokens reach the client this long after
        # their step (Pool.output_delay_s; 0 for every other engine)
        self._output_delay_s = pool.output_delay_s
        # ... and a first token waits for the next step's host work and eager launches
        self._first_token = FirstTokenDelay.of(pool, pricer)
        if pool.holds_window_finishes:      # vLLM 0.6.0: window finishes leave at its end
            self.scheduler.hold_window_finishes(pool.output_delay_s)
        self.hooks: ReplicaHooks | None = None   # set by a disaggregated cluster
        self._outstanding = 0           # Σ prompt + output tokens of unreported requests
        self._inflight = 0              # requests submitted here and not reported finished
        # The engine's own request limits (None: none; Replica.refusal)
        self.max_waiting = pool.engine.max_waiting_requests
        self.max_inflight = pool.engine.max_inflight_requests
        self._step_s = 0.0              # the last step's duration
        self._in_step: tuple = ()       # (cost, KV blocks used, LM-head rows, seconds) of the step in progress
        self.busy = False               # running a step now (kept while hooked)
        self._wake: simpy.Event | None = None
        self.failed = False             # failed (engine/fleet.py): its loop ends, state is dropped
        self._may_plan = False          # the step just scheduled may start a decode run
        self._process = env.process(self._loop())

    # ------------------------------------------------------------ inputs
    @property
    def outstanding_tokens(self) -> int:
        """Σ prompt + output tokens of requests submitted here and not finished by now
        (what ``least_outstanding_tokens`` routing compares). Inside a decode run that
        goes on through finishes, those whose step ended by now count as finished, as
        they would step by step."""
        return self._outstanding - self.runner.finished_tokens(self.env.now)

    @outstanding_tokens.setter
    def outstanding_tokens(self, value: int) -> None:
        self._outstanding += value - self.outstanding_tokens

    @property
    def num_waiting(self) -> int:
        """Requests queued here: the scheduler's waiting queue and those submitted during
        the step in progress of an engine that schedules ahead."""
        return len(self.scheduler.waiting) + len(self._late)

    def waiting_requests(self):
        """The requests :attr:`num_waiting` counts, queue first."""
        return chain(self.scheduler.waiting, (req for _, req in self._late))

    @property
    def num_inflight(self) -> int:
        """Requests submitted here and not finished by now, queued or running (what TGI's
        ``max_concurrent_requests`` counts)."""
        return self._inflight - self.runner.finished_count(self.env.now)

    def refusal(self) -> str:
        """Why this engine turns away a request submitted now ("" if it takes it): its
        waiting queue already holds ``engine.max_waiting_requests`` (SGLang's
        ``_abort_on_queued_limit``: ``len(waiting_queue) + 1 > max_queued_requests``), or
        ``engine.max_inflight_requests`` requests are queued or running here (TGI's
        semaphore of ``max_concurrent_requests`` permits). The reason starts ``queue_full:``."""
        limit = self.max_waiting
        if limit is not None and self.num_waiting >= limit:
            return (f"{QUEUE_FULL}: {self.num_waiting} requests wait at replica {self.index} "
                    f"(engine.max_waiting_requests {limit})")
        limit = self.max_inflight
        if limit is not None and self.num_inflight >= limit:
            return (f"{QUEUE_FULL}: {self.num_inflight} requests in flight at replica "
                    f"{self.index} (engine.max_inflight_requests {limit})")
        return ""

    def submit(self, req: Request) -> None:
        now = self.env.now
        req.replica = self.index
        self._inflight += 1
        self._outstanding += req.prompt_tokens + req.output_tokens
        if self.schedules_ahead and self._wake is None:     # a step is in progress
            self._late.append((now, req))
            self.runner.arrived(now, late=True)
            return
        self.runner.arrived(now)
        self.scheduler.add(req)
        if self.scheduler.held_finishes:   # the request wakes vLLM 0.6.0's loop: they leave
            self.scheduler.release_held(now)
            self._report_finished()
        self.wake()

    def admit_transferred(self, req: Request) -> None:
        """Decode role: ``req``'s KV has arrived; it decodes from the next scheduled step."""
        self._inflight += 1
        self.runner.arrived(self.env.now)
        self.scheduler.admit_transfer(req)
        self.wake()

    def reserve_transfer(self, req: Request) -> bool:
        """Decode pool: hold a slot and blocks for ``req``'s KV if both are free now
        (:meth:`ContinuousScheduler.reserve_transfer`); a run in progress ends after its
        step in progress (the blocks it planned to take may be gone)."""
        self.runner.sync()
        if not self.scheduler.reserve_transfer(req):
            return False
        self.runner.cut()
        return True

    def kv_load(self) -> tuple[int, int]:
        """(KV blocks in use, running sequences) as of now, what a disaggregated cluster's
        ``least_kv`` placement compares (inside a decode run: the blocks its steps have
        taken by now)."""
        load = self.runner.kv_load()
        return load if load is not None else (self.alloc.num_used_blocks,
                                              self.scheduler.num_running)

    def wake(self) -> None:
        """Resume the loop if it is idle (new work arrived)."""
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    # ------------------------------------------------------------ the loop
    def _loop(self):
        """schedule → (a decode run | one step: price → timeout → complete) → report."""
        schedule, plan_run = self._schedule, self._plan
        start, complete, report = self._start_step, self._complete_step, self._report
        while True:
            step = schedule()
            if step is None:                             # nothing runnable
                yield from self._idle()
                continue
            plan = plan_run(step) if self._may_plan else None
            if plan is None:
                yield start(step)                        # price → timeout
                if self.failed:                          # the step died with the replica
                    return
                complete(step)                           # → complete
            else:
                yield from self._decode_run(plan, step)  # a decode run in one event
                if self.failed:
                    return
            report()                                     # finishes, then the hooks

    def _schedule(self) -> Step | None:
        """The next step (the hooks told of it), after which the requests held during the
        step that just ended join the queue (:meth:`_release_held`); with no step but some
        joined, schedule again. None: nothing to run. Sets :attr:`_may_plan`: a decode
        run is not tried while arrivals come faster than a few steps apart, nor while
        requests just queued wait to be scheduled in the next steps."""
        sched, hooks, late = self.scheduler, self.hooks, self._late
        while True:
            queued = len(sched.waiting)
            step = sched.schedule(self.env.now)
            if hooks is not None:
                hooks.scheduled(step is not None, len(sched.waiting) != queued)
            if not late:
                self._may_plan = self.runner.arrival_gap_s > MIN_RUN_STEPS * self._step_s
                return step
            self._release_held(step is None)
            if step is not None:
                self._may_plan = False
                return step

    def _release_held(self, idle: bool) -> None:
        """Hand the scheduler the requests submitted during the step that just ended (vLLM
        V1 ``EngineCore.step_with_batch_queue``, vllm/v1/engine/core.py at v0.19.0; SGLang's
        ``Scheduler.event_loop_overlap``; TensorRT-LLM's ``PyExecutor._executor_loop_overlap``:
        the step now starting was composed when the one that ended began). One submitted
        as that step ended (a closed-loop client's next request) arrives after the engine
        composed the step after it, so it waits one step more, unless nothing runs
        (``idle``)."""
        self._held.release_before(math.inf if idle else self.env.now)

    def _idle(self):
        """Wait for new work (:meth:`wake`); never busy-polls."""
        self._wake = self.env.event()
        yield self._wake
        self._wake = None

    def _plan(self, step: Step) -> RunPlan | None:
        """A decode run starting with ``step`` (:meth:`Scheduler.plan_decode_run`, through
        finishes about as far as the next arrival: :meth:`DecodeRunner.horizon_steps`), or
        None: this step on its own."""
        if not self.macro_steps:
            return None
        waiting = self.hooks is not None and self.hooks.transfers_waiting()
        return self.scheduler.plan_decode_run(
            step, horizon_steps=0 if waiting else self.runner.horizon_steps(self._step_s))

    def _decode_run(self, plan: RunPlan, step: Step):
        """Advance ``plan`` in one event (:meth:`DecodeRunner.advance`). Its first step's
        KV peak is noted now, as :meth:`_start_step` would: a transfer reserved while it
        runs adds to the tokens held before the run commits it."""
        used, account = self.alloc.num_used_blocks, self.account
        if used > account.peak_kv_used_blocks:
            account.note_kv_peak(used, step)
        hooks, first = self.hooks, self._first_token
        if first is not None and first.fresh:
            first.settle(step.decode_seqs, 0, getattr(self.scheduler, "decoders", None))
        first_end_s, self._step_s = yield from self.runner.advance(plan, hooks is not None)
        if hooks is not None:
            hooks.ran(first_end_s)

    def _start_step(self, step: Step) -> simpy.Event:
        """Price ``step`` (noting a new KV peak) and return the timeout it takes."""
        logits = step.logits_seqs          # before complete() moves the prefills on
        cost = self.pricer.price(step, logits)
        first = self._first_token
        if first is not None and first.fresh:
            first.settle(step.decode_seqs + len(step.prefills), step.prefill_tokens,
                         getattr(self.scheduler, "decoders", None))
        used, account = self.alloc.num_used_blocks, self.account
        if used > account.peak_kv_used_blocks:
            account.note_kv_peak(used, step)
        seconds = cost.seconds + (self._swap_s(step.swap_bytes) if step.swap_bytes else 0.0)
        self._step_s = seconds
        self._in_step = (cost, used, logits, seconds)
        return self.env.timeout(seconds)

    def _complete_step(self, step: Step) -> None:
        """Complete the step :meth:`_start_step` priced and account it."""
        cost, used, logits, seconds = self._in_step
        sched, now = self.scheduler, self.env.now
        sched.complete(step, now)
        if self._first_token is not None and step.prefills:
            self._first_token.note(step.prefills, now)
        self.account.account_one(step, now, seconds, cost.compute_bound, logits, used,
                                 len(sched.waiting) + len(self._late))
        if self.hooks is not None:
            self.hooks.stepped(step, cost.seconds)

    def _start_spec_step(self, step: Step) -> simpy.Event:
        """:meth:`_start_step` of a speculating replica: the verification of
        ``scheduler.width`` tokens per decoding sequence and the draft passes
        (:class:`~capsim.cost.speculative.SpecPricer`)."""
        cost, work, draft_flops, draft_bytes = self.spec_pricer.price(
            step, step.logits_seqs, self.scheduler.width)
        used, account = self.alloc.num_used_blocks, self.account
        if used > account.peak_kv_used_blocks:
            account.note_kv_peak(used, step)
        seconds = cost.seconds + (self._swap_s(step.swap_bytes) if step.swap_bytes else 0.0)
        self._step_s = seconds
        self._in_step = (cost, used, (work, draft_flops, draft_bytes), seconds)
        return self.env.timeout(seconds)

    def _complete_spec_step(self, step: Step) -> None:
        """:meth:`_complete_step` of a speculating replica: the target's work as priced, the
        tokens the decoders emitted as the step's decode tokens."""
        cost, used, (work, draft_flops, draft_bytes), seconds = self._in_step
        sched, account = self.scheduler, self.account
        sched.complete(step, self.env.now)
        account.add_busy(seconds, cost.compute_bound)
        account.add_draft(draft_flops, draft_bytes)
        tokens, logits, pairs, kv_read, logit_steps = work
        account.account_steps((self.env.now,), (seconds,), step.prefill_tokens,
                              sched.emitted_tokens,
                              (1, tokens, logits, pairs, kv_read, logit_steps),
                              used, 0, 0, self.num_waiting)
        if self.hooks is not None:
            self.hooks.stepped(step, cost.seconds)

    def _report(self) -> None:
        """After a step or run: report its finishes, then tell the hooks."""
        self._report_finished()
        if self.hooks is not None:
            self.hooks.changed()

    def _report_finished(self) -> None:
        """Hand each finished request to ``on_finish``, its first and last token moved to
        when its client receives them (:attr:`~capsim.scenario.run_config.Pool.output_delay_s`
        later; a first token also its wait beyond that for the next step's host work,
        settled by :class:`~capsim.engine.first_token.FirstTokenDelay` when that step began)."""
        sched = self.scheduler
        if sched.finished:
            finished = list(sched.finished)     # on_finish may submit, which may report
            sched.finished.clear()
            self._inflight -= len(finished)
            delay_s = self._output_delay_s
            for req in finished:
                self._outstanding -= req.prompt_tokens + req.output_tokens
                if delay_s:
                    req.first_token_s += delay_s
                    req.finish_s += delay_s
                self.on_finish(req)

    def _offload_stats(self, counters) -> dict:
        """The host tier's figures for :class:`ReplicaStats` (none without KV offload)."""
        host = getattr(self.alloc, "host", None)
        if host is None:
            return {}
        return dict(offload_hit_tokens=counters.offload_hit_tokens,
                    offload_stored_blocks=host.stored_blocks,
                    offload_capacity_blocks=host.num_blocks)

    def _swap_s(self, nbytes: int) -> float:
        """Host↔GPU copy time: each GPU moves its KV shard over its own PCIe link."""
        hw, tp = self.pool_cfg.hardware, self.pool_cfg.engine.tensor_parallel_size
        return hw.pcie_latency_s + nbytes / tp / hw.pcie_bandwidth_bytes_per_s

    def fail(self) -> list[Request]:
        """The replica fails now: steps that ended by now count (a decode run is committed
        up to now and its finishes reported), the step in progress is lost, and the
        requests queued, running or swapped here are returned (counters materialised) for
        the fleet to retry or fail. The loop ends at its next wake-up; the scheduler and
        KV cache are left as they are (the replica is gone)."""
        self.failed = True
        self.runner.abort()
        self.scheduler.release_held(self.env.now)   # finished: their chunks leave with it
        self._report_finished()
        sched = self.scheduler
        sched.sync()
        return [*sched.running.values(), *sched.waiting, *sched.swapped,
                *(req for _, req in self._late)]

    def stats(self) -> ReplicaStats:
        eng, sched, acct = self.pool_cfg.engine, self.scheduler.counters, self.account
        flops, hbm_bytes = self.pricer.work(acct.work)
        if acct.draft_flops:
            flops, hbm_bytes = flops + acct.draft_flops, hbm_bytes + acct.draft_hbm_bytes
        tp = eng.tensor_parallel_size
        return ReplicaStats(
            replica=self.index, pool=self.pool, hardware=self.pool_cfg.hardware.name,
            tensor_parallel_size=eng.tensor_parallel_size,
            num_gpu_blocks=self.alloc.num_blocks, block_size=eng.block_size,
            kv_cache_tokens=self.alloc.num_blocks * eng.block_size, steps=sched.steps,
            busy_s=acct.busy_s, flops=flops * tp, hbm_bytes=hbm_bytes * tp,
            compute_bound_steps=acct.compute_bound_steps, prefill_tokens=acct.prefill_tokens,
            decode_tokens=acct.decode_tokens, preemptions=sched.preemptions,
            peak_kv_used_blocks=acct.peak_kv_used_blocks,
            slot_steps_held=sched.slot_steps_held, slot_steps_useful=sched.slot_steps_useful,
            slot_capacity=sched.steps * eng.max_num_seqs,
            recomputed_tokens=sched.recomputed_tokens,
            swap_out_bytes=sched.swap_out_bytes, swap_in_bytes=sched.swap_in_bytes,
            prefix_queried_tokens=sched.prefix_queried_tokens,
            prefix_hit_tokens=sched.prefix_hit_tokens,
            prefix_queried_blocks=sched.prefix_queried_blocks,
            prefix_hit_blocks=sched.prefix_hit_blocks,
            prefix_evictions=self.alloc.num_evictions,
            **self._offload_stats(sched),
            kv_written_tokens_at_peak=acct.kv_written_at_peak,
            block_table_entries_at_peak=acct.table_entries_at_peak,
            peak_running=max(acct.timeline.bins["running_max"], default=0),
            admission_blocked=sched.admission_blocked,
            first_blocked=list(sched.first_blocked or []))
