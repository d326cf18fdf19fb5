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

Roles (prefill/decode disaggregation, DistServe / Splitwise, :mod:`.roles`): a
``prefill`` scheduler hands a request off after its first token; a ``decode``
scheduler takes transferred requests, their blocks held while the KV crosses the
link. The ``colocated`` role (the default) does both halves itself.

The decoding sequences live in a :class:`~capsim.engine.decode_set.DecodeSet`
(implicit per-sequence counters, O(1) per step); one step and a macro-step run
commit through the same :meth:`DecodeSet.advance` and take blocks through the
same KV facade calls (:mod:`.runs`). Batches in flight under pipeline parallelism
are :mod:`.lanes`, swap preemption :mod:`.swap`, parallel sampling's forks
:mod:`.sampling`; KV blocks and the prefix cache are the facade's
(:class:`~capsim.kv.manager.KVCacheManager`): the policy never touches a block list.
"""

from __future__ import annotations

from capsim.engine.decode_set import DecodeSet
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import FINISHED, RUNNING, WAITING, Request
from capsim.engine.scheduler.base import PolicyArgs, Scheduler
from capsim.engine.scheduler.lanes import PipelineLanes
from capsim.engine.scheduler.roles import TransferRoles
from capsim.engine.scheduler.runs import DecodeRuns
from capsim.engine.scheduler.sampling import ParallelSampling
from capsim.engine.scheduler.swap import SwapPreemption
from capsim.engine.step import Step
from capsim.engine.window_decode_set import WindowDecodeSet
from capsim.kv.allocator import BlockAllocator
from capsim.kv.manager import KVCacheManager
from capsim.profiles.policies import policy_capabilities

GIB = 2**30


class ContinuousScheduler(PipelineLanes, TransferRoles, DecodeRuns, SwapPreemption,
                          ParallelSampling, Scheduler):
    """Iteration-level scheduler for one replica.

    Args:
        max_num_seqs: cap on running sequences (vLLM ``max_num_seqs``).
        max_num_batched_tokens: token budget per step.
        chunked: ``enable_chunked_prefill``.
        allocator: this replica's paged KV pool (wrapped in the KV facade, :meth:`make_kv`).
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
            32e7db2). Such windows are stepped one by one (no decode runs), and each
            request's tokens of a window stream as one chunk at its end
            (:class:`~capsim.engine.window_decode_set.WindowDecodeSet`).
        long_prefill_token_threshold: vLLM V1's cap on the prompt tokens one request is
            given in a step, a partial prefill's next chunk as a waiting request's first
            (``num_new_tokens = threshold`` when it exceeds it, before the budget's
            ``min``: vllm/v1/core/sched/scheduler.py ``schedule`` at 00024d3); 0: none.
            With it several long prompts share a step's budget instead of prefilling one
            after another.
    """

    capabilities = policy_capabilities("continuous")
    grows_kv = True       # decoders take blocks as they grow (False: reserved up front)
    #: Full blocks enter the prefix cache when they are scheduled, as vLLM v1 does
    #: (``allocate_slots`` → ``cache_blocks``), decode blocks as they fill. False: the policy
    #: registers computed blocks itself after their step (SGLang, TensorRT-LLM).
    registers_when_scheduled = True

    def __init__(self, *, max_num_seqs: int, max_num_batched_tokens: int, chunked: bool,
                 allocator: BlockAllocator, num_classes: int, itl: ItlRecorder,
                 role: str = "colocated", swap_space_bytes: int = 0,
                 kv_bytes_per_token: int = 0, num_scheduler_steps: int = 1,
                 long_prefill_token_threshold: int = 0, priority_scheduling: bool = False):
        super().__init__()
        # vLLM's --scheduling-policy priority: the waiting queue in (priority, arrival)
        # order, preemption of the lowest-priority, latest-arriving running request.
        self.by_priority = priority_scheduling
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
        self.swap_used_bytes = 0
        self._swap_pending = 0            # bytes copied since the last returned step
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.chunked = chunked
        self.kv = self.make_kv(allocator)
        self.bs = self.kv.block_size
        self.caching = self.kv.enable_caching
        self.offload = self.caching and getattr(allocator, "host", None) is not None
        self.itl = itl
        self.num_classes = num_classes
        self.prefilling: dict[int, Request] = {}   # running, still computing prompt tokens
        # Multi-step windows stream each request's tokens once per window.
        self.decoders = (WindowDecodeSet if num_scheduler_steps > 1 else DecodeSet)(
            self.bs, num_classes, itl)
        self._admitted = 0
        self._now = 0.0
        self._preempted_now = False
        self._cow_pending: list[Request] = []       # forked samples about to write a shared block
        self._fork_id = 0                           # forked samples get ids -1, -2, ...
        self._kv_ready: list[Request] = []          # decode role: KV arrived, joins at next schedule
        self._lanes: list[DecodeSet] | None = None  # PP > 1: one decode set per batch in flight
        self._max_lanes = 1
        self._hold = False              # vLLM 0.6.0: window finishes stream late (hold_window_finishes)

    def hold_window_finishes(self, delay_s: float) -> None:
        """vLLM 0.6.0-0.6.1 under multi-step windows: a request finishing inside a window
        streams its last chunk when the engine's loop next wakes, at the window's end or at
        the next arrival (:class:`~capsim.engine.window_decode_set.WindowDecodeSet`,
        ``hold_delay_s``; ``delay_s``: the output delay every chunk waits, s). Its KV is
        freed at its step; it is reported finished when its chunk streams. No-op without
        windows."""
        if self.num_scheduler_steps > 1:
            self.decoders.hold_delay_s = delay_s
            self._hold = True

    @property
    def held_finishes(self) -> bool:
        """Whether a finished request's last chunk waits for the engine's loop to wake."""
        return self._hold and bool(self.decoders.held)

    def release_held(self, now: float) -> None:
        """A request reached the engine at ``now``, waking its loop: the held last chunks
        stream (:meth:`WindowDecodeSet.release`) and their requests join ``finished``."""
        if self.held_finishes:
            self.decoders.release(now - self.decoders.hold_delay_s)
            self._deliver_released()

    def _deliver_released(self) -> None:
        """Report the requests whose held last chunk streamed, finished at that chunk."""
        released = self.decoders.released
        for req in released:
            req.finish_s = req.last_token_s
            self.finished.append(req)
        released.clear()

    def make_kv(self, allocator: BlockAllocator) -> KVCacheManager:
        """The KV facade over ``allocator`` (a policy with another layout overrides it)."""
        return KVCacheManager(allocator, self.registers_when_scheduled)

    @classmethod
    def engine_kwargs(cls, args: PolicyArgs) -> dict:
        """The constructor arguments every continuous-family policy reads from the engine
        config (``long_prefill_token_threshold`` and swap are vLLM's own: :meth:`from_engine`)."""
        eng = args.engine
        return dict(max_num_seqs=eng.max_num_seqs,
                    max_num_batched_tokens=eng.max_num_batched_tokens, chunked=eng.chunked,
                    allocator=args.allocator, num_classes=args.num_classes, itl=args.itl,
                    role=args.role)

    @classmethod
    def from_engine(cls, args: PolicyArgs, **extra) -> ContinuousScheduler:
        """vLLM's policy from the engine config: multi-step windows, the long-prefill
        threshold, swap space (``swap_space_gib`` × TP when ``preemption_mode: swap``)."""
        eng = args.engine
        swap = int(eng.swap_space_gib * GIB) * eng.tensor_parallel_size \
            if eng.preemption_mode == "swap" else 0
        return cls(**cls.engine_kwargs(args), **extra, swap_space_bytes=swap,
                   kv_bytes_per_token=args.kv_bytes_per_token,
                   long_prefill_token_threshold=eng.long_prefill_token_threshold,
                   priority_scheduling=eng.scheduling_policy == "priority")

    # ----------------------------------------------------------------- queue
    def add(self, req: Request) -> None:
        """Queue an arrived request: at the back (fcfs), or by priority."""
        if self.by_priority:
            req.state = WAITING
            self._enqueue_by_priority(req)
        else:
            super().add(req)

    def _enqueue_by_priority(self, req: Request) -> None:
        """Into the waiting queue in (priority, arrival) order, after its equals (vLLM's
        PriorityRequestQueue pops the smallest (priority, arrival_time))."""
        waiting, key = self.waiting, (req.priority, req.arrival_s)
        i = len(waiting)
        while i and (waiting[i - 1].priority, waiting[i - 1].arrival_s) > key:
            i -= 1
        waiting.insert(i, req)

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

    @property
    def merged_tokens(self) -> int:
        """Tokens streamed in a chunk after the chunk's first (multi-step windows)."""
        return self.decoders.merged_tokens

    @property
    def streamed(self) -> bool:
        """False for a step inside a multi-step window (not its last)."""
        return self.decoders.window_end

    @property
    def buffered_tokens(self) -> int:
        """Tokens computed in the current multi-step window, not yet streamed."""
        return self.decoders.buffered_tokens

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
        if self._hold and not in_window and self.decoders.held:
            self.release_held(self._now)     # a window cut short (all preempted): they leave
        if not self.swapped and not in_window:
            self._admit_waiting(step, self.budget, whole_prompts=True)
        if step.prefills:
            self._window_left = 0
            return step                      # prefill-only step: decodes stall (Orca / vLLM v0)
        if self.decoders.size:
            self._window_left = self._window_left - 1 if in_window \
                else self.num_scheduler_steps - 1
            if self.num_scheduler_steps > 1:
                self.decoders.window_end = not self._window_left
                if not in_window:          # a new window: its batch is the members alone
                    self.decoders.end_window()
            self._grow_decoders()
            self._add_decodes(step)
        return step

    def _admit_waiting(self, step: Step, budget: int, whole_prompts: bool) -> None:
        kv, bs = self.kv, self.bs
        while (self.waiting and budget > 0
               and self.num_running + self.waiting[0].n <= self.max_num_seqs):
            req = self.waiting[0]
            hit = kv.get_computed_blocks(req)
            # KV offload (capsim.kv.offload): the next blocks found in host memory are
            # loaded, not recomputed; they take fresh GPU blocks like computed ones.
            host = kv.host_hits(req, len(hit)) if self.offload else 0
            cached = (len(hit) + host) * bs
            todo = req.num_tokens - cached
            if whole_prompts and todo > budget:
                break
            n = min(todo, budget, self.chunk_cap)
            need = -(-(cached + n) // bs) - len(hit)
            if not kv.can_allocate(need + kv.num_free_among(hit)):
                break
            if self.caching:
                self._take_prefix(req, hit, host)
            kv.allocate_slots(req, cached + n)
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
        decoders = self.decoders
        n = decoders.size
        # Under multi-step windows the batch's members that finished earlier in the window
        # are still computed (WindowDecodeSet.ghost_seqs); they emit nothing.
        step.decode_seqs = n + decoders.ghost_seqs
        step.emitting_decodes = n
        step.decode_ctx_tokens = decoders.ctx_tokens + decoders.ghost_ctx_tokens
        return n

    def _grow_decoders(self) -> None:
        """Give a new block to every decoder whose next token starts one; preempt if short."""
        bucket = self.decoders.crossing()
        can_allocate = self.kv.can_allocate
        cow = self._cow_pending
        while (bucket or cow) and not can_allocate(len(bucket) + len(cow)):
            self._preempt(self._victim())
        if cow:
            self._copy_on_write(cow)
        if bucket:
            self.kv.append_blocks(list(bucket.values()), self.decoders.shareable)

    def _reserve_prefill(self, req: Request, n: int) -> bool:
        """Blocks for a running prefill's next chunk; evicts newer prefills, else itself."""
        upto = req.num_computed + req.num_inflight + n
        need = self.kv.blocks_to_allocate(req, upto)
        while not self.kv.can_allocate(need):
            victim = self._prefill_victim()
            if victim is None:
                return False        # PP: every newer prefill is in the pipeline; wait
            self._preempt(victim)
            if victim is req:
                return False
        self.kv.allocate_slots(req, upto)
        return True

    # ------------------------------------------------------------ prefix cache
    def _take_prefix(self, req: Request, hit: list[int], host: int = 0) -> None:
        """Admission with prefix caching: count the lookup, take a reference to the hit
        blocks (``req`` holds no blocks yet) and skip their tokens; the ``host`` blocks
        after them are loaded from the host tier (their bytes charged to the step over
        the host link, as swap-in copies are)."""
        c, bs = self.counters, self.bs
        cached = len(hit) * bs
        c.prefix_queried_tokens += req.num_tokens
        c.prefix_hit_tokens += cached
        c.prefix_queried_blocks += req.num_tokens // bs
        c.prefix_hit_blocks += len(hit)
        self.kv.take_computed(req, hit)
        if host:
            self.kv.allocator.host.load(req.hashes[len(hit):len(hit) + host])
            c.offload_hit_tokens += host * bs
            self._swap_pending += host * bs * self.kv_bytes_per_token
            cached += host * bs
        req.num_computed = cached
        self.kv_tokens += cached

    def _preempt(self, req: Request) -> None:
        """Preempt: swap the KV out if swap space allows, else recompute (free everything,
        back to the front of the queue). Either way the request loses its blocks."""
        decoding = req.dec_epoch0 >= 0
        if decoding:
            self._lane_of(req).leave(req)
        else:
            del self.prefilling[req.rid]
        del self.running[req.rid]
        counters, kv = self.counters, self.kv
        counters.preemptions += 1
        self._preempted_now = True
        req.num_preemptions += 1
        if self.swap_space_bytes and self._swap_out(req):
            return
        if self.caching:                             # its recompute can find them again
            kv.cache_blocks(req, self._cached_at_preemption(req, decoding))
        kv.free_to_recompute(req)
        counters.recomputed_tokens += req.num_computed
        self.kv_tokens -= req.num_computed
        req.num_computed = 0
        req.state = WAITING
        if self.by_priority:
            self._enqueue_by_priority(req)
        else:
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
            self._land_lane(step)
        self._steps_done(1, step.prefill_tokens + step.decode_seqs,
                         (now, now) if step.decode_seqs else None)
        emitted = step.emitting_decodes
        for req, n in step.prefills:
            req.num_computed += n
            if req.num_computed == req.num_tokens:
                emitted += 1
                self._emit_after_prefill(req, now)
        self.counters.slot_steps_useful += emitted

    def _steps_done(self, m: int, tokens: int, decode_clock_s) -> None:
        """``m`` steps ran, writing ``tokens`` tokens of KV; the decoders emitted at the
        step ends of ``decode_clock_s`` (:meth:`DecodeSet.advance`; None: no decode in
        them): the decode set's bookkeeping, then its finishes, in (epoch, admission)
        order."""
        counters = self.counters
        counters.steps += m
        counters.slot_steps_held += len(self.running) * m
        self.kv_tokens += tokens
        if decode_clock_s is None:
            return
        leavers = self.decoders.advance(decode_clock_s)
        if leavers:
            now = float(decode_clock_s[-1])
            for req in leavers:
                self._finish(req, now)
        if self._hold and self.decoders.released:
            self._deliver_released()

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
            self.counters.slot_steps_useful += req.n - 1
            self._fork_samples(req, now)
        if req.num_generated == req.output_tokens:
            for f in [r for r in self.running.values() if r.group is req and
                      r.num_generated == r.output_tokens]:
                self._finish(f, now)
            self._finish(req, now)
        elif self.role == "prefill":
            self._hand_off(req)
        else:
            self.decoders.join(req, now)

    def _finish(self, req: Request, now: float) -> None:
        del self.running[req.rid]
        if self.caching and req.shareable:
            self.kv.cache_blocks(req, req.num_computed)   # a next turn reuses prompt + reply
        self.kv.free(req)
        self.kv_tokens -= req.num_computed
        req.state = FINISHED
        group = req.group or req
        group.samples_left -= 1
        if req is not group:
            group.note_gap(req.max_itl_s)
        if group.samples_left == 0:                 # the request ends with its last sample
            if self._hold and self._holding(req):
                return                              # reported when its last chunk streams
            group.finish_s = now
            self.finished.append(group)

    def _holding(self, req: Request) -> bool:
        """``req``'s last chunk is held, or was released in the step that finished it."""
        decoders = self.decoders
        return req.rid in decoders.held or any(r is req for r in decoders.released)
