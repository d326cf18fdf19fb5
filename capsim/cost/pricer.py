"""Roofline price of one engine step (per-operator, tensor-parallel aware).

Each operator of :mod:`capsim.cost.operators` costs

    t_op = max(flops_op / (peak_flops × compute_eff), bytes_op / (hbm_bw × memory_eff))

(the roofline of Williams, Waterman & Patterson, CACM 2009), and the step costs

    seconds = Σ t_op + tensor-parallel communication + step_overhead_s.

The efficiencies come per operator class from the profile
(:class:`capsim.profiles.hardware.Efficiency`; fitted by ``capsim calibrate``), resolved
once per pricer (:meth:`~capsim.profiles.hardware.HardwareProfile.operator_rates`):
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
predicts them). The parts, one module each: :mod:`.operator_terms` (the operators),
:mod:`.experts` (routed experts), :mod:`.communication` (TP all-reduce as the preset
runs it, EP all-to-all), :mod:`.host` (the engine's host time), :mod:`.decode_run`
(decode runs, vectorised), :mod:`.terms` (the result types and the work tally).

One reference, two fast paths: :meth:`StepPricer.breakdown` prices each operator
on its own (the reference formula, for reports); :meth:`StepPricer.price` prices a
step from batch aggregates in O(1) (one per engine step) and
:meth:`StepPricer.decode_costs` a run of decode-only steps vectorised. Property
tests hold both fast paths to the reference (and ``decode_costs`` to ``cost``
bit for bit).

Public API:
    StepPricer, MOE_BACKENDS; re-exported from :mod:`.terms`: StepCost, OperatorCost,
    WorkTally, PricedStep, StepInput
"""

from __future__ import annotations

from capsim.common.errors import ScenarioError
from capsim.cost.communication import Communication
from capsim.cost.decode_run import DecodeRuns
from capsim.cost.experts import busiest_rank_load, check_moe_options
from capsim.cost.host import HostTime
from capsim.cost.operator_terms import OperatorTerms
from capsim.cost.operators import (ACTIVATION_BYTES, WEIGHT_DTYPE_BYTES, check_tensor_parallel,
                                   windowed)
from capsim.cost.terms import (ZERO_COST, OperatorCost, PricedStep, StepCost, StepInput,
                               WorkTally, step_input)
from capsim.profiles.engines import (AbsorbedBmmDequant, AllReduceFusion, HostOverhead,
                                     PiecewiseCudaGraph, SharedExpertsFusion, TpAllReduce,
                                     UntunedFp8Gemm)
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.links import LinkProfile
from capsim.profiles.models import ModelShape
from capsim.profiles.moe_runners import MOE_RUNNERS
from capsim.profiles.weight_layout import weight_layout

__all__ = ["MOE_BACKENDS", "OperatorCost", "PricedStep", "StepCost", "StepInput", "StepPricer",
           "WorkTally"]

#: The MoE runner names capsim prices apart (StepPricer ``moe_backend``): vLLM's
#: ``--moe-backend`` and SGLang's ``--moe-runner-backend`` values of
#: :data:`~capsim.profiles.moe_runners.MOE_RUNNERS`.
MOE_BACKENDS = tuple(dict.fromkeys(r for runners in MOE_RUNNERS.values() for r in runners))


def _check_dtypes(weight_dtype: str, quantization: str | None, moe_backend: str) -> str | None:
    """The quantization ``weight_dtype`` and ``quantization`` mean together (fp8: its
    ``fp8_channel`` shorthand).

    Raises:
        ScenarioError: an unknown weight dtype or MoE backend; fp8 with another format.
    """
    if weight_dtype not in WEIGHT_DTYPE_BYTES:
        valid = ", ".join(WEIGHT_DTYPE_BYTES)
        raise ScenarioError(f"unknown weight_dtype {weight_dtype!r}; valid: {valid}")
    if weight_dtype == "fp8":
        if quantization not in (None, "fp8_channel"):
            raise ScenarioError(f"weight_dtype fp8 means quantization fp8_channel, "
                                f"not {quantization!r}; give one of the two")
        quantization = "fp8_channel"
    if moe_backend not in MOE_BACKENDS:
        raise ScenarioError(f"unknown moe_backend {moe_backend!r}; valid: "
                            f"{', '.join(MOE_BACKENDS)}")
    return quantization


class StepPricer:
    """Prices engine steps for one (model, hardware, TP degree, weight dtype).

    Construction precomputes every per-model constant and a table of the
    GEMM efficiency curve's ``1 / e(n)`` for ``n < 16,384`` tokens, so
    :meth:`price` is a few dozen float operations, O(1) in the batch size.

    It composes one part per job, each built once: :class:`~capsim.cost.operator_terms.
    OperatorTerms` (matmuls, routed experts, attention, elementwise, LM head; the
    reference per operator beside the O(1) form), :class:`~capsim.cost.communication.
    Communication` (TP all-reduces, EP all-to-alls), :class:`~capsim.cost.host.HostTime`
    and :class:`~capsim.cost.decode_run.DecodeRuns`; :meth:`price` adds them up (the one
    step formula), :meth:`cost` is the same for a step given by keywords.

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
            (its ``attention_decode_fp8_head_dim`` entry for the model's head_dim first:
            :meth:`~capsim.profiles.hardware.Efficiency.decode_attention`); None or no
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
            needed only when the TP / EP group spans nodes.
        attention_tp: with ``dp_attention``, the GPUs of each data-parallel attention rank
            (SGLang's ``--tp`` / ``--dp-size``; 1: every GPU its own rank). Each rank shards
            attention over its GPUs as TP does and all-reduces its output on each MoE layer
            (NCCL's ring over NVLink); it must divide ``tensor_parallel_size``.
        redundant_experts: EPLB's extra expert copies (vLLM ``num_redundant_experts``, SGLang
            ``--ep-num-redundant-experts``; needs ``expert_parallel``, EP dividing experts
            + copies): under a routing skew the busiest rank of EPLB's placement sets the
            time (:func:`~capsim.cost.operators.eplb_rank_loads`); uniform routing: no
            change.
        embedding, lm_head: whether this GPU group runs the embedding gather (and its
            all-reduce) and the LM head (and the logits gather); both but one are off
            for the stages of a pipeline (:mod:`capsim.cost.pipeline`).
        all_reduce: the engine preset's tensor-parallel all-reduce
            (:class:`~capsim.profiles.engines.TpAllReduce`); None: NCCL's ring.
        moe_backend: the MoE runner of the routed experts: ``auto`` (the
            engine's default path; MXFP4 experts take the profile's ``fused_moe_mxfp4``
            entry for ``engine`` where it has one), ``marlin`` (``fused_moe``)
            (:meth:`~capsim.profiles.hardware.Efficiency.moe_kernel`), or a runner the
            profile measured (``fused_moe_runners``: its curve and fixed time).
        shared_experts_fusion: the engine preset's rule (None: never): where it applies the
            shared expert runs inside the routed experts' grouped GEMM as experts every
            token selects (SGLang's shared-experts fusion), not as its own matmuls.
        all_reduce_fusion: the engine preset's fused all-reduce + RMSNorm (None: never):
            where it applies (this model and GPU, no DP attention, one node) the layers'
            all-reduces of a step under its token limit take the GPU's table of that kernel
            (:class:`~capsim.cost.communication.Communication`).
        absorbed_bmm_dequant: the engine preset's rule (None: never): where it applies each
            decode step also rewrites the absorbed MLA weights to 16 bits
            (:meth:`absorbed_dequant_s`).
        untuned_fp8_gemm: the engine preset's rule (None: never): where it applies the
            layer matmuls it names take at least their K-loop floor
            (:mod:`capsim.cost.gemm_floor`).
        piecewise_cuda_graph: the engine preset's prefill graph (None: none): where it
            applies, a prefill step of at most its token limit (prompt and decode tokens)
            is not held to the ``host.eager_prefill_op_s`` floor
            (:meth:`~capsim.profiles.engines.PiecewiseCudaGraph.max_tokens`).
        decode_graph_max_seqs: the most sequences a decode-only step replays a captured
            CUDA graph for (SGLang's ``cuda_graph_max_bs``, over all DP-attention ranks;
            vLLM V1's largest capture size); a larger one runs eagerly and is held to the
            launch floor of ``host.eager_decode_op_s`` per operator (0: the eager prefill's,
            :attr:`eager_floor_s`). None: every decode step replays a graph.
        moe_build: the engine build (``sglang-0.5.14``) whose fused-MoE curve fp8 routed
            experts take where the profile measured it (the preset's
            ``grouped_gemm_fp8_engine``; None: the profile's ``grouped_gemm_fp8``).

    Raises:
        ScenarioError: TP does not shard the heads evenly, an unknown weight
            dtype or format, a format the hardware cannot run, a negative routing skew,
            DP attention or expert parallelism on a dense model, EP not dividing the
            experts, or an EP group across nodes without a ``scale_out`` link.
    """

    __slots__ = (
        "model", "hw", "tensor_parallel_size", "weight_dtype", "kv_cache_dtype_bytes", "engine",
        "quant", "matmul_dtype", "_model_dtype", "layout", "expert_dtype", "moe_backend",
        "dp_attention", "attention_tp", "expert_parallel", "fuse_shared_expert", "rates", "terms",
        "comm", "host", "decode_costs",
        "_routing_skew", "_ep_q", "_ep_imbalance", "_lm_on", "_embedding_on", "_all_reduce",
        "_scale_out", "_base", "_attn", "_attn_d", "_window", "_win_frac", "_win_tokens",
        "_comm_split", "_comm_fixed_s", "_comm_per_token_s", "_comm_per_logit_s",
        "_overhead_s", "_host_on", "_host_apply", "_eager_op_s", "_eager_ar", "_eager_s",
        "_eager_dec_op_s", "_eager_dec_s",
        "_dequant", "_untuned", "_graph_tokens", "_graph_seqs", "moe_build",
    )

    def __init__(self, model: ModelShape, hw: HardwareProfile, tensor_parallel_size: int = 1,
                 weight_dtype: str = "bf16", kv_cache_dtype_bytes: int = 2,
                 host: HostOverhead | None = None, routing_skew: float = 0.0,
                 dp_attention: bool = False, expert_parallel: bool = False,
                 scale_out: LinkProfile | None = None, embedding: bool = True,
                 lm_head: bool = True, quantization: str | None = None,
                 all_reduce: TpAllReduce | None = None, engine: str | None = None,
                 moe_backend: str = "auto", attention_tp: int = 1, redundant_experts: int = 0,
                 shared_experts_fusion: SharedExpertsFusion | None = None,
                 all_reduce_fusion: AllReduceFusion | None = None,
                 absorbed_bmm_dequant: AbsorbedBmmDequant | None = None,
                 piecewise_cuda_graph: PiecewiseCudaGraph | None = None,
                 untuned_fp8_gemm: UntunedFp8Gemm | None = None,
                 decode_graph_max_seqs: int | None = None, moe_build: str | None = None):
        tp = tensor_parallel_size
        # DP attention shards the heads over a rank's GPUs only (SGLang's attn_tp_size)
        check_tensor_parallel(model, tp if not dp_attention or not model.is_moe
                              or tp % max(attention_tp, 1) else attention_tp)
        quantization = _check_dtypes(weight_dtype, quantization, moe_backend)
        self.model, self.hw, self.tensor_parallel_size = model, hw, tp
        self.weight_dtype, self.kv_cache_dtype_bytes = weight_dtype, kv_cache_dtype_bytes
        self.engine, self.moe_backend, self.moe_build = engine, moe_backend, moe_build
        self._model_dtype = "fp16" if weight_dtype == "fp16" else "bf16"
        # Each tensor group's format (the checkpoint's, e.g. gpt-oss: bf16 attention, MXFP4
        # experts); the layer matmuls run at the attention format's peak, the experts at theirs.
        self.layout = weight_layout(model, quantization)
        self.quant = self.layout.attention
        # The engine's own kernels may multiply in another dtype than the format's (vLLM:
        # MXFP4 with bf16 activations, so at the 16-bit peak, on Blackwell too).
        self.matmul_dtype = self.quant.compute_dtype(hw, self._model_dtype, engine)
        self.expert_dtype = self.layout.experts.compute_dtype(hw, self._model_dtype, engine)
        check_moe_options(model, tp, routing_skew, dp_attention, expert_parallel, attention_tp,
                          redundant_experts)
        self._routing_skew = float(routing_skew)
        self.dp_attention, self.expert_parallel = dp_attention, expert_parallel
        self.fuse_shared_expert = model.is_moe and shared_experts_fusion is not None \
            and shared_experts_fusion.applies(model, hw.name, hw.platform,
                                              self.layout.experts.name, expert_parallel)
        self.attention_tp = attention_tp if dp_attention else tp
        self._init_kernel_rules(absorbed_bmm_dequant, untuned_fp8_gemm)
        self._lm_on, self._embedding_on = lm_head, embedding
        self._all_reduce, self._scale_out = all_reduce, scale_out
        self._ep_q, self._ep_imbalance = busiest_rank_load(model, tp, self._routing_skew,
                                                           expert_parallel, redundant_experts)
        self._init_host(host, piecewise_cuda_graph, decode_graph_max_seqs)
        self._init_rates()
        self.comm = self._communication(embedding, lm_head, attention_tp, all_reduce_fusion)
        self._bind()

    def _init_kernel_rules(self, dequant: AbsorbedBmmDequant | None,
                           untuned: UntunedFp8Gemm | None) -> None:
        """The preset's ROCm kernel rules that apply to this model, GPU and format (None:
        the rule is absent or does not apply)."""
        hw, dtype = self.hw, self.matmul_dtype
        self._dequant = dequant if dequant is not None and \
            dequant.applies(self.model, hw.name, dtype) else None
        self._untuned = untuned if untuned is not None and \
            untuned.applies(hw.name, dtype, self.quant.scale == "block") else None

    def _communication(self, embedding: bool, lm_head: bool, attention_tp: int,
                       fusion: AllReduceFusion | None) -> Communication:
        """The step's collectives (:class:`Communication`), with the preset's fused
        all-reduce + RMSNorm where it applies to this model and GPU (no DP attention, the TP
        group on one node)."""
        model, hw, tp, dp = self.model, self.hw, self.tensor_parallel_size, self.dp_attention
        if fusion is not None and not fusion.applies_to(model, hw, tp, dp):
            fusion = None
        return Communication(model, hw, tp, self._all_reduce, embedding=embedding,
                             lm_head=lm_head, all_to_all=self.expert_parallel and dp,
                             scale_out=self._scale_out, ep_imbalance=self._ep_imbalance,
                             attention_tp=attention_tp if dp else 1, fusion=fusion)

    def _init_host(self, host: HostOverhead | None, graph: PiecewiseCudaGraph | None,
                   decode_graph_seqs: int | None) -> None:
        """The engine's host terms (None: the GPU step alone), the tokens up to which a
        prefill step replays the engine's piecewise graph, free of the eager floor (0: none),
        and the sequences up to which a decode step replays one (None: any)."""
        self.host = HostTime(host)
        self._graph_seqs = float("inf") if decode_graph_seqs is None else decode_graph_seqs
        self._eager_op_s = host.eager_prefill_op_s if host is not None else 0.0
        # An ungraphed decode forward's launches: its own per-operator figure or the prefill's
        self._eager_dec_op_s = (host.eager_decode_op_s or self._eager_op_s) \
            if host is not None else 0.0
        self._eager_ar = host is not None and host.eager_all_reduce_ops
        self._graph_tokens = 0.0 if graph is None else graph.max_tokens(
            self.model, self.hw.name, self.hw.platform, self.layout.experts.name,
            self.dp_attention)

    def _init_rates(self) -> None:
        """The profile's rates, asked once, and every operator's terms built from them."""
        self.rates = self.hw.operator_rates(
            self.matmul_dtype, self.expert_dtype, self._model_dtype, self.kv_cache_dtype_bytes,
            self.engine, self.layout.experts.name, self.moe_backend, self.model.is_mla,
            self.quant.scale == "block", self.moe_build, self.model.head_dim)
        self.terms = OperatorTerms(
            self.model, self.tensor_parallel_size, self.layout, self.dp_attention,
            self.kv_cache_dtype_bytes, self._embedding_on, self._lm_on, self.rates,
            (self._routing_skew, self._ep_q, self._ep_imbalance,
             self.expert_dtype != self.matmul_dtype),
            self.attention_tp if self.dp_attention else 1, self.fuse_shared_expert,
            self.absorbed_dequant_s(), self._untuned, self.hw.num_sms or 0)

    def absorbed_dequant_s(self) -> float:
        """Seconds per layer a decode step spends rewriting the absorbed MLA weights under
        the preset's :class:`~capsim.profiles.engines.AbsorbedBmmDequant` (0.0 where it does
        not apply): ``passes`` element-wise kernels per weight (``w_kc`` and ``w_vc``: heads
        / attention TP x kv_lora_rank x (qk_nope + v_head) elements), each the GEMM curve's
        fixed time (the profile's measured time of one kernel) plus its bytes at the
        element-wise memory rate: the cast reads fp8 and writes 16 bits, every later pass
        reads and writes 16 bits, and the bmm reads 16 bits where kv_b_proj's row priced fp8."""
        rule, m = self._dequant, self.model
        if rule is None:
            return 0.0
        r, act = self.rates, ACTIVATION_BYTES
        elems = (m.num_attention_heads / self.attention_tp * m.kv_lora_rank
                 * (m.qk_nope_head_dim + m.v_head_dim))
        fp8 = WEIGHT_DTYPE_BYTES["fp8"]
        per_elem = (fp8 + act) + (rule.passes - 1) * 2 * act + (act - fp8)
        launch = r.matmul_curve.launch_s if r.matmul_curve is not None else 0.0
        return (2 * rule.passes * launch
                + elems * per_elem / (r.hbm_bandwidth_bytes_per_s * r.elementwise.memory))

    def _bind(self) -> None:
        """The parts' numbers and methods :meth:`price` reads, as attributes of its own
        (one lookup each per step)."""
        t, c = self.terms, self.comm
        self._base, self._attn, self._attn_d = t.base, t.attn, t.attn_d
        self._window, self._win_frac, self._win_tokens = t.window, t.win_frac, t.win_tokens
        self._comm_split, self._comm_fixed_s = c.split_tokens, c.fixed_s
        self._comm_per_token_s, self._comm_per_logit_s = c.per_token_s, c.per_logit_s
        self._overhead_s = self.rates.step_overhead_s
        self._host_on, self._host_apply = self.host.active, self.host.apply
        # An eagerly run forward lasts at least its operators' host launches.
        ops = t.eager_operators + (t.eager_all_reduces if self._eager_ar else 0)
        self._eager_s = self._eager_op_s * ops
        self._eager_dec_s = self._eager_dec_op_s * ops
        self.decode_costs = DecodeRuns(t.base, c, self._lm_on, t.attn_d,
                                       (t.win_frac, t.win_tokens), self._overhead_s,
                                       self.host, (self._eager_dec_s, self._graph_seqs)).costs

    @property
    def eager_floor_s(self) -> float:
        """Seconds of the host launches of one eagerly run forward (the floor of a step with
        prompt tokens, and of a decode step beyond the captured graphs where the pricer has
        ``decode_graph_max_seqs`` and the preset no ``eager_decode_op_s`` of its own; 0 where
        the preset has none).

        Such a step lasts ``max(launches, kernels + collectives)``: the host/GPU pipeline
        with the host free to queue ahead, which holds while nothing inside the forward
        makes the host wait for the GPU. Nothing does in the forwards this floor prices
        (read in the code): SGLang 0.5.7's DeepSeek-V3 extend at TP 8 without EP or DP
        attention (models/deepseek_v2.py; layers/attention/flashattention_backend.py on
        Hopper, trtllm_mla_backend.py on Blackwell; fused_moe_triton / flashinfer_trtllm
        MoE; custom_all_reduce.py) and vLLM 0.6.0's Llama prefill (attention/backends/
        flash_attn.py; custom_all_reduce.py ``all_reduce_unreg``, a device-to-device copy)
        take their lengths from host lists set before the first layer; the first wait is
        the sampler's copy to the host after the last layer. Over capsim's DeepSeek-V3
        operators the exact pipeline, operator by operator, is within 1.2 % of the max
        (1-4,096 tokens, H200 / B200). A forward that does wait (SGLang's DeepEP dispatch
        under EP takes per-expert counts to the host, layers/moe/token_dispatcher/
        deepep.py) would need the max per segment between waits instead."""
        return self._eager_s

    # -- pricing ----------------------------------------------------------------

    def price(self, step: PricedStep, logits_seqs: int, width: int = 1) -> StepCost:
        """Price one step from its aggregates (O(1) in the batch size): the step formula.

        Args:
            step: the batch (:class:`~capsim.cost.terms.PricedStep`; the engine's ``Step``).
            logits_seqs: sequences whose LM head runs this step (0 skips the LM head and
                its weight read).
            width: tokens each decoding sequence computes: 1, or 1 + the drafts it
                verifies (speculative decoding, :meth:`_verify_keys`).

        Returns:
            StepCost per GPU (all zeros for an empty step); ``compute_s`` and ``memory_s``
            include the kernels' launch times, ``overhead_s`` the step's and host's.
        """
        prefill_tokens, seqs = step.prefill_tokens, step.decode_seqs
        if width == 1:
            new, n = seqs, prefill_tokens + seqs
            pairs = read = step.decode_ctx_tokens
            if self._window and seqs > 0:    # windowed layers read at most W keys per sequence
                pairs = read = windowed(pairs, seqs * self._win_tokens, self._win_frac)
        else:
            new = seqs * width
            n = prefill_tokens + new
            pairs, read = self._verify_keys(seqs, step.decode_ctx_tokens, width)
        if n <= 0:
            return ZERO_COST
        if not self._lm_on:
            logits_seqs = 0
        compute_s, memory_s, roof_s, flops, nbytes = self._base(
            n, logits_seqs, prefill_tokens, step.prefill_attn_pairs, step.prefill_kv_tokens)
        if new > 0:
            c_pair, m_kv, m_new, launch = self._attn_d
            c = launch + c_pair * pairs
            m = launch + m_kv * read + m_new * new
            compute_s, memory_s = compute_s + c, memory_s + m
            roof_s += c if c > m else m
            flops += (a := self._attn).decode_flops_per_pair * pairs
            nbytes += a.kv_bytes_per_token * read + a.new_bytes_per_token * new
        comm_s = (self._comm_fixed_s + self._comm_per_token_s * n  # the first piece inlined
                  + self._comm_per_logit_s * logits_seqs) if n < self._comm_split \
            else self.comm.seconds(n, logits_seqs)
        overhead_s = self._overhead_s
        floor_s = self._eager_s if prefill_tokens else self._eager_dec_s
        if roof_s + comm_s < floor_s and self._runs_eagerly(prefill_tokens, n, seqs):
            overhead_s += floor_s - roof_s - comm_s
        seconds = roof_s + comm_s + overhead_s
        if self._host_on:
            gpu_s = seconds
            seconds = self._host_apply(gpu_s, seqs + len(step.prefills), prefill_tokens)
            overhead_s += seconds - gpu_s
        return StepCost(seconds, flops, nbytes, compute_s, memory_s, comm_s, overhead_s,
                        compute_s > memory_s)

    def _runs_eagerly(self, prefill_tokens: int, tokens: int, seqs: int) -> bool:
        """Whether a step runs outside CUDA graphs: a prefill beyond the piecewise graph's
        tokens, a decode step of more sequences than the captured graphs."""
        return tokens > self._graph_tokens if prefill_tokens else seqs > self._graph_seqs

    def _verify_keys(self, seqs: int, ctx_tokens: int, width: int) -> tuple[int, int]:
        """(query-key pairs, KV tokens read) of ``seqs`` sequences verifying ``width``
        tokens each on a context whose next decode token would attend over Σ
        ``ctx_tokens`` keys, the windowed layers capped; at width 1 the decode step's
        (a test holds it).

        Verified tokens are GEMM rows like any other; their attention runs on the decode
        kernel with ``width`` queries per sequence, as vLLM's backends route requests of
        up to 1 + num_speculative_tokens queries (the attention metadata builders'
        ``reorder_batch_threshold``, "spec as decode"): each context's KV read once,
        ``width·c + width(width+1)/2`` query-key pairs. The host terms count each
        decoding sequence once and only prompt tokens as such."""
        cached = ctx_tokens - seqs
        pairs = width * cached + seqs * (width * (width + 1) // 2)
        read = cached + seqs * width
        if self._window:
            pairs = windowed(pairs, seqs * width * self._win_tokens, self._win_frac)
            read = windowed(read, seqs * (self._win_tokens + width - 1), self._win_frac)
        return pairs, read

    def cost(self, *, prefill_tokens: int = 0, prefill_attn_pairs: float = 0.0,
             prefill_kv_tokens: int = 0, decode_seqs: int = 0, decode_ctx_tokens: int = 0,
             logits_seqs: int | None = None, prefill_seqs: int | None = None) -> StepCost:
        """:meth:`price` of a step given by its aggregates (:func:`~capsim.cost.terms.
        step_input` documents them and their defaults): for steps no scheduler made (SLO
        floors, the roofline table, a pool's prefill rate) and tests."""
        step, logits = step_input(prefill_tokens, prefill_attn_pairs, prefill_kv_tokens,
                                  decode_seqs, decode_ctx_tokens, logits_seqs, prefill_seqs)
        return self.price(step, logits)

    def work(self, tally: WorkTally) -> tuple[float, float]:
        """(FLOPs, HBM bytes) per GPU of all the steps in ``tally``
        (:meth:`~capsim.cost.operator_terms.OperatorTerms.work`): Σ of their
        ``cost().flops`` / ``cost().bytes`` up to float rounding."""
        return self.terms.work(tally)

    def new_tally(self) -> WorkTally:
        """A :class:`WorkTally` for this pricer's :meth:`work` (it keeps the steps per
        token count when the model has routed experts)."""
        return WorkTally(by_tokens=self.terms.experts is not None)

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
        rows = self.terms.operator_rows(n, logits_seqs, prefill_tokens, prefill_attn_pairs,
                                        prefill_kv_tokens, decode_seqs, decode_ctx_tokens)
        return [OperatorCost(name, count, *row)
                for (name, count), row in zip(self.terms.names(), rows)]

    def experts_hit(self, tokens: int) -> float:
        """Expected distinct experts per MoE layer a step of ``tokens`` tokens reads
        (:func:`~capsim.cost.operators.expected_experts_hit` with this pricer's routing
        skew; :meth:`~capsim.cost.experts.ExpertPricer.hit`); 0.0 for a dense model."""
        experts = self.terms.experts
        return experts.hit(tokens) if experts is not None else 0.0

    def all_to_all_terms(self) -> tuple[float, float]:
        """:meth:`~capsim.cost.communication.Communication.all_to_all_terms`."""
        return self.comm.all_to_all_terms()

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Matmul weight bytes one GPU reads per step (layers + LM head; no embedding table)."""
        return self.terms.weight_bytes_per_gpu

    @property
    def untuned_fp8_gemm(self) -> UntunedFp8Gemm | None:
        """The preset's untuned block-fp8 GEMM rule where it applies here (None: not)."""
        return self._untuned

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where a matmul turns compute-bound: effective peak ÷ bandwidth."""
        return self.terms.mm_peak / self.terms.mm_bw
