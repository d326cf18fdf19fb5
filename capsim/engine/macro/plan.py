"""Planning a decode run: the decode steps ahead that change nothing but the clock and
the batch's membership, so a replica can advance them in one SimPy event.

A run starts with a step just scheduled (its blocks taken). It holds as long as
the same sequences decode, nothing is admitted, preempted or swapped, and every
block they need is free; it may go on through finishes (each finish only shrinks
the batch), in *segments* of a constant batch (:class:`RunPlan`). The scheduler
decides whether a run may start (:meth:`ContinuousScheduler.can_plan_run
<capsim.engine.scheduler.continuous.ContinuousScheduler.can_plan_run>`); this
module decides how long it is, from the decode set alone
(:class:`~capsim.engine.decode_set.DecodeSet`).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right

from capsim.engine.decode_set import DecodeSet

# Shorter decode-only stretches run step by step: a macro-step's fixed cost (vectorised
# pricing and bookkeeping, tens of µs) exceeds that of a few single steps (a saturated
# replica, where something changes every few steps, was slower with runs of 2-7 steps).
MIN_RUN_STEPS = 8


class RunBlocks:
    """KV blocks in use during each step j (0 <= j < m) of a decode run (or of one of its
    segments), without a list. Steps ``first``..j have taken ``q`` whole cycles of
    ``block_size`` steps (``per_cycle`` blocks each) plus ``taken[r]`` blocks, where
    ``j − first = q · block_size + r``; ``first`` is 1 when step 0's blocks were taken
    before the run (by ``schedule``), 0 when the run takes them."""

    __slots__ = ("used0", "m", "bs", "taken", "per_cycle", "first")

    def __init__(self, used0: int, m: int, bs: int, taken: list[int], per_cycle: int,
                 first: int = 1):
        self.used0, self.m, self.bs, self.taken, self.per_cycle = used0, m, bs, taken, per_cycle
        self.first = first

    def at(self, j: int) -> int:
        if j < self.first or not self.per_cycle:
            return self.used0
        q, r = divmod(j - self.first, self.bs)
        return self.used0 + q * self.per_cycle + self.taken[r]

    def first_reaching(self, value: int) -> int:
        """The first step whose count is >= ``value`` (the counts never decrease)."""
        return bisect_left(range(self.m), value, key=self.at)


class RunPlan:
    """A planned decode run of ``ends[-1]`` steps, in segments of a constant batch.

    Segment i is steps ``ends[i−1]``..``ends[i] − 1`` (``ends[−1] = 0``): ``seqs[i]``
    sequences decode, over Σ context ``ctx0[i]`` tokens in its first step (growing by
    ``seqs[i]`` per step). Every segment but the last ends with requests finishing; they
    free ``done_tokens[i]`` prompt + output tokens (what the router counts as
    outstanding); the last segment's entry is 0 (its finishes are reported when the run
    is committed).

    ``more``: None, or the plan stopped at its horizon at a finish it could go on
    through: what :func:`extend_run` needs to append later segments (the decode set's
    offset after the last segment began, and ``free_blocks`` and ``max_steps`` as
    planned), so a run is planned (and priced) no further than it is likely to get
    before an arrival cuts it.
    """

    __slots__ = ("ends", "seqs", "ctx0", "done_tokens", "more")

    def __init__(self, ends: list[int], seqs: list[int], ctx0: list[int],
                 done_tokens: list[int]):
        self.ends, self.seqs, self.ctx0, self.done_tokens = ends, seqs, ctx0, done_tokens
        self.more: tuple[int, float, int] | None = None

    @property
    def steps(self) -> int:
        return self.ends[-1]


def plan_run(decoders: DecodeSet, ctx_tokens: int, free_blocks: float, *, through_finishes: bool,
             max_steps: int, min_steps: int, horizon_steps: int) -> RunPlan | None:
    """How far the decode set can run from the step just scheduled (over ``ctx_tokens``).

    The run stops at the first finish, unless ``through_finishes`` (nothing waits to be
    admitted: a finish then only shrinks the batch): each finish then starts a new
    segment, and the run stops at a finish that others observe (a shareable request: a
    conversation's next turn, forked samples, prefix-cache registration), when the
    batch empties, or at the first finish at or after ``horizon_steps`` (the caller's
    guess of where an arrival will cut the run; planning further is wasted work, never a
    different result; 0: at the first finish), where :func:`extend_run` can take it on
    (``RunPlan.more``). It never passes ``max_steps``, nor the first step that could
    lack a block (``free_blocks``: free KV blocks, ``math.inf`` when the sequences
    reserved theirs up front).

    Returns None for a run shorter than ``min_steps`` (not worth it: step by step).
    O(block_size + log k) plus O(log n) per finish crossed.
    """
    n = decoders.size
    to_finish = decoders.steps_to_finish()
    k = min(max_steps, to_finish if to_finish is not None else max_steps)
    if k >= min_steps and free_blocks != math.inf:
        short = _steps_before_short(decoders, k, free_blocks)
        if short < k:
            return RunPlan([short], [n], [ctx_tokens], [0]) if short >= min_steps else None
    plan = RunPlan([k], [n], [ctx_tokens], [0])
    if to_finish is not None and k < max_steps and through_finishes and horizon_steps > 0:
        plan.more = (decoders.offset, free_blocks, max_steps)
        if k < horizon_steps:
            _extend_through_finishes(decoders, plan, horizon_steps, [], decoders.epoch)
    return plan if plan.steps >= min_steps else None


def extend_run(decoders: DecodeSet, plan: RunPlan, horizon_steps: int,
               committed: int) -> None:
    """Append to ``plan`` (open: ``plan.more``; its first ``committed`` steps committed)
    the segments :func:`plan_run` would have planned with a farther ``horizon_steps``;
    ``plan.more`` is None afterwards if the run can go no further."""
    e0 = decoders.epoch - committed             # the decode set's epoch when it was planned
    # The finishes of its segments but the last (those not committed yet) are off the
    # heap while planning: pop them again (the valid entries up to the last segment's
    # first epoch).
    popped: list = []
    if len(plan.ends) > 1:
        heap, upto = decoders.finish_heap, e0 + plan.ends[-2]
        while heap and heap[0][0] <= upto:
            entry = heapq.heappop(heap)
            if entry[2] == entry[3].dec_version and entry[3].dec_epoch0 >= 0:
                popped.append(entry)
    _extend_through_finishes(decoders, plan, horizon_steps, popped, e0)


def _steps_before_short(decoders: DecodeSet, k: int, free: float) -> int:
    """How many of ``k`` decode steps find every block they need free: k, or the first
    step j that would preempt (the run stops before it)."""
    bs, n = decoders.bs, decoders.size
    # Steps 1..k-1 give each decoder at most ceil((k-1)/bs) new blocks.
    if free >= n * -(-(k - 1) // bs):
        return k
    # The first step j whose blocks (those of steps 1..j) are more than are free.
    return 1 + bisect_right(range(1, k), free, key=lambda j: decoders.blocks_ahead(1, j))


def _extend_through_finishes(decoders: DecodeSet, plan: RunPlan, horizon_steps: int,
                             popped: list, e0: int) -> None:
    """Append segments to an open run (``plan.more``), which ends at a finish, until one
    ends at or after ``horizon_steps``; ``plan.more`` is None if the run stops earlier.

    Peeks at the finish heap by popping (``popped``: entries already popped) and pushing
    back; ``e0``: the decode set's epoch when the run was planned. The KV check is the
    cheap bound: the run's first batch (the largest) takes at most one block per
    sequence per ``block_size`` steps, and finishes only free blocks."""
    bs = decoders.bs
    offset, free, max_steps = plan.more
    n = plan.seqs[-1]
    ahead = decoders.epoch - e0                 # steps of the run committed so far
    plan.more = None
    while True:
        done_epoch = e0 + plan.ends[-1]
        leavers = decoders.pop_finishing(done_epoch, popped)
        shareable, freed, behind = False, 0, 0      # one loop, not three generators
        for r in leavers:
            shareable = shareable or r.shareable
            freed += r.prompt_tokens + r.output_tokens
            behind += r.dec_computed0 - r.dec_epoch0
        if shareable or n == len(leavers):
            break
        n -= len(leavers)
        to_finish = decoders.steps_to_finish()       # from the decode set's epoch now
        end = min(max_steps, to_finish + ahead if to_finish is not None else max_steps)
        if free < plan.seqs[0] * -(-(end - 1) // bs):
            break
        plan.done_tokens[-1] = freed
        offset -= behind
        plan.ends.append(end)
        plan.seqs.append(n)
        plan.ctx0.append(n * (done_epoch + 1) + offset)
        plan.done_tokens.append(0)
        if to_finish is None or end == max_steps:
            break
        if end >= horizon_steps:
            plan.more = (offset, free, max_steps)
            break
    decoders.push_back(popped)
