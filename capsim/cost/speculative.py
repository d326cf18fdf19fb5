"""Price of one speculative-decoding step: the target's verification plus the draft passes.

How vLLM V1 runs such a step (vllm/v1/core/sched/scheduler.py at 00024d3: a running
request is scheduled ``num_tokens_with_spec − num_computed_tokens`` = 1 + k tokens;
vllm/v1/spec_decode/eagle.py at f7eef1b ``propose``):

- **Verification**: every decoding sequence feeds its last sampled token and its k
  drafts, so the target runs ``(k + 1)·n`` query tokens: GEMMs on ``prefill_tokens +
  (k+1)·n`` rows, the LM head on every verified position (the rejection sampler compares
  the target's distribution at each, vllm/v1/sample/rejection_sampler.py at 7f6fc1c) plus
  the prompts completing, and attention on the decode kernel with k + 1 causal queries
  per sequence (``Σ (k+1)·c + (k+1)(k+2)/2`` pairs over cached contexts c, each context
  read once), as vLLM's attention backends treat requests of up to 1 + k queries as
  decodes (:meth:`~capsim.cost.pricer.StepPricer.price` with ``width`` k + 1). The engine's host terms
  count each decoding sequence once.
- **Drafting** (the same step, after sampling): the drafter's first pass runs over all of
  the step's target tokens (vLLM's padded drafter batch: prompt chunks and verified
  positions, the drafter writing its own KV for them), then k − 1 passes of one token per
  sequence that sampled this step; each pass ends with the (shared) LM head on one row
  per sequence. Priced with the drafter's own :class:`StepPricer` (one layer for EAGLE /
  MTP, the draft model) without the engine's host terms (one engine step, scheduled
  once), but each pass with the GPU's per-forward overhead (the hardware's
  ``step_overhead_s``: launch and sampling): ``propose`` runs every pass as its own
  forward of the drafter followed by ``compute_logits`` and an argmax (vllm/v1/
  spec_decode/eagle.py at f7eef1b, the loop over ``num_speculative_tokens − 1``), so at
  a small batch a pass costs its launches, not only the layer's bytes. The later passes'
  context is approximated as the first's plus one token per pass.
  ``ngram`` has no GPU drafter (its host-side lookup is not priced).
- **Drafting launched from Python** (the preset's ``host_overhead.draft_*``,
  :class:`DraftHost`): in vLLM V1 before asynchronous scheduling the drafting runs in series
  after the sampled tokens reach the host (gpu_model_runner.py ``execute_model``:
  ``sampled_token_ids.tolist()`` / ``parse_output``, then ``propose``, whose ``.item()``
  calls and the drafts' ``.tolist()`` synchronise again), so the GPU waits on every kernel
  the host launches there. A pass lasts the longer of its kernels and its launches, and
  each step adds the set-up's launches; the per-pass ``step_overhead_s`` stand-in is then
  dropped (the launches and the argmax are counted). What runs, per version: vLLM 0.8.5
  builds the EAGLE / EAGLE-3 head as a plain module and calls it eagerly (eagle.py
  ``load_model`` / ``propose``, llama_eagle3.py without ``@support_torch_compile``, in the
  v0.8.5 wheel); vLLM PR 17211 (EAGLE) and PR 17504 (EAGLE-3), merged 2025-05-01 and first
  released in 0.9.0, compile the head and replay it in piecewise CUDA graphs split at
  ``vllm.unified_attention`` (the v0.9.2 wheel), with ``compute_logits`` and the argmax
  outside; the counts are the presets' (vllm-0.8, vllm-0.9).

Public API:
    SpecPricer, DraftHost, verify_aggregates(n, ctx_tokens, width)
"""

from __future__ import annotations

from typing import NamedTuple

from capsim.cost.pricer import StepCost, StepPricer
from capsim.cost.terms import PricedStep


def verify_aggregates(n: int, ctx_tokens: int, width: int) -> tuple[int, float, int]:
    """(query tokens, attention pairs, KV tokens read) of verifying ``width`` tokens for
    each of ``n`` sequences whose next decode token would attend over Σ ``ctx_tokens``
    keys (its cached context + 1, as :attr:`DecodeSet.ctx_tokens` counts).

    Per sequence with c cached tokens: width·c + width(width+1)/2 pairs and c + width
    keys read (a chunk of ``width`` on c cached tokens, :meth:`Step.add_prefill`)."""
    cached = ctx_tokens - n
    return n * width, width * cached + n * width * (width + 1) / 2, cached + n * width


class DraftHost(NamedTuple):
    """The drafting's host launches, s (module docstring): ``step_s`` once per step with a
    drafter pass, ``first_pass_s`` the least the first pass lasts, ``later_pass_s`` the
    least each later pass lasts."""

    step_s: float
    first_pass_s: float
    later_pass_s: float


class SpecPricer:
    """Prices speculative steps for one replica.

    Args:
        target: the target model's pricer (with the engine's host overhead).
        draft: one draft pass's pricer (:meth:`capsim.scenario.run_config.Pool.draft_pricer`);
            None for ngram.
        k: ``num_speculative_tokens`` (the drafter's passes per step).
        host: the drafting's host launches (:class:`DraftHost`); None: each pass costs its
            kernels + the GPU's ``step_overhead_s``.
    """

    def __init__(self, target: StepPricer, draft: StepPricer | None, k: int,
                 host: DraftHost | None = None):
        self.target, self.draft, self.k, self.host = target, draft, k, host

    def price(self, step: PricedStep, logits_seqs: int, width: int
              ) -> tuple[StepCost, tuple[int, int, int, int, int], float, float]:
        """One step: its prompt chunks (``logits_seqs − decode_seqs`` of them completing
        their prompt) and ``step.decode_seqs`` sequences verifying ``width`` tokens each
        (1 + the drafts scheduled).

        Returns:
            (cost, target work, draft FLOPs, draft bytes): the step's cost (target + draft
            passes; ``flops`` and ``bytes`` of both, ``compute_bound`` the target's), the
            target's work as :meth:`WorkTally.add` takes it after ``steps``: (tokens,
            LM-head rows, attention pairs, KV tokens read, steps with logits), and the
            draft passes' FLOPs and HBM bytes per GPU.
        """
        decode_seqs, ctx = step.decode_seqs, step.decode_ctx_tokens
        prefill_done = logits_seqs - decode_seqs         # prompts completing this step
        v, pairs_v, kv_v = verify_aggregates(decode_seqs, ctx, width) \
            if decode_seqs else (0, 0.0, 0)
        logits = prefill_done + v
        c = self.target.price(step, logits, width)
        tokens = step.prefill_tokens + v
        pairs, kv = step.prefill_attn_pairs + pairs_v, step.prefill_kv_tokens + kv_v
        work = (tokens, logits, int(pairs), kv, 1 if logits else 0)
        if self.draft is None or tokens == 0:
            return c, work, 0.0, 0.0
        seqs = decode_seqs + prefill_done
        seconds, flops, nbytes = c.seconds, c.flops, c.bytes
        compute_s, memory_s, comm_s = c.compute_s, c.memory_s, c.comm_s
        first = self.draft.price(step, seqs, width)
        later = [self.draft.cost(decode_seqs=seqs, logits_seqs=seqs,
                                 decode_ctx_tokens=ctx + j * seqs)
                 for j in range(1, self.k)] if seqs else []
        passes, host = [first, *later], self.host
        if host is None:                # each pass: its kernels + the per-forward overhead
            per_pass_s = self.draft.rates.step_overhead_s
            floors = (0.0,) * len(passes)
        else:                           # launch-bound where the launches outlast the kernels
            per_pass_s = 0.0
            seconds += host.step_s
            floors = (host.first_pass_s,) + (host.later_pass_s,) * len(later)
        for d, floor_s in zip(passes, floors):
            gpu_s = d.seconds - d.overhead_s
            seconds += (gpu_s if gpu_s > floor_s else floor_s) + per_pass_s
            flops, nbytes = flops + d.flops, nbytes + d.bytes
            compute_s, memory_s, comm_s = compute_s + d.compute_s, memory_s + d.memory_s, \
                comm_s + d.comm_s
        return StepCost(seconds, flops, nbytes, compute_s, memory_s, comm_s, c.overhead_s,
                        c.compute_bound), work, flops - c.flops, nbytes - c.bytes
