"""Roofline price of one engine step (per-operator, tensor-parallel aware).

Each operator of :mod:`capsim.cost.operators` costs

    t_op = max(flops_op / (peak_flops × compute_eff), bytes_op / (hbm_bw × memory_eff))

(the roofline of Williams, Waterman & Patterson, CACM 2009), and the step costs

    seconds = Σ t_op + tensor-parallel communication + step_overhead_s.

The efficiencies come per operator class from the profile
(:class:`capsim.profiles.hardware.Efficiency`; fitted by ``capsim calibrate``):
weight matmuls use ``launch_s + max(flops / peak, bytes / hbm_bw) / e(n)``
with a GEMM curve over the step's tokens n (``gemm_fp8`` at the fp8 peak for fp8
weights when the profile has it, else ``gemm``); prefill attention a compute
curve over keys per query; decode attention and elementwise kernels their
own memory factors; each class adds a fixed launch time per layer (the routed
experts of a MoE layer: the profile's ``fused_moe`` fixed time of vLLM's whole fused-MoE
call where it has one (MXFP4 experts: the engine's own ``fused_moe_mxfp4`` entry, unless
``moe_backend`` is ``marlin``), else two GEMM launches; their weight reads use the GEMM
curve). A
profile without those entries (and ``hw.ideal()``) uses the scalar
``compute`` / ``memory`` factors for every operator, as above. The prefill
chunks and the decode tokens are priced separately and summed (as Vidur
predicts them).

Tensor-parallel all-reduces run the engine preset's algorithm
(:class:`~capsim.profiles.engines.TpAllReduce`): NCCL's ring, the α-β model
``2(TP−1)/TP × bytes / (link_bw × interconnect_eff) + 2(TP−1) × link_latency``
(Patarasuk & Yuan, JPDC 2009; NCCL's "bus bandwidth" definition), or the engine's own
one-shot / two-shot kernels below its size limits
(:func:`~capsim.cost.operators.one_shot_all_reduce_s`, ``two_shot_all_reduce_s``; costs
from the GPU profile's ``custom_all_reduce``). A message is the step's tokens × hidden ×
2 bytes, so the algorithm changes at fixed token counts: the step's communication is
piecewise linear in its tokens. Communication is not overlapped with compute (vLLM does
not overlap TP collectives by default).

One reference, two fast paths: :meth:`StepPricer.breakdown` prices each operator
on its own (the reference formula, for reports); :meth:`StepPricer.cost` prices a
step from batch aggregates in O(1) (one per engine step) and
:meth:`StepPricer.decode_costs` a run of decode-only steps vectorised. Property
tests hold both fast paths to the reference (and ``decode_costs`` to ``cost``
bit for bit).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.cost.operators import (
    ACTIVATION_BYTES,
    one_shot_all_reduce_s,
    two_shot_all_reduce_s,
    WEIGHT_DTYPE_BYTES,
    Matmul,
    all_to_all_s,
    attention_work,
    check_tensor_parallel,
    dp_attention_work,
    curve_efficiency,
    elementwise_bytes_per_token,
    expected_experts_hit,
    expert_rank_loads,
    expert_work,
    keys_per_query,
    layer_matmuls,
    lm_head,
    moe_all_to_all_bytes_per_token,
    ring_all_reduce_s,
    windowed,
)
from capsim.profiles.engines import HostOverhead, TpAllReduce
from capsim.profiles.hardware import Curve, HardwareProfile, KernelEfficiency
from capsim.profiles.links import LinkProfile
from capsim.profiles.models import ModelShape
from capsim.profiles.weight_layout import weight_layout

class StepCost(NamedTuple):
    """Cost of one engine step on one GPU of the tensor-parallel group.

    ``seconds = Σ_op max(compute, memory) + comm_s + overhead_s``, so
    ``seconds >= max(compute_s, memory_s)`` when one side dominates every op.
    ``flops`` and ``bytes`` are per GPU (for MFU / MBU); ``bytes`` is HBM traffic.
    ``compute_bound`` is ``compute_s > memory_s`` summed over the operators.
    (A named tuple: one is built per engine step, and a frozen dataclass costs
    several times more to construct.)
    """

    seconds: float
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    compute_bound: bool


class WorkTally:
    """Exact running sums of the step aggregates that FLOPs and HBM bytes are linear in.

    A step's ``cost().flops`` and ``cost().bytes`` are linear functions of its token
    count, LM-head rows, attention pairs and KV tokens read (plus fixed weight bytes
    per step), so a run's totals follow from these integer sums
    (:meth:`StepPricer.work`) whatever order the steps are added in: step by step and
    in decode runs alike. All fields are ``int``.
    """

    __slots__ = ("steps", "logit_steps", "tokens", "logits", "attn_pairs", "kv_read_tokens",
                 "steps_by_tokens")

    def __init__(self, by_tokens: bool = False) -> None:
        self.steps = self.logit_steps = self.tokens = self.logits = 0
        self.attn_pairs = self.kv_read_tokens = 0
        # Steps per tokens-per-step, kept for MoE models, whose expert weight reads are
        # not linear in the tokens (StepPricer.new_tally); None otherwise.
        self.steps_by_tokens: dict[int, int] | None = {} if by_tokens else None

    def add(self, steps: int, tokens: int, logits: int, attn_pairs: int, kv_read_tokens: int,
            logit_steps: int) -> None:
        """``steps`` steps computing Σ ``tokens`` tokens (prefill + decode) and Σ ``logits``
        LM-head rows (in ``logit_steps`` of them), attending over Σ ``attn_pairs``
        query-key pairs and reading Σ ``kv_read_tokens`` cached KV tokens."""
        self.steps += steps
        self.logit_steps += logit_steps
        self.tokens += tokens
        self.logits += logits
        self.attn_pairs += attn_pairs
        self.kv_read_tokens += kv_read_tokens
        if self.steps_by_tokens is not None and steps:
            n = tokens // steps          # every step of a call has the same token count
            self.steps_by_tokens[n] = self.steps_by_tokens.get(n, 0) + steps


@dataclass(frozen=True, slots=True)
class OperatorCost:
    """One operator's share of a step, summed over its ``count`` executions (layers)."""

    name: str
    count: int
    flops: float
    bytes: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        """Roofline time: the slower of compute and memory."""
        return max(self.compute_s, self.memory_s)

    @property
    def compute_bound(self) -> bool:
        """True if the arithmetic takes longer than the memory traffic."""
        return self.compute_s > self.memory_s


#: vLLM's ``--moe-backend`` values capsim prices apart (StepPricer ``moe_backend``).
MOE_BACKENDS = ("auto", "marlin")

#: "No token limit" for the all-reduce pieces (StepPricer._init_comm).
_NO_LIMIT_TOKENS = 1 << 62

#: Counts below this use a precomputed table of 1 / e(n) (see StepPricer).
_GEMM_TABLE_TOKENS = 16_384


#: The table of a profile without a curve: 1 / e = 1 everywhere (shared, read-only use).
_NO_CURVE = array("d", [1.0]) * _GEMM_TABLE_TOKENS


def _inverse_table(curve: Curve | None) -> array:
    """``1 / e(n)`` for n in [0, 16,384) as a flat array of doubles."""
    if curve is None:
        return _NO_CURVE
    return array("d", (1.0 / curve_efficiency(curve, np.arange(_GEMM_TABLE_TOKENS))).tobytes())


class StepPricer:
    """Prices engine steps for one (model, hardware, TP degree, weight dtype).

    Construction precomputes every per-model constant and a table of the
    GEMM efficiency curve's ``1 / e(n)`` for ``n < 16,384`` tokens, so
    :meth:`cost` is a few dozen float operations, O(1) in the batch size.

    Per operator class (see :class:`capsim.profiles.hardware.Efficiency`):

    - weight matmuls (layers and LM head): ``launch_s + max(flops / peak,
      bytes / bw) / e(n)`` with the profile's ``gemm`` curve (``gemm_fp8`` for fp8
      weights, when the profile has one), or
      ``max(flops / (peak × compute), bytes / (bw × memory))`` without one;
    - attention, split into the prefill part (chunks over their cached
      prefix) and the decode part (one token over its context), each with its
      own factors and per-layer launch time, summed (as Vidur predicts them);
    - elementwise kernels and the embedding gather: memory only, plus a
      per-layer launch time;
    - tensor-parallel all-reduces (the preset's algorithm: ring α-β model, or the
      engine's one-shot / two-shot kernels) and the step overhead.

    Args:
        model: the transformer shape.
        hw: the GPU profile; its efficiencies and step overhead apply (use
            ``hw.ideal()`` for textbook numbers).
        tensor_parallel_size: GPUs in the tensor-parallel group.
        weight_dtype: the model's ``bf16`` / ``fp16``, or ``fp8``: shorthand for
            ``quantization="fp8_channel"`` (compressed-tensors FP8-dynamic).
            Attention runs at the bf16 (else fp16) peak.
        kv_cache_dtype_bytes: bytes per KV-cache element (2 for bf16, 1 for fp8).
        engine: the engine family running the step (``vllm``, ``sglang``,
            ``tensorrt-llm``, ``tgi``; an engine preset's ``engine``): with an fp8 KV cache
            decode attention takes the profile's ``attention_decode_fp8`` entry for it
            (:meth:`~capsim.profiles.hardware.Efficiency.decode_attention`); None or no
            entry: ``attention_decode`` at the fp8 bytes.
        quantization: a format of :mod:`capsim.profiles.quantization` (``awq``,
            ``nvfp4``, …; None: 16-bit weights). It sets the layer matmuls' weight
            bytes (scales included: per tensor shape for dense models, the format's mean
            bytes per weight for MoE / MLA shapes and their experts), the peak they run
            at (:meth:`~capsim.profiles.quantization.QuantFormat.compute_dtype`) and
            their GEMM curve (``gemm_fp8`` at the fp8 peak when the profile has one,
            else ``gemm``). The LM head and the embedding gather stay 16-bit at the
            16-bit peak and ``gemm`` curve in every format.
        routing_skew: MoE routing skew (Zipf exponent of expert popularity, 0: uniform;
            :func:`~capsim.cost.operators.expected_experts_hit`).
        dp_attention: data-parallel attention (MoE models): attention projections and
            attention whole on each GPU for 1/TP of the sequences
            (:func:`~capsim.cost.operators.dp_attention_work`). The collectives stay
            priced as TP all-reduces (SGLang's gather / scatter around the MoE layers
            move the same bytes), except as below.
        expert_parallel: the routed experts spread whole over the TP group's GPUs (EP =
            TP). Compute and weight reads per GPU equal TP's under uniform routing; with
            a routing skew the busiest rank sets the time (:func:`~capsim.cost.operators.
            expert_rank_loads`). With ``dp_attention`` too, each MoE layer's two
            all-reduces become an all-to-all dispatch and combine
            (:func:`~capsim.cost.operators.all_to_all_s`, bytes from
            :func:`~capsim.cost.operators.moe_all_to_all_bytes_per_token`), as vLLM
            switches to its all2all backends only when ``dp_size > 1`` and EP
            (``FusedMoEParallelConfig.use_all2all_kernels`` in
            vllm/model_executor/layers/fused_moe/config.py; SGLang's DeepEP dispatcher,
            python/sglang/srt/layers/moe/token_dispatcher/deepep.py, moves the same
            pairs); without DP attention every rank holds every token, runs its experts
            on them and the all-reduce combines them (priced as TP's; SGLang can instead
            reduce-scatter the tokens and run DeepEP under TP attention: not modelled).
            Traffic to GPUs of another node (``hw.gpus_per_node``) goes over
            ``scale_out``.
        scale_out: the link between nodes (``hw.scale_out_link``, loaded by the caller);
            needed only when the EP group spans nodes.
        embedding, lm_head: whether this GPU group runs the embedding gather (and its
            all-reduce) and the LM head (and the logits gather); both but one are off
            for the stages of a pipeline (:mod:`capsim.cost.pipeline`).
        all_reduce: the engine preset's tensor-parallel all-reduce
            (:class:`~capsim.profiles.engines.TpAllReduce`); None: NCCL's ring.
        moe_backend: vLLM's ``--moe-backend`` for the routed experts: ``auto`` (the
            engine's default path; MXFP4 experts take the profile's ``fused_moe_mxfp4``
            entry for ``engine`` where it has one) or ``marlin`` (``fused_moe``)
            (:meth:`~capsim.profiles.hardware.Efficiency.moe_kernel`).

    Raises:
        ScenarioError: TP does not shard the heads evenly, an unknown weight
            dtype or format, a format the hardware cannot run, a negative routing skew,
            DP attention or expert parallelism on a dense model, EP not dividing the
            experts, or an EP group across nodes without a ``scale_out`` link.
    """

    __slots__ = (
        "model", "hw", "tensor_parallel_size", "weight_dtype", "kv_cache_dtype_bytes", "engine",
        "quant", "matmul_dtype", "_model_dtype", "layout", "expert_dtype", "_ex_peak",
        "_ex_bw", "_ex_ginv", "_ex_cap_inv",
        "_matmuls", "_lm", "_attn", "_peak", "_attn_peak", "_bw", "_mm_peak", "_mm_bw",
        "_lm_peak", "_lm_bw", "_lm_ginv", "_gemm_launch_one",
        "_elementwise", "_embedding", "_mem_only_bytes_per_token",
        "_lin", "_lm_t", "_ginv", "_ainv", "_attn_p", "_attn_d", "_mem_only_t",
        "_gemm_launch_s", "_lm_launch_s", "_ew_launch_s", "_fixed_s", "_per_token_s",
        "_flops_per_token", "_bytes_fixed", "_bytes_per_token",
        "_comm_fixed_s", "_comm_per_token_s", "_comm_per_logit_s", "_overhead_s", "_decode_base",
        "_all_reduce", "_ar_split_tokens", "_comm_tail", "_gemm_base",
        "_host", "_host_step_s", "_host_seq_s", "_host_token_s", "_host_async", "_host_residual_s",
        "_experts", "_routing_skew", "_hits", "_expert_launch_s", "_window", "_win_frac",
        "_win_tokens", "dp_attention", "expert_parallel", "_scale_out", "_ep_q",
        "_ep_imbalance", "_lm_on", "_embedding_on", "moe_backend",
    )

    def __init__(self, model: ModelShape, hw: HardwareProfile, tensor_parallel_size: int = 1,
                 weight_dtype: str = "bf16", kv_cache_dtype_bytes: int = 2,
                 host: HostOverhead | None = None, routing_skew: float = 0.0,
                 dp_attention: bool = False, expert_parallel: bool = False,
                 scale_out: LinkProfile | None = None, embedding: bool = True,
                 lm_head: bool = True, quantization: str | None = None,
                 all_reduce: TpAllReduce | None = None, engine: str | None = None,
                 moe_backend: str = "auto"):
        check_tensor_parallel(model, tensor_parallel_size)
        if weight_dtype not in WEIGHT_DTYPE_BYTES:
            valid = ", ".join(WEIGHT_DTYPE_BYTES)
            raise ScenarioError(f"unknown weight_dtype {weight_dtype!r}; valid: {valid}")
        if weight_dtype == "fp8":
            if quantization not in (None, "fp8_channel"):
                raise ScenarioError(f"weight_dtype fp8 means quantization fp8_channel, "
                                    f"not {quantization!r}; give one of the two")
            quantization = "fp8_channel"
        self.model, self.hw = model, hw
        self.tensor_parallel_size, self.weight_dtype = tensor_parallel_size, weight_dtype
        self.kv_cache_dtype_bytes = kv_cache_dtype_bytes
        self.engine = engine
        if moe_backend not in MOE_BACKENDS:
            raise ScenarioError(f"unknown moe_backend {moe_backend!r}; valid: "
                                f"{', '.join(MOE_BACKENDS)}")
        self.moe_backend = moe_backend
        self._model_dtype = "fp16" if weight_dtype == "fp16" else "bf16"
        # Each tensor group's format (the checkpoint's where it stores them apart, e.g.
        # gpt-oss: bf16 attention, MXFP4 experts); the layer matmuls run at the attention
        # format's peak, the routed experts at theirs.
        self.layout = weight_layout(model, quantization)
        self.quant = self.layout.attention
        # The engine's own kernels may multiply in another dtype than the format's (vLLM:
        # MXFP4 with bf16 activations, so at the 16-bit peak, on Blackwell too).
        self.matmul_dtype = self.quant.compute_dtype(hw, self._model_dtype, engine)
        self.expert_dtype = self.layout.experts.compute_dtype(hw, self._model_dtype, engine)
        if routing_skew < 0:
            raise ScenarioError(f"moe_routing_skew must be >= 0, got {routing_skew}")
        if routing_skew and not model.is_moe:
            raise ScenarioError(f"moe_routing_skew needs a mixture-of-experts model; "
                                f"{model.name} is dense")
        self._routing_skew = float(routing_skew)
        if dp_attention and not model.is_moe:
            raise ScenarioError(f"data-parallel attention needs a mixture-of-experts model; "
                                f"{model.name} is dense")
        self.dp_attention = dp_attention
        self._lm_on, self._embedding_on = lm_head, embedding
        self._all_reduce = all_reduce
        self._init_expert_parallel(expert_parallel, scale_out)
        self._init_host(host)
        self._init_operators()
        self._init_rates()
        self._init_comm()
        self._fixed_s = (self._overhead_s + self._comm_fixed_s + self._gemm_launch_s
                         + self._ew_launch_s)
        if self._experts is not None:
            self._fixed_s += self._expert_launch_s
        self._per_token_s = self._comm_per_token_s + self._mem_only_t
        self._flops_per_token = sum(op.flops_per_row for op in self._matmuls)
        self._bytes_fixed = sum(op.weight_bytes for op in self._matmuls)
        self._bytes_per_token = (sum(op.act_bytes_per_row for op in self._matmuls)
                                 + self._mem_only_bytes_per_token)

    def _init_expert_parallel(self, expert_parallel: bool, scale_out: LinkProfile | None) -> None:
        """EP flags and the busiest rank's routing load (module docstring of
        :mod:`capsim.cost.operators`, :func:`~capsim.cost.operators.expert_rank_loads`)."""
        m, ep = self.model, self.tensor_parallel_size
        if expert_parallel and not m.is_moe:
            raise ScenarioError(f"expert parallelism needs a mixture-of-experts model; "
                                f"{m.name} is dense")
        if expert_parallel and m.num_experts % ep:
            raise ScenarioError(f"expert parallel size {ep} must divide num_experts "
                                f"{m.num_experts} of {m.name}")
        self.expert_parallel, self._scale_out = expert_parallel, scale_out
        # q_i of the busiest rank's experts and its load over the mean (1.0: balanced);
        # None under uniform routing, where every rank is the mean (no change to TP's terms).
        self._ep_q, self._ep_imbalance = None, 1.0
        if expert_parallel and ep > 1 and self._routing_skew > 0:
            q = expert_rank_loads(m.num_experts, m.num_experts_per_tok, ep, self._routing_skew)
            self._ep_q = q
            self._ep_imbalance = float(q.sum()) * ep / m.num_experts_per_tok

    def _init_host(self, host: HostOverhead | None) -> None:
        """The engine's host terms (:class:`capsim.profiles.engines.HostOverhead`); None:
        the GPU step alone."""
        self._host = host is not None and (host.per_step_s or host.per_seq_s
                                           or host.per_prefill_token_s) > 0
        h = host or HostOverhead()
        self._host_step_s, self._host_seq_s = h.per_step_s, h.per_seq_s
        self._host_token_s, self._host_residual_s = h.per_prefill_token_s, h.residual_s
        self._host_async = h.overlap == "async"

    def _with_host(self, gpu_s: float, seqs: int, prefill_tokens: int) -> float:
        """A step's seconds: the GPU's and the host's, in series or overlapped."""
        host_s = self._host_step_s + self._host_seq_s * seqs + self._host_token_s * prefill_tokens
        if self._host_async:
            return (gpu_s if gpu_s > host_s else host_s) + self._host_residual_s
        return gpu_s + host_s

    def _with_host_array(self, gpu_s: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """:meth:`_with_host` over a decode run (no prompt tokens), elementwise, the same
        float operations in the same order."""
        host_s = self._host_step_s + self._host_seq_s * seqs + self._host_token_s * 0
        if self._host_async:
            return np.maximum(gpu_s, host_s) + self._host_residual_s
        return gpu_s + host_s

    def _init_operators(self) -> None:
        m, tp = self.model, self.tensor_parallel_size
        # Dense layers: each weight's exact bytes; MoE / MLA shapes: the format's mean
        # bytes per weight (scales spread over the elements).
        weight_bytes = self.quant.bytes_per_weight(m.hidden_size, ACTIVATION_BYTES)
        lay, groups = self.layout, None
        if lay.grouped:                  # the checkpoint's groups apart; the router 16-bit
            groups = {"attention": weight_bytes, "router": float(ACTIVATION_BYTES),
                      "mlp": lay.mlp.bytes_per_weight(m.hidden_size, ACTIVATION_BYTES)}
        self._matmuls = layer_matmuls(m, tp, weight_bytes, self.dp_attention, self.quant,
                                      lay.mlp, groups)
        self._lm = lm_head(m, tp, ACTIVATION_BYTES)            # 16-bit in every format
        self._attn = dp_attention_work(m, tp, self.kv_cache_dtype_bytes) if self.dp_attention \
            else attention_work(m, tp, self.kv_cache_dtype_bytes)
        self._experts = expert_work(m, tp, lay.experts.bytes_per_weight(
            m.hidden_size, ACTIVATION_BYTES) if lay.grouped else weight_bytes)
        self._hits: dict[int, float] = {}            # expected experts hit, per step tokens
        a = self._attn
        self._window = a.window_fraction > 0
        self._win_frac, self._win_tokens = a.window_fraction, a.window_tokens
        self._elementwise = m.num_hidden_layers * elementwise_bytes_per_token(m, tp)
        self._embedding = m.hidden_size * (ACTIVATION_BYTES + ACTIVATION_BYTES) \
            if self._embedding_on else 0.0
        self._mem_only_bytes_per_token = self._elementwise + self._embedding

    def _init_rates(self) -> None:
        hw, eff = self.hw, self.hw.efficiency
        attn_dtype = "bf16" if "bf16" in hw.peak_flops_per_s else "fp16"
        peak, bw = hw.peak_flops(self.matmul_dtype), hw.hbm_bandwidth_bytes_per_s
        self._peak, self._bw = peak * eff.compute, bw * eff.memory
        self._attn_peak = hw.peak_flops(attn_dtype)
        curve = eff.matmul_curve(self.matmul_dtype)
        # With a curve the matmul roofs are ideal and 1 / e(n) scales their max.
        self._mm_peak = peak if curve is not None else self._peak
        self._mm_bw = bw if curve is not None else self._bw
        self._lin = tuple(self._time_coeffs(op) for op in self._matmuls)
        launch = curve.launch_s if curve is not None else 0.0
        self._gemm_launch_one = launch
        self._gemm_launch_s = sum(op.count for op in self._matmuls) * launch
        # vLLM's fused MoE per MoE layer: the profile's measured fixed time of the whole
        # call (top-k, align, two grouped GEMMs, activation, sum) where it has one, else
        # the launches of its two grouped GEMMs (gate/up and down); MXFP4 experts run the
        # engine's own MXFP4 path where the profile measured it.
        moe = eff.moe_kernel(self.layout.experts.name, self.engine, self.moe_backend)
        per_layer = moe.launch_s if moe is not None else 2 * launch
        self._expert_launch_s = self._experts.layers * per_layer if self._experts else 0.0
        self._ginv = _inverse_table(curve)
        # The routed experts: the layer matmuls' rates, or their own format's.
        self._ex_peak, self._ex_bw, self._ex_ginv = self._mm_peak, self._mm_bw, self._ginv
        if self.expert_dtype != self.matmul_dtype:
            ex_curve = eff.matmul_curve(self.expert_dtype)
            ex_peak = hw.peak_flops(self.expert_dtype)
            self._ex_peak = ex_peak if ex_curve is not None else ex_peak * eff.compute
            self._ex_bw = bw if ex_curve is not None else self._bw
            self._ex_ginv = _inverse_table(ex_curve)
        # The fused-MoE grouped GEMMs reach at most ``fused_moe.memory`` (fitted with the
        # fixed time); a new table, the dense matmuls' may be the same object.
        self._ex_cap_inv = 1.0
        if (moe is not None and moe.memory < 1.0
                and eff.matmul_curve(self.expert_dtype) is not None):
            self._ex_cap_inv = 1.0 / moe.memory
            self._ex_ginv = array("d", np.maximum(np.frombuffer(self._ex_ginv, dtype=float),
                                                  self._ex_cap_inv).tobytes())
        # The LM head: 16-bit weights at the 16-bit peak and the gemm curve.
        lm_curve = eff.matmul_curve(self._model_dtype)
        lm_peak = hw.peak_flops(self._model_dtype)
        self._lm_peak = lm_peak if lm_curve is not None else lm_peak * eff.compute
        self._lm_bw = bw if lm_curve is not None else self._bw
        self._lm_t = (self._lm.flops_per_row / self._lm_peak, self._lm.weight_bytes / self._lm_bw,
                      self._lm.act_bytes_per_row / self._lm_bw)
        self._lm_launch_s = lm_curve.launch_s if lm_curve is not None else 0.0
        self._lm_ginv = self._ginv if lm_curve is curve else _inverse_table(lm_curve)
        prefill = eff.kernel("attention_prefill")
        self._ainv = _inverse_table(prefill.compute_curve)
        self._attn_p = self._attn_coeffs(prefill, self._attn.flops_per_pair)
        # An fp8 KV cache: the engine's own fp8 decode kernel where the profile measured
        # one (vLLM's FA3 reads fp8 KV at a lower fraction of bandwidth than bf16 KV).
        self._attn_d = self._attn_coeffs(
            eff.decode_attention(self.kv_cache_dtype_bytes, self.engine),
            self._attn.decode_flops_per_pair)
        ew = eff.kernel("elementwise")
        self._mem_only_t = self._mem_only_bytes_per_token / (bw * ew.memory)
        self._ew_launch_s = self.model.num_hidden_layers * ew.launch_s
        self._overhead_s = hw.step_overhead_s
        self._decode_base: dict[int, tuple[float, ...]] = {}   # see _decode_terms
        self._gemm_base: dict[int, tuple[float, ...]] = {}     # see _before_decode_attention

    def _time_coeffs(self, op: Matmul) -> tuple[float, float, float]:
        """(compute s per row, weight-read s, activation s per row) of a matmul."""
        return (op.flops_per_row / self._mm_peak, op.weight_bytes / self._mm_bw,
                op.act_bytes_per_row / self._mm_bw)

    def _attn_coeffs(self, k: KernelEfficiency,
                     flops_per_pair: float) -> tuple[float, float, float, float]:
        """(compute s per pair, s per KV token read, s per new token, launch s per step)."""
        a, bw = self._attn, self.hw.hbm_bandwidth_bytes_per_s * k.memory
        compute = 1.0 if k.compute_curve is not None else k.compute   # the curve scales it
        return (flops_per_pair / (self._attn_peak * compute), a.kv_bytes_per_token / bw,
                a.new_bytes_per_token / bw, a.layers * k.launch_s)

    # -- mixture of experts ---------------------------------------------------------

    def experts_hit(self, tokens: int) -> float:
        """Expected distinct experts per MoE layer a step of ``tokens`` tokens reads
        (:func:`~capsim.cost.operators.expected_experts_hit` with this pricer's routing
        skew); memoised per token count. 0.0 for a dense model. Expert parallel with a
        routing skew: the busiest rank's distinct experts × EP (its weight reads in the
        per-GPU units of a TP slice of every expert)."""
        if self._experts is None or tokens <= 0:
            return 0.0
        hit = self._hits.get(tokens)
        if hit is None:
            e = self._experts
            if self._ep_q is not None:   # the busiest EP rank's experts, × EP per-GPU units
                hit = self.tensor_parallel_size * float(np.sum(1.0 - (1.0 - self._ep_q) ** tokens))
            else:
                hit = expected_experts_hit(tokens, e.num_experts, e.top_k, self._routing_skew)
            self._hits[tokens] = hit
        return hit

    def _expert_terms(self, n: int) -> tuple[float, float, float, float]:
        """(flops, bytes, compute_s, memory_s) of the routed experts in a step of ``n``
        tokens (launch excluded): n·k (token, expert) rows over the experts hit, each
        expert's GEMM at the efficiency of its ``n·k / hit`` rows."""
        e = self._experts
        hit, pairs = self.experts_hit(n), n * e.top_k
        if self._ep_q is not None:       # the busiest rank's pairs, in per-GPU units (× EP)
            pairs *= self._ep_imbalance
        rows = int(pairs / hit) if hit > 0 else 0
        g = self._expert_inv(rows) if rows > 0 else 1.0
        f = e.flops_per_pair * pairs
        b = e.weight_bytes_per_expert * hit + e.act_bytes_per_pair * pairs
        return f, b, f / self._ex_peak * g, b / self._ex_bw * g

    def _expert_inv(self, n: int) -> float:
        """1 / e(n) of the routed experts' GEMM curve (the layer matmuls' unless their
        format computes at another peak), e(n) capped at the profile's ``fused_moe.memory``."""
        if n < _GEMM_TABLE_TOKENS:
            return self._ex_ginv[n]
        return max(float(1.0 / curve_efficiency(
            self.hw.efficiency.matmul_curve(self.expert_dtype), n)), self._ex_cap_inv)

    def new_tally(self) -> WorkTally:
        """A :class:`WorkTally` for this pricer's :meth:`work` (it keeps the steps per
        token count when the model has routed experts)."""
        return WorkTally(by_tokens=self._experts is not None)

    def _init_comm(self) -> None:
        """The all-reduce pieces (:meth:`_all_reduce_pieces`) plus the logits gather and,
        with DP attention + EP, the MoE all-to-alls. The first piece is
        ``_comm_fixed_s`` / ``_comm_per_token_s``, valid below ``_ar_split_tokens``
        tokens; the others are ``_comm_tail``."""
        tp, hw, m = self.tensor_parallel_size, self.hw, self.model
        self._ar_split_tokens, self._comm_tail = _NO_LIMIT_TOKENS, ()
        if tp == 1:
            self._comm_fixed_s = self._comm_per_token_s = self._comm_per_logit_s = 0.0
            return
        bw = hw.tp_link_bandwidth_bytes_per_s * hw.efficiency.interconnect
        latency = hw.tp_link_latency_s
        n_all_reduce = 2 * m.num_hidden_layers + (1 if self._embedding_on else 0)
        all_to_all = self.expert_parallel and self.dp_attention
        if all_to_all:                   # the MoE layers dispatch and combine instead
            n_all_reduce -= 2 * m.moe_layers
        # + latency: the logits gather's; the all-to-alls added last (the float order
        # of the ring-only sum before the presets had algorithms)
        pieces = [(limit, n_all_reduce * fixed + latency, n_all_reduce * per_token)
                  for limit, fixed, per_token in self._all_reduce_pieces(bw, latency)]
        if all_to_all:
            a2a_fixed, a2a_per_token = self.all_to_all_terms()
            pieces = [(limit, fixed + a2a_fixed, per_token + a2a_per_token)
                      for limit, fixed, per_token in pieces]
        (self._ar_split_tokens, self._comm_fixed_s, self._comm_per_token_s), *tail = pieces
        self._comm_tail = tuple(tail)
        self._comm_per_logit_s = (tp - 1) / tp * m.vocab_size * ACTIVATION_BYTES / bw \
            if self._lm_on else 0.0

    def _all_reduce_pieces(self, ring_bw: float, ring_latency: float
                           ) -> list[tuple[int, float, float]]:
        """One all-reduce of a step's activations as ``(below_tokens, fixed_s,
        per_token_s)`` pieces in token order, the last unlimited: the engine's one-shot
        kernel, then its two-shot kernel, below their byte limits (``TpAllReduce``; a
        message of n tokens is n × hidden × 2 bytes), then NCCL's ring. Only the ring
        without a ``custom`` preset, a TP size its kernels lack, a group of more than 2
        GPUs without NVLink, or a profile without ``custom_all_reduce`` costs."""
        tp, hw = self.tensor_parallel_size, self.hw
        row = self.model.hidden_size * ACTIVATION_BYTES
        ring = (_NO_LIMIT_TOKENS, ring_all_reduce_s(0.0, tp, ring_bw, ring_latency),
                ring_all_reduce_s(row, tp, ring_bw, 0.0))
        ar, kernel = self._all_reduce, hw.custom_all_reduce
        if (ar is None or ar.algorithm != "custom" or kernel is None
                or tp not in ar.world_sizes or (tp > 2 and not hw.has_nvlink)):
            return [ring]
        link = hw.tp_link_bandwidth_bytes_per_s
        max_tokens = -(-ar.max_bytes // row)            # fewest tokens of >= max_bytes
        one_max = ar.one_shot_max_bytes[tp]
        one_tokens = max_tokens if one_max is None else min(-(-one_max // row), max_tokens)
        bw1 = link * kernel.one_shot_link_efficiency
        bw2 = link * kernel.two_shot_link_efficiency
        pieces = []
        if one_tokens > 0:
            pieces.append((one_tokens,
                           one_shot_all_reduce_s(0.0, tp, bw1, kernel.one_shot_latency_s),
                           one_shot_all_reduce_s(row, tp, bw1, 0.0)))
        if max_tokens > one_tokens:
            pieces.append((max_tokens,
                           two_shot_all_reduce_s(0.0, tp, bw2, kernel.two_shot_latency_s),
                           two_shot_all_reduce_s(row, tp, bw2, 0.0)))
        return pieces + [ring]

    def _comm_terms(self, n: int) -> tuple[float, float]:
        """(fixed s, s per token) of a step's communication at ``n`` tokens."""
        if n < self._ar_split_tokens:
            return self._comm_fixed_s, self._comm_per_token_s
        for limit, fixed, per_token in self._comm_tail:
            if n < limit:
                return fixed, per_token
        raise AssertionError("the last all-reduce piece is unlimited")

    def all_to_all_terms(self) -> tuple[float, float]:
        """(fixed s, s per token of the step) of the expert-parallel dispatch and combine
        of every MoE layer (2 all-to-alls each): the latency, and the busiest rank's
        bytes per token (:func:`~capsim.cost.operators.moe_all_to_all_bytes_per_token` ×
        the routing imbalance) over NVLink within a node and the scale-out link beyond.

        Raises:
            ScenarioError: the EP group spans nodes and no scale-out link was given.
        """
        m, hw, ep = self.model, self.hw, self.tensor_parallel_size
        g = hw.gpus_per_node
        if g is not None and ep > g and self._scale_out is None:
            raise ScenarioError(f"expert parallel size {ep} spans nodes of {g} GPUs: the "
                                "pricer needs the scale-out link (hardware scale_out_link)")
        out_bw, out_lat = (self._scale_out.bandwidth_bytes_per_s, self._scale_out.latency_s) \
            if self._scale_out is not None else (0.0, 0.0)
        bw = hw.tp_link_bandwidth_bytes_per_s * hw.efficiency.interconnect
        args = (ep, g, bw, hw.tp_link_latency_s, out_bw, out_lat)
        per_token = moe_all_to_all_bytes_per_token(m, ep) * self._ep_imbalance
        fixed = all_to_all_s(0.0, *args)
        per_token_s = all_to_all_s(per_token, *args) - fixed
        n = 2 * m.moe_layers
        return n * fixed, n * per_token_s

    def _gemm_inv(self, n: int) -> float:
        """1 / e(n) of the GEMM curve (table lookup below 16,384 tokens)."""
        if n < _GEMM_TABLE_TOKENS:
            return self._ginv[n]
        return float(1.0 / curve_efficiency(self.hw.efficiency.matmul_curve(self.matmul_dtype), n))

    def _lm_inv(self, n: int) -> float:
        """1 / e(n) of the LM head's (16-bit) GEMM curve."""
        if n < _GEMM_TABLE_TOKENS:
            return self._lm_ginv[n]
        return float(1.0 / curve_efficiency(self.hw.efficiency.matmul_curve(self._model_dtype), n))

    def _attn_inv(self, keys: int) -> float:
        """1 / e(keys per query) of the prefill-attention compute curve."""
        if keys < _GEMM_TABLE_TOKENS:
            return self._ainv[keys]
        return float(1.0 / curve_efficiency(
            self.hw.efficiency.kernel("attention_prefill").compute_curve, keys))

    # -- pricing ----------------------------------------------------------------

    def cost(self, *, prefill_tokens: int = 0, prefill_attn_pairs: float = 0.0,
             prefill_kv_tokens: int = 0, decode_seqs: int = 0, decode_ctx_tokens: int = 0,
             logits_seqs: int | None = None, prefill_seqs: int | None = None) -> StepCost:
        """Price one step from batch aggregates (O(1) in the batch size).

        Args:
            prefill_tokens: Σ new prompt tokens (chunks) computed this step.
            prefill_attn_pairs: Σ over prefill chunks of ``c·p + c(c+1)/2``
                (see :func:`attn_pairs`; chunk c on top of p cached tokens).
            prefill_kv_tokens: Σ over prefill chunks of ``p + c`` (KV tokens
                the prefill attention reads).
            decode_seqs: sequences decoding one token each.
            decode_ctx_tokens: Σ context length those decodes attend over.
            logits_seqs: sequences whose LM head runs this step. Default
                ``decode_seqs + (1 if prefill_tokens else 0)``: the pricer
                cannot know how many prefill sequences finish their prompt
                this step, so pass the exact count when you have it (vLLM
                computes logits only for a prompt's last chunk). 0 skips the
                LM head and its weight read entirely.

            prefill_seqs: sequences with a prompt chunk this step (the host's
                per-sequence work); default 1 if ``prefill_tokens`` else 0.

        Returns:
            StepCost per GPU; all zeros for an empty step. ``compute_s`` and
            ``memory_s`` each include the kernels' fixed launch times;
            ``overhead_s`` is what the step overhead and the engine's host work add.
        """
        n = prefill_tokens + decode_seqs
        if n <= 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, False)
        if logits_seqs is None:
            logits_seqs = decode_seqs + 1 if prefill_tokens else decode_seqs
        if not self._lm_on:
            logits_seqs = 0
        compute_s, memory_s, roof_s, flops, nbytes = self._before_decode_attention(
            n, logits_seqs, prefill_tokens, prefill_attn_pairs, prefill_kv_tokens)
        a = self._attn
        if decode_seqs > 0:
            c_pair, m_kv, m_new, launch = self._attn_d
            if self._window:     # windowed layers read at most W keys per sequence
                decode_ctx_tokens = windowed(decode_ctx_tokens, decode_seqs * self._win_tokens,
                                             self._win_frac)
            c = launch + c_pair * decode_ctx_tokens
            m = launch + m_kv * decode_ctx_tokens + m_new * decode_seqs
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops += a.decode_flops_per_pair * decode_ctx_tokens
            nbytes += a.kv_bytes_per_token * decode_ctx_tokens + a.new_bytes_per_token * decode_seqs
        if n < self._ar_split_tokens:
            comm_s = (self._comm_fixed_s + self._comm_per_token_s * n
                      + self._comm_per_logit_s * logits_seqs)
        else:
            fixed, per_token = self._comm_terms(n)
            comm_s = fixed + per_token * n + self._comm_per_logit_s * logits_seqs
        seconds, overhead_s = roof_s + comm_s + self._overhead_s, self._overhead_s
        if self._host:
            if prefill_seqs is None:
                prefill_seqs = 1 if prefill_tokens else 0
            gpu_s = seconds
            seconds = self._with_host(gpu_s, decode_seqs + prefill_seqs, prefill_tokens)
            overhead_s += seconds - gpu_s
        return StepCost(seconds, flops, nbytes, compute_s, memory_s, comm_s, overhead_s,
                        compute_s > memory_s)

    def cost_verify(self, *, prefill_tokens: int, prefill_attn_pairs: float,
                    prefill_kv_tokens: int, prefill_seqs: int, logits_seqs: int,
                    verify_seqs: int, verify_ctx_tokens: int, width: int) -> StepCost:
        """A speculative-decoding step (:mod:`capsim.cost.speculative`): prompt chunks as in
        :meth:`cost` plus ``verify_seqs`` sequences each verifying ``width`` tokens
        (its last token and the drafts) on a context whose next decode token would attend
        over Σ ``verify_ctx_tokens`` keys.

        The verified tokens are GEMM rows like any other; their attention runs on the
        decode kernel with ``width`` queries per sequence, as vLLM's backends route
        requests of up to 1 + num_speculative_tokens queries (the attention metadata
        builders' ``reorder_batch_threshold``, "spec as decode"): the KV of each context
        is read once, the query-key pairs are ``width·c + width(width+1)/2``. With
        ``width`` 1 this is :meth:`cost` of the same decode step, bit for bit (a test
        holds it). The host terms count each verifying sequence once and only prompt
        tokens as prompt tokens.
        """
        v = verify_seqs * width
        n = prefill_tokens + v
        if n <= 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, False)
        if not self._lm_on:
            logits_seqs = 0
        compute_s, memory_s, roof_s, flops, nbytes = self._before_decode_attention(
            n, logits_seqs, prefill_tokens, prefill_attn_pairs, prefill_kv_tokens)
        a = self._attn
        if verify_seqs > 0:
            cached = verify_ctx_tokens - verify_seqs
            pairs = width * cached + verify_seqs * (width * (width + 1) // 2)
            read = cached + v
            if self._window:
                pairs = windowed(pairs, v * self._win_tokens, self._win_frac)
                read = windowed(read, verify_seqs * (self._win_tokens + width - 1),
                                self._win_frac)
            c_pair, m_kv, m_new, launch = self._attn_d
            c = launch + c_pair * pairs
            m = launch + m_kv * read + m_new * v
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops += a.decode_flops_per_pair * pairs
            nbytes += a.kv_bytes_per_token * read + a.new_bytes_per_token * v
        fixed, per_token = self._comm_terms(n)      # cost() inlines its first piece
        comm_s = fixed + per_token * n + self._comm_per_logit_s * logits_seqs
        seconds, overhead_s = roof_s + comm_s + self._overhead_s, self._overhead_s
        if self._host:
            gpu_s = seconds
            seconds = self._with_host(gpu_s, verify_seqs + prefill_seqs, prefill_tokens)
            overhead_s += seconds - gpu_s
        return StepCost(seconds, flops, nbytes, compute_s, memory_s, comm_s, overhead_s,
                        compute_s > memory_s)

    def work(self, tally: WorkTally) -> tuple[float, float]:
        """(FLOPs, HBM bytes) per GPU of all the steps in ``tally``: equal to Σ of their
        ``cost().flops`` / ``cost().bytes`` up to float rounding (the same linear terms).

        The routed experts' terms come from the tally's steps per token count (a tally
        from :meth:`new_tally`). Not exact for MLA (prefill and decode pairs are summed
        together and priced at the prefill rate) nor for windowed layers (the pairs are
        uncapped): an upper bound there; nor with expert parallelism under a routing
        skew, whose expert terms are the busiest rank's (× EP): an upper bound."""
        a, lm = self._attn, self._lm
        logits, logit_steps = (tally.logits, tally.logit_steps) if self._lm_on else (0, 0)
        flops = (self._flops_per_token * tally.tokens + lm.flops_per_row * logits
                 + a.flops_per_pair * tally.attn_pairs)
        nbytes = (self._bytes_fixed * tally.steps + self._bytes_per_token * tally.tokens
                  + lm.weight_bytes * logit_steps + lm.act_bytes_per_row * logits
                  + a.kv_bytes_per_token * tally.kv_read_tokens
                  + a.new_bytes_per_token * tally.tokens)
        if self._experts is not None and tally.steps_by_tokens:
            for n, steps in tally.steps_by_tokens.items():
                f, b, _, _ = self._expert_terms(n)
                flops, nbytes = flops + f * steps, nbytes + b * steps
        return flops, nbytes

    def decode_costs(self, seqs: list[int], ctx0: list[int], lengths: list[int]
                     ) -> tuple[np.ndarray, np.ndarray | None]:
        """Vectorised :meth:`cost` of a run of decode-only steps, in segments.

        Args:
            seqs: sequences decoding in each segment's steps (> 0).
            ctx0: Σ context of each segment's first step; it grows by ``seqs[i]``
                per step (every sequence appends one token).
            lengths: steps in each segment (> 0); k = Σ lengths.

        Returns:
            (seconds, compute_bound): shape (k,) float64, bit-for-bit equal to
            ``cost(decode_seqs=n, decode_ctx_tokens=ctx, logits_seqs=n).seconds`` for
            each step's n and ctx (same float operations in the same order; numpy does
            not fuse them, and the additions commute exactly); ``compute_bound`` is the
            (k,) bool array of ``cost().compute_bound``, or None when no step is
            compute-bound. FLOPs and bytes come from :meth:`work`.
        """
        c_pair, m_kv, m_new, launch = self._attn_d
        if self._window or c_pair * (1 + 1e-6) > m_kv or not self._never_compute_bound(
                seqs, ctx0):
            return self._decode_costs_general(seqs, ctx0, lengths)
        # The memory side always wins (max(c, m) is m). Per segment: its steps' constant
        # terms, in the order cost() adds them, and its host term; one np.repeat spreads
        # them over the steps (numpy calls, not the steps, are what a run's pricing costs).
        host = self._host
        step_s, seq_s, token_s = self._host_step_s, self._host_seq_s, self._host_token_s
        rows: list[list[float]] = [[], [], [], [], [], []]
        a_new, a_roof, a_comm, a_host, a_base, a_seqs = rows
        lo = 0
        for n, c, length in zip(seqs, ctx0, lengths):
            _, _, roof_s, comm_s, _ = self._decode_base[n]    # memoised by the check above
            a_new.append(m_new * n)
            a_roof.append(roof_s)
            a_comm.append(comm_s)
            a_host.append(step_s + seq_s * n + token_s * 0 if host else 0.0)
            a_base.append(c - n * lo)    # step j of the run: base + n·j (exact integers)
            a_seqs.append(n)
            lo += length
        if len(seqs) == 1:
            new_s, roof_s, comm_s, host_s, _, _ = (r[0] for r in rows)
            n = seqs[0]
            m = np.arange(ctx0[0], ctx0[0] + n * lo, n, dtype=np.float64)
        else:
            # One array, one repeat (the method: no dispatch wrapper); the integers are exact
            # in float64.
            new_s, roof_s, comm_s, host_s, base, n = np.array(rows).repeat(lengths, axis=1)
            m = np.arange(lo, dtype=np.float64)
            m *= n
            m += base                    # the context of each step, exactly
        m *= m_kv
        m += launch
        m += new_s
        m += roof_s
        m += comm_s
        m += self._overhead_s
        if host:
            if not self._host_async:
                m += host_s
            else:
                np.maximum(m, host_s, out=m)
                m += self._host_residual_s
        return m, None

    def _decode_costs_general(self, seqs: list[int], ctx0: list[int], lengths: list[int]
                              ) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`decode_costs` where a step may be compute-bound (or layers are windowed):
        both sides of every step."""
        c_pair, m_kv, m_new, launch = self._attn_d
        terms = [self._decode_terms(n) for n in seqs]
        ctx = np.concatenate([np.arange(c, c + n * m, n, dtype=np.float64)
                              for n, c, m in zip(seqs, ctx0, lengths)])
        compute_s, memory_s, roof_s, comm_s, n = np.array(
            terms, dtype=np.float64).T.repeat(lengths, axis=1)
        if self._window:         # the windowed layers' keys capped, as cost() caps them
            ctx = ctx - self._win_frac * (ctx - np.minimum(ctx, n * self._win_tokens))
        m = ctx * m_kv
        m += launch
        c = launch + c_pair * ctx
        m += m_new * n
        bound = (compute_s + c) > (memory_s + m)
        gpu = roof_s + np.maximum(c, m) + comm_s + self._overhead_s
        if self._host:
            gpu = self._with_host_array(gpu, n)
        return gpu, bound if bound.any() else None

    def _never_compute_bound(self, seqs: list[int], ctx0: list[int]) -> bool:
        """Whether no step of a decode run is compute-bound, with a margin far above
        rounding: in each segment the memory side of its first step exceeds the compute
        side by more than 1e-9 of itself, and it grows faster per context token (the
        caller checked ``m_kv ≥ c_pair · (1 + 1e-6)``), so every later step is
        memory-bound too."""
        c_pair, m_kv, m_new, launch = self._attn_d
        for n, c in zip(seqs, ctx0):
            compute_s, memory_s, _, _, _ = self._decode_terms(n)
            mem = memory_s + launch + m_kv * c + m_new * n
            if not mem - (compute_s + launch + c_pair * c) > 1e-9 * mem:
                return False
        return True

    def _decode_terms(self, n: int) -> tuple[float, ...]:
        """(compute_s, memory_s, roof_s, comm_s, n) of a decode-only step of ``n``
        sequences, all but its attention; memoised (they depend on n only)."""
        terms = self._decode_base.get(n)
        if terms is None:
            fixed, per_token = self._comm_terms(n)
            comm_s = fixed + per_token * n + self._comm_per_logit_s * n
            compute_s, memory_s, roof_s, _, _ = self._before_decode_attention(
                n, n if self._lm_on else 0, 0, 0.0, 0)
            terms = self._decode_base[n] = (compute_s, memory_s, roof_s, comm_s, n)
        return terms

    def _before_decode_attention(self, n: int, logits_seqs: int, prefill_tokens: int,
                                 prefill_attn_pairs: float, prefill_kv_tokens: int
                                 ) -> tuple[float, float, float, float, float]:
        """(compute_s, memory_s, roof_s, flops, bytes) of everything but decode attention."""
        terms = self._gemm_base.get(n)
        if terms is None:
            terms = self._gemm_terms(n)
            if n < _GEMM_TABLE_TOKENS:       # bounded: one entry per token count seen
                self._gemm_base[n] = terms
        compute_s, memory_s, roof_s, flops, nbytes = terms
        if logits_seqs > 0:
            lm, (c_row, m_fixed, m_row) = self._lm, self._lm_t
            g = self._lm_ginv[logits_seqs] if logits_seqs < _GEMM_TABLE_TOKENS \
                else self._lm_inv(logits_seqs)
            launch = self._lm_launch_s
            c = launch + c_row * logits_seqs * g
            m = launch + (m_fixed + m_row * logits_seqs) * g
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops += lm.flops_per_row * logits_seqs
            nbytes += lm.weight_bytes + lm.act_bytes_per_row * logits_seqs
        a = self._attn
        if prefill_tokens > 0:
            if self._window:
                prefill_attn_pairs, prefill_kv_tokens = self._windowed_prefill(
                    prefill_tokens, prefill_attn_pairs, prefill_kv_tokens)
            c_pair, m_kv, m_new, launch = self._attn_p
            keys = int(prefill_attn_pairs / prefill_tokens)
            c = launch + c_pair * prefill_attn_pairs * (
                self._ainv[keys] if keys < _GEMM_TABLE_TOKENS else self._attn_inv(keys))
            m = launch + m_kv * prefill_kv_tokens + m_new * prefill_tokens
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops += a.flops_per_pair * prefill_attn_pairs
            nbytes += a.kv_bytes_per_token * prefill_kv_tokens + a.new_bytes_per_token * prefill_tokens
        return compute_s, memory_s, roof_s, flops, nbytes

    def _gemm_terms(self, n: int) -> tuple[float, float, float, float, float]:
        """(compute_s, memory_s, roof_s, flops, bytes) of a step's layer matmuls, element-wise
        work and routed experts: everything that depends on its ``n`` tokens only
        (memoised per n by :meth:`_before_decode_attention`)."""
        ginv = self._ginv
        g = ginv[n] if n < _GEMM_TABLE_TOKENS else self._gemm_inv(n)
        fixed = self._gemm_launch_s + self._ew_launch_s
        mem_only = self._mem_only_t * n
        compute_s, memory_s, roof_s = fixed, fixed + mem_only, fixed + mem_only
        for c_row, m_fixed, m_row in self._lin:
            c, m = c_row * n * g, (m_fixed + m_row * n) * g
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
        flops, nbytes = self._flops_per_token * n, self._bytes_fixed + self._bytes_per_token * n
        if self._experts is not None:
            f, b, c, m = self._expert_terms(n)
            c, m = c + self._expert_launch_s, m + self._expert_launch_s
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops, nbytes = flops + f, nbytes + b
        return compute_s, memory_s, roof_s, flops, nbytes

    def _windowed_prefill(self, tokens: int, pairs: float, kv_tokens: float
                          ) -> tuple[float, float]:
        """Prefill (pairs, KV tokens read) with the windowed layers capped: at most W keys
        per query, and at most the chunk + W cached keys read (one sequence; more
        prefilling sequences in one step make it an upper bound)."""
        w, frac = self._win_tokens, self._win_frac
        return windowed(pairs, tokens * w, frac), windowed(kv_tokens, tokens + w, frac)

    def _operator_terms(self, n: int, logits_seqs: int, prefill_tokens: int, pairs: float,
                        prefill_kv_tokens: float, decode_seqs: int,
                        decode_ctx_tokens: float) -> list[tuple[float, float, float, float]]:
        """(flops, bytes, compute_s, memory_s) of every operator, in :meth:`breakdown` order.

        Each side's seconds include the operator's fixed launch time, so
        ``max(compute_s, memory_s)`` is the operator's time.
        """
        g = self._gemm_inv(n) if n > 0 else 1.0
        launch = self._gemm_launch_one
        rows = [self._matmul_terms(op, n, g, op.count * launch, self._mm_peak, self._mm_bw)
                for op in self._matmuls]
        if self._experts is not None:
            if n > 0:
                f, b, c, m = self._expert_terms(n)
                rows.append((f, b, c + self._expert_launch_s, m + self._expert_launch_s))
            else:
                rows.append((0.0, 0.0, 0.0, 0.0))
        if self._window and prefill_tokens > 0:
            pairs, prefill_kv_tokens = self._windowed_prefill(prefill_tokens, pairs,
                                                              prefill_kv_tokens)
        if self._window and decode_seqs > 0:
            decode_ctx_tokens = windowed(decode_ctx_tokens, decode_seqs * self._win_tokens,
                                         self._win_frac)
        g_attn = self._attn_inv(keys_per_query(pairs, prefill_tokens)) if prefill_tokens > 0 \
            else 1.0
        rows.append(self._attn_terms(self._attn_p, prefill_tokens, pairs, prefill_kv_tokens,
                                     g_attn, self._attn.flops_per_pair))
        rows.append(self._attn_terms(self._attn_d, decode_seqs, decode_ctx_tokens,
                                     decode_ctx_tokens, 1.0, self._attn.decode_flops_per_pair))
        bw_ew = self._mem_only_bytes_per_token / self._mem_only_t
        ew_bytes, emb_bytes = self._elementwise * n, self._embedding * n
        ew_launch = self._ew_launch_s if n > 0 else 0.0
        rows.append((0.0, ew_bytes, ew_launch, ew_launch + ew_bytes / bw_ew))
        rows.append((0.0, emb_bytes, 0.0, emb_bytes / bw_ew))
        lm_rows = max(logits_seqs, 0) if n > 0 else 0
        g_lm = self._lm_inv(lm_rows) if lm_rows > 0 else 1.0
        rows.append(self._matmul_terms(self._lm, lm_rows, g_lm, self._lm_launch_s,
                                       self._lm_peak, self._lm_bw))
        return rows

    def _matmul_terms(self, op: Matmul, rows: int, g: float, launch_s: float, peak: float,
                      bw: float) -> tuple[float, float, float, float]:
        if rows <= 0:
            return (0.0, 0.0, 0.0, 0.0)
        f, b = op.flops_per_row * rows, op.weight_bytes + op.act_bytes_per_row * rows
        return (f, b, launch_s + f / peak * g, launch_s + b / bw * g)

    def _attn_terms(self, coeffs: tuple[float, float, float, float], new_tokens: int,
                    pairs: float, kv_tokens: float, g: float,
                    flops_per_pair: float) -> tuple[float, float, float, float]:
        if new_tokens <= 0:
            return (0.0, 0.0, 0.0, 0.0)
        a = self._attn
        c_pair, m_kv, m_new, launch = coeffs
        f = flops_per_pair * pairs
        b = a.kv_bytes_per_token * kv_tokens + a.new_bytes_per_token * new_tokens
        return (f, b, launch + c_pair * pairs * g, launch + m_kv * kv_tokens + m_new * new_tokens)

    def breakdown(self, *, prefill_tokens: int = 0, prefill_attn_pairs: float = 0.0,
                  prefill_kv_tokens: int = 0, decode_seqs: int = 0, decode_ctx_tokens: int = 0,
                  logits_seqs: int | None = None) -> list[OperatorCost]:
        """Per-operator costs of a step (same inputs as :meth:`cost`); for reports, not hot loops.

        Operators: the four layer matmuls, ``attention_prefill``,
        ``attention_decode`` and ``elementwise`` (each summed over all
        layers), then ``embedding`` and ``lm_head`` (once). Each operator's
        compute and memory seconds include its fixed launch time. A MoE / MLA model
        lists its own projections (:func:`~capsim.cost.operators.layer_matmuls`), then
        ``experts`` (the routed experts the step's tokens hit, over the MoE layers).
        """
        n = prefill_tokens + decode_seqs
        if logits_seqs is None:
            logits_seqs = decode_seqs + 1 if prefill_tokens else decode_seqs
        if not self._lm_on:
            logits_seqs = 0
        layers = self.model.num_hidden_layers
        names = [(op.name, op.count) for op in self._matmuls] + (
            [("experts", self._experts.layers)] if self._experts is not None else []) + [
            ("attention_prefill", layers), ("attention_decode", layers), ("elementwise", layers),
            ("embedding", 1), ("lm_head", 1)]
        terms = self._operator_terms(n, logits_seqs, prefill_tokens, prefill_attn_pairs,
                                     prefill_kv_tokens, decode_seqs, decode_ctx_tokens)
        return [OperatorCost(name, count, *t) for (name, count), t in zip(names, terms)]

    # -- derived constants ---------------------------------------------------------

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Matmul weight bytes one GPU reads per step (layers + LM head; no embedding table)."""
        experts = self._experts.weight_bytes_per_expert * self._experts.num_experts \
            if self._experts is not None else 0.0
        lm = self._lm.weight_bytes if self._lm_on else 0.0
        return sum(op.weight_bytes for op in self._matmuls) + lm + experts

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where a matmul turns compute-bound: effective peak ÷ bandwidth."""
        return self._mm_peak / self._mm_bw

