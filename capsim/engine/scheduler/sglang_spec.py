"""SGLang's scheduler with EAGLE / EAGLE-3 / MTP speculation (``--speculative-algorithm``).

Read from the sglang 0.5.7 wheel (python/sglang/srt/, paraphrased): ``speculative/
eagle_worker.py`` (``EAGLEWorker.forward_batch_generation``: a decode batch is drafted by
``speculative_num_steps`` draft passes of ``speculative_eagle_topk`` candidates each, then
verified by one target forward of ``speculative_num_draft_tokens`` tokens per request;
accepted tokens are kept, the rejected drafts' KV slots freed), ``server_args.py``
``_handle_speculative_decoding`` (with topk 1, ``speculative_num_draft_tokens`` is set to
``speculative_num_steps + 1``: a chain of k = num_steps drafts, verified k + 1 at a time, as
capsim's speculative model prices it) and ``managers/scheduler.py`` (``update_running_batch``
checks ``check_decode_mem(decode_mem_cache_buf_multiplier)``, the multiplier being
``num_draft_tokens + topk × num_steps`` = 2k + 1 tokens per request with topk 1, and retracts
when short).

What changes against :class:`~capsim.engine.scheduler.sglang.SglangScheduler`:

- **Decode steps verify**: every running request verifies k + 1 tokens (prefill steps are
  unchanged and still run on their own); progress, acceptance draws and ITL chunks are
  :class:`~capsim.engine.spec_decode_set.SpecDecodeSet`'s, as under vLLM
  (:class:`~capsim.engine.scheduler.speculative.SpeculativeScheduler`, whose step
  accounting this class inherits).
- **KV room**: before a decode step each request needs blocks up to computed + (k + 1) + k
  tokens (SGLang's 2k + 1 per request); when they are short, requests are retracted in
  SGLang's order (:meth:`SglangScheduler._retract`), not preempted newest first.
- **Admission charge**: the running requests' remaining outputs are read from their
  explicit counters (a speculating request advances by 1 + accepted tokens per step).

The SGLang policy's ``build`` lives here (the policy table's module for ``sglang``): it makes
either scheduler.
"""

from __future__ import annotations

from capsim.engine.scheduler.base import PolicyArgs
from capsim.engine.scheduler.own_policy import knob, own_policy_kwargs
from capsim.engine.scheduler.sglang import (SGLANG_KNOBS, SglangScheduler, ignore_eos_kwargs,
                                            recv_skipper_kwargs)
from capsim.engine.scheduler.speculative import SpeculativeScheduler


class SglangSpecScheduler(SglangScheduler, SpeculativeScheduler):
    """:class:`SglangScheduler` whose decode steps verify k drafts per request.

    Args:
        spec: the variant's resolved speculative decoding.
        Others: as :class:`SglangScheduler`.
    """

    def _running_charge(self) -> float:
        """new_token_ratio × Σ over decoding requests of min(output still to come, clip)."""
        clip = self.clip
        left_sum = 0
        for r in self.decoders.members.values():
            left = r.output_tokens - r.num_generated
            left_sum += left if left < clip else clip
        return left_sum * self.new_token_ratio

    def _spec_needs(self) -> list:
        """(request, tokens to hold, blocks to add) for each decoder: its verified k + 1
        tokens and k draft slots, capped at prompt + output."""
        kv, room = self.kv, self.spec.k + 1 + self.spec.lookahead_tokens
        return [(r, upto, kv.blocks_to_allocate(r, upto)) for r, upto in
                ((r, min(r.num_computed + room, r.prompt_tokens + r.output_tokens))
                 for r in self.decoders.members.values())]

    def _grow_decoders(self) -> None:
        """``update_running_batch``: room for every decoder's verification; retract in
        SGLang's order when short, else decay the ratio by one step."""
        kv, cow = self.kv, self._cow_pending

        def fits() -> bool:
            need = sum(n for _, _, n in self._spec_needs() if n > 0)
            return kv.can_allocate(need + len(cow)) or not (need or cow)

        if fits():
            self._decays += 1
        else:
            self._retract(fits)
        self.width = self.spec.k + 1
        if cow:
            self._copy_on_write(cow)
        register = kv.cache_on_allocate and self.decoders.shareable
        for req, upto, need in self._spec_needs():
            if need > 0:
                kv.grow(req, upto)
            if register and req.shareable:
                kv.cache_blocks(req, req.num_computed)


def build(args: PolicyArgs) -> SglangScheduler:
    """SGLang's policy from the engine config; its constants from the preset's knobs; with
    ``engine.speculative`` the verifying scheduler."""
    common = own_policy_kwargs(args, SglangScheduler.engine_kwargs(args))
    kwargs = {"schedule_conservativeness": knob(args, "schedule_conservativeness"),
              **{k: knob(args, k) for k in SGLANG_KNOBS}, **recv_skipper_kwargs(args),
              **ignore_eos_kwargs(args),
              **common}
    if args.spec is not None:
        return SglangSpecScheduler(spec=args.spec, **kwargs)
    return SglangScheduler(**kwargs)
