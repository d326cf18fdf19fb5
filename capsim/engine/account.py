"""One replica's accounting: busy time, tokens, work, the KV peak and the timeline.

A replica commits engine steps in three shapes (one step of the step loop, a decode
run's segment, a pipelined batch) and all of them land here, so what a report reads
has one owner: :meth:`ReplicaAccount.account_one` for one step,
:meth:`ReplicaAccount.account_steps` for m ≥ 1 steps (same sums, same order: the
timeline's :meth:`~capsim.engine.recorder.TimelineRecorder.record_step` is
:meth:`~capsim.engine.recorder.TimelineRecorder.record` of one step).
"""

from __future__ import annotations

from typing import Callable

from capsim.cost.pricer import WorkTally
from capsim.engine.macro.plan import RunBlocks
from capsim.engine.recorder import TimelineRecorder
from capsim.engine.scheduler.base import Scheduler
from capsim.engine.step import Step


class ReplicaAccount:
    """What one replica has done so far.

    Args:
        scheduler: the replica's scheduler (the running batch the timeline records, the
            KV tokens and block-table entries noted at a KV peak).
        tally: the pricer's work tally (:meth:`StepPricer.new_tally
            <capsim.cost.pricer.StepPricer.new_tally>`; FLOPs and bytes follow from it).
        timeline: the replica's timeline.

    Attributes:
        busy_s: seconds with a step (or, pipelined, a batch) in flight.
        compute_bound_steps: steps the roofline found compute-bound.
        prefill_tokens, decode_tokens: tokens computed (decode: tokens emitted).
        work: the :class:`~capsim.cost.pricer.WorkTally`.
        draft_flops, draft_hbm_bytes: speculative decoding's draft passes (per GPU).
        peak_kv_used_blocks: the most KV blocks in use in any step;
            ``kv_written_at_peak`` tokens written and ``table_entries_at_peak`` block-table
            entries then (seed 000's block-size sweep reports waste and table entries at
            peak).
        timeline: the :class:`~capsim.engine.recorder.TimelineRecorder`.
    """

    __slots__ = ("scheduler", "work", "timeline", "busy_s", "compute_bound_steps",
                 "prefill_tokens", "decode_tokens", "draft_flops", "draft_hbm_bytes",
                 "peak_kv_used_blocks", "kv_written_at_peak", "table_entries_at_peak")

    def __init__(self, scheduler: Scheduler, tally: WorkTally, timeline: TimelineRecorder):
        self.scheduler, self.work, self.timeline = scheduler, tally, timeline
        self.busy_s = 0.0
        self.compute_bound_steps = 0
        self.prefill_tokens = self.decode_tokens = 0
        self.draft_flops = self.draft_hbm_bytes = 0.0
        self.peak_kv_used_blocks = self.kv_written_at_peak = self.table_entries_at_peak = 0

    # ------------------------------------------------------------ steps
    def account_one(self, step: Step, end_s: float, step_s: float, compute_bound: int,
                    logits: int, kv_used_blocks: int, queue_len: int) -> None:
        """One completed ``step`` that ended at ``end_s`` and took ``step_s``:
        :meth:`account_steps` of one step with its busy time (the step loop's hot path:
        no tuples to build). ``logits``: its LM-head rows (read before it completed);
        ``queue_len``: requests waiting after it."""
        self.busy_s += step_s
        self.compute_bound_steps += compute_bound
        ctx = step.decode_ctx_tokens
        prefill, decode = step.prefill_tokens, step.decode_seqs
        self.prefill_tokens += prefill
        self.decode_tokens += decode
        self.work.add(1, step.batch_tokens, logits, int(step.prefill_attn_pairs) + ctx,
                      step.prefill_kv_tokens + ctx, 1 if logits else 0)
        self.timeline.record_step(end_s, step_s, prefill, decode, kv_used_blocks, queue_len,
                                  self.scheduler.num_running)

    def account_steps(self, ends_s, secs_s, prefill_tokens: int, decode_seqs: int,
                      work: tuple[int, int, int, int, int, int],
                      kv_used_blocks: Callable[[int], int] | int, queue0: int, running0: int,
                      last_queue: int, busy_s: float | None = None) -> None:
        """Account m ≥ 1 completed steps (one, or a decode run's segment) that ended at
        ``ends_s`` and took ``secs_s``, each computing ``prefill_tokens`` +
        ``decode_seqs`` tokens: tokens, work (:meth:`WorkTally.add`'s arguments) and the
        timeline (:meth:`TimelineRecorder.record`: ``queue0`` / ``running0`` seen by all
        steps but the last, which saw ``last_queue`` and the running batch now). Busy time
        is the caller's (:meth:`add_busy`, or a run's cumulated sum: :meth:`end_run`)."""
        m = len(ends_s)
        self.prefill_tokens += prefill_tokens * m
        self.decode_tokens += decode_seqs * m
        self.work.add(*work)
        self.timeline.record(ends_s, secs_s, prefill_tokens, decode_seqs, kv_used_blocks,
                             queue0, running0, last_queue, self.scheduler.num_running, busy_s)

    def add_decode(self, decode_tokens: int, work: tuple[int, int, int, int, int, int]) -> None:
        """Tokens and work of decode steps whose timeline entry the caller records in one
        (:meth:`TimelineRecorder.add_in_bin`)."""
        self.decode_tokens += decode_tokens
        self.work.add(*work)

    def add_busy(self, step_s: float, compute_bound: int) -> None:
        """A step's (or a pipelined batch's) busy seconds and compute-bound count."""
        self.busy_s += step_s
        self.compute_bound_steps += compute_bound

    def end_run(self, busy_s: float, compute_bound_steps: int) -> None:
        """A decode run's end: busy seconds as cumulated over its steps (the step loop's
        sums, in its order), and the compute-bound steps it added."""
        self.busy_s = busy_s
        self.compute_bound_steps += compute_bound_steps

    def add_draft(self, flops: float, hbm_bytes: float) -> None:
        """Speculative decoding: one step's draft passes (per GPU)."""
        self.draft_flops += flops
        self.draft_hbm_bytes += hbm_bytes

    # ------------------------------------------------------------ KV peak
    def note_kv_peak(self, used_blocks: int, step: Step) -> None:
        """A new KV peak (blocks held for ``step``, about to run; the caller checked
        ``used_blocks`` > :attr:`peak_kv_used_blocks`): tokens written by then and
        block-table entries. O(running), only at new peaks."""
        self.peak_kv_used_blocks = used_blocks
        self.kv_written_at_peak = self.scheduler.kv_tokens + step.batch_tokens
        self.table_entries_at_peak = self.scheduler.block_table_entries()

    def note_run_peak(self, blocks: RunBlocks, n: int) -> None:
        """The step loop's KV-peak check over a decode run of ``n`` decoders (before it is
        committed): the last new peak is the first step that reaches the run's highest
        block count (``blocks``: non-decreasing)."""
        top = blocks.at(blocks.m - 1)
        if top <= self.peak_kv_used_blocks:
            return
        j = blocks.first_reaching(top)
        self.peak_kv_used_blocks = top
        self.kv_written_at_peak = self.scheduler.kv_tokens + n * (j + 1)
        # Nothing is allocated after the peak step j, so the tables then hold what they hold now.
        self.table_entries_at_peak = self.scheduler.block_table_entries()
