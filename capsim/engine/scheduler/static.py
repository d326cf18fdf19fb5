"""Static (request-level, run-to-completion) batching.

The baseline of seed 000 and pack Q1: a batch of up to ``max_num_seqs``
waiting requests is formed when the engine is free; it is prefilled in one
step with prompts padded to the longest; then every member decodes each step
until the longest reply is done. Finished members keep their slot and are
still computed (padding, as Hugging Face ``generate`` does). Each member
reserves KV for its whole reply at admission, so a static batch never preempts.

What a user receives: the whole reply at once, when the batch ends. Seed 002
Q1 (../shared/seeds/002_be97687ecafaf8fa.txt): "their reply is done after 50
steps, but they can't leave until the batch finishes at step 800"; a batch
returned by Hugging Face ``generate()`` is likewise one tensor for all its
members. So every member's first and last token arrive together at the end of
the batch's last step: TTFT = E2EL, and its ``output_tokens − 1`` inter-token
gaps are all 0 (recorded as one ITL run of zero-length gaps per class), which
makes TPOT = (E2EL − TTFT) ÷ (output − 1) = 0 = mean ITL. ``vllm bench serve``
measures a reply that arrives in one piece the same way (vllm/benchmarks/serve.py,
``calculate_metrics``: TTFT = latency, TPOT 0, no gap between chunks).
"""

from __future__ import annotations

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import FINISHED, RUNNING, Request
from capsim.engine.scheduler.base import PolicyArgs, Scheduler
from capsim.engine.step import Step
from capsim.kv.allocator import BlockAllocator
from capsim.kv.manager import KVCacheManager
from capsim.profiles.policies import policy_capabilities


class StaticScheduler(Scheduler):
    """Run-to-completion batches for one replica."""

    capabilities = policy_capabilities("static")

    def __init__(self, *, max_num_seqs: int, allocator: BlockAllocator, num_classes: int,
                 itl: ItlRecorder):
        super().__init__()
        self.max_num_seqs = max_num_seqs
        self.kv = KVCacheManager(allocator)
        self.itl = itl
        self.num_classes = num_classes
        self.batch: list[Request] = []          # members, by output length ascending
        self._max_prompt = 0
        self._decode_steps = 0
        self._active = 0                        # members still generating
        self._active_counts = [0] * num_classes
        self._admitted = 0

    def has_work(self) -> bool:
        return bool(self.batch or self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.batch)

    def schedule(self, now: float = 0.0) -> Step | None:
        if not self.batch:
            self._form_batch(now)
            if not self.batch:
                return None
            return self._prefill_step()
        return self._decode_step()

    def _form_batch(self, now: float) -> None:
        while self.waiting and len(self.batch) < self.max_num_seqs:
            req = self.waiting[0]
            kv = self.kv
            if not kv.can_allocate(kv.blocks_to_allocate(req, req.total_tokens)):
                break
            self.waiting.popleft()
            kv.grow(req, req.total_tokens)
            req.state = RUNNING
            req.first_scheduled_s = now
            req.admit_order = self._admitted
            self._admitted += 1
            self.batch.append(req)
            self.running[req.rid] = req
        self.batch.sort(key=lambda r: (r.output_tokens, r.admit_order))
        self._max_prompt = max((r.prompt_tokens for r in self.batch), default=0)
        self._decode_steps = 0

    def _prefill_step(self) -> Step:
        n, p = len(self.batch), self._max_prompt
        step = Step(prefills=[(r, r.prompt_tokens) for r in self.batch])
        step.prefill_tokens = n * p                        # padded to the longest prompt
        step.prefill_attn_pairs = n * p * (p + 1) / 2
        step.prefill_kv_tokens = n * p
        return step

    def _decode_step(self) -> Step:
        n = len(self.batch)
        ctx = self._max_prompt + self._decode_steps + 1
        return Step(decode_seqs=n, decode_ctx_tokens=n * ctx, emitting_decodes=self._active)

    def complete(self, step: Step, now: float) -> None:
        self.counters.steps += 1
        self.counters.slot_steps_held += len(self.batch)
        if step.prefills:
            self._complete_prefill(now)
        else:
            self._complete_decode(now)
        if self._active == 0:
            self._end_batch(now)

    def _complete_prefill(self, now: float) -> None:
        for req in self.batch:
            req.num_computed = req.prompt_tokens
            req.num_generated = 1
            self._active_counts[req.class_id] += 1
        self._active = len(self.batch)
        self.kv_tokens = sum(r.prompt_tokens for r in self.batch)
        self.counters.slot_steps_useful += self._active
        self._retire_done()

    def _complete_decode(self, now: float) -> None:
        self.counters.slot_steps_useful += self._active
        self.kv_tokens += self._active
        self._decode_steps += 1
        self._retire_done()

    def _retire_done(self) -> None:
        """Members whose reply is complete stop emitting (their slot stays held)."""
        done_upto = len(self.batch) - self._active
        generated = 1 + self._decode_steps
        while done_upto < len(self.batch) and self.batch[done_upto].output_tokens <= generated:
            req = self.batch[done_upto]
            self._active_counts[req.class_id] -= 1
            self._active -= 1
            done_upto += 1

    def _end_batch(self, now: float) -> None:
        """Every reply leaves now, in one piece: first token = last token = now (see the
        module docstring); its output − 1 gaps are 0, one ITL run per class."""
        held_gaps = [0] * self.num_classes
        for req in self.batch:
            req.num_generated = req.output_tokens
            req.num_computed = req.total_tokens
            req.first_token_s = now
            req.last_token_s = now
            if req.output_tokens > 1:
                req.note_gap(0.0)
                held_gaps[req.class_id] += req.output_tokens - 1
            self.kv.free(req)
            req.state = FINISHED
            req.finish_s = now                 # the response returns with the batch
            del self.running[req.rid]
        self.itl.add(0.0, held_gaps)
        self.finished.extend(self.batch)
        self.batch = []
        self.kv_tokens = 0


def build(args: PolicyArgs) -> StaticScheduler:
    """Static batching from the engine config (``max_num_seqs``).

    Raises:
        ValueError: a disaggregated pool's role (the scenario's resolution refuses it first).
    """
    if args.role not in StaticScheduler.capabilities.roles:
        raise ValueError("static batching cannot be disaggregated")
    return StaticScheduler(max_num_seqs=args.engine.max_num_seqs, allocator=args.allocator,
                           num_classes=args.num_classes, itl=args.itl)
