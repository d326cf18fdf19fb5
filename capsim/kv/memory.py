"""A replica's GPU memory at start-up, term by term, as each engine profiles it.

Every term is per GPU (all GPUs of a tensor-parallel group are alike) and in bytes;
:class:`MemoryTerms` holds them the way vLLM logs them. :func:`memory_terms` applies
an engine's :class:`~capsim.profiles.engines.MemoryRule`:

- **weights** (:func:`weight_bytes_per_gpu`): every tensor on the GPU that holds it.
  Linear layers are sharded over TP in the weight dtype, with fp32 per-output-channel
  scales when quantized to fp8 (compressed-tensors FP8-dynamic, as vLLM loads it), or
  in a quantization format's layout (int4 + group scales, NVFP4, …:
  :mod:`capsim.profiles.quantization`);
  the embedding table and LM head (vocab-parallel) and the norms stay in the model's
  16-bit dtype; vLLM also allocates the RoPE cos/sin cache
  (``rotary_embedding/base.py``: max_position × rotary_dim in the model dtype).
  Reproduces vLLM 0.19's "Model loading took" lines (measured cases
  ``kv_vllm0190_h100_llama31_8b_tp1_bf16``: 14.99 GiB, ``…_tp2_bf16``: 7.51 GiB,
  ``kv_vllm0190_h100_llama33_70b_fp8dyn_tp2``: 33.88 GiB).
- **activation peak** (:func:`activation_peak_bytes`): the larger of the profile
  run's forward pass and its dummy sampler (vLLM 0.19 ``gpu_model_runner.profile_run``
  → ``_dummy_run(max_num_batched_tokens)`` + ``_dummy_sampler_run``: the sampler's
  logits for ``min(max_num_seqs, max_num_batched_tokens)`` requests × the full
  vocabulary dominate at vLLM's defaults), plus a constant.
- **non-torch** memory charged to the budget (NCCL buffers at TP ≥ 2) and, for
  engines that count it, the CUDA context (:func:`cuda_context_bytes`: a per-build base
  plus the driver's local-memory reservation, SMs × resident threads per SM × stack bytes
  per thread, so it differs by GPU); for vLLM <= 0.2.5 at TP ≥ 2 also the profile run's
  all-reduce outputs the caching allocator still holds (:func:`held_all_reduce_bytes`).
- **CUDA graphs** (:func:`cudagraph_count` graphs × layers × the preset's MiB per layer per
  graph): captured after the pool is sized, beside the budget, unless the engine version
  takes its estimate out of the budget (vLLM >= 0.21). What lives beside the budget (the
  context and init-time communicators where the budget excludes them, the graphs) must fit
  in the memory the fraction leaves: :attr:`MemoryTerms.graphs_fit`.

The available KV memory then becomes blocks of ``block_size`` tokens
(``vllm/v1/core/kv_cache_utils.py`` ``get_num_blocks``: available // page // layers).
Constants come from the preset YAML, each with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import MemoryRule, at_tp
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import QuantFormat
from capsim.profiles.weight_layout import WeightLayout, weight_layout

GIB = 2**30
FP32_BYTES = 4


@dataclass(frozen=True)
class MemoryTerms:
    """One GPU of a replica at start-up, bytes (vLLM's log names in brackets).

    Attributes:
        total_bytes: torch-visible device memory [``total_memory``].
        fraction: the engine's memory fraction (``gpu_memory_utilization``, …).
        budget_bytes: what the rule divides among weights, activations and KV
            [``worker requested memory``].
        weight_bytes: [``Model loading took``].
        activation_peak_bytes: [``torch peak memory increase``].
        non_torch_bytes: non-torch memory charged to the budget (and, vLLM <= 0.2.5,
            the all-reduce outputs the allocator holds: :func:`held_all_reduce_bytes`)
            [``non-torch forward increase memory``].
        cudagraph_bytes: CUDA-graph memory charged to the budget (0 when the
            engine captures graphs after sizing the pool).
        available_kv_bytes: [``Available KV cache memory``].
        cuda_context_bytes: the CUDA context (inside ``non_torch_bytes`` where the
            engine counts it, else outside the budget) [vLLM 0.19's ``worker init memory
            snapshot: ... cuda_memory``].
        outside_budget_bytes: memory the engine holds that its budget does not count,
            before the graphs (the context and init-time communicators of vLLM V1).
        cudagraph_pool_bytes: the captured graph pool [``Graph capturing finished in N
            secs, took X GiB``].
        cudagraph_estimate_bytes: the start-up estimate of it [``Estimated CUDA graph
            memory: X GiB total``]; 0 when the engine makes none.
    """

    total_bytes: int
    fraction: float
    budget_bytes: int
    weight_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int
    cuda_context_bytes: int = 0
    outside_budget_bytes: int = 0
    cudagraph_pool_bytes: int = 0
    cudagraph_estimate_bytes: int = 0

    @property
    def non_kv_bytes(self) -> int:
        """[``Total non KV cache memory``]: weights + activation peak + non-torch (+ graphs)."""
        return (self.weight_bytes + self.activation_peak_bytes + self.non_torch_bytes
                + self.cudagraph_bytes)

    @property
    def graph_headroom_bytes(self) -> int:
        """Memory the fraction leaves beside the budget and what the budget does not count:
        total − budget − :attr:`outside_budget_bytes` (vLLM captures its graphs in it)."""
        return self.total_bytes - self.budget_bytes - self.outside_budget_bytes

    @property
    def graphs_beside_budget_bytes(self) -> int:
        """The part of the graph pool the budget did not charge (pool − charged estimate)."""
        return max(self.cudagraph_pool_bytes - self.cudagraph_bytes, 0)

    @property
    def graphs_fit(self) -> bool:
        """Whether the graph pool fits beside the budget; when it does not, vLLM runs out of
        memory capturing the graphs or in the sampler warm-up that follows (vLLM 0.19
        ``gpu_worker.compile_or_warm_up_model``: ``capture_model`` then ``_dummy_sampler_run``,
        which needs the activation peak again)."""
        return self.graphs_beside_budget_bytes <= self.graph_headroom_bytes

    def gib(self) -> dict[str, float]:
        """Every term in GiB, keyed by its attribute name without ``_bytes``."""
        return {"total": self.total_bytes / GIB, "budget": self.budget_bytes / GIB,
                "weights": self.weight_bytes / GIB,
                "activation_peak": self.activation_peak_bytes / GIB,
                "non_torch": self.non_torch_bytes / GIB, "cudagraph": self.cudagraph_bytes / GIB,
                "available_kv": self.available_kv_bytes / GIB,
                "cuda_context": self.cuda_context_bytes / GIB,
                "outside_budget": self.outside_budget_bytes / GIB,
                "cudagraph_pool": self.cudagraph_pool_bytes / GIB,
                "cudagraph_estimate": self.cudagraph_estimate_bytes / GIB}

    def log_lines(self) -> list[str]:
        """The start-up lines vLLM prints for these terms (per GPU), in vLLM's order; the
        graph-capture line without the seconds capsim does not model, and where the graphs
        live (beside the budget: the headroom left there)."""
        g = self.gib()
        lines = [
            f"Model loading took {g['weights']:.2f} GiB memory",
            f"Total non KV cache memory: {self.non_kv_bytes / GIB:.2f}GiB; torch peak memory "
            f"increase: {g['activation_peak']:.2f}GiB; non-torch forward increase memory: "
            f"{g['non_torch']:.2f}GiB; weights memory: {g['weights']:.2f}GiB.",
        ]
        if self.cudagraph_estimate_bytes:
            lines.append(f"Estimated CUDA graph memory: {g['cudagraph_estimate']:.2f} GiB total")
        lines.append(f"Available KV cache memory: {g['available_kv']:.2f} GiB")
        if self.cudagraph_bytes:                # vLLM >= 0.21 (gpu_worker.py) says what it costs
            lines.append(
                f"CUDA graph memory profiling is enabled. The current gpu_memory_utilization="
                f"{self.fraction:.4f} is equivalent to gpu_memory_utilization="
                f"{self.fraction - self.cudagraph_bytes / self.total_bytes:.4f} without CUDA "
                f"graph memory profiling.")
        if self.cudagraph_pool_bytes:
            where = ("its estimate charged to the budget" if self.cudagraph_bytes else
                     "beside the budget")
            lines.append(f"Graph capturing finished, took {g['cudagraph_pool']:.2f} GiB ({where}; "
                         f"{self.graph_headroom_bytes / GIB:.2f} GiB free there)")
        return lines


def weight_bytes_per_gpu(model: ModelShape, tp: int, weight_bytes: int,
                         rope_cache: bool = False, dp_attention: bool = False,
                         embedding: bool = True, lm_head: bool = True,
                         quant: QuantFormat | None = None, attention_tp: int = 1) -> int:
    """Bytes of weights on one GPU of a TP group (module docstring, "weights").

    Args:
        model: the shape.
        tp: tensor-parallel degree (linears and the vocabulary are split by it; norms
            and the RoPE cache are replicated).
        weight_bytes: bytes per linear-layer weight (2: bf16/fp16; 1: fp8, which adds
            fp32 per-output-channel scales); unused when ``quant`` is given.
        rope_cache: add the RoPE cos/sin cache (vLLM).
        dp_attention: attention weights whole on every GPU (data-parallel attention,
            MoE shapes only), or with ``attention_tp`` > 1 (DP ranks of several GPUs,
            SGLang's ``--tp`` / ``--dp-size``) sharded over each rank's GPUs as TP shards
            them (MLA's q_a / kv_a still replicated). Expert parallelism holds E / TP whole experts per GPU: the
            same bytes as a 1/TP slice of each, so it needs no flag here.
        embedding, lm_head: whether this GPU holds the embedding table / the LM head
            (a pipeline stage's layers come from :func:`~capsim.cost.operators.stage_shape`:
            vLLM builds the embedding on the first stage, the LM head on the last, and
            with tied embeddings the last stage a copy of the table too,
            vllm/model_executor/models/llama.py).
        quant: a quantized format (:mod:`capsim.profiles.quantization`): each linear
            weight of a dense model, sharded as vLLM shards it (QKV and gate/up split
            along outputs, O and down along inputs), takes :meth:`QuantFormat.tensor_bytes`
            of its per-GPU shape, scales and zero points included; a MoE / MLA shape's
            linears take the format's mean bytes per weight; everything else stays 16-bit.
            A model whose checkpoint stores its tensor groups in their own formats
            (``model.weight_formats``, gpt-oss) takes each group's
            (:func:`~capsim.profiles.weight_layout.weight_layout`; ``quant`` must then be
            the checkpoint's format or None), as does a format of some groups only (MXFP4:
            the experts).

    Raises:
        ScenarioError: ``quant`` is not the format of ``model``'s checkpoint, or
            quantizes no group of it (MXFP4 on a dense model).
    """
    h, layers, act = model.hidden_size, model.num_hidden_layers, model.dtype_bytes
    layout = weight_layout(model, quant.name if quant is not None else None) \
        if model.weight_formats or quant is not None else None
    if layout is not None and layout.grouped:   # the checkpoint's groups, or MXFP4's experts
        if model.is_moe or model.is_mla or model.attention_sinks:
            return _grouped_moe_weight_bytes_per_gpu(model, tp, layout, rope_cache,
                                                     dp_attention, embedding, lm_head,
                                                     attention_tp)
        return _dense_weight_bytes_per_gpu(model, tp, weight_bytes, rope_cache, embedding,
                                           lm_head, layout.attention, layout.mlp)
    quantized = quant is not None and quant.quantized
    if model.is_moe or model.is_mla or model.attention_sinks:
        per = quant.bytes_per_weight(h, act) if quantized else weight_bytes
        return _moe_weight_bytes_per_gpu(model, tp, per, rope_cache, dp_attention,
                                         embedding, lm_head, attention_tp)
    return _dense_weight_bytes_per_gpu(model, tp, weight_bytes, rope_cache, embedding, lm_head,
                                       quant if quantized else None,
                                       quant if quantized else None, quant is None)


def redundant_bytes_per_gpu(model: ModelShape, tp: int, weight_bytes: int,
                            quant: QuantFormat | None, redundant_experts: int) -> float:
    """Bytes EPLB's ``redundant_experts`` copies add to each of ``tp`` expert-parallel GPUs:
    R / EP whole experts on every MoE layer, in the experts' format (the checkpoint's, or
    ``quant``'s, else ``weight_bytes`` per weight)."""
    h = model.hidden_size
    params = model.moe_layers * 3 * h * model.moe_intermediate_size * redundant_experts / tp
    if model.weight_formats or (quant is not None and quant.quantized):
        layout = weight_layout(model, quant.name if quant is not None else None)
        return params * layout.experts.bytes_per_weight(h, model.dtype_bytes)
    return params * weight_bytes


def _dense_weight_bytes_per_gpu(model: ModelShape, tp: int, weight_bytes: int,
                                rope_cache: bool, embedding: bool, lm_head: bool,
                                attn: QuantFormat | None, mlp: QuantFormat | None,
                                channel_scales: bool = False) -> int:
    """:func:`weight_bytes_per_gpu` of a dense shape: q/k/v/o in ``attn``'s layout and
    gate/up/down in ``mlp``'s (None or 16-bit: ``weight_bytes`` per parameter);
    ``channel_scales``: dtype fp8's fp32 per-output-channel scales."""
    h, layers, act = model.hidden_size, model.num_hidden_layers, model.dtype_bytes
    attn = attn if attn is not None and attn.quantized else None
    mlp = mlp if mlp is not None and mlp.quantized else None
    qkv_out = model.q_size + 2 * model.kv_size
    if attn is not None or mlp is not None:
        f = model.intermediate_size
        shapes = ((attn, h, qkv_out / tp), (attn, model.q_size / tp, h),
                  (mlp, h, 2 * f / tp), (mlp, f / tp, h))
        out = int(layers * sum(q.tensor_bytes(k, n) if q is not None else k * n * weight_bytes
                               for q, k, n in shapes))
    else:
        linear = (model.qkv_params - (qkv_out if model.attention_bias else 0) + model.o_params
                  + model.mlp_params)
        out = layers * linear * weight_bytes // tp
    if model.attention_bias:
        out += layers * qkv_out * act // tp
    if channel_scales and weight_bytes < act:   # per-output-channel scales of each linear
        out += layers * (qkv_out + h + 3 * model.intermediate_size) * FP32_BYTES // tp
    out += _vocab_params(model, embedding, lm_head) * act // tp
    out += (layers * model.norm_params + (h if lm_head else 0)) * act     # final norm: last stage
    if rope_cache:
        out += model.max_position_embeddings * model.head_dim * act
    return out


def _grouped_moe_weight_bytes_per_gpu(model: ModelShape, tp: int, layout: WeightLayout,
                                      rope_cache: bool, dp_attention: bool = False,
                                      embedding: bool = True, lm_head: bool = True,
                                      attention_tp: int = 1) -> int:
    """:func:`_moe_weight_bytes_per_gpu` with each tensor group in its own format: the
    attention projections (whole on every GPU with ``dp_attention``, ÷ ``attention_tp``
    on ranks of several GPUs; MLA's q_a / kv_a replicated), the dense MLP and shared experts, the routed experts (a 1/TP slice of
    each, or E / EP whole ones: the same bytes), each at its format's mean bytes per
    weight; the router, biases, sinks, norms and vocabulary in the model's 16-bit dtype
    (gpt-oss-120b: 114.7 B expert weights in MXFP4 at 0.53125 bytes, the other 2.2 B
    parameters in bf16 = 60.8 GiB, the published checkpoint)."""
    h, layers, act = model.hidden_size, model.num_hidden_layers, model.dtype_bytes
    per = {g: f.bytes_per_weight(h, act) for g, f in layout.formats.items()}
    if model.is_mla:       # the projections without their q_a / kv_a norms
        attn = layers * (model.mla_params - (model.q_lora_rank or 0) - model.kv_lora_rank)
        attn_rep = layers * h * ((model.q_lora_rank or 0) + model.kv_lora_rank
                                 + model.qk_rope_head_dim)
    else:
        attn = layers * (h * (model.q_size + 2 * model.kv_size) + model.o_params)
        attn_rep = 0
    shard = attn - attn_rep          # ÷ TP
    if dp_attention:                 # per GPU: whole, or its rank's 1/attention_tp slice
        attn_rep = attn if attention_tp == 1 else \
            attn_rep + (attn - attn_rep) / attention_tp
        shard = 0
    mlp = model.dense_layers * model.mlp_params \
        + model.moe_layers * 3 * h * model.shared_expert_intermediate_size
    experts = model.moe_layers * model.num_experts * 3 * h * model.moe_intermediate_size
    router = model.moe_layers * model.router_params                  # replicated, 16-bit
    vocab = model.embedding_params + (0 if model.tie_word_embeddings else model.lm_head_params)
    small = layers * model.norm_params + h + (layers * model.num_attention_heads
                                              if model.attention_sinks else 0)
    rest = model.params_total - vocab - small - router - attn - mlp - experts   # biases
    out = int((shard * per["attention"] + mlp * per["mlp"]
               + experts * per["experts"] + rest * act) / tp
              + attn_rep * per["attention"] + router * act)
    return out + _unsharded_bytes(model, tp, small, rope_cache, embedding, lm_head)


def _unsharded_bytes(model: ModelShape, tp: int, small: int, rope_cache: bool,
                     embedding: bool, lm_head: bool) -> int:
    """The 16-bit tensors beside the linears: the vocabulary ÷ TP, the ``small`` norms,
    sinks and biases (the final norm on the last stage only) and the RoPE cache."""
    act = model.dtype_bytes
    out = _vocab_params(model, embedding, lm_head) * act // tp
    out += (small - (0 if lm_head else model.hidden_size)) * act
    if rope_cache:
        rope_dim = model.qk_rope_head_dim if model.is_mla else model.head_dim
        out += model.max_position_embeddings * rope_dim * act
    return out


def _vocab_params(model: ModelShape, embedding: bool = True, lm_head: bool = True) -> int:
    """Vocabulary parameters a GPU group holds: the embedding table (first stage; the last
    too when the LM head is tied to it) and the untied LM head (last stage)."""
    tied = model.tie_word_embeddings
    return (model.embedding_params if embedding or (tied and lm_head) else 0) + (
        model.lm_head_params if lm_head and not tied else 0)


def _moe_weight_bytes_per_gpu(model: ModelShape, tp: int, weight_bytes: float,
                              rope_cache: bool, dp_attention: bool = False,
                              embedding: bool = True, lm_head: bool = True,
                              attention_tp: int = 1) -> int:
    """:func:`weight_bytes_per_gpu` of a MoE / MLA shape: every linear (experts included:
    vLLM's fused MoE shards each expert's intermediate dimension over TP without expert
    parallelism) in the weight dtype ÷ TP, except the linears vLLM replicates on every
    rank (the router, ``ReplicatedLinear``; MLA's q_a / kv_a down-projections, fused
    ``fused_qkv_a_proj`` with ``disable_tp``, vllm/model_executor/models/deepseek_v2.py);
    vocabulary ÷ TP and norms, sinks and biases in the model's 16-bit dtype. A quantized
    format comes in as its mean bytes per weight (scales spread over the elements; the
    router, a few MB, is counted in it too); dtype fp8's channel scales are not added. With
    ``dp_attention`` every layer's attention projections are whole on each GPU (SGLang's
    DP attention: TP 1 inside attention; the dense and shared MLPs stay TP-sharded), or
    ÷ ``attention_tp`` on DP ranks of several GPUs (MLA's down-projections replicated)."""
    h, layers, act = model.hidden_size, model.num_hidden_layers, model.dtype_bytes
    vocab = model.embedding_params + (0 if model.tie_word_embeddings else model.lm_head_params)
    small = layers * model.norm_params + h + (layers * model.num_attention_heads
                                              if model.attention_sinks else 0)
    replicated = model.moe_layers * model.router_params
    down = layers * h * ((model.q_lora_rank or 0) + model.kv_lora_rank
                         + model.qk_rope_head_dim) if model.is_mla else 0
    attn = layers * (model.attention_params
                     - (model.num_attention_heads if model.attention_sinks else 0))
    rank_share = 0.0                 # a DP rank's slice of attention, on each of its GPUs
    if dp_attention and attention_tp > 1:
        replicated += down
        rank_share = (attn - down) / attention_tp
        linear = model.params_total - vocab - small - replicated - (attn - down)
    else:
        if dp_attention:
            replicated += attn
        elif model.is_mla:
            replicated += down
        linear = model.params_total - vocab - small - replicated
    out = int(linear * weight_bytes // tp + replicated * weight_bytes
              + rank_share * weight_bytes)
    return out + _unsharded_bytes(model, tp, small, rope_cache, embedding, lm_head)


def activation_peak_bytes(model: ModelShape, tp: int, rule: MemoryRule, max_num_seqs: int,
                          max_num_batched_tokens: int, num_sms: int,
                          with_sampler: bool = True, expert_parallel: bool = False) -> int:
    """The profile run's peak of torch memory above the weights, one GPU (bytes).

    forward = T × (a × I / TP + b × h) with T = ``max_num_batched_tokens`` (gate_up,
    activation and residual tensors of one layer; a, b from the rule); sampler = R × V
    × s + S × V × 4 + T × h × 2 + 2 × R × h × 2 with R = min(max_num_seqs, T): the
    logits (s bytes per element live at once: bf16 logits, an fp32 copy, fp32 probs
    and the fp32 noise of random sampling make vLLM 0.19's 14), S rows of fp32 top-k /
    top-p scratch and the hidden states. The sampler does not shrink with TP: logits
    are all-gathered to the full vocabulary before sampling; ``with_sampler`` False: a pipeline
    stage before the last (vLLM runs the dummy sampler on the last PP rank only). Returns
    max(forward, sampler) + the rule's constant.

    A MoE model's forward peak is its widest MLP: the fused-MoE layer's intermediate
    caches hold k rows per token (vllm/model_executor/layers/fused_moe/fused_moe.py
    ``fused_experts_impl``: ``intermediate_cache1`` [T, k, 2 I_moe / TP],
    ``intermediate_cache2`` [T·k, I_moe / TP], ``intermediate_cache3`` [T, k, h], bf16),
    so I = k × ``moe_intermediate_size`` (whole experts per GPU under
    ``expert_parallel``: not ÷ TP) plus 2·k·h bytes per token for cache 3, against the
    shared expert's width and the dense layers' ``intermediate_size`` where the model
    has them (DeepSeek-V3: 8 × 2,048 = 16,384 < its 3 dense layers' 18,432).
    """
    t, h, v = max_num_batched_tokens, model.hidden_size, model.vocab_size
    act = model.dtype_bytes
    rows = min(max_num_seqs, t)
    if model.is_moe:
        k = model.num_experts_per_tok
        moe = (rule.forward_bytes_per_token_intermediate * k * model.moe_intermediate_size
               / (1 if expert_parallel else tp) + act * k * h)
        other = rule.forward_bytes_per_token_intermediate * max(
            model.shared_expert_intermediate_size,
            model.intermediate_size if model.dense_layers else 0) / tp
        forward = t * (max(moe, other) + rule.forward_bytes_per_token_hidden * h)
    else:
        forward = t * (rule.forward_bytes_per_token_intermediate * model.intermediate_size / tp
                       + rule.forward_bytes_per_token_hidden * h)
    sampler = 0.0
    if rule.sampler_bytes_per_logit and with_sampler:
        scratch = num_sms if rule.sampler_scratch_rows == "num_sms" else rule.sampler_scratch_rows
        sampler = (rows * v * rule.sampler_bytes_per_logit + scratch * v * FP32_BYTES
                   + t * h * act + 2 * rows * h * act)
    return int(max(forward, sampler) + rule.profile_constant_gib * GIB)


def cuda_context_bytes(rule: MemoryRule, num_sms: int | None,
                       max_threads_per_sm: int | None) -> int:
    """The CUDA context of the engine's process on one GPU (bytes).

    ``rule.cuda_context_base_gib`` + num_sms × max_threads_per_sm ×
    ``rule.cuda_stack_bytes_per_thread``: the driver reserves local memory (the per-thread
    stack, 1 KiB by default) for every thread the GPU can hold at once, context-wide
    (NVIDIA developer forum "Local memory management", 2024: MAX_THREADS_PER_SM × SMs ×
    LOCAL_MEM_PER_THREAD; 216 MiB on an A100's 108 SMs). The reservation term is 0 when the
    GPU profile lacks ``num_sms`` or ``max_threads_per_sm``.
    """
    local = (num_sms * max_threads_per_sm * rule.cuda_stack_bytes_per_thread
             if num_sms and max_threads_per_sm else 0)
    return int(rule.cuda_context_base_gib * GIB) + local


def held_all_reduce_bytes(model: ModelShape, rule: MemoryRule, tp: int,
                          max_num_batched_tokens: int, embedding: bool = True) -> int:
    """The profile run's all-reduce outputs still reserved when the profiler reads free
    memory, one GPU (bytes); 0 unless ``rule.held_all_reduce_outputs`` and TP ≥ 2.

    (2 × layers + 1) × T × hidden × dtype bytes, T = ``max_num_batched_tokens``: one
    forward's tensor-parallel all-reduces, each of a [T, hidden] tensor — the attention and
    MLP output projections of every layer (``RowParallelLinear`` with ``reduce_results``)
    and the vocabulary-parallel embedding (first pipeline stage only, ``embedding``)
    (vllm/model_executor/layers/linear.py, vocab_parallel_embedding.py, models/llama.py in
    the v0.2.5 wheel). ``torch.distributed.all_reduce`` records its tensor on the NCCL
    stream (``recordStream`` unless ``TORCH_NCCL_AVOID_RECORD_STREAMS``), so the caching
    allocator reuses a freed block only after the GPU has run that all-reduce; the CPU
    enqueues the whole forward ahead of the GPU, so every block stays out of reach and the
    allocator reserves new memory for the next (vLLM issue 2150, found while measuring PR
    2031; fixed in v0.2.6 by PR 2151, which sets ``TORCH_NCCL_AVOID_RECORD_STREAMS=1`` in
    vllm/worker/worker.py). v0.2.5's profiler reads ``total − free`` after the run, which
    counts that reserved memory. A lower bound: segments the held blocks strand (a freed
    gate/up buffer split to serve a held output) are not counted.
    """
    if not rule.held_all_reduce_outputs or tp < 2:
        return 0
    reduces = 2 * model.num_hidden_layers + (1 if embedding else 0)
    return reduces * max_num_batched_tokens * model.hidden_size * model.dtype_bytes


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int,
                            step_16_from: int | None = 256) -> list[int]:
    """vLLM's default CUDA-graph batch sizes up to min(2 × max_num_seqs, 512,
    max_num_batched_tokens): [1, 2, 4] + multiples of 8, and from ``step_16_from`` on
    multiples of 16 (0.19: 256, ``vllm/config/vllm.py`` ``_set_cudagraph_sizes`` at v0.19.0;
    0.11: None, every multiple of 8, ``vllm/config/__init__.py`` at v0.11.0)."""
    top = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    eights_below = top + 1 if step_16_from is None else min(top + 1, step_16_from)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, eights_below, 8))
    if step_16_from is not None and top >= step_16_from:
        sizes += list(range(step_16_from, top + 1, 16))
    return sorted(set(sizes))


def rule_capture_sizes(rule: MemoryRule, max_num_seqs: int,
                       max_num_batched_tokens: int) -> list[int]:
    """The batch sizes the engine captures under ``rule.cudagraph_capture``
    (:func:`cudagraph_capture_sizes` on 0.19's or 0.11's grid; [] for ``none``)."""
    if rule.cudagraph_capture == "none":
        return []
    return cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens,
                                   None if rule.cudagraph_capture == "vllm_0_11" else 256)


def cudagraph_count(rule: MemoryRule, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Graphs the engine captures (``rule.cudagraph_capture``; 0 for ``none``).

    ``vllm_v1`` (FULL_AND_PIECEWISE, vLLM 0.19's default mode): a piecewise graph for every
    capture size and a full graph for every size <= max_num_seqs (uniform decode batches),
    ``vllm/v1/cudagraph_dispatcher.py`` ``initialize_cudagraph_keys`` at v0.19.0;
    ``vllm_0_11``: the same at 0.11's capture sizes (the same dispatcher at v0.11.0). A piecewise
    "graph" is one graph per piece between attention layers; capsim prices every graph per
    layer, so pieces need no separate count.
    """
    sizes = rule_capture_sizes(rule, max_num_seqs, max_num_batched_tokens)
    return len(sizes) + sum(1 for s in sizes if s <= max_num_seqs)


def memory_terms(model: ModelShape, rule: MemoryRule, *, total_bytes: int, fraction: float,
                 tp: int, weight_bytes: int, max_num_seqs: int, max_num_batched_tokens: int,
                 num_sms: int, dp_attention: bool = False, embedding: bool = True,
                 lm_head: bool = True, quant: QuantFormat | None = None,
                 max_threads_per_sm: int | None = None,
                 expert_parallel: bool = False, attention_tp: int = 1,
                 redundant_experts: int = 0) -> MemoryTerms:
    """Apply ``rule`` to one GPU of a replica (module docstring; rules in
    :class:`~capsim.profiles.engines.MemoryRule`).

    Args:
        model: the shape; total_bytes: torch-visible memory of one GPU;
        fraction: the engine's memory fraction knob; tp: tensor-parallel degree;
        weight_bytes: bytes per linear weight; max_num_seqs, max_num_batched_tokens:
        the profile run's requests and tokens; num_sms: streaming multiprocessors
        (sampler scratch rows); dp_attention: data-parallel attention; embedding,
        lm_head: a pipeline stage's share of the vocabulary (:func:`weight_bytes_per_gpu`;
        the sampler's activations only with the LM head); quant: a quantized weight format;
        max_threads_per_sm: resident threads per SM (the context's local memory,
        :func:`cuda_context_bytes`); expert_parallel: whole experts per GPU
        (the fused-MoE activations are not ÷ TP); attention_tp: GPUs per data-parallel
        attention rank (:func:`weight_bytes_per_gpu`); redundant_experts: EPLB's extra
        expert copies, ``redundant_experts`` / TP whole experts more per GPU.

    Raises:
        ScenarioError: the weights alone do not fit in the budget; a ``vllm_v1`` budget is
            larger than the memory free at start-up (vLLM refuses to start:
            ``vllm/v1/worker/utils.py`` ``request_memory`` at v0.19.0).
    """
    w = weight_bytes_per_gpu(model, tp, weight_bytes, rule.rope_cache, dp_attention,
                             embedding, lm_head, quant, attention_tp)
    if redundant_experts:            # EPLB's copies: R / EP more whole experts per GPU
        w += int(redundant_bytes_per_gpu(model, tp, weight_bytes, quant, redundant_experts))
    a = activation_peak_bytes(model, tp, rule, max_num_seqs, max_num_batched_tokens, num_sms,
                              lm_head, expert_parallel)
    n = int(rule.non_torch_gib_at(tp) * GIB) + held_all_reduce_bytes(
        model, rule, tp, max_num_batched_tokens, embedding)
    ctx = cuda_context_bytes(rule, num_sms, max_threads_per_sm)
    if rule.context_in_budget:
        n += ctx
    outside = (0 if rule.context_in_budget else ctx) + int(at_tp(rule.init_comm_gib, tp) * GIB)
    pool, estimate = _cudagraph_bytes(model, rule, tp, max_num_seqs, max_num_batched_tokens)
    graphs = estimate if rule.cudagraph_in_budget else 0
    if rule.rule == "sglang":
        a = n = graphs = 0                      # activations live outside the static fraction
    budget, available = _budget_and_kv(rule, total_bytes, fraction, w, a, n, graphs)
    _check_fits(rule, total_bytes=total_bytes, fraction=fraction, budget=budget, weights=w,
                outside=outside, num_sms=num_sms, max_threads_per_sm=max_threads_per_sm)
    return MemoryTerms(total_bytes=total_bytes, fraction=fraction, budget_bytes=budget,
                       weight_bytes=w, activation_peak_bytes=a, non_torch_bytes=n,
                       cudagraph_bytes=graphs, available_kv_bytes=available,
                       cuda_context_bytes=ctx, outside_budget_bytes=outside,
                       cudagraph_pool_bytes=pool, cudagraph_estimate_bytes=estimate)


def _cudagraph_bytes(model: ModelShape, rule: MemoryRule, tp: int, max_num_seqs: int,
                     max_num_batched_tokens: int) -> tuple[int, int]:
    """(pool, estimate) bytes of the CUDA graphs captured for every layer: what the graph
    pool holds, and what the engine's estimate reserves (in the budget when
    ``rule.cudagraph_in_budget``)."""
    layer_graphs = model.num_hidden_layers * cudagraph_count(rule, max_num_seqs,
                                                             max_num_batched_tokens)
    pool = int(layer_graphs * at_tp(rule.cudagraph_mib_per_layer_graph, tp) * 2**20)
    estimate = int(layer_graphs * at_tp(rule.cudagraph_estimate_mib_per_layer_graph, tp) * 2**20)
    return pool, estimate


def _budget_and_kv(rule: MemoryRule, total_bytes: int, fraction: float, w: int, a: int, n: int,
                   graphs: int) -> tuple[int, int]:
    """(budget, available for the KV cache) bytes per GPU under ``rule.rule``, from the
    weights ``w``, activation peak ``a``, non-torch ``n`` and CUDA graph ``graphs`` bytes
    in the budget."""
    context = int(rule.context_gib * GIB)
    if rule.rule == "sglang":                   # f × (free before weights) − weights
        budget = int(fraction * (total_bytes - context))
        return budget, budget - w
    if rule.rule in ("vllm_v1", "vllm_v0"):
        budget = math.ceil(total_bytes * fraction) if rule.ceil_budget else int(total_bytes * fraction)
        return budget, budget - w - a - n - graphs
    if rule.rule == "trtllm":                   # f × (what the profile run left free)
        budget = total_bytes
        return budget, int(fraction * (budget - w - a - n - context))
    # tgi: a share of f × total less the peak
    budget = int(fraction * total_bytes)
    return budget, int(rule.kv_fraction_of_free * (budget - w - a - n - context))


def _check_fits(rule: MemoryRule, *, total_bytes: int, fraction: float, budget: int,
                weights: int, outside: int, num_sms: int,
                max_threads_per_sm: int | None) -> None:
    """Raise :class:`ScenarioError` when what lives outside the budget (``outside`` bytes:
    CUDA context, communicators) fills the GPU, when a ``vllm_v1`` budget exceeds the
    memory free at start-up, or when the weights fill the budget."""
    if outside >= total_bytes:      # not a fraction to lower: the profile's numbers are off
        raise ScenarioError(
            f"the CUDA context and communicators alone hold {outside / GIB:,.2f} GiB (the "
            f"context's local memory is num_sms {num_sms} × max_threads_per_sm "
            f"{max_threads_per_sm} × {rule.cuda_stack_bytes_per_thread} B), more than the "
            f"GPU's {total_bytes / GIB:.2f} GiB: check the profile's num_sms and "
            "max_threads_per_sm")
    if rule.rule == "vllm_v1" and outside and total_bytes - outside < budget:
        raise ScenarioError(
            f"{fraction:g} × {total_bytes / GIB:.2f} GiB = {budget / GIB:.2f} GiB per GPU is more "
            f"than the {(total_bytes - outside) / GIB:.2f} GiB free when vLLM starts (the CUDA "
            f"context and communicators hold {outside / GIB:.2f} GiB), so vLLM refuses to start; "
            f"lower gpu_memory_utilization to <= {(total_bytes - outside) / total_bytes:.4f}")
    if weights >= budget:
        raise ScenarioError(
            f"model weights {weights / GIB:.2f} GiB per GPU do not fit in {fraction:g} × "
            f"{total_bytes / GIB:.2f} GiB = {budget / GIB:.2f} GiB; raise the memory fraction "
            "or tensor_parallel_size, or use a larger GPU")
