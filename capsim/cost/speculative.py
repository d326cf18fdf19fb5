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
- **Passes run outside CUDA graphs** (the preset's ``host_overhead.draft_cuda_graph``): a
  pass whose operators are launched from Python lasts at least ``draft_eager_op_s`` × those
  operators (:func:`draft_eager_operators`), as an eager prefill does
  (``eager_prefill_op_s``). vLLM 0.8.5 builds the EAGLE / EAGLE-3 head as a plain module
  and calls it eagerly (vllm/v1/spec_decode/eagle.py ``load_model`` / ``propose`` and
  vllm/model_executor/models/llama_eagle3.py, no ``@support_torch_compile``, in the v0.8.5
  wheel): ``none``. vLLM PR 17211 (EAGLE) and PR 17504 (EAGLE-3), merged 2025-05-01 and
  first released in 0.9.0, compile the head and replay it in piecewise CUDA graphs
  (``use_cuda_graph`` when the compilation level is PIECEWISE; eagle.py in the v0.9.2,
  v0.10.2 and v0.11.0 wheels), split at ``vllm.unified_attention``
  (vllm/config.py ``set_splitting_ops_for_v1`` at v0.9.2), with ``compute_logits`` and the
  argmax outside the compiled model: ``piecewise``.

Public API:
    SpecPricer, verify_aggregates(n, ctx_tokens, width), draft_eager_operators(draft, graph)
"""

from __future__ import annotations

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


def draft_eager_operators(draft: StepPricer, graph: str) -> int:
    """Operators one draft pass launches from Python, in the unit of
    :attr:`~capsim.cost.operator_terms.OperatorTerms.eager_operators` (a matmul, or one of
    the two attention / element-wise groups of a layer).

    Args:
        draft: one draft pass's pricer (its ``terms`` give the layers and operators).
        graph: ``full`` (0: the pass is one graph replay), ``piecewise`` (each layer's
            attention, the ``layers + 1`` graph pieces around them and the LM head:
            ``2·layers + 2``), ``none`` (the forward's operators and the LM head:
            ``eager_operators + 1``).
    """
    if graph == "full":
        return 0
    layers = draft.terms.layers
    if graph == "piecewise":
        return 2 * layers + 2
    return draft.terms.eager_operators + 1


class SpecPricer:
    """Prices speculative steps for one replica.

    Args:
        target: the target model's pricer (with the engine's host overhead).
        draft: one draft pass's pricer (:meth:`capsim.scenario.run_config.Pool.draft_pricer`);
            None for ngram.
        k: ``num_speculative_tokens`` (the drafter's passes per step).
        pass_floor_s: the least a draft pass lasts, s (its operators launched from Python:
            ``draft_eager_op_s ×`` :func:`draft_eager_operators`); 0: no floor.
    """

    def __init__(self, target: StepPricer, draft: StepPricer | None, k: int,
                 pass_floor_s: float = 0.0):
        self.target, self.draft, self.k = target, draft, k
        self.pass_floor_s = pass_floor_s

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
        pass_overhead_s, floor_s = self.draft.rates.step_overhead_s, self.pass_floor_s
        for d in [first, *later]:
            gpu_s = d.seconds - d.overhead_s
            seconds += (gpu_s if gpu_s > floor_s else floor_s) + pass_overhead_s
            flops, nbytes = flops + d.flops, nbytes + d.bytes
            compute_s, memory_s, comm_s = compute_s + d.compute_s, memory_s + d.memory_s, \
                comm_s + d.comm_s
        return StepCost(seconds, flops, nbytes, compute_s, memory_s, comm_s, c.overhead_s,
                        c.compute_bound), work, flops - c.flops, nbytes - c.bytes
