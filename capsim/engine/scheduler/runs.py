"""Decode runs (macro-steps, :mod:`capsim.engine.macro`) as a continuous scheduler plans,
grows and commits them.

A mixin of :class:`~capsim.engine.scheduler.continuous.ContinuousScheduler`: one step and
a run commit through the same ``_steps_done`` (:meth:`DecodeSet.advance`) and take blocks
through the same KV facade calls (:meth:`KVCacheManager.append_blocks` /
:meth:`~capsim.kv.manager.KVCacheManager.append_cycles`), so a run's result is the
step-by-step one.
"""

from __future__ import annotations

import math
from itertools import accumulate, chain

from capsim.engine.macro.plan import MIN_RUN_STEPS, RunBlocks, RunPlan, extend_run, plan_run
from capsim.engine.request import Request
from capsim.engine.step import Step


class DecodeRuns:
    """The macro-step methods of :class:`~capsim.engine.scheduler.base.Scheduler`."""

    def can_plan_run(self, step: Step) -> bool:
        """Whether a decode run (macro-step, :mod:`capsim.engine.macro`) may start with
        ``step``, just scheduled. All of these hold:

        - the step only decodes (no prefill chunk, no swap copy) and decodes something;
        - nothing joins the decode set at the next schedule (no transferred KV ready)
          and no KV is in flight to this replica;
        - no forked sample is about to copy a shared block, nothing is swapped out, and
          nothing was preempted while scheduling this step;
        - with prefix caching and decoders that take blocks as they grow, nothing waits:
          a block the run takes can evict one of the queue head's cached blocks and
          change what its admission needs (without caching a head that could not be
          admitted stays blocked while the run takes blocks; with KV reserved up front
          the run takes none);
        - no multi-step scheduling (its windows open the queue at fixed steps).
        """
        return not (step.prefills or step.swap_bytes or not step.decode_seqs
                    or self._kv_ready or self.incoming or self._cow_pending or self.swapped
                    or self._preempted_now or (self.caching and self.grows_kv and self.waiting)
                    or self.num_scheduler_steps > 1)

    def plan_decode_run(self, step: Step, max_steps: int = 4096,
                        min_steps: int = MIN_RUN_STEPS,
                        horizon_steps: int = 4096) -> RunPlan | None:
        """The decode steps, starting with ``step`` (just scheduled), that change nothing
        but the clock and the batch's membership (:func:`~capsim.engine.macro.plan.plan_run`),
        if :meth:`can_plan_run`. Sequences that emitted their first token in the previous
        step (a pending cohort) may be in it: their first gap is recorded at the run's
        first step, as :meth:`complete` does. The run goes on through finishes only while
        nothing waits to be admitted.

        Returns None (step by step) or a plan the caller advances in one go
        (:meth:`grow_for_run` and :meth:`commit_decode_run` per segment) with exactly the
        step-by-step result. An arrival may still end the run early; the caller handles
        that.
        """
        if not self.can_plan_run(step):
            return None
        free = self.kv.num_free_blocks if self.grows_kv else math.inf
        return plan_run(self.decoders, step.decode_ctx_tokens, free,
                        through_finishes=not self.waiting, max_steps=max_steps,
                        min_steps=min_steps, horizon_steps=horizon_steps)

    def extend_decode_run(self, plan: RunPlan, horizon_steps: int, committed: int) -> None:
        """Plan an open run (``plan.more``: it stopped at its horizon; its first
        ``committed`` steps are committed) on through finishes to ``horizon_steps``
        (:func:`~capsim.engine.macro.plan.extend_run`)."""
        extend_run(self.decoders, plan, horizon_steps, committed)

    def decode_blocks_ahead(self, start: int, count: int) -> int:
        """Blocks the current decoders take in decode steps ``start``..``start + count − 1``
        from now (step 0 is the next one), the batch unchanged."""
        return self.decoders.blocks_ahead(start, count) if self.grows_kv else 0

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        """Blocks for steps ``first``..m−1 of a planned run or segment (step 0's were taken
        by ``schedule`` when ``first`` is 1), in the order the step-by-step path takes
        them. Returns the KV blocks in use during each step (:class:`RunBlocks`). The
        plan guaranteed they are free.

        The buckets cycle with period ``block_size``, so one cycle is walked and repeated.
        """
        used0 = self.kv.num_used_blocks
        walk = self.decoders.crossings(first, m)
        taken = list(accumulate(map(len, walk)))
        blocks = RunBlocks(used0, m, self.bs, taken, taken[-1] if taken else 0, first)
        if not blocks.per_cycle:
            return blocks
        cycle: list[Request] = list(chain.from_iterable(map(dict.values, walk)))
        full, rem = divmod(m - first, self.bs)
        self.kv.append_cycles(cycle, full * len(cycle) + (taken[rem - 1] if rem else 0),
                              self.decoders.shareable)
        return blocks

    def commit_decode_run(self, clock_s) -> None:
        """Complete planned decode steps: ``clock_s`` (float64 array) holds the first
        step's start, then every step's end. The same bookkeeping as :meth:`complete`
        step by step, in bulk."""
        m, n = len(clock_s) - 1, self.decoders.size
        self.counters.slot_steps_useful += n * m
        self._steps_done(m, n * m, clock_s)
