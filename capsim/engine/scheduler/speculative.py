"""vLLM V1's continuous batching with speculative decoding (``speculative_config``).

What changes against :class:`~capsim.engine.scheduler.continuous.ContinuousScheduler`
(vllm/v1/core/sched/scheduler.py at 00024d3):

- **Token budget**: a running request is scheduled ``num_tokens_with_spec −
  num_computed_tokens`` = 1 + k tokens, all counted against ``max_num_batched_tokens``
  (``token_budget −= num_new_tokens``) before any prompt chunk. vLLM truncates a
  request's drafts when the budget runs out mid-batch (``spec_token_ids[:
  num_scheduled_spec_tokens]``); here the verification width ``min(k + 1, budget ÷ n)``
  is the same for every decoding sequence of the step (n·(k+1) fits the budget in any
  configuration where max_num_batched_tokens ≥ max_num_seqs·(k+1)).
- **KV slots**: ``allocate_slots(request, 1 + k, num_lookahead_tokens=k)`` (k for
  EAGLE / MTP / draft models, 0 for ngram): each decoding sequence holds blocks for
  ``num_computed + (1 + k) + lookahead`` tokens (capped at prompt + output, the most it
  ever writes), taken before the step, preempting the newest running request when short
  (as for plain decodes). Rejected drafts' slots are not freed: ``update_from_output``
  only rolls ``num_computed_tokens`` back by the rejected count, the blocks stay with the
  request and the next step writes over them.
- **Progress**: after the step a sequence advances by the tokens it emitted (1 + accepted
  drafts), in :meth:`SpecDecodeSet.advance_spec`; the KV written (``kv_tokens``) grows by
  the same.
- **No macro-steps**: acceptance is drawn per sequence and step, so decode runs are not
  planned (:meth:`can_plan_run` is False); every step is its own event.
"""

from __future__ import annotations

from capsim.engine.scheduler.base import PolicyArgs
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.spec_decode_set import SpecDecodeSet
from capsim.engine.step import Step
from capsim.scenario.speculative import SpecDecoding


class SpeculativeScheduler(ContinuousScheduler):
    """:class:`ContinuousScheduler` verifying k drafts per decoding sequence per step.

    Args:
        spec: the variant's resolved speculative decoding.
        Others: as :class:`ContinuousScheduler`.

    Attributes:
        width: tokens verified per decoding sequence in the step last scheduled (1 + k,
            or fewer when the token budget is short).
    """

    def __init__(self, *, spec: SpecDecoding, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        self.decoders = SpecDecodeSet(self.bs, self.num_classes, self.itl,
                                      spec.alpha_by_class, spec.seed,
                                      spec.survival_by_class)
        self.width = spec.k + 1

    @classmethod
    def from_engine(cls, args: PolicyArgs, **extra) -> SpeculativeScheduler:
        """As :meth:`ContinuousScheduler.from_engine`, with ``args.spec``."""
        return super().from_engine(args, spec=args.spec, **extra)

    @property
    def merged_tokens(self) -> int:
        """Tokens that arrived in a chunk after the chunk's first (no gap of their own)."""
        return self.decoders.merged_tokens

    @property
    def emitted_tokens(self) -> int:
        """Decode tokens the step last completed emitted (1 + accepted drafts each)."""
        return self.decoders.emitted_tokens

    def _grow_decoders(self) -> None:
        """Blocks for every decoder's 1 + k verified tokens and the lookahead slots;
        preempt the newest running request while they do not fit."""
        dec, kv, cow = self.decoders, self.kv, self._cow_pending
        extra = self.spec.lookahead_tokens
        while True:
            n = dec.size
            if not n:
                return
            width = min(self.spec.k + 1, self.budget // n)
            needs = [(req, upto, kv.blocks_to_allocate(req, upto)) for req, upto in
                     ((r, min(r.num_computed + width + extra, r.prompt_tokens + r.output_tokens))
                      for r in dec.members.values())]
            total = sum(need for _, _, need in needs if need > 0)
            if kv.can_allocate(total + len(cow)) or not (total or cow):
                break
            self._preempt(next(reversed(self.running.values())))
        self.width = width
        if cow:
            self._copy_on_write(cow)
        register = kv.cache_on_allocate and dec.shareable
        for req, upto, need in needs:
            if need > 0:
                kv.grow(req, upto)
            if register and req.shareable:
                kv.cache_blocks(req, req.num_computed)

    def _add_decodes(self, step: Step) -> int:
        n = self.decoders.size
        step.decode_seqs = n
        step.emitting_decodes = n
        step.decode_ctx_tokens = self.decoders.ctx_tokens
        return n * self.width

    def complete(self, step: Step, now: float) -> None:
        """Apply a finished step: the decoders' chunks (:meth:`SpecDecodeSet.advance_spec`),
        then the prompts that completed (first tokens), as the parent orders them."""
        counters = self.counters
        counters.steps += 1
        counters.slot_steps_held += len(self.running)
        tokens = step.prefill_tokens
        if step.decode_seqs:
            leavers = self.decoders.advance_spec(now, self.width)
            tokens += self.decoders.emitted_tokens
        else:
            leavers, self.decoders.emitted_tokens = [], 0
        self.kv_tokens += tokens
        for req in leavers:
            self._finish(req, now)
        emitted = step.decode_seqs
        for req, n in step.prefills:
            req.num_computed += n
            if req.num_computed == req.num_tokens:
                emitted += 1
                self._emit_after_prefill(req, now)
        counters.slot_steps_useful += emitted

    def can_plan_run(self, step: Step) -> bool:
        """Never: acceptance is drawn per sequence and step (module docstring)."""
        return False
