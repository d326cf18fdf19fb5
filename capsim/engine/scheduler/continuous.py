"""Continuous (iteration-level) batching, with or without chunked prefill.

Pure Python, no SimPy: a test drives it with ``add`` / ``schedule`` /
``complete`` and asserts the exact batches.

Policies (DESIGN.md "The step model"):

- **chunked** (Sarathi-Serve; vLLM v1 ``vllm/v1/core/sched/scheduler.py``):
  every decoding sequence first (one token each), then running partial
  prefills in admission order, then waiting requests FCFS, all inside one
  ``max_num_batched_tokens`` budget and priced as ONE step. New requests are
  admitted only if no preemption happened this step (as vLLM v1 does).
- **unchunked** (Orca / vLLM v0 ``_schedule_default``): if waiting prompts
  fit (whole prompt within the budget, ``max_num_seqs`` and free KV blocks),
  the step prefills only them and running decodes stall for that step;
  otherwise the step decodes every running sequence.

KV blocks are allocated on demand, one block when a sequence's next token
crosses a block boundary. When none is free, the most recently admitted
running request is preempted by recompute (blocks freed, ``num_computed`` reset,
put at the front of the waiting queue), as vLLM does. A partial prefill never
evicts a decode already scheduled in the same step: it evicts later partial
prefills, or itself.

Roles (prefill/decode disaggregation, DistServe / Splitwise): a ``prefill``
scheduler hands a request off after its first token, keeping its KV blocks
until :meth:`release_handoff`; a ``decode`` scheduler takes transferred
requests with :meth:`reserve_transfer` (blocks and a slot held while the KV
crosses the link) and :meth:`admit_transfer` (joins the decode set). The
``colocated`` role (the default) does both halves itself.

Decode bookkeeping is implicit for speed: a decoding request records the
replica's decode *epoch* when it joined plus its counters then; a decode step
updates O(1) aggregates, allocates blocks only for the sequences crossing a
block boundary (bucketed by ``(epoch0 − computed0) mod block_size``) and pops
finished sequences from a heap. Per-step cost therefore does not grow with the
number of tokens or of running sequences.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
import math
from array import array
from collections import deque
from itertools import accumulate, chain

import numpy as np

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import FINISHED, RUNNING, SWAPPED, WAITING, Request
from capsim.engine.step import Step
from capsim.kv.allocator import BlockAllocator
from capsim.kv.prefix import extend_hashes


# Shorter decode-only stretches run step by step: a macro-step's fixed cost (vectorised
# pricing and bookkeeping, tens of µs) exceeds that of a few single steps (a saturated
# replica, where something changes every few steps, was slower with runs of 2-7 steps).
MIN_RUN_STEPS = 8


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


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
    """

    __slots__ = ("ends", "seqs", "ctx0", "done_tokens")

    def __init__(self, ends: list[int], seqs: list[int], ctx0: list[int],
                 done_tokens: list[int]):
        self.ends, self.seqs, self.ctx0, self.done_tokens = ends, seqs, ctx0, done_tokens

    @property
    def steps(self) -> int:
        return self.ends[-1]


class ContinuousScheduler:

    """Iteration-level scheduler for one replica.

    Args:
        max_num_seqs: cap on running sequences (vLLM ``max_num_seqs``).
        max_num_batched_tokens: token budget per step.
        chunked: ``enable_chunked_prefill``.
        allocator: this replica's paged KV pool.
        num_classes: request classes, for per-class ITL runs.
        itl: the run's ITL recorder.
        role: ``colocated``, ``prefill`` or ``decode`` (see the module docstring).
    """

    grows_kv = True       # decoders take blocks as they grow (False: reserved up front)
    trim_epochs = 1 << 16  # decode epochs' end times kept before forgetting the unneeded ones

    def __init__(self, *, max_num_seqs: int, max_num_batched_tokens: int, chunked: bool,
                 allocator: BlockAllocator, num_classes: int, itl: ItlRecorder,
                 role: str = "colocated", swap_space_bytes: int = 0,
                 kv_bytes_per_token: int = 0):
        self.role = role
        # Swap preemption (vLLM v0 preemption_mode="swap"): victims' KV goes to a
        # host buffer of swap_space_bytes; copies are charged to the step (PCIe).
        self.swap_space_bytes = swap_space_bytes
        self.kv_bytes_per_token = kv_bytes_per_token
        self.swapped: deque[Request] = deque()
        self.swap_used_bytes = 0
        self.swap_out_bytes = 0
        self.swap_in_bytes = 0
        self._swap_pending = 0            # bytes copied since the last returned step
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.chunked = chunked
        self.alloc = allocator
        self.bs = allocator.block_size
        self.caching = allocator.enable_caching
        self.prefix_queried_tokens = 0      # prompt (+ generated) tokens looked up at admission
        self.prefix_hit_tokens = 0          # of which found in the prefix cache
        self.prefix_queried_blocks = 0
        self.prefix_hit_blocks = 0
        self.kv_tokens = 0                  # Σ num_computed of sequences holding KV here
        self.itl = itl
        self.num_classes = num_classes
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}      # admission order; tail = newest
        self.prefilling: dict[int, Request] = {}   # running, still computing prompt tokens
        self._buckets: list[dict[int, Request]] = [{} for _ in range(self.bs)]
        self._finish_heap: list[tuple[int, int, int, Request]] = []
        self.epoch = 0                 # decode steps completed
        self.num_decoding = 0
        self._shareable_decoding = 0   # of which shareable (they register blocks as they grow)
        self._dec_offset = 0           # Σ (computed0 − epoch0) over decoding sequences
        self._epoch_end = array("d")   # end time of each decode step since _epoch_base
        self._epoch_gap = array("d")   # gap seen at each decode step by the previous step's decoders
        self._epoch_base = 0           # first epoch still kept (older ones: _trim_epochs)
        self._trim_at = self.trim_epochs   # trim when this many epochs are kept
        self._cohort_t = math.nan      # when the decoders of the last decode step emitted
        self._cohort = [0] * num_classes
        self._pending: dict[float, list[int]] = {}   # joined since: emit time → class counts
        self._admitted = 0
        self._now = 0.0
        self._preempted_now = False
        self.preemptions = 0
        self.recomputed_tokens = 0
        self.slot_steps_useful = 0
        self.slot_steps_held = 0
        self.steps = 0
        self.finished: list[Request] = []           # filled by complete(); caller drains it
        self.handoff: list[Request] = []            # prefill role: prefilled, KV still held here
        self._cow_pending: list[Request] = []       # forked samples about to write a shared block
        self._fork_id = 0                           # forked samples get ids -1, -2, ...
        self.incoming: dict[int, Request] = {}      # decode role: slot + blocks held, KV in flight
        self._kv_ready: list[Request] = []          # decode role: KV arrived, joins at next schedule

    # ----------------------------------------------------------------- queue
    def add(self, req: Request) -> None:
        """Queue an arrived request (its total KV need must fit the pool; the caller checks)."""
        req.state = WAITING
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.incoming or self.swapped)

    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.incoming)

    # ------------------------------------------------------- disaggregation
    def release_handoff(self, req: Request) -> None:
        """Prefill role: the request's KV has left; free its blocks here."""
        self.alloc.free(req.handoff_blocks[::-1])
        req.handoff_blocks = []

    def reserve_transfer(self, req: Request) -> bool:
        """Decode role: hold a slot and blocks for a prefilled request's KV, if both are free.

        Returns False (nothing held) when the slot cap or the KV pool is full;
        the caller retries after this replica frees something.
        """
        need = blocks_for(req.num_computed, self.bs)
        if self.num_running >= self.max_num_seqs or not self.alloc.can_allocate(need):
            return False
        req.blocks = self.alloc.allocate(need)
        self.kv_tokens += req.num_computed
        req.state = RUNNING
        self.incoming[req.rid] = req
        return True

    def admit_transfer(self, req: Request) -> None:
        """Decode role: the KV arrived; the request decodes from the next scheduled step.

        (Called between or during steps: it joins the decode set only when the
        next step is scheduled, so an in-flight step never counts it.)
        """
        self._kv_ready.append(req)

    def _join_transferred(self) -> None:
        for req in self._kv_ready:
            del self.incoming[req.rid]
            req.admit_order = self._admitted
            self._admitted += 1
            self.running[req.rid] = req
            self._join_decode(req, req.last_token_s)   # its next gap runs from token 1
        self._kv_ready.clear()

    # -------------------------------------------------------------- schedule
    def schedule(self, now: float = 0.0) -> Step | None:
        """Pick the batch of a step starting at ``now``, or None when nothing is runnable."""
        self._preempted_now = False
        self._now = now
        if self._kv_ready:
            self._join_transferred()
        if self.swapped:
            self._swap_in()
        step = self._schedule_chunked() if self.chunked else self._schedule_unchunked()
        if not step.prefills and not step.decode_seqs:
            return None
        step.swap_bytes, self._swap_pending = self._swap_pending, 0
        return step

    def _swap_in(self) -> None:
        """Bring swapped requests back, oldest first, while slots and blocks allow (vLLM v0)."""
        while self.swapped and self.num_running < self.max_num_seqs:
            req = self.swapped[0]
            need = blocks_for(req.num_computed, self.bs)
            if not self.alloc.can_allocate(need):
                break
            self.swapped.popleft()
            req.blocks = self.alloc.allocate(need)
            nbytes = req.num_computed * self.kv_bytes_per_token
            self.swap_used_bytes -= nbytes
            self.kv_tokens += req.num_computed
            self.swap_in_bytes += nbytes
            self._swap_pending += nbytes
            req.state = RUNNING
            self.running[req.rid] = req
            if req.num_generated and req.remaining_to_compute == 1:
                self._join_decode(req, req.last_token_s)
            else:
                self.prefilling[req.rid] = req

    def _schedule_chunked(self) -> Step:
        step = Step()
        budget = self.budget
        if self.num_decoding:
            self._grow_decoders()
            budget -= self._add_decodes(step)
        for req in list(self.prefilling.values()):
            if budget <= 0:
                break
            if req.state != RUNNING:
                continue            # evicted by an earlier request's reservation this step
            n = min(req.remaining_to_compute, budget)
            if self._reserve_prefill(req, n):
                step.add_prefill(req, n)
                budget -= n
        if not self._preempted_now and not self.swapped:
            self._admit_waiting(step, budget, whole_prompts=False)
        return step

    def _schedule_unchunked(self) -> Step:
        step = Step()
        if not self.swapped:
            self._admit_waiting(step, self.budget, whole_prompts=True)
        if step.prefills:
            return step                      # prefill-only step: decodes stall (Orca / vLLM v0)
        if self.num_decoding:
            self._grow_decoders()
            self._add_decodes(step)
        return step

    def _admit_waiting(self, step: Step, budget: int, whole_prompts: bool) -> None:
        alloc = self.alloc
        while (self.waiting and budget > 0
               and self.num_running + self.waiting[0].n <= self.max_num_seqs):
            req = self.waiting[0]
            hit = self._cached_prefix(req) if self.caching else ()
            cached = len(hit) * self.bs
            todo = req.num_tokens - cached
            if whole_prompts and todo > budget:
                break
            n = min(todo, budget)
            need = blocks_for(cached + n, self.bs) - len(hit)
            if not alloc.can_allocate(need + (alloc.num_free_among(hit) if hit else 0)):
                break
            if self.caching:
                self._count_lookup(req, hit)
                alloc.touch(hit)
                req.blocks = list(hit)
                req.num_computed = cached
                req.num_registered = len(hit)
                self.kv_tokens += cached
            req.blocks.extend(alloc.allocate(need))
            if self.caching and req.shareable:
                self._register(req, cached + n)
            self._start(req, step, n)
            budget -= n

    def _start(self, req: Request, step: Step, n: int) -> None:
        """Move the head of the queue into the running batch with a first chunk of ``n``."""
        self.waiting.popleft()
        req.state = RUNNING
        req.admit_order = self._admitted
        if req.first_scheduled_s != req.first_scheduled_s:    # NaN: first admission
            req.first_scheduled_s = self._now
        self._admitted += 1
        self.running[req.rid] = req
        self.prefilling[req.rid] = req
        step.add_prefill(req, n)

    def _add_decodes(self, step: Step) -> int:
        n = self.num_decoding
        step.decode_seqs = n
        step.emitting_decodes = n
        step.decode_ctx_tokens = n * (self.epoch + 1) + self._dec_offset
        return n

    def _grow_decoders(self) -> None:
        """Give a new block to every decoder whose next token starts one; preempt if short."""
        bucket = self._buckets[self.epoch % self.bs]
        alloc = self.alloc
        cow = self._cow_pending
        while (bucket or cow) and not alloc.can_allocate(len(bucket) + len(cow)):
            self._preempt(next(reversed(self.running.values())))
        if cow:
            self._copy_on_write(cow)
        if bucket:
            new = alloc.allocate(len(bucket))
            for req, block in zip(bucket.values(), new):
                req.blocks.append(block)
            if self.caching and self._shareable_decoding:
                for req in bucket.values():
                    if req.shareable:
                        self._register(req, (len(req.blocks) - 1) * self.bs)

    def _copy_on_write(self, samples: list[Request]) -> None:
        """First write of forked samples into their shared partial last block (seed 000):
        each writer copies while others still share the block; the last one left writes
        in place (pack Q7: 4 samples of a 1,000-token prompt hold 63 + 3 blocks)."""
        alloc = self.alloc
        for req in samples:
            if req.dec_epoch0 >= 0 and alloc.refcount(req.blocks[-1]) > 1:
                req.blocks[-1] = alloc.cow(req.blocks[-1])
        samples.clear()

    def _fork_samples(self, req: Request, now: float) -> None:
        """Parallel sampling: n − 1 sibling sequences share the prompt's blocks (refcounts).

        All n samples emit their first token at the end of the prefill; each then
        decodes on its own. Siblings have the same output length as sample 0.
        """
        siblings = []
        for _ in range(req.n - 1):
            self._fork_id -= 1
            f = Request(self._fork_id, req.class_id, req.arrival_s, req.prompt_tokens,
                        req.output_tokens, req.segments[:-1])
            f.group, f.samples_left, f.shareable = req, 0, req.shareable
            f.num_computed, f.num_generated = req.num_computed, req.num_generated
            f.first_scheduled_s, f.first_token_s, f.last_token_s = req.first_scheduled_s, now, now
            f.replica, f.state, f.admit_order = req.replica, RUNNING, self._admitted
            self._admitted += 1
            f.blocks = list(req.blocks)
            self.alloc.share(f.blocks)
            self.kv_tokens += f.num_computed    # shared tokens count once per sequence
            self.running[f.rid] = f
            siblings.append(f)
        if req.num_generated == req.output_tokens:
            return                                   # one-token replies: nothing to decode
        if req.num_computed % self.bs:
            self._cow_pending.extend(siblings + [req])
        for f in siblings:
            self._join_decode(f, now)

    def _reserve_prefill(self, req: Request, n: int) -> bool:
        """Blocks for a running prefill's next chunk; evicts newer prefills, else itself."""
        need = blocks_for(req.num_computed + n, self.bs) - len(req.blocks)
        while not self.alloc.can_allocate(need):
            victim = next(reversed(self.prefilling.values()))
            self._preempt(victim)
            if victim is req:
                return False
        if need > 0:
            req.blocks.extend(self.alloc.allocate(need))
        if self.caching and req.shareable:
            self._register(req, req.num_computed + n)
        return True

    # ------------------------------------------------------------ prefix cache
    def _cached_prefix(self, req: Request) -> list[int]:
        """Resident blocks of the longest cached prefix (the last token is always recomputed)."""
        if req.num_computed or not (req.shareable or req.num_preemptions):
            return []
        cacheable = (req.num_tokens - 1) // self.bs
        extend_hashes(req.hashes, req.segments, self.bs, cacheable)
        return self.alloc.lookup(req.hashes[:cacheable])

    def _count_lookup(self, req: Request, hit: list[int]) -> None:
        self.prefix_queried_tokens += req.num_tokens
        self.prefix_hit_tokens += len(hit) * self.bs
        self.prefix_queried_blocks += req.num_tokens // self.bs
        self.prefix_hit_blocks += len(hit)

    def _register(self, req: Request, upto_tokens: int) -> None:
        """Register the request's newly full blocks (up to ``upto_tokens``) in the prefix cache.

        As vLLM v1 does at scheduling time (``allocate_slots`` → ``cache_blocks``),
        so a request admitted later in the same step can already hit them.
        """
        full = upto_tokens // self.bs
        if full <= req.num_registered:
            return
        extend_hashes(req.hashes, req.segments, self.bs, full)
        register = self.alloc.register
        for k in range(req.num_registered, full):
            register(req.blocks[k], req.hashes[k])
        req.num_registered = full

    def _preempt(self, req: Request) -> None:
        """Preempt: swap the KV out if swap space allows, else recompute (free everything,
        back to the front of the queue). Either way the request loses its blocks."""
        if req.dec_epoch0 >= 0:
            self._leave_decode(req)
        else:
            del self.prefilling[req.rid]
        del self.running[req.rid]
        self.preemptions += 1
        self._preempted_now = True
        req.num_preemptions += 1
        nbytes = req.num_computed * self.kv_bytes_per_token
        if self.swap_space_bytes and self.swap_used_bytes + nbytes <= self.swap_space_bytes:
            self.alloc.free(req.blocks[::-1])
            req.blocks = []
            self.swap_used_bytes += nbytes
            self.kv_tokens -= req.num_computed
            self.swap_out_bytes += nbytes
            self._swap_pending += nbytes
            req.state = SWAPPED
            self.swapped.append(req)
            return
        if self.caching:
            self._register(req, req.num_computed)    # its recompute can find them again
        self.alloc.free(req.blocks[::-1])
        req.blocks = []
        req.num_registered = 0
        self.recomputed_tokens += req.num_computed
        self.kv_tokens -= req.num_computed
        req.num_computed = 0
        req.state = WAITING
        self.waiting.appendleft(req)

    # -------------------------------------------------------------- complete
    def complete(self, step: Step, now: float) -> None:
        """Apply a finished step that ended at ``now``: emit tokens, finish requests.

        Finished requests are appended to ``self.finished``.
        """
        self.steps += 1
        self.slot_steps_held += len(self.running)
        self.kv_tokens += step.prefill_tokens + step.decode_seqs
        emitted = 0
        if step.decode_seqs:
            emitted += step.decode_seqs
            self._complete_decodes(now)
        for req, n in step.prefills:
            req.num_computed += n
            if req.num_computed == req.num_tokens:
                emitted += 1
                self._emit_after_prefill(req, now)
        self.slot_steps_useful += emitted

    def _complete_decodes(self, now: float) -> None:
        gap = now - self._cohort_t if self.epoch else math.nan
        if self.epoch:
            self.itl.add(gap, self._cohort)
        for t, counts in self._pending.items():
            self.itl.add(now - t, counts)
            for c, k in enumerate(counts):
                self._cohort[c] += k
        self._pending.clear()
        self._cohort_t = now
        self._epoch_end.append(now)
        self._epoch_gap.append(gap)
        self.epoch += 1
        self._end_epochs(now)

    # --------------------------------------------------------------- decode runs
    def plan_decode_run(self, step: Step, max_steps: int = 4096,
                        min_steps: int = MIN_RUN_STEPS,
                        horizon_steps: int = 4096) -> RunPlan | None:
        """The decode steps, starting with ``step`` (just scheduled), that change nothing
        but the clock and the batch's membership: the same sequences decode, nothing is
        admitted, preempted or swapped, and every block they need is free. Sequences that
        emitted their first token in the previous step (a pending cohort) may be in it:
        their first gap is recorded at the run's first step, as :meth:`complete` does.

        The run goes on through finishes while nothing waits to be admitted (a finish then
        only shrinks the batch): each finish starts a new segment (:class:`RunPlan`). It
        stops at a finish that others observe (a shareable request: a conversation's next
        turn, forked samples, prefix-cache registration), when the batch empties, after
        ``max_steps`` steps, or before the first step that could lack a block. Segments
        after the first stop at ``horizon_steps`` (the caller's guess of where an
        arrival will cut the run: planning further is wasted work, never a different
        result).

        Returns None for a run shorter than ``min_steps`` (not worth it: step by step),
        else a plan the caller advances in one go (:meth:`grow_for_run` and
        :meth:`commit_decode_run` per segment) with exactly the step-by-step result.
        An arrival may still end the run early; the caller handles that.

        A queue head that could not be admitted stays blocked while the run takes
        blocks, unless prefix caching is on: a block the run takes may evict one of the
        head's cached blocks and change what its admission needs (seen with decode-pool
        preemptions), so then nothing may wait. O(block_size + log k) plus O(log n) per
        finish crossed.
        """
        if (step.prefills or step.swap_bytes or not step.decode_seqs or self._kv_ready
                or self._cow_pending or self.swapped or self._preempted_now or self.incoming
                or (self.caching and self.waiting)):
            return None
        heap = self._finish_heap
        self._drop_stale_finishes()
        n = self.num_decoding
        k = min(max_steps, heap[0][0] - self.epoch if heap else max_steps)
        if k >= min_steps and self.grows_kv:
            short = self._steps_before_short(k)
            if short < k:
                return RunPlan([short], [n], [step.decode_ctx_tokens], [0]) \
                    if short >= min_steps else None
        plan = RunPlan([k], [n], [step.decode_ctx_tokens], [0])
        if heap and k < min(max_steps, horizon_steps) and not self.waiting:
            self._extend_through_finishes(plan, min(max_steps, horizon_steps))
        return plan if plan.steps >= min_steps else None

    def _drop_stale_finishes(self) -> None:
        heap = self._finish_heap
        while heap and (heap[0][2] != heap[0][3].dec_version or heap[0][3].dec_epoch0 < 0):
            heapq.heappop(heap)                     # stale entries: already left the decode set

    def _steps_before_short(self, k: int) -> int:
        """How many of ``k`` decode steps (the current decoders) find every block they need
        free: k, or the first step j that would preempt (the run stops before it)."""
        free, bs, n = self.alloc.num_free_blocks, self.bs, self.num_decoding
        # Steps 1..k-1 give each decoder at most ceil((k-1)/bs) new blocks.
        if free >= n * -(-(k - 1) // bs):
            return k
        # The first step j whose blocks (those of steps 1..j) are more than are free.
        return 1 + bisect_right(range(1, k), free,
                                key=lambda j: self.decode_blocks_ahead(1, j))

    def _extend_through_finishes(self, plan: RunPlan, max_steps: int) -> None:
        """Append segments to a run that ends at a finish (see :meth:`plan_decode_run`).

        Peeks at the finish heap by popping and pushing back. The KV check is the
        cheap bound: the run's first batch (the largest) takes at most one block per
        sequence per ``block_size`` steps, and finishes only free blocks."""
        heap, e0, bs = self._finish_heap, self.epoch, self.bs
        n, offset = plan.seqs[0], self._dec_offset
        free = self.alloc.num_free_blocks if self.grows_kv else math.inf
        popped = []
        while True:
            done_epoch = e0 + plan.ends[-1]
            leavers = []
            while heap and heap[0][0] == done_epoch:
                entry = heapq.heappop(heap)
                req = entry[3]
                if entry[2] == req.dec_version and req.dec_epoch0 >= 0:
                    popped.append(entry)            # pushed back below; stale ones dropped
                    leavers.append(req)
            if any(r.shareable for r in leavers) or n == len(leavers):
                break
            plan.done_tokens[-1] = sum(r.prompt_tokens + r.output_tokens for r in leavers)
            n -= len(leavers)
            offset -= sum(r.dec_computed0 - r.dec_epoch0 for r in leavers)
            self._drop_stale_finishes()
            end = min(max_steps, heap[0][0] - e0 if heap else max_steps)
            if free < plan.seqs[0] * -(-(end - 1) // bs):
                break
            plan.ends.append(end)
            plan.seqs.append(n)
            plan.ctx0.append(n * (done_epoch + 1) + offset)
            plan.done_tokens.append(0)
            if not heap or end == max_steps:
                break
        for entry in popped:
            heapq.heappush(heap, entry)

    def decode_blocks_ahead(self, start: int, count: int) -> int:
        """Blocks the current decoders take in decode steps ``start``..``start + count − 1``
        from now (step 0 is the next one, at the current epoch), the batch unchanged:
        whole cycles of ``block_size`` steps take one per decoder (each crosses a block
        boundary once per cycle), plus the buckets of the partial cycle. O(block_size)."""
        if count <= 0 or not self.grows_kv:
            return 0
        q, r = divmod(count, self.bs)
        buckets, e, bs = self._buckets, self.epoch + start, self.bs
        return q * self.num_decoding + sum(len(buckets[(e + i) % bs]) for i in range(r))

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        """Blocks for steps ``first``..m−1 of a planned run or segment (step 0's were taken
        by ``schedule`` when ``first`` is 1), in the order the step-by-step path takes
        them. Returns the KV blocks in use during each step (:class:`RunBlocks`). The
        plan guaranteed they are free.

        The buckets cycle with period ``block_size``, so one cycle is walked and repeated.
        """
        alloc, buckets, bs = self.alloc, self._buckets, self.bs
        used0 = alloc.num_used_blocks
        # The buckets crossing at a cycle's steps (epochs e + first, ...), in order, and
        # the blocks taken by a cycle's first r+1 steps.
        rot = (self.epoch + first) % bs
        walk = (buckets[rot:] + buckets[:rot])[:m - first] if m > first else []
        taken = list(accumulate(map(len, walk)))
        blocks = RunBlocks(used0, m, bs, taken, taken[-1] if taken else 0, first)
        if not blocks.per_cycle:
            return blocks
        cycle: list[Request] = list(chain.from_iterable(map(dict.values, walk)))
        full, rem = divmod(m - first, bs)
        order = cycle * full + cycle[:taken[rem - 1]] if rem else cycle * full
        for req, block in zip(order, alloc.allocate(len(order))):
            req.blocks.append(block)
        if self.caching and self._shareable_decoding:
            for req in order:
                if req.shareable:
                    self._register(req, (len(req.blocks) - 1) * bs)
        return blocks

    def commit_decode_run(self, clock: np.ndarray) -> None:
        """Complete a planned run of ``len(clock) − 1`` decode steps that started at
        ``clock[0]``, step j ending at ``clock[j + 1]`` (float64): the same bookkeeping
        as ``complete`` step by step, in bulk."""
        ends = clock[1:]
        m, n = len(ends), self.num_decoding
        had_epoch = self.epoch > 0
        gaps = ends - clock[:-1]
        if not had_epoch:
            gaps[0] = math.nan
        elif self._cohort_t != clock[0]:            # the previous step decoded nothing
            gaps[0] = ends[0] - self._cohort_t
        itl, cohort = self.itl, self._cohort
        if self._pending:                           # the first step merges the new cohorts
            t0 = float(ends[0])
            if had_epoch:
                itl.add(float(gaps[0]), cohort)
            for t, counts in self._pending.items():
                itl.add(t0 - t, counts)
                for c, k in enumerate(counts):
                    cohort[c] += k
            self._pending.clear()
            itl.add_steps(gaps[1:], cohort)
        else:
            itl.add_steps(gaps if had_epoch else gaps[1:], cohort)
        t_end = float(ends[-1])
        self._cohort_t = t_end
        self._epoch_end.frombytes(ends.tobytes())
        self._epoch_gap.frombytes(gaps.tobytes())
        self.steps += m
        self.slot_steps_held += len(self.running) * m
        self.kv_tokens += n * m
        self.slot_steps_useful += n * m
        self.epoch += m
        self._end_epochs(t_end)

    def _end_epochs(self, now: float) -> None:
        """After the epoch advanced (decode steps ended at ``now``): finish the decoders
        whose last token it was, in (epoch, admission) order; trim old epochs."""
        heap = self._finish_heap
        while heap and heap[0][0] <= self.epoch:
            _, _, version, req = heapq.heappop(heap)
            if version == req.dec_version and req.dec_epoch0 >= 0:
                self._leave_decode(req)
                self._finish(req, now)
        if len(self._epoch_end) >= self._trim_at:
            self._trim_epochs()

    def _trim_epochs(self) -> None:
        """Forget the end times and gaps of decode epochs before the oldest decoder joined:
        no one reads them again, so this memory follows the running batch, not the steps.
        O(running + kept epochs), at most once per doubling of the kept epochs."""
        oldest = min((req.dec_epoch0 for bucket in self._buckets for req in bucket.values()),
                     default=self.epoch)
        cut = oldest - self._epoch_base
        if cut > 0:
            del self._epoch_end[:cut]
            del self._epoch_gap[:cut]
            self._epoch_base = oldest
        self._trim_at = max(self.trim_epochs, 2 * len(self._epoch_end))

    def _emit_after_prefill(self, req: Request, now: float) -> None:
        del self.prefilling[req.rid]
        req.num_generated += 1
        if req.num_generated == 1:
            req.first_token_s = now
        else:                                    # resumed after preemption
            gap = now - req.last_token_s
            req.note_gap(gap)
            self.itl.add_one(gap, req.class_id)
        req.last_token_s = now
        if req.n > 1 and req.num_generated == 1 and self.role == "colocated":
            self.slot_steps_useful += req.n - 1
            self._fork_samples(req, now)
        if req.num_generated == req.output_tokens:
            for f in [r for r in self.running.values() if r.group is req and
                      r.num_generated == r.output_tokens]:
                self._finish(f, now)
            self._finish(req, now)
        elif self.role == "prefill":
            del self.running[req.rid]
            req.handoff_blocks, req.blocks = req.blocks, []
            self.kv_tokens -= req.num_computed
            self.handoff.append(req)
        else:
            self._join_decode(req, now)

    def _join_decode(self, req: Request, now: float) -> None:
        e0, c0 = self.epoch, req.num_computed
        req.dec_epoch0, req.dec_computed0, req.dec_generated0 = e0, c0, req.num_generated
        req.dec_bucket = (e0 - c0) % self.bs
        self._buckets[req.dec_bucket][req.rid] = req
        self.num_decoding += 1
        self._shareable_decoding += req.shareable
        self._dec_offset += c0 - e0
        done_epoch = e0 + req.output_tokens - req.num_generated
        heapq.heappush(self._finish_heap, (done_epoch, req.admit_order, req.dec_version, req))
        counts = self._pending.get(now)
        if counts is None:
            counts = self._pending[now] = [0] * self.num_classes
        counts[req.class_id] += 1

    def _leave_decode(self, req: Request) -> None:
        """Materialise a decoder's counters and take it out of the decode set."""
        steps = self.epoch - req.dec_epoch0
        req.num_computed = req.dec_computed0 + steps
        req.num_generated = req.dec_generated0 + steps
        del self._buckets[req.dec_bucket][req.rid]
        self.num_decoding -= 1
        self._shareable_decoding -= req.shareable
        self._dec_offset -= req.dec_computed0 - req.dec_epoch0
        if steps:
            base = self._epoch_base
            req.note_gap(self._epoch_end[req.dec_epoch0 - base] - req.last_token_s)
            if steps > 1:
                req.note_gap(self._max_gap(req.dec_epoch0 + 1 - base, self.epoch - base))
            req.last_token_s = self._epoch_end[self.epoch - 1 - base]
            self._cohort[req.class_id] -= 1
        else:
            self._pending[req.last_token_s][req.class_id] -= 1
        req.dec_epoch0 = -1
        req.dec_version += 1

    def _max_gap(self, lo: int, hi: int) -> float:
        """The longest gap of kept epochs lo..hi−1 (never NaN: only epoch 0's is)."""
        if hi - lo < 32:
            return max(self._epoch_gap[lo:hi])
        view = np.frombuffer(self._epoch_gap, dtype=np.float64, count=hi - lo, offset=lo * 8)
        top = float(view.max())
        del view                                  # release the buffer: the array grows again
        return top

    def _finish(self, req: Request, now: float) -> None:
        del self.running[req.rid]
        if self.caching and req.shareable:
            self._register(req, req.num_computed)    # a next turn reuses prompt + reply
        self._release_kv(req)
        self.kv_tokens -= req.num_computed
        req.state = FINISHED
        group = req.group or req
        group.samples_left -= 1
        if req is not group:
            group.note_gap(req.max_itl_s)
        if group.samples_left == 0:                 # the request ends with its last sample
            group.finish_s = now
            self.finished.append(group)

    def _release_kv(self, req: Request) -> None:
        self.alloc.free(req.blocks[::-1])     # tail first, as vLLM frees (last blocks evicted first)
        req.blocks = []

    # ------------------------------------------------------------ invariants
    def sync(self) -> None:
        """Materialise every decoder's counters (for inspection in tests)."""
        for bucket in self._buckets:
            for req in bucket.values():
                steps = self.epoch - req.dec_epoch0
                req.num_computed = req.dec_computed0 + steps
                req.num_generated = req.dec_generated0 + steps


class ContiguousScheduler(ContinuousScheduler):
    """Continuous batching over a contiguous KV allocator (the pre-paging baseline).

    Admission reserves the whole range a request may ever need — ``max_model_len``
    tokens (``reserve="max_model_len"``) or its prompt + ``max_tokens``
    (``reserve="max_tokens"``) — first fit (:class:`capsim.kv.contiguous.ContiguousAllocator`);
    nothing grows afterwards, so nothing is preempted. The queue head waits when no
    hole fits, even if enough tokens are free in pieces: the first such moment is
    recorded (``first_blocked``: wanted, free, biggest hole) as the seed's demo prints it.
    """

    def __init__(self, *, reserve: str, max_model_len: int, **kwargs):
        super().__init__(**kwargs)
        self.reserve = reserve
        self.max_model_len = max_model_len
        self.admission_blocked = 0                 # requests that waited for a hole at the head
        self._blocked_rid = -1
        self.first_blocked: tuple[int, int, int] | None = None
        self._reservation: dict[int, tuple[int, int]] = {}

    def _size(self, req: Request) -> int:
        if self.reserve == "max_model_len":
            return self.max_model_len
        return req.prompt_tokens + req.output_tokens

    def _admit_waiting(self, step: Step, budget: int, whole_prompts: bool) -> None:
        while self.waiting and budget > 0 and self.num_running < self.max_num_seqs:
            req = self.waiting[0]
            todo = req.remaining_to_compute
            if whole_prompts and todo > budget:
                break
            size = self._size(req)
            start = self.alloc.reserve(size)
            if start is None:
                self._note_blocked(req, size)
                break
            self._reservation[req.rid] = (start, size)
            n = min(todo, budget)
            self._start(req, step, n)
            budget -= n

    def _note_blocked(self, req: Request, size: int) -> None:
        if req.rid != self._blocked_rid:          # count requests, not scheduling attempts
            self._blocked_rid = req.rid
            self.admission_blocked += 1
        if self.first_blocked is None:
            self.first_blocked = (size, self.alloc.free_tokens, self.alloc.biggest_hole)

    grows_kv = False

    def _grow_decoders(self) -> None:
        """Nothing to grow: the reservation already covers every future token."""

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        return RunBlocks(self.alloc.num_used_blocks, m, self.bs, [], 0, first)

    def _reserve_prefill(self, req: Request, n: int) -> bool:
        return True

    def _release_kv(self, req: Request) -> None:
        self.alloc.release(*self._reservation.pop(req.rid))
