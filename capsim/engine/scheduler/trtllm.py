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
"""

from __future__ import annotations

from capsim.engine.request import RUNNING, Request
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.upfront import UpFrontKV
from capsim.engine.step import Step
from capsim.kv.blocks import blocks_needed


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
    """

    supports_prefix_caching = False     # KV cache block reuse is not modelled yet

    def seq_blocks(self, req: Request) -> int:
        """Blocks one sequence of a new context takes (the capacity policy's)."""
        raise NotImplementedError

    def group_blocks(self, req: Request, per_seq: int) -> int:
        return per_seq

    def take_reservation(self, req: Request, per_seq: int) -> None:
        req.blocks += self.alloc.allocate(per_seq - len(req.blocks))   # reused blocks count once

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
        waiting = self.waiting
        while waiting and self.num_running + waiting[0].n <= self.max_num_seqs:
            req = waiting[0]
            todo = req.remaining_to_compute
            n = self._chunk(todo, room) if chunk else (todo if todo <= room else 0)
            if n <= 0:
                break
            blocks = self.seq_blocks(req)
            if not self.alloc.can_allocate(self.group_blocks(req, blocks)):
                break
            self.take_reservation(req, blocks)
            self._start(req, step, n)
            room -= n


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
        if self.group_blocks(req, per) > self.alloc.num_blocks:
            per = blocks_needed(req.total_tokens, self.bs)
        return per
