"""Hugging Face text-generation-inference 2.1 (router v3): batches that grow only at
chosen moments, a prefill of their own, and every sequence's KV reserved at admission.

Sources (read, paraphrased; no code copied), tag v2.1.0 =
192d49af0bfa71e886c27856232031f3935628ff:

- ``router/src/infer/v3/scheduler.rs`` ``batching_task``: with no batch, take one from the
  queue (no minimum size) and prefill it; then, while the batch runs, before every decode
  step try to add a batch: its minimum size is floor(batch size × waiting_served_ratio)
  (an f32 product), or none once ``waiting_tokens`` >= ``max_waiting_tokens``; a new batch
  is prefilled on its own (the running batch waits) and resets ``waiting_tokens`` to 1; the
  decode step over everything follows and adds 1 to ``waiting_tokens``;
- ``router/src/infer/v3/queue.rs`` ``State::next_batch``: nothing if the queue is shorter
  than the minimum size; the prefill budget rounded up to whole blocks; entries in queue
  order while Σ prompt <= prefill budget and Σ (prompt + max_new_tokens) <= token budget
  (the blocks not held by the running batch) and the blocks of prompt + max_new_tokens − 1
  can be allocated; the first entry that fails stops the batch (it stays at the head);
  a batch smaller than the minimum size goes back to the queue.

capsim's mapping: ``max_num_batched_tokens`` = ``max_batch_prefill_tokens``,
``max_num_seqs`` = the batch size cap, ``block_size`` = the router's block size,
``output_tokens`` = ``max_new_tokens``; ``max_waiting_tokens`` and
``waiting_served_ratio`` are the engine knobs of those names.
"""

from __future__ import annotations

import math

import numpy as np

from capsim.engine.macro.plan import MIN_RUN_STEPS, RunPlan
from capsim.engine.request import Request
from capsim.engine.scheduler.base import PolicyArgs
from capsim.engine.scheduler.own_policy import knob, own_policy_kwargs
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.upfront import UpFrontKV
from capsim.engine.step import Step
from capsim.kv.blocks import blocks_needed
from capsim.profiles.policies import policy_capabilities


class TgiScheduler(UpFrontKV, ContinuousScheduler):
    """TGI 2.1's router-v3 batching for one replica.

    Args:
        max_waiting_tokens: decode steps after which a batch of any size may join.
        waiting_served_ratio: queued requests per running one that let a batch join
            before that.
        **kwargs: as :class:`ContinuousScheduler` (``chunked`` is ignored: TGI 2.1 never
            splits a prompt).

    A step is either the prefill of a new batch (alone: running requests see it in their
    token gap) or one decode step of every running request. Admission reserves the blocks
    of prompt + output − 1 tokens (TGI's router allocation), so nothing is preempted.
    ``waiting_tokens`` holds TGI's counter.

    No prefix caching: TGI 2.1 had none (v2.1.0's ``router/src/infer/v3/block_allocator.rs``
    hands out blocks without hashing them); the v3 router's radix allocator
    (``backends/v3/src/radix.rs``) and ``USE_PREFIX_CACHING`` came with TGI 2.3 (8deeaca,
    b70ae09), and the scenario's resolution refuses ``enable_prefix_caching: true``.
    """

    capabilities = policy_capabilities("tgi")

    def __init__(self, *, max_waiting_tokens: int, waiting_served_ratio: float, **kwargs):
        super().__init__(**kwargs)
        self.max_waiting_tokens = max_waiting_tokens
        self.waiting_served_ratio = np.float32(waiting_served_ratio)
        self.waiting_tokens = 0
        self._decode_next = False      # a new batch was just prefilled: decode before trying again
        self._quiet: float = 0         # decode steps from the last one scheduled whose tries fail

    def seq_blocks(self, req: Request) -> int:
        return blocks_needed(req.total_tokens, self.bs)

    # -------------------------------------------------------------- schedule
    def _schedule_chunked(self) -> Step:
        return self._schedule_unchunked()

    def _schedule_unchunked(self) -> Step:
        step = Step()
        if not self.running:                       # no batch: form one, no minimum size
            self._decode_next = False
            if self._next_batch(step, None) and step.prefills:
                self.waiting_tokens = 1
            return step
        if self._decode_next:                      # the decode after a new batch's prefill
            self._decode_next = False
            self._quiet = 1 if self.waiting else math.inf
        else:
            w = self.waiting_tokens
            min_size = None if w >= self.max_waiting_tokens else \
                int(np.float32(len(self.running)) * self.waiting_served_ratio)
            fits = self._next_batch(step, min_size)
            if step.prefills:
                self.waiting_tokens = 1
                self._decode_next = True
                return step                         # the running batch waits for this prefill
            # Until a finish or an arrival, only the minimum size can change the next tries'
            # outcome, when waiting_tokens reaches max_waiting_tokens.
            self._quiet = math.inf if not self.waiting or min_size is None or not fits \
                else self.max_waiting_tokens - w
        self._add_decodes(step)
        return step

    def _next_batch(self, step: Step, min_size: int | None) -> int:
        """``State::next_batch``: admit a batch from the head of the queue into ``step``
        (prefills), if it has at least ``min_size`` entries. Returns how many entries fit
        the budgets (-1: not looked at, the queue is shorter than ``min_size``)."""
        waiting, bs = self.waiting, self.bs
        if not waiting:
            return 0
        if min_size is not None and len(waiting) < min_size:
            return -1
        prefill_budget = -(-self.budget // bs) * bs
        free = self.kv.num_free_blocks
        token_budget = free * bs
        room = self.max_num_seqs - self.num_running
        prefill = decode = seqs = 0
        batch: list[tuple[Request, int]] = []
        for req in waiting:
            prefill += req.prompt_tokens
            decode += req.output_tokens * req.n
            over = prefill > prefill_budget or prefill + decode > token_budget
            if over and (batch or self.running):   # an idle engine always takes what fits its blocks
                break
            per = self.seq_blocks(req)
            need = self.group_blocks(req, per)
            if need > free or seqs + req.n > room:
                break
            free -= need
            seqs += req.n
            batch.append((req, per))
        if min_size is not None and len(batch) < min_size:
            return len(batch)
        for req, per in batch:
            self.take_reservation(req, per)
            self._start(req, step, req.num_tokens)
        return len(batch)

    def _steps_done(self, m: int, tokens: int, decode_clock_s) -> None:
        if decode_clock_s is not None:
            self.waiting_tokens += m
        super()._steps_done(m, tokens, decode_clock_s)

    # --------------------------------------------------------------- decode runs
    def plan_decode_run(self, step: Step, max_steps: int = 4096,
                        min_steps: int = MIN_RUN_STEPS,
                        horizon_steps: int = 4096) -> RunPlan | None:
        """As :meth:`ContinuousScheduler.plan_decode_run`, no further than the decode steps
        whose admission tries are known to fail (``max_waiting_tokens`` may turn a too-small
        batch into an admissible one)."""
        if self._quiet < min_steps:
            return None
        if self._quiet != math.inf:
            max_steps = min(max_steps, int(self._quiet))
        return super().plan_decode_run(step, max_steps, min_steps, horizon_steps)


def build(args: PolicyArgs) -> TgiScheduler:
    """TGI's policy from the engine config; its knobs from the engine or the preset."""
    common = own_policy_kwargs(args, TgiScheduler.engine_kwargs(args))
    return TgiScheduler(max_waiting_tokens=knob(args, "max_waiting_tokens"),
                        waiting_served_ratio=knob(args, "waiting_served_ratio"), **common)
