"""TensorRT-LLM's in-flight batching (the batch manager's capacity and micro-batch
schedulers, as the PyTorch executor of ``trtllm-serve`` runs them).

Sources (read, paraphrased; no code copied):

- ``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp`` at
  02a10fed0dbf5db74c7da035be9c5fbef6d2df7a: ``GuaranteedNoEvictScheduler::impl`` (running
  requests first, then pending contexts in arrival order, each admitted only if the blocks
  it needs to completion are free, stopping at the first that is not) and
  ``MaxUtilizationScheduler`` (one step's blocks per request in list order; when one does
  not fit, the most recently started request is paused, and a new context that does not
  fit stops the pass);
- ``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp`` at
  0a949d3128bfaf4ddedefb0259125622a9ec830f: ``MicroBatchScheduler::operator()``
  (generation requests 1 token each within ``max_num_tokens``; without chunking a
  context runs whole or the pass stops; with chunking the contexts share what the
  generation tokens leave, ``FIRST_COME_FIRST_SERVED``: each in turn gets
  min(remaining, capacity left), rounded down to a multiple of the chunk unit
  ``tokens_per_block`` when cut; a context cut to 0 does not run);
- ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp`` at
  002ba6a7cc5eb28f180d45d4a91142d9d927a606: ``getRemainingBlocksToCompletion`` =
  ceil((prompt + max_new_tokens) / tokens_per_block) − blocks held;
  ``getNeededBlocksOneStep`` = the prompt's blocks for a first context chunk, the next
  token's block for a generation request; ``addSequence`` allocates all the prompt's
  blocks at the first chunk.

capsim's mapping: ``max_num_batched_tokens`` = ``max_num_tokens``, ``max_num_seqs`` =
``max_batch_size``, ``block_size`` = ``tokens_per_block`` (= the chunk unit),
``output_tokens`` = ``max_new_tokens``. Every step is one forward of all running decodes
plus context (prefill) work (decodes never stall for a prompt).

KV cache block reuse (``enable_prefix_caching`` = ``KvCacheConfig.enable_block_reuse``, on
by default), read in the same files:

- ``kvCacheManager.cpp`` at 002ba6a7cc5eb28f180d45d4a91142d9d927a606:
  ``WindowBlockManager::addSequence`` / ``loadOrAllocateBlocks`` (a new context walks the
  tree of stored blocks over its prompt minus the last token, takes every matching block,
  freeing it from the free queue if nobody holds it, and allocates the rest);
  ``storeContextBlocks`` (the prompt's full blocks become reusable once the context has
  run; capsim stores them after a chunked context's last chunk, as
  ``tensorrt_llm/_torch/pyexecutor/resource_manager.py`` does in later releases, where
  earlier ones called it after every chunk) and ``releaseBlocks`` / ``storeBlocksForReuse`` (at release, prompt and generated
  tokens minus the last; blocks go to the back of the LRU free queue, last block first);
  ``getRemainingBlocksToCompletion`` (a request not yet added needs ceil((prompt +
  max_new_tokens) / tokens_per_block) blocks: reuse is not known when it is scheduled);
- ``scheduledBlocksManager.h`` ``NoEvictScheduledBlocksManager`` (GUARANTEED_NO_EVICT
  compares that need with the free blocks, reusable ones included);
- ``capacityScheduler.cpp`` (above) ``beneficialToSkip``: a new context whose first
  not-yet-stored block is the one an earlier context of this pass (or a chunked context
  still running) will store is skipped for this iteration, so that it reuses the block
  next time; the requests behind it are still considered;
- ``microBatchScheduler.cpp`` (above): a first context chunk is sized against
  ``max_num_tokens`` as if nothing were reused;
- ``cpp/include/tensorrt_llm/batch_manager/llmRequest.h`` at
  d879430b040ea30c65220c9171a8a70607398748 ``setPrepopulatedPromptLen``: the reused
  tokens are skipped afterwards; a chunk that does not end the prompt then ends on a
  block boundary.

Batch waiting (LLM API ``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio``, both 0
by default, which turns it off; ``tensorrt_llm/llmapi/llm_args.py``, read in the stored copy
of NVIDIA/TensorRT-LLM): ``tensorrt_llm/_torch/pyexecutor/py_executor.py`` at
0004396720054fd8e205cbf616f21f0b57c6b412 sets ``enable_batch_waiting`` when either is above 0,
and, without attention DP, filters each iteration's scheduled contexts when the iteration
also has generation requests (``_schedule`` / ``_waiting_requests`` in that file's earlier
form, the request scheduler's ``_apply_batch_waiting`` in later ones): the contexts run when
the iterations waited reach ``batch_wait_timeout_iters`` or the scheduled tokens (each
context's whole prompt, ``get_tokens(0)``, plus one per generation request and its draft
tokens) reach ``batch_wait_max_tokens_ratio`` x ``max_num_tokens``, and the count restarts;
otherwise none runs this iteration and the count goes up by one.

capsim reuses full blocks only. TensorRT-LLM 1.0 also reuses a partially matching block
(``enable_partial_reuse`` and ``copy_on_partial_reuse``, both True in
``tensorrt_llm/llmapi/llm_args.py`` at fcd3f31682808ae56118ae43c1d7864a3a945e6f): where two
prompts diverge inside a block, it takes (or copies) the matching tokens too, so capsim
recomputes up to ``tokens_per_block`` − 1 tokens per request that TensorRT-LLM would not.
GUARANTEED_NO_EVICT's reservation is physical in capsim (:mod:`.upfront`): a request's
future blocks are taken at admission, so a cached block on the free queue is evicted
when a reservation takes it rather than when the token is written, and capsim keeps fewer
freed prompts cached than TensorRT-LLM when the pool is full.
"""

from __future__ import annotations

from capsim.engine.request import RUNNING, Request
from capsim.engine.scheduler.base import PolicyArgs
from capsim.engine.scheduler.own_policy import own_policy_kwargs
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.upfront import UpFrontKV
from capsim.engine.step import Step
from capsim.kv.blocks import blocks_needed
from capsim.profiles.policies import policy_capabilities


class InflightBatching(ContinuousScheduler):
    """TensorRT-LLM's step, whichever capacity policy admits the contexts.

    Per step (one forward): every decoding request gets one token (taking the blocks its
    capacity policy gives it, :meth:`_grow_decoders`); then contexts, oldest first: with
    chunked context (``enable_chunked_prefill``) the started ones continue and new ones
    start, FIRST_COME_FIRST_SERVED within what the decodes leave of
    ``max_num_batched_tokens``; without it a new prompt runs whole or waits. A new context
    needs a slot under ``max_num_seqs`` and the blocks its capacity policy reserves
    (:meth:`seq_blocks`, :meth:`group_blocks`); the first one that misses anything stops
    admission for the step, and so does a paused request.

    With block reuse (a caching allocator): a new context takes the stored blocks of its
    longest cached prefix and computes the rest; the token budget and the capacity check
    count its whole prompt (TensorRT-LLM learns the reuse only when it adds the sequence);
    a context that would store the same next block as one scheduled before it this step
    waits a step instead (``beneficialToSkip``). The prompt's full blocks are stored when
    its context has run, the whole sequence's when it ends or is paused.
    """

    capabilities = policy_capabilities("trtllm")
    registers_when_scheduled = False

    def __init__(self, *, batch_wait_timeout_iters: int = 0,
                 batch_wait_max_tokens_ratio: float = 0.0, dp_attention: bool = False,
                 **common) -> None:
        super().__init__(**common)
        # Batch waiting (module docstring); TensorRT-LLM skips it under attention DP.
        on = (batch_wait_timeout_iters > 0 or batch_wait_max_tokens_ratio > 0) \
            and not dp_attention
        self.wait_iters = batch_wait_timeout_iters if on else 0
        self.wait_tokens = batch_wait_max_tokens_ratio * self.budget if on else 0.0
        self.waited_iters = 0

    def seq_blocks(self, req: Request) -> int:
        """Blocks one sequence of a new context takes (the capacity policy's)."""
        raise NotImplementedError

    def group_blocks(self, req: Request, per_seq: int) -> int:
        return per_seq

    def take_reservation(self, req: Request, per_seq: int) -> None:
        self.kv.reserve(req, per_seq, per_seq, False)     # reused blocks count once

    def _schedule_chunked(self) -> Step:
        return self._schedule_inflight(chunk=True)

    def _schedule_unchunked(self) -> Step:
        return self._schedule_inflight(chunk=False)

    def _schedule_inflight(self, chunk: bool) -> Step:
        step = Step()
        room = self.budget
        if self.decoders.size:
            self._grow_decoders()
            room -= self._add_decodes(step)
            if self.wait_iters and self._contexts_wait(room, chunk):
                return step                         # batch waiting: decodes only
        for req in list(self.prefilling.values()):      # started contexts, oldest first
            if req.state != RUNNING:
                continue
            n = self._chunk(req.remaining_to_compute, room)
            if n and self._reserve_prefill(req, n):
                step.add_prefill(req, n)
                room -= n
        if not self._preempted_now:
            self._admit_contexts(step, room, chunk)
        return step

    def _contexts_wait(self, room: int, chunk: bool) -> bool:
        """Whether batch waiting holds back this step's contexts (``room``: the token
        budget the step's decodes leave). The contexts counted are those the step would
        run: the started ones and the queue's head while each alone has its slot, its
        tokens and its blocks (the blocks of several are not summed: the count only
        decides whether to wait)."""
        gen = self.budget - room
        prompts = 0
        for req in self.prefilling.values():
            n = self._chunk(req.remaining_to_compute, room) if req.state == RUNNING else 0
            if n:
                prompts += req.num_tokens
                room -= n
        seqs = self.num_running
        for req in self.waiting:
            seqs += req.n
            fits = self._context_fits(req, room, chunk) if seqs <= self.max_num_seqs else None
            if fits is None:
                break
            prompts += req.num_tokens
            room -= fits[0]
        if not prompts:                 # no context scheduled: the rule is not consulted
            return False
        if self.waited_iters >= self.wait_iters or prompts + gen >= self.wait_tokens:
            self.waited_iters = 0
            return False
        self.waited_iters += 1
        return True

    def _chunk(self, todo: int, room: int) -> int:
        """FIRST_COME_FIRST_SERVED: the whole rest, or what room is left cut down to a
        multiple of the chunk unit (``tokens_per_block``)."""
        if todo <= room:
            return todo
        return max(room, 0) // self.bs * self.bs

    def _admit_contexts(self, step: Step, room: int, chunk: bool) -> None:
        """New contexts in queue order while a slot, their blocks and tokens are there;
        the first that misses one stops the pass (a context cut to 0 tokens waits, and so
        does everything behind it)."""
        if self.caching:
            self._admit_contexts_reusing(step, room, chunk)
            return
        waiting = self.waiting
        while waiting and self.num_running + waiting[0].n <= self.max_num_seqs:
            req = waiting[0]
            fits = self._context_fits(req, room, chunk)
            if fits is None:
                break
            n, blocks = fits
            self.take_reservation(req, blocks)
            self._start(req, step, n)
            room -= n

    def _context_fits(self, req: Request, room: int, chunk: bool) -> tuple[int, int] | None:
        """(tokens of ``req``'s context this step, blocks of its whole-request reservation)
        when the chunk fits the token budget ``room`` and the reservation fits the pool;
        None when either does not (admission stops there, in queue order)."""
        todo = req.remaining_to_compute
        n = self._chunk(todo, room) if chunk else (todo if todo <= room else 0)
        if n <= 0:
            return None
        blocks = self.seq_blocks(req)
        if not self.kv.can_allocate(self.group_blocks(req, blocks)):
            return None
        return n, blocks

    # ------------------------------------------------------------ block reuse
    def _admit_contexts_reusing(self, step: Step, room: int, chunk: bool) -> None:
        """:meth:`_admit_contexts` with block reuse: contexts that would store the same next
        block as an earlier one are passed over; the others are admitted as without reuse,
        then take their cached prefix and compute only the rest of the chunk."""
        waiting, bs = self.waiting, self.bs
        contributed = {self._next_stored_block(r) for r in self.prefilling.values()
                       if r.state == RUNNING and r.shareable}
        i = 0
        while i < len(waiting) and self.num_running + waiting[i].n <= self.max_num_seqs:
            req = waiting[i]
            if req.shareable:
                key = self._next_stored_block(req)
                if key is not None:
                    if key in contributed:
                        i += 1                  # beneficialToSkip: reuse it next step
                        continue
                    contributed.add(key)
            fits = self._context_fits(req, room, chunk)
            if fits is None:
                break
            n, blocks = fits
            todo = req.remaining_to_compute
            hit = self.kv.get_computed_blocks(req)
            cached = len(hit) * bs
            # setPrepopulatedPromptLen: skip the reused tokens; a cut chunk ends on a block
            run = todo - cached if cached + n >= todo else (cached + n) // bs * bs - cached
            self._take_prefix(req, hit)
            self.take_reservation(req, blocks)
            if i:                               # _start admits the head of the queue
                del waiting[i]
                waiting.appendleft(req)
            self._start(req, step, run)
            room -= n                           # the budget counted the whole chunk

    def _next_stored_block(self, req: Request) -> int | None:
        """``findNewContextBlock``: the hash of ``req``'s first full block that is not in
        the cache (None: all are), which its context will store."""
        return self.kv.first_uncached_hash(req)

    def complete(self, step: Step, now: float) -> None:
        """As :meth:`ContinuousScheduler.complete`; with block reuse, a context that ran its
        last chunk first stores its prompt's full blocks (``storeContextBlocks``: the
        prompt minus its last token)."""
        if self.caching:
            for req, n in step.prefills:
                if req.shareable and req.num_computed + n == req.num_tokens:
                    self.kv.cache_blocks(req, req.num_tokens - 1)
        super().complete(step, now)


class TrtllmMaxUtilizationScheduler(InflightBatching):
    """TensorRT-LLM with ``capacity_scheduler_policy: MAX_UTILIZATION``.

    Blocks are taken as tokens arrive: a new context takes its whole prompt's blocks (at
    its first chunk), a decoding request a block when its token starts one. When those are
    short, the most recently started request (decoding or mid-prompt) is paused: its KV is
    freed and it recomputes prompt + generated tokens later, ahead of the requests that
    never started (the continuous scheduler's recompute preemption).
    """

    def seq_blocks(self, req: Request) -> int:
        return blocks_needed(req.num_tokens, self.bs)


class TrtllmScheduler(UpFrontKV, InflightBatching):
    """TensorRT-LLM with ``capacity_scheduler_policy: GUARANTEED_NO_EVICT`` (its default).

    A new context is admitted only if the blocks of prompt + ``output_tokens`` (its
    max_new_tokens) are free, and takes them all at once: running requests never need
    another block, so nothing is ever paused. (A sequence whose prompt + output blocks
    exceed the whole pool reserves prompt + output − 1, the tokens it writes, so that every
    request capsim accepts can run.)
    """

    def seq_blocks(self, req: Request) -> int:
        per = blocks_needed(req.prompt_tokens + req.output_tokens, self.bs)
        if self.group_blocks(req, per) > self.kv.num_blocks:
            per = blocks_needed(req.total_tokens, self.bs)
        return per


def build(args: PolicyArgs) -> InflightBatching:
    """TensorRT-LLM's policy from the engine config: ``capacity_scheduler_policy`` (the
    engine's, else the preset's knob, else GUARANTEED_NO_EVICT) picks the class."""
    common = own_policy_kwargs(args, InflightBatching.engine_kwargs(args))
    knobs = args.knobs or {}
    policy = args.engine.capacity_scheduler_policy or knobs.get(
        "capacity_scheduler_policy", "GUARANTEED_NO_EVICT")
    cls = TrtllmMaxUtilizationScheduler if policy == "MAX_UTILIZATION" else TrtllmScheduler
    wait = {key: value for key in ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio")
            if (value := _knob_or_none(args, key)) is not None}
    return cls(**common, **wait, dp_attention=args.engine.enable_dp_attention)


def _knob_or_none(args: PolicyArgs, key: str):
    """Knob ``key``: the engine config's, else the preset's ``scheduler.knobs``, else None
    (TensorRT-LLM's default, off)."""
    value = getattr(args.engine, key, None)
    return value if value is not None else (args.knobs or {}).get(key)
