"""Roofline price of one engine step of a pipeline-parallel replica (TP × PP GPUs).

vLLM splits the layers over ``pipeline_parallel_size`` stages
(:func:`~capsim.cost.operators.pp_layer_partition`, its ``get_pp_indices``); each stage is
a tensor-parallel group of TP GPUs holding its layers, the first also the embedding, the
last also the final norm and the LM head. A step's batch goes through the stages in
turn; between two stages every TP rank sends its 1/TP slice of the hidden states and the
residual (``IntermediateTensors`` of two tensors of tokens × hidden, e.g.
vllm/model_executor/models/llama.py) and the next stage all-gathers them over its own
TP group (``send_tensor_dict(..., all_gather_group=get_tp_group())`` in
vllm/v1/worker/gpu_worker.py). So one step costs

    Σ_stages stage_s + Σ_boundaries (latency + 2·n·h·2 / TP / bw + all-gather over TP)

with each boundary over NVLink when both stages sit in one node and over the hardware's
scale-out link otherwise (GPUs fill nodes in order: stage s holds GPUs s·TP … s·TP+TP−1).
The engine's host overhead and the hardware's per-step overhead are counted once.

That sum is the latency of one batch alone. vLLM V1 keeps up to PP batches in flight
(the executor's ``max_concurrent_batches`` is PP; ``EngineCore.step_with_batch_queue``
in vllm/v1/engine/core.py at 00080ee), so a loaded replica overlaps the stages: the
engine (:mod:`capsim.engine.pipeline`) takes :meth:`PipelinePricer.stage_times` — the
host's share, each stage's seconds and each handoff's — and runs every stage as a
resource of its own. Micro-batching within a step is not modelled.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from capsim.cost.host import HostTime
from capsim.cost.operators import ACTIVATION_BYTES, pp_layer_partition, stage_shape
from capsim.cost.pricer import StepPricer
from capsim.cost.terms import ZERO_COST, OperatorCost, PricedStep, StepCost, WorkTally, step_input
from capsim.profiles.engines import HostOverhead
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.links import LinkProfile
from capsim.profiles.models import ModelShape

#: Tensors a stage hands to the next: hidden states and the residual (vLLM's
#: ``IntermediateTensors({"hidden_states": ..., "residual": ...})`` in its decoder models).
PP_TENSORS = 2


def stage_link_crosses_node(boundary: int, tp: int, gpus_per_node: int | None) -> bool:
    """Whether any TP rank of stage ``boundary`` sends to its peer of stage ``boundary``+1
    in another node, GPUs filling nodes in order (rank r of stage s is GPU s·TP + r)."""
    if gpus_per_node is None:
        return False
    return any((boundary * tp + r) // gpus_per_node != ((boundary + 1) * tp + r) // gpus_per_node
               for r in range(tp))


def pp_boundary_terms(model: ModelShape, hw: HardwareProfile, tp: int, pp: int,
                      scale_out: LinkProfile | None) -> list[tuple[float, float]]:
    """(fixed s, s per token) of each of the PP − 1 handoffs, in stage order: the terms
    :func:`pp_transfer_terms` sums (same link choice and formulas)."""
    nv_bw = hw.tp_link_bandwidth_bytes_per_s * hw.efficiency.interconnect
    nv_lat = hw.tp_link_latency_s
    message = PP_TENSORS * model.hidden_size * ACTIVATION_BYTES     # bytes per token
    out = []
    for b in range(pp - 1):
        if stage_link_crosses_node(b, tp, hw.gpus_per_node):
            if scale_out is None:
                raise ValueError("a pipeline stage boundary crosses nodes but the hardware "
                                 "has no scale_out_link")
            bw, lat = scale_out.bandwidth_bytes_per_s, scale_out.latency_s
        else:
            bw, lat = nv_bw, nv_lat
        fixed, per_token = lat, message / tp / bw
        if tp > 1:
            fixed += (tp - 1) * nv_lat
            per_token += (tp - 1) / tp * message / nv_bw
        out.append((fixed, per_token))
    return out


def pp_transfer_terms(model: ModelShape, hw: HardwareProfile, tp: int, pp: int,
                      scale_out: LinkProfile | None) -> tuple[float, float]:
    """(fixed s, s per token of the step) of the PP − 1 stage-to-stage handoffs.

    Each handoff: every TP rank sends 2 × h × 2 / TP bytes per token (hidden states and
    residual, bf16) over NVLink (× the profile's interconnect efficiency) or the scale-out
    link, then the receiving stage all-gathers the slices over NVLink (ring: (TP − 1) /
    TP of the message per rank). Latency: the link's, plus (TP − 1) NVLink hops of the
    all-gather. One node of ``hw.gpus_per_node`` GPUs, or None (every GPU in one domain).

    Raises:
        ScenarioError: (from the caller) a handoff crosses nodes without ``scale_out``.
    """
    terms = pp_boundary_terms(model, hw, tp, pp, scale_out)
    return sum((f for f, _ in terms), 0.0), sum((t for _, t in terms), 0.0)


class StageTimes(NamedTuple):
    """One batch's timing by resource (:meth:`PipelinePricer.stage_times`)."""

    stage_s: list[float]         # each stage's GPU seconds (the step overhead on the last)
    handoff_s: list[float]       # each of the PP − 1 handoffs
    host_s: float                # the engine's host work for the batch
    host_async: bool             # overlapped with the GPU (else in series)
    residual_s: float            # an overlapping engine's host time after the GPU
    compute_bound: bool          # any stage is


class PipelinePricer:
    """Prices engine steps of a TP × PP replica: the same interface the engine uses of a
    :class:`~capsim.cost.pricer.StepPricer` (``price``, ``cost``, ``decode_costs``, ``work``,
    ``new_tally``, ``breakdown``, ``experts_hit``), one StepPricer per stage.

    ``price().seconds`` = Σ stage seconds (each without host overhead, the hardware's
    step overhead on the last stage only) + the handoffs (:func:`pp_transfer_terms`),
    then the engine's host overhead as :class:`StepPricer` applies it. FLOPs and bytes
    per GPU column (Σ over stages of one TP rank's): × TP gives the replica's.
    ``compute_bound``: any stage is. :meth:`stage_times`: the same step by resource, for
    batches in flight.

    Args:
        pipeline_parallel_size: stages (>= 2; 1 needs no PipelinePricer).
        scale_out: the link between nodes, needed when a stage boundary crosses one.
        **pricer_kwargs: as :class:`StepPricer` (weight_dtype, kv_cache_dtype_bytes,
            routing_skew, dp_attention, expert_parallel, quantization, all_reduce).

    Raises:
        ScenarioError: PP exceeds the layers; anything a stage's StepPricer refuses.
        ValueError: a boundary crosses nodes and ``scale_out`` is None.
    """

    __slots__ = ("model", "hw", "tensor_parallel_size", "pipeline_parallel_size", "stages",
                 "partition", "_fixed_s", "_per_token_s", "_host", "_boundaries")

    def __init__(self, model: ModelShape, hw: HardwareProfile, tensor_parallel_size: int,
                 pipeline_parallel_size: int, host: HostOverhead | None = None,
                 scale_out: LinkProfile | None = None, **pricer_kwargs):
        tp, pp = tensor_parallel_size, pipeline_parallel_size
        self.model, self.hw = model, hw
        self.tensor_parallel_size, self.pipeline_parallel_size = tp, pp
        self.partition = pp_layer_partition(model.num_hidden_layers, pp)
        quiet = hw.model_copy(update={"step_overhead_s": 0.0})
        stages, start = [], 0
        # Each stage launches its own layers' operators: the eager-prefill floor per stage.
        eager = HostOverhead(eager_prefill_op_s=host.eager_prefill_op_s,
                             eager_all_reduce_ops=host.eager_all_reduce_ops) \
            if host is not None and host.eager_prefill_op_s else None
        # SGLang turns its piecewise prefill graph off with PP (server_args.py
        # _handle_piecewise_cuda_graph, 0.5.10-0.5.12 wheels): every stage prefills eagerly.
        pricer_kwargs.pop("piecewise_cuda_graph", None)
        for i, layers in enumerate(self.partition):
            last = i == pp - 1
            stages.append(StepPricer(stage_shape(model, start, start + layers),
                                     hw if last else quiet, tp, host=eager,
                                     scale_out=scale_out, embedding=i == 0, lm_head=last,
                                     **pricer_kwargs))
            start += layers
        self.stages: tuple[StepPricer, ...] = tuple(stages)
        self._fixed_s, self._per_token_s = pp_transfer_terms(model, hw, tp, pp, scale_out)
        self._boundaries = pp_boundary_terms(model, hw, tp, pp, scale_out)
        # The host terms, applied once to the whole step (StepPricer's own formula).
        self._host = HostTime(host)

    def transfer_s(self, tokens: int) -> float:
        """Seconds of the PP − 1 handoffs of a step of ``tokens`` tokens."""
        return self._fixed_s + self._per_token_s * tokens

    def price(self, step: PricedStep, logits_seqs: int) -> StepCost:
        """:meth:`StepPricer.price` of the whole pipeline (same arguments; no speculative
        width)."""
        n = step.prefill_tokens + step.decode_seqs
        if n <= 0:
            return ZERO_COST
        parts = [s.price(step, logits_seqs) for s in self.stages]
        seconds = 0.0
        for p in parts:
            seconds += p.seconds
        transfer = self._fixed_s + self._per_token_s * n
        seconds += transfer
        overhead = sum(p.overhead_s for p in parts)
        if self._host.active:
            gpu_s = seconds
            seconds = self._host.apply(gpu_s, step.decode_seqs + len(step.prefills),
                                       step.prefill_tokens)
            overhead += seconds - gpu_s
        return StepCost(seconds, sum(p.flops for p in parts), sum(p.bytes for p in parts),
                        sum(p.compute_s for p in parts), sum(p.memory_s for p in parts),
                        sum(p.comm_s for p in parts) + transfer, overhead,
                        any(p.compute_bound for p in parts))

    def cost(self, *, prefill_tokens: int = 0, prefill_attn_pairs: float = 0.0,
             prefill_kv_tokens: int = 0, decode_seqs: int = 0, decode_ctx_tokens: int = 0,
             logits_seqs: int | None = None, prefill_seqs: int | None = None) -> StepCost:
        """:meth:`StepPricer.cost` of the whole pipeline (same arguments)."""
        step, logits = step_input(prefill_tokens, prefill_attn_pairs, prefill_kv_tokens,
                                  decode_seqs, decode_ctx_tokens, logits_seqs, prefill_seqs)
        return self.price(step, logits)

    def stage_times(self, step: PricedStep, logits_seqs: int) -> StageTimes:
        """One batch's timing by resource, for batches in flight (:mod:`capsim.engine.pipeline`):
        each stage's GPU seconds (the hardware's step overhead on the last), each of the
        PP − 1 handoffs, the engine's host seconds for the batch, whether the preset
        overlaps them with the GPU (then ``residual_s`` follows the GPU) or runs them in
        series, and whether any stage is compute-bound (:class:`StageTimes`).
        Alone in the pipeline, host + Σ stage + Σ handoff (serial), or max(host, Σ) +
        residual (overlapped), is :meth:`price`'s seconds up to float rounding. Same
        arguments as :meth:`price`; an empty batch: all zeros."""
        n = step.prefill_tokens + step.decode_seqs
        pp = self.pipeline_parallel_size
        if n <= 0:
            return StageTimes([0.0] * pp, [0.0] * (pp - 1), 0.0, False, 0.0, False)
        stage_s, bound = [], False
        for s in self.stages:
            c = s.price(step, logits_seqs)
            stage_s.append(c.seconds)
            bound = bound or c.compute_bound
        handoff_s = [fixed + per_token * n for fixed, per_token in self._boundaries]
        h = self._host
        if not h.active:
            return StageTimes(stage_s, handoff_s, 0.0, False, 0.0, bound)
        host_s = h.seconds(step.decode_seqs + len(step.prefills), step.prefill_tokens)
        return StageTimes(stage_s, handoff_s, host_s, h.overlapped,
                          h.residual_s if h.overlapped else 0.0, bound)

    def decode_costs(self, seqs: list[int], ctx0: list[int], lengths: list[int]
                     ) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`StepPricer.decode_costs` of the pipeline: bit-for-bit
        ``cost(decode_seqs=n, decode_ctx_tokens=ctx, logits_seqs=n).seconds`` per step
        (the stages' arrays summed in :meth:`cost`'s order, then the handoffs and host)."""
        total, bound = None, None
        for s in self.stages:
            secs, b = s.decode_costs(seqs, ctx0, lengths)
            total = secs.copy() if total is None else total + secs
            if b is not None:
                bound = b.copy() if bound is None else bound | b
        n = np.repeat(np.array(seqs, dtype=np.float64), lengths)
        total = total + (self._fixed_s + self._per_token_s * n)
        if self._host.active:
            total = self._host.apply_array(total, n)
        return total, bound

    def new_tally(self) -> WorkTally:
        """A tally for :meth:`work` (by token count when the model has routed experts)."""
        return WorkTally(by_tokens=self.model.is_moe)

    def work(self, tally: WorkTally) -> tuple[float, float]:
        """(FLOPs, HBM bytes) of one GPU column (Σ over stages of one TP rank's)."""
        flops = nbytes = 0.0
        for s in self.stages:
            f, b = s.work(tally)
            flops, nbytes = flops + f, nbytes + b
        return flops, nbytes

    @property
    def untuned_fp8_gemm(self):
        """The stages' untuned block-fp8 GEMM rule (the same on every stage)."""
        return self.stages[0].untuned_fp8_gemm

    @property
    def fuse_shared_expert(self) -> bool:
        """Whether the stages price the shared expert among the routed experts (SGLang's
        shared-experts fusion; the same on every stage)."""
        return self.stages[0].fuse_shared_expert

    def experts_hit(self, tokens: int) -> float:
        """Expected experts hit per MoE layer (the same on every stage)."""
        for s in self.stages:
            if s.model.moe_layers:
                return s.experts_hit(tokens)
        return 0.0

    def breakdown(self, **inputs) -> list[OperatorCost]:
        """Per-operator costs summed over the stages, by operator name (the handoffs are
        not an operator: :meth:`transfer_s`)."""
        rows: dict[str, OperatorCost] = {}
        for s in self.stages:
            for op in s.breakdown(**inputs):
                old = rows.get(op.name)
                rows[op.name] = op if old is None else OperatorCost(
                    op.name, old.count + op.count, old.flops + op.flops, old.bytes + op.bytes,
                    old.compute_s + op.compute_s, old.memory_s + op.memory_s)
        return list(rows.values())

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.stages[0].ridge_flops_per_byte

    @property
    def matmul_dtype(self) -> str:
        """The peak the layer matmuls run at (every stage's)."""
        return self.stages[0].matmul_dtype
