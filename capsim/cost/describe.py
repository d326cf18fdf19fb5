"""``capsim roofline``: one step priced per operator, as a table (FLOPs, bytes,
arithmetic intensity, time, compute- or memory-bound).

:func:`describe_step` returns a dict with ``model``, ``hardware``,
``tensor_parallel_size``, ``ideal``, ``inputs``, ``flops``, ``bytes`` (per GPU),
``arithmetic_intensity_flops_per_byte``, ``ridge_flops_per_byte``, ``seconds``,
``compute_s``, ``memory_s``, ``comm_s``, ``overhead_s``, ``bound`` ("compute" / "memory" /
"idle") and ``operators`` (list of dicts with name, count, flops, bytes,
arithmetic_intensity_flops_per_byte, compute_s, memory_s, seconds, bound); for a MoE
model ``experts`` (dict with ``hit`` — expected distinct experts per MoE layer —,
``num_experts``, ``top_k``, ``tokens``), else None; ``pipeline`` (dict with
``partition`` — layers per stage —, ``stage_s``, ``handoff_s``, ``bottleneck_s``: the
slowest stage, which bounds the step rate with PP batches in flight), or None at PP 1.
"""

from __future__ import annotations

from typing import Any

from capsim.common.errors import ScenarioError
from capsim.cost.operators import attn_pairs
from capsim.cost.pipeline import PipelinePricer
from capsim.cost.pricer import StepPricer
from capsim.cost.terms import OperatorCost, StepCost, step_input
from capsim.profiles.engines import (AbsorbedBmmDequant, AllReduceFusion, SharedExpertsFusion,
                                     TpAllReduce, UntunedFp8Gemm)
from capsim.profiles.hardware import HardwareProfile, load_hardware
from capsim.profiles.links import resolve_link
from capsim.profiles.models import ModelShape, load_model

def _resolve(model: ModelShape | str,
             hw: HardwareProfile | str) -> tuple[ModelShape, HardwareProfile]:
    model = load_model(model) if isinstance(model, str) else model
    hw = load_hardware(hw) if isinstance(hw, str) else hw
    return model, hw


def _intensity(flops: float, nbytes: float) -> float:
    return flops / nbytes if nbytes > 0 else 0.0


def _bound_label(compute_s: float, memory_s: float) -> str:
    if compute_s == 0.0 and memory_s == 0.0:
        return "idle"
    return "compute" if compute_s > memory_s else "memory"


def _operator_row(op: OperatorCost) -> dict[str, Any]:
    intensity = _intensity(op.flops, op.bytes)
    return {
        "name": op.name, "count": op.count, "flops": op.flops, "bytes": op.bytes,
        "arithmetic_intensity_flops_per_byte": intensity,
        "compute_s": op.compute_s, "memory_s": op.memory_s,
        "seconds": op.seconds,
        "bound": _bound_label(op.compute_s, op.memory_s),
    }


def describe_step(model: ModelShape | str, hw: HardwareProfile | str, tp: int = 1, *,
                  prefill_tokens: int = 0, decode_batch: int = 0, context: int = 0,
                  ideal: bool = False, weight_dtype: str = "bf16",
                  routing_skew: float = 0.0, quantization: str | None = None, pp: int = 1,
                  expert_parallel: bool = False, dp_attention: bool = False,
                  all_reduce: TpAllReduce | None = None,
                  engine: str | None = None,
                  shared_experts_fusion: SharedExpertsFusion | None = None,
                  absorbed_bmm_dequant: AbsorbedBmmDequant | None = None,
                  untuned_fp8_gemm: UntunedFp8Gemm | None = None,
                  all_reduce_fusion: AllReduceFusion | None = None,
                  moe_build: str | None = None) -> dict[str, Any]:
    """Roofline summary of one step, for ``capsim roofline`` to print as a table (its keys:
    the module docstring). The step holds one prompt of ``prefill_tokens`` tokens (no
    cached prefix; its last token samples) and ``decode_batch`` sequences that each
    decode one token over ``context`` tokens of KV.

    Args:
        model, hw: shapes/profiles or their names (load_model / load_hardware).
        tp: tensor-parallel degree; ``ideal``: efficiencies 1.0, no step overhead.
        routing_skew: MoE routing skew (:func:`capsim.cost.operators.expected_experts_hit`).
        pp: pipeline stages (:class:`~capsim.cost.pipeline.PipelinePricer`): the operators
            are summed over the stages (one GPU column: bytes and FLOPs of one TP rank of
            every stage), ``pipeline`` gives each stage's and handoff's seconds.
        expert_parallel, dp_attention: vLLM's ``enable_expert_parallel`` (EP size = TP)
            and ``enable_dp_attention`` (MoE models).
        all_reduce: the engine preset's tensor-parallel all-reduce
            (:class:`~capsim.profiles.engines.TpAllReduce`); None: NCCL's ring.
        engine: the preset's engine family (``vllm``, …): the profile's per-engine kernels
            apply (MXFP4 experts: ``efficiency.fused_moe_mxfp4``); None: the generic ones.
        shared_experts_fusion: the preset's rule (SGLang): where it applies the shared
            expert is priced in the ``experts`` row, not a ``shared_expert`` row.
        absorbed_bmm_dequant: the preset's ROCm rule (SGLang): where it applies decode
            attention's row includes rewriting the absorbed MLA weights.
        untuned_fp8_gemm: the preset's ROCm rule (SGLang): where it applies the layer
            matmuls it names take at least their K-loop floor (:mod:`capsim.cost.gemm_floor`).
        all_reduce_fusion: the preset's fused all-reduce + RMSNorm (SGLang on B200): where
            it applies the communication of a step under its token limit uses it.
        moe_build: the preset's ``grouped_gemm_fp8_engine``: fp8 routed experts take that
            build's fused-MoE curve where the profile measured it.

    Raises:
        ScenarioError: unknown names, negative counts, bad TP degree, PP beyond the
            layers, a stage boundary across nodes without a scale-out link, EP or DP
            attention on a dense model, EP not dividing the experts.
    """
    _check_counts(prefill_tokens=prefill_tokens, decode_batch=decode_batch, context=context)
    model, hw = _resolve(model, hw)
    hw = hw.ideal() if ideal else hw
    pricer = _pricer(model, hw, tp, pp, weight_dtype=weight_dtype, routing_skew=routing_skew,
                     quantization=quantization, expert_parallel=expert_parallel,
                     dp_attention=dp_attention, all_reduce=all_reduce, engine=engine,
                     shared_experts_fusion=shared_experts_fusion,
                     absorbed_bmm_dequant=absorbed_bmm_dequant,
                     untuned_fp8_gemm=untuned_fp8_gemm,
                     all_reduce_fusion=all_reduce_fusion, moe_build=moe_build)
    inputs = _inputs(prefill_tokens, decode_batch, context)
    cost = pricer.cost(**inputs)
    return {
        "model": model.name, "hardware": hw.name, "tensor_parallel_size": tp, "ideal": ideal,
        "pipeline_parallel_size": pp, "expert_parallel": expert_parallel,
        "dp_attention": dp_attention, "pipeline": _pipeline(pricer, inputs) if pp > 1 else None,
        "inputs": {"prefill_tokens": prefill_tokens, "decode_batch": decode_batch,
                   "context": context, "weight_dtype": weight_dtype,
                   "quantization": quantization, "matmul_dtype": pricer.matmul_dtype},
        **_totals(cost, pricer.ridge_flops_per_byte),
        "operators": [_operator_row(op) for op in pricer.breakdown(**inputs)],
        "experts": _experts(model, pricer, prefill_tokens + decode_batch),
        "k_loop_floor": _k_loop_floor(pricer),
    }


def _k_loop_floor(pricer: StepPricer | PipelinePricer) -> dict[str, Any] | None:
    """The preset's untuned block-fp8 GEMM rule where it applies (None: not): the matmuls
    whose time is at least their K-loop floor, and the seconds per K step."""
    rule = pricer.untuned_fp8_gemm
    if rule is None:
        return None
    return {"matmuls": list(rule.matmuls), "block_k": rule.block_k, "k_step_s": rule.k_step_s}


def _inputs(prefill_tokens: int, decode_batch: int, context: int) -> dict[str, Any]:
    """The step's aggregates: one prompt without a cached prefix, ``decode_batch``
    decodes over ``context`` keys each."""
    return dict(prefill_tokens=prefill_tokens, prefill_attn_pairs=attn_pairs(prefill_tokens, 0),
                prefill_kv_tokens=prefill_tokens, decode_seqs=decode_batch,
                decode_ctx_tokens=decode_batch * context)


def _check_counts(**counts: int) -> None:
    """Refuse a negative count (ScenarioError naming it)."""
    for label, value in counts.items():
        if value < 0:
            raise ScenarioError(f"{label} must be >= 0, got {value}")


def _experts(model: ModelShape, pricer: StepPricer | PipelinePricer,
             tokens: int) -> dict[str, Any] | None:
    """The routed experts a step of ``tokens`` tokens hits per MoE layer (None: dense) and
    whether the shared expert runs among them (``shared_fused``)."""
    if not model.is_moe:
        return None
    return {"hit": pricer.experts_hit(tokens), "num_experts": model.num_experts,
            "top_k": model.num_experts_per_tok, "tokens": tokens,
            "shared_fused": pricer.fuse_shared_expert}


def _pricer(model: ModelShape, hw: HardwareProfile, tp: int, pp: int,
            **kwargs: Any) -> StepPricer | PipelinePricer:
    """The step's pricer: a :class:`PipelinePricer` at PP > 1 (its node-crossing error in
    the command's terms)."""
    scale_out = resolve_link(hw.scale_out_link) if hw.scale_out_link else None
    if pp == 1:
        return StepPricer(model, hw, tp, scale_out=scale_out, **kwargs)
    try:
        return PipelinePricer(model, hw, tp, pp, scale_out=scale_out, **kwargs)
    except ValueError as exc:          # a boundary crosses nodes, no link to price it
        raise ScenarioError(f"--pp {pp} × --tp {tp} spans more than one node of "
                            f"{hw.gpus_per_node} {hw.name} GPUs and {exc.args[0]}; give "
                            "the profile a scale_out_link") from None


def _pipeline(pricer: PipelinePricer, inputs: dict[str, Any]) -> dict[str, Any]:
    """Each stage's and handoff's seconds, and the slowest stage."""
    stage_s, handoff_s = pricer.stage_times(*step_input(**inputs))[:2]
    return {"partition": list(pricer.partition), "stage_s": stage_s,
            "handoff_s": handoff_s, "bottleneck_s": max(stage_s)}


def _totals(cost: StepCost, ridge_flops_per_byte: float) -> dict[str, Any]:
    """The step's totals, as the table prints them."""
    return {
        "flops": cost.flops, "bytes": cost.bytes,
        "arithmetic_intensity_flops_per_byte": _intensity(cost.flops, cost.bytes),
        "ridge_flops_per_byte": ridge_flops_per_byte,
        "seconds": cost.seconds,
        "compute_s": cost.compute_s, "memory_s": cost.memory_s,
        "comm_s": cost.comm_s, "overhead_s": cost.overhead_s,
        "bound": _bound_label(cost.compute_s, cost.memory_s),
    }
