"""Continuous (iteration-level) batching, with or without chunked prefill.

Pure Python, no SimPy: a test drives it with ``add`` / ``schedule`` /
``complete`` and asserts the exact batches.

Policies (DESIGN.md "The step model"):

- **chunked** (Sarathi-Serve; vLLM v1 ``vllm/v1/core/sched/scheduler.py``):
  every decoding sequence first (one token each), then running partial
  prefills in admission order, then waiting requests FCFS, all inside one
  ``max_num_batched_tokens`` budget and priced as ONE step; a request's chunk
  is capped by ``long_prefill_token_threshold`` when set. New requests are
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

The decoding sequences live in a :class:`~capsim.engine.decode_set.DecodeSet`
(implicit per-sequence counters, O(1) per step); one step and a macro-step run
commit through the same :meth:`DecodeSet.advance` and take blocks through the
same :meth:`_give_blocks`.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import accumulate, chain

from capsim.engine.decode_set import DecodeSet
from capsim.engine.macro.plan import MIN_RUN_STEPS, RunBlocks, RunPlan, extend_run, plan_run
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import RUNNING, SWAPPED, WAITING, FINISHED, Request
from capsim.engine.scheduler.base import Scheduler
from capsim.engine.step import Step
from capsim.kv.allocator import BlockAllocator
from capsim.kv.blocks import blocks_needed
from capsim.kv.prefix import extend_hashes


class ContinuousScheduler(Scheduler):

    """Iteration-level scheduler for one replica.

    Args:
        max_num_seqs: cap on running sequences (vLLM ``max_num_seqs``).
        max_num_batched_tokens: token budget per step.
        chunked: ``enable_chunked_prefill``.
        allocator: this replica's paged KV pool.
        num_classes: request classes, for per-class ITL runs.
        itl: the run's ITL recorder.
        role: ``colocated``, ``prefill`` or ``decode`` (see the module docstring).
        swap_space_bytes: host swap space of the replica (vLLM v0 ``--swap-space`` ×
            TP) when preempting by swap; 0 preempts by recompute.
        kv_bytes_per_token: KV bytes per token of the replica (swap copies).
        num_scheduler_steps: vLLM 0.6's multi-step scheduling (unchunked only): once a
            decode step starts a window, the next ``num_scheduler_steps − 1`` steps decode
            the same batch without consulting the queue, so a new prompt waits for the
            window to end (vllm/engine/llm_engine.py ``_has_remaining_steps`` at v0.6.0,
            32e7db2). Such windows are stepped one by one (no decode runs).
        long_prefill_token_threshold: vLLM V1's cap on the prompt tokens one request is
            given in a step, a partial prefill's next chunk as a waiting request's first
            (``num_new_tokens = threshold`` when it exceeds it, before the budget's
            ``min``: vllm/v1/core/sched/scheduler.py ``schedule`` at 00024d3); 0: none.
            With it several long prompts share a step's budget instead of prefilling one
            after another.
    """

    grows_kv = True       # decoders take blocks as they grow (False: reserved up front)
    #: The policy can use a prefix-caching allocator (``make_kv`` turns caching on only then).
    supports_prefix_caching = True
    #: Full blocks enter the prefix cache when they are scheduled, as vLLM v1 does
    #: (``allocate_slots`` → ``cache_blocks``), decode blocks as they fill. False: the policy
    #: registers computed blocks itself after their step (SGLang, TensorRT-LLM).
    registers_when_scheduled = True
    #: The policy can keep several batches in flight (pipeline parallelism,
    #: :meth:`enable_pipeline`); subclasses that reorder or retract batches say False.
    pipelines = True

    def __init__(self, *, max_num_seqs: int, max_num_batched_tokens: int, chunked: bool,
                 allocator: BlockAllocator, num_classes: int, itl: ItlRecorder,
                 role: str = "colocated", swap_space_bytes: int = 0,
                 kv_bytes_per_token: int = 0, num_scheduler_steps: int = 1,
                 long_prefill_token_threshold: int = 0):
        super().__init__()
        self.role = role
        self.num_scheduler_steps = num_scheduler_steps
        # The most prompt tokens a request gets in one step (vLLM V1's threshold; none: the
        # budget bounds it anyway).
        self.chunk_cap = long_prefill_token_threshold or max_num_batched_tokens
        self._window_left = 0             # decode steps left in the current multi-step window
        # Swap preemption (vLLM v0 preemption_mode="swap"): victims' KV goes to a
        # host buffer of swap_space_bytes; copies are charged to the step (PCIe).
        self.swap_space_bytes = swap_space_bytes
        self.kv_bytes_per_token = kv_bytes_per_token
        self.swapped: deque[Request] = deque()
        self.swap_used_bytes = 0
        self._swap_pending = 0            # bytes copied since the last returned step
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.chunked = chunked
        self.alloc = allocator
        self.bs = allocator.block_size
        self.caching = allocator.enable_caching
        self._register_now = self.caching and self.registers_when_scheduled
        self.itl = itl
        self.num_classes = num_classes
        self.prefilling: dict[int, Request] = {}   # running, still computing prompt tokens
        self.decoders = DecodeSet(self.bs, num_classes, itl)
        self._admitted = 0
        self._now = 0.0
        self._preempted_now = False
        self._cow_pending: list[Request] = []       # forked samples about to write a shared block
        self._fork_id = 0                           # forked samples get ids -1, -2, ...
        self._kv_ready: list[Request] = []          # decode role: KV arrived, joins at next schedule
        self._lanes: list[DecodeSet] | None = None  # PP > 1: one decode set per batch in flight
        self._max_lanes = 1

    # ----------------------------------------------------------------- queue
    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.incoming or self.swapped)

    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.incoming)

    @property
    def num_decoding(self) -> int:
        if self._lanes is not None:
            return sum(lane.size for lane in self._lanes)
        return self.decoders.size

    # ------------------------------------------------------- batches in flight
    def can_pipeline(self) -> bool:
        """Whether :meth:`enable_pipeline` applies: the policy allows it and no multi-step
        windows (vLLM 0.6's ``num_scheduler_steps`` > 1) are in use."""
        return self.pipelines and self.num_scheduler_steps == 1

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
        ``self.running.pop()``), never one in flight."""
        if self._lanes is None:
            return next(reversed(self.running.values()))
        for req in reversed(self.running.values()):
            if not self._in_flight(req):
                return req
        raise RuntimeError("no running request outside the pipeline to preempt")

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
        need = blocks_needed(req.num_computed, self.bs)
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
            self.decoders.join(req, req.last_token_s)   # its next gap runs from token 1
        self._kv_ready.clear()

    # -------------------------------------------------------------- schedule
    def schedule(self, now: float = 0.0) -> Step | None:
        """Pick the batch of a step starting at ``now``, or None when nothing is runnable."""
        self._preempted_now = False
        self._now = now
        if self._lanes is not None:
            self._pick_lane()
        if self._kv_ready:
            self._join_transferred()
        if self.swapped:
            self._swap_in()
        step = self._schedule_chunked() if self.chunked else self._schedule_unchunked()
        if not step.prefills and not step.decode_seqs:
            return None
        step.swap_bytes, self._swap_pending = self._swap_pending, 0
        if self._lanes is not None:
            step.lane = self.decoders
            self.decoders.in_flight = True
        return step

    def _swap_in(self) -> None:
        """Bring swapped requests back, oldest first, while slots and blocks allow (vLLM v0)."""
        while self.swapped and self.num_running < self.max_num_seqs:
            req = self.swapped[0]
            need = blocks_needed(req.num_computed, self.bs)
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
                self.decoders.join(req, req.last_token_s)
            else:
                self.prefilling[req.rid] = req

    def _schedule_chunked(self) -> Step:
        step = Step()
        budget = self.budget
        if self.decoders.size:
            self._grow_decoders()
            budget -= self._add_decodes(step)
        for req in list(self.prefilling.values()):
            if budget <= 0:
                break
            if req.state != RUNNING:
                continue            # evicted by an earlier request's reservation this step
            n = min(req.remaining_to_compute - req.num_inflight, budget, self.chunk_cap)
            if n <= 0:
                continue            # PP: every prompt token is in the pipeline already
            if self._reserve_prefill(req, n):
                step.add_prefill(req, n)
                budget -= n
        if not self._preempted_now and not self.swapped:
            self._admit_waiting(step, budget, whole_prompts=False)
        return step

    def _schedule_unchunked(self) -> Step:
        step = Step()
        in_window = self._window_left > 0 and self.decoders.size
        if not self.swapped and not in_window:
            self._admit_waiting(step, self.budget, whole_prompts=True)
        if step.prefills:
            self._window_left = 0
            return step                      # prefill-only step: decodes stall (Orca / vLLM v0)
        if self.decoders.size:
            self._window_left = self._window_left - 1 if in_window \
                else self.num_scheduler_steps - 1
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
            n = min(todo, budget, self.chunk_cap)
            need = blocks_needed(cached + n, self.bs) - len(hit)
            if not alloc.can_allocate(need + (alloc.num_free_among(hit) if hit else 0)):
                break
            if self.caching:
                self._take_prefix(req, hit)
            req.blocks.extend(alloc.allocate(need))
            if self._register_now and req.shareable:
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
        n = self.decoders.size
        step.decode_seqs = n
        step.emitting_decodes = n
        step.decode_ctx_tokens = self.decoders.ctx_tokens
        return n

    def _grow_decoders(self) -> None:
        """Give a new block to every decoder whose next token starts one; preempt if short."""
        bucket = self.decoders.crossing()
        alloc = self.alloc
        cow = self._cow_pending
        while (bucket or cow) and not alloc.can_allocate(len(bucket) + len(cow)):
            self._preempt(self._victim())
        if cow:
            self._copy_on_write(cow)
        if bucket:
            self._give_blocks(list(bucket.values()))

    def _give_blocks(self, order: list[Request]) -> None:
        """One new block for each decoder in ``order`` (a decoder listed k times gets k),
        in that order; shareable ones register their newly full block."""
        for req, block in zip(order, self.alloc.allocate(len(order))):
            req.blocks.append(block)
        self._register_last_blocks(order)

    def _register_last_blocks(self, reqs: list[Request]) -> None:
        """Shareable decoders among ``reqs`` register their last (newly full) block; a
        decoder listed twice registers the same block twice, a no-op."""
        if self._register_now and self.decoders.shareable:
            for req in reqs:
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
            self.decoders.join(f, now)

    def _reserve_prefill(self, req: Request, n: int) -> bool:
        """Blocks for a running prefill's next chunk; evicts newer prefills, else itself."""
        upto = req.num_computed + req.num_inflight + n
        need = blocks_needed(upto, self.bs) - len(req.blocks)
        while not self.alloc.can_allocate(need):
            victim = self._prefill_victim()
            if victim is None:
                return False        # PP: every newer prefill is in the pipeline; wait
            self._preempt(victim)
            if victim is req:
                return False
        if need > 0:
            req.blocks.extend(self.alloc.allocate(need))
        if self._register_now and req.shareable:
            self._register(req, upto)
        return True

    def _prefill_victim(self) -> Request | None:
        """The newest running prefill (outside the pipeline), or None."""
        if self._lanes is None:
            return next(reversed(self.prefilling.values()))
        return next((r for r in reversed(self.prefilling.values()) if not r.num_inflight), None)

    # ------------------------------------------------------------ prefix cache
    def _cached_prefix(self, req: Request) -> list[int]:
        """Resident blocks of the longest cached prefix (the last token is always recomputed)."""
        if req.num_computed or not (req.shareable or req.num_preemptions):
            return []
        cacheable = (req.num_tokens - 1) // self.bs
        extend_hashes(req.hashes, req.segments, self.bs, cacheable)
        return self.alloc.lookup(req.hashes[:cacheable])

    def _take_prefix(self, req: Request, hit: list[int]) -> None:
        """Admission with prefix caching: count the lookup, take a reference to the hit
        blocks (``req`` holds no blocks yet) and skip their tokens."""
        self._count_lookup(req, hit)
        self.alloc.touch(hit)
        req.blocks = list(hit)
        cached = len(hit) * self.bs
        req.num_computed = cached
        req.num_registered = len(hit)
        self.kv_tokens += cached

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
        decoding = req.dec_epoch0 >= 0
        if decoding:
            self._lane_of(req).leave(req)
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
        if self.caching:                             # its recompute can find them again
            self._register(req, self._cached_at_preemption(req, decoding))
        self.alloc.free(req.blocks[::-1])
        req.blocks = []
        req.num_registered = 0
        self.recomputed_tokens += req.num_computed
        self.kv_tokens -= req.num_computed
        req.num_computed = 0
        req.state = WAITING
        self.waiting.appendleft(req)

    def _cached_at_preemption(self, req: Request, decoding: bool) -> int:
        """Tokens of a preempted request that stay in the prefix cache: every computed one
        (vLLM v1 frees the blocks, their hashes stay)."""
        return req.num_computed

    # -------------------------------------------------------------- complete
    def complete(self, step: Step, now: float) -> None:
        """Apply a finished step that ended at ``now``: emit tokens, finish requests.

        Finished requests are appended to ``self.finished``.
        """
        if step.lane is not None:          # PP: the batch left the last stage
            self.decoders = step.lane
            step.lane.in_flight = False
            for req, n in step.prefills:
                req.num_inflight -= n
        self._steps_done(1, step.prefill_tokens + step.decode_seqs,
                         (now, now) if step.decode_seqs else None)
        emitted = step.decode_seqs
        for req, n in step.prefills:
            req.num_computed += n
            if req.num_computed == req.num_tokens:
                emitted += 1
                self._emit_after_prefill(req, now)
        self.slot_steps_useful += emitted

    def _steps_done(self, m: int, tokens: int, decode_clock_s) -> None:
        """``m`` steps ran, writing ``tokens`` tokens of KV; the decoders emitted at the
        step ends of ``decode_clock_s`` (:meth:`DecodeSet.advance`; None: no decode in
        them): the decode set's bookkeeping, then its finishes, in (epoch, admission)
        order."""
        self.steps += m
        self.slot_steps_held += len(self.running) * m
        self.kv_tokens += tokens
        if decode_clock_s is None:
            return
        leavers = self.decoders.advance(decode_clock_s)
        if leavers:
            now = float(decode_clock_s[-1])
            for req in leavers:
                self._finish(req, now)

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
            self.decoders.join(req, now)

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

    # --------------------------------------------------------------- decode runs
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
        free = self.alloc.num_free_blocks if self.grows_kv else math.inf
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
        used0 = self.alloc.num_used_blocks
        walk = self.decoders.crossings(first, m)
        taken = list(accumulate(map(len, walk)))
        blocks = RunBlocks(used0, m, self.bs, taken, taken[-1] if taken else 0, first)
        if not blocks.per_cycle:
            return blocks
        cycle: list[Request] = list(chain.from_iterable(map(dict.values, walk)))
        full, rem = divmod(m - first, self.bs)
        self._give_cycles(cycle, full * len(cycle) + (taken[rem - 1] if rem else 0))
        return blocks

    def _give_cycles(self, cycle: list[Request], count: int) -> None:
        """:meth:`_give_blocks` of ``cycle`` repeated, cut after ``count`` entries (each
        decoder is in a cycle once): decoder p gets blocks p, p + len(cycle), … of one
        allocation, as the step loop hands them out, by one slice per decoder instead of
        one append per block."""
        out, c = self.alloc.allocate(count), len(cycle)
        for p, req in enumerate(cycle):
            req.blocks.extend(out[p::c])
        self._register_last_blocks(cycle[:count])     # once per decoder that got a block

    def commit_decode_run(self, clock_s) -> None:
        """Complete planned decode steps: ``clock_s`` (float64 array) holds the first
        step's start, then every step's end. The same bookkeeping as :meth:`complete`
        step by step, in bulk."""
        m, n = len(clock_s) - 1, self.decoders.size
        self.slot_steps_useful += n * m
        self._steps_done(m, n * m, clock_s)

    # ------------------------------------------------------------ invariants
    def sync(self) -> None:
        """Materialise every decoder's counters (for inspection in tests)."""
        for lane in self._lanes or (self.decoders,):
            lane.sync()
