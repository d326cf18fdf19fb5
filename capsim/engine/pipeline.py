"""A pipeline-parallel replica with up to PP batches in flight.

vLLM V1 runs pipeline parallelism with a batch queue of ``max_concurrent_batches`` =
``pipeline_parallel_size`` (``EngineCore.step_with_batch_queue``, vllm/v1/engine/core.py
at 00080ee): while the queue has room it schedules a new batch at once from the
requests not in flight and hands it to the executor without waiting; when the queue
is full, or nothing more can be scheduled, it blocks on the oldest batch, applies its
output, and only then takes in requests that arrived meanwhile. The scheduler
(:meth:`ContinuousScheduler.enable_pipeline`) never puts a request in flight into
another batch, but a prompt's next chunk may follow its previous one down the pipeline.

Here every stage is a resource: a batch enters stage 0 when stage 0 is free, stage s + 1
when stage s has finished it, the handoff has arrived and stage s + 1 is free; it leaves
the last stage in queue order. The engine's host work per batch is a resource too (the
engine core's thread: scheduling and input preparation), run before stage 0 by a serial
engine or beside the stages by an overlapping one
(:meth:`~capsim.cost.pipeline.PipelinePricer.stage_times`). A batch alone in the pipeline
takes what :meth:`PipelinePricer.cost` prices, so at low load latency is as with one
batch in flight; under load the stages overlap and throughput approaches 1 / (slowest
stage), the weights of a stage being read once per batch. A handoff delays the next
stage but holds neither stage (the send is asynchronous; its all-gather is priced in the
handoff).

Macro-steps are off in such a replica (every batch is its own event). Policies that do
not keep several batches in flight (``capabilities.pipelining`` False: SGLang's, TensorRT-LLM's,
TGI's, the contiguous baselines, vLLM 0.6's multi-step windows) run one batch at a time
as :class:`~capsim.engine.replica.Replica` does, priced as the sum of the stages.
"""

from __future__ import annotations

from collections import deque

from capsim.engine.replica import Replica
from capsim.engine.step import Step


class PipelinedReplica(Replica):
    """A :class:`Replica` of ``pipeline_parallel_size`` > 1 stages (same arguments; the
    pricer is a :class:`~capsim.cost.pipeline.PipelinePricer`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        sched = self.scheduler
        pp = self.pool_cfg.engine.pipeline_parallel_size
        self.batches = pp if sched.can_pipeline() else 1
        if self.batches > 1:             # the batch queue composes batches ahead itself
            sched.enable_pipeline(self.batches)
            self.schedules_ahead = False
        self._stage_free = [0.0] * pp         # when each stage finishes its last batch
        self._host_free = 0.0                 # when the engine core finishes its host work
        self._last_done = 0.0                 # when the last batch left the pipeline
        # Batches in the pipeline, oldest first: (step, compute-bound, blocks used, logits,
        # done_s, start_s).
        self._queue: deque[tuple] = deque()

    def _loop(self):
        if self.batches == 1:                # one batch at a time, priced as the sum
            yield from super()._loop()
            return
        sched, queue = self.scheduler, self._queue
        while True:
            while len(queue) < self.batches:
                step = sched.schedule(self.env.now)
                if step is None:
                    break
                self._launch(step)
            if not queue:
                yield from self._idle()
                continue
            # Block on the oldest batch (arrivals meanwhile wait, as vLLM's engine core).
            yield self.env.timeout_at(queue[0][4])
            if self.failed:
                return
            self._land(queue.popleft())
            self._report_finished()

    def _launch(self, step: Step) -> None:
        """Price ``step``, place it on the stages and queue it."""
        now = self.env.now
        logits = step.logits_seqs
        stage_s, handoff_s, host_s, host_async, residual_s, bound = \
            self.pricer.stage_times(step, logits)
        if step.swap_bytes:                  # host↔GPU copies before the batch runs
            host_s += self._swap_s(step.swap_bytes)
        host_end = max(now, self._host_free) + host_s
        self._host_free = host_end
        t = now if host_async else host_end
        free = self._stage_free
        for s, secs in enumerate(stage_s):
            if s:
                t += handoff_s[s - 1]
            start = t if t > free[s] else free[s]
            t = free[s] = start + secs
        if host_async:
            t = max(t, host_end) + residual_s
        used, account = self.alloc.num_used_blocks, self.account
        if used > account.peak_kv_used_blocks:
            account.note_kv_peak(used, step)
        self.scheduler.launch(step)
        self.busy = True
        self._queue.append((step, bound, used, logits, t, now))

    def _land(self, batch: tuple) -> None:
        """The oldest batch left the last stage now: complete it and account it."""
        step, bound, used, logits, done_s, start_s = batch
        sched, now, account = self.scheduler, self.env.now, self.account
        sched.complete(step, now)
        seconds = now - start_s                         # this batch's latency
        busy = now - max(start_s, self._last_done)      # time with a batch in flight
        account.add_busy(busy, bound)
        self._last_done = now
        self._step_s = seconds
        self.busy = bool(self._queue)
        ctx = step.decode_ctx_tokens
        # The timeline's busy time is the time some batch was in flight (batches overlap),
        # its longest step a batch's latency.
        tl = account.timeline
        account.account_steps((now,), (seconds,), step.prefill_tokens, step.decode_seqs,
                              (1, step.batch_tokens, logits,
                               int(step.prefill_attn_pairs) + ctx, step.prefill_kv_tokens + ctx,
                               1 if logits else 0),
                              used, 0, 0, len(sched.waiting),
                              busy_s=tl.busy_in(int(now / tl.bin_s)) + busy)

    def fail(self):
        """As :meth:`Replica.fail`; the batches in flight are lost with it."""
        self._queue.clear()
        return super().fail()


def replica_class(pool) -> type[Replica]:
    """:class:`PipelinedReplica` for a pool of ``pipeline_parallel_size`` > 1, else
    :class:`Replica`."""
    return PipelinedReplica if pool.engine.pipeline_parallel_size > 1 else Replica
