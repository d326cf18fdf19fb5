"""Per-operator work of one engine step: the reference formulas of the roofline.

One step runs every layer once over all the tokens scheduled in it (prefill
chunks and decode tokens fused into one batch, as vLLM v1 and Sarathi-Serve
do), then the LM head for the sequences that sample. This module states, per
GPU of a tensor-parallel group, the FLOPs and HBM bytes of each operator as
coefficients of the step's aggregates (tokens, query-key pairs, KV tokens read);
:mod:`capsim.cost.pricer` turns them into seconds.

Operators per layer (all per GPU, sharded Megatron-style as vLLM does):

- ``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``: weight matmuls.
  flops = 2 × tokens × params / TP; bytes = params × weight_bytes / TP (read
  once per step) + tokens × (in + out activation widths) × 2 bytes.
- ``attention_prefill`` and ``attention_decode``: flops = 4 × head_dim ×
  heads / TP × query-key pairs (QKᵀ and AV, PaLM appendix B); bytes = KV
  read for every context token + KV write and q / output activations for
  every new token. FlashAttention streams K/V once per sequence; re-reads
  across query tiles are ignored (lower bound).
- ``elementwise``: RMSNorms, RoPE, SiLU·mul and residual adds, memory only
  (their FLOPs are negligible). Vidur's A100 Llama-3-8B rows measure these
  at ~9 % of a layer's time at 4,096 tokens; this traffic model gives ~6 %.
- once per step: ``embedding`` (row gather, memory only) and ``lm_head``
  (vocab-parallel matmul for the sequences that sample), both in the model's
  16-bit dtype whatever the layers' quantization (checkpoints leave them out).

Mixture-of-experts layers (:func:`layer_matmuls`, :class:`ExpertWork`): the router
(replicated), the shared expert (a dense MLP, TP-sharded) and the routed experts,
whose weight bytes read per step grow with the distinct experts the step's tokens hit
(:func:`expected_experts_hit`) and whose FLOPs follow the k experts of every token.
MLA attention (DeepSeek-V2/V3) runs as vLLM runs it: prefill expands the latent with
kv_b_proj and attends MHA-style over ``qk_nope + qk_rope`` / ``v_head_dim``; decode
absorbs kv_b_proj into q and the output and attends over the latent
(``kv_lora_rank + qk_rope_head_dim`` per key, every rank reading the whole latent).
Sliding-window and chunked-attention layers attend over at most their window.

Tensor parallelism: 2 all-reduces per layer (after o_proj and down_proj)
plus one after the vocab-parallel embedding, each of tokens × hidden × 2
bytes, priced by the ring all-reduce α-β model (:func:`ring_all_reduce_s`),
and a gather of the vocab-sharded logits to rank 0. Expert parallelism with
data-parallel attention: each MoE layer's all-reduces become an all-to-all dispatch
and combine (:func:`all_to_all_s`, :func:`moe_all_to_all_bytes_per_token`); the
busiest rank under routing skew: :func:`expert_rank_loads`. Pipeline parallelism:
the layer split (:func:`pp_layer_partition`) and a stage's shape (:func:`stage_shape`);
the stages are priced in :mod:`capsim.cost.pipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import Curve
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import QuantFormat

#: Bytes per activation element (bf16/fp16 activations, as vLLM runs them).
ACTIVATION_BYTES = 2


#: Bytes per weight element for each weight format the roofline prices.
WEIGHT_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class Matmul:
    """A weight matmul as coefficients of its row count n (per GPU, over ``count`` layers).

    flops = ``flops_per_row × n``; HBM bytes = ``weight_bytes + act_bytes_per_row × n``.
    ``k_in`` × ``n_out``: one layer's weight per GPU (input × output width, elements;
    0: not given), for kernels whose time follows the shape, not only the work
    (:class:`~capsim.profiles.engines.UntunedFp8Gemm`).
    """

    name: str
    count: int
    flops_per_row: float
    weight_bytes: float
    act_bytes_per_row: float
    k_in: float = 0.0
    n_out: float = 0.0


@dataclass(frozen=True, slots=True)
class AttentionWork:
    """Attention work per GPU over ``layers`` layers, as coefficients of the batch.

    flops = ``flops_per_pair × query-key pairs`` (prefill; ``decode_flops_per_pair``
    for decode, which differs for MLA's absorbed form); bytes = ``kv_bytes_per_token ×
    KV tokens read + new_bytes_per_token × new tokens`` (KV write, q and output).
    ``window_layers`` of the layers attend over at most ``window_tokens`` keys
    (sliding window or local chunk; 0: none): :func:`windowed` caps their share.
    """

    layers: int
    flops_per_pair: float
    kv_bytes_per_token: float
    new_bytes_per_token: float
    decode_flops_per_pair: float = 0.0
    window_tokens: int = 0
    window_layers: int = 0

    @property
    def window_fraction(self) -> float:
        """Share of the layers that are windowed (0.0 without windows)."""
        return self.window_layers / self.layers if self.window_tokens else 0.0


def windowed(total: float, cap: float, fraction: float) -> float:
    """Pairs (or KV tokens) with the windowed layers' share capped:
    ``total − fraction × (total − min(total, cap))``.

    ``total`` is the uncapped aggregate over the step's sequences; ``cap`` the window
    times the sequences (decode: n × W keys; prefill: tokens × W pairs). Exact when
    every sequence is past the window or none is; otherwise an upper bound (the
    aggregate cannot tell which sequences are). Chunked local attention (a query sees
    the keys of its own chunk, ``pos mod C + 1`` of them) is priced with the same
    cap: exact below the chunk size, an upper bound beyond it.
    """
    return total - fraction * (total - (total if total < cap else cap))


@dataclass(frozen=True, slots=True)
class ExpertWork:
    """The routed experts of the MoE layers, per GPU, summed over ``layers`` MoE layers.

    A step of n tokens routes n × k (token, expert) pairs: flops =
    ``flops_per_pair × n × k``; HBM bytes = ``weight_bytes_per_expert × experts hit``
    (each expert's weights read once per step, :func:`expected_experts_hit`) +
    ``act_bytes_per_pair × n × k``. Each expert's GEMM runs ``n × k / hit`` rows.
    ``fused_shared``: shared experts run inside the same kernel as experts every token
    selects (SGLang's shared-experts fusion): k + fused_shared pairs per token, each
    read once per step like an expert hit.
    """

    layers: int
    num_experts: int
    top_k: int
    flops_per_pair: float
    weight_bytes_per_expert: float
    act_bytes_per_pair: float
    fused_shared: int = 0


def attn_pairs(chunk_tokens: int, cached_tokens: int) -> float:
    """Causal query-key pairs of a prefill chunk of ``chunk_tokens`` on ``cached_tokens``.

    ``c × p + c (c + 1) / 2``: every new query sees all p cached keys plus the
    new keys up to and including itself. Sum this over the step's chunks to
    get ``StepPricer.cost(prefill_attn_pairs=...)``.
    """
    c = chunk_tokens
    return c * cached_tokens + c * (c + 1) / 2


def curve_efficiency(curve: Curve | None, tokens: Any) -> np.ndarray:
    """Efficiency e(n) of a profile's curve (GEMM, prefill attention) at ``tokens``
    (array-like of counts; values below 1 count as 1).

    Piecewise linear in ``log(n)`` between the knots, flat outside them
    (``numpy.interp``); all ones when ``curve`` is None. Shape: as ``tokens``.
    """
    n = np.asarray(tokens, dtype=float)
    if curve is None:
        return np.ones_like(n)
    logs = np.log(np.maximum(n, 1.0))
    return np.interp(logs, np.log(np.asarray(curve.tokens, dtype=float)), curve.efficiency)


def check_tensor_parallel(model: ModelShape, tp: int) -> None:
    """vLLM's sharding rule: TP divides the heads; KV heads are split or replicated."""
    if not isinstance(tp, int) or tp < 1:
        raise ScenarioError(f"tensor_parallel_size must be an integer >= 1, got {tp!r}")
    heads, kv_heads = model.num_attention_heads, model.num_key_value_heads
    if heads % tp:
        raise ScenarioError(
            f"tensor_parallel_size {tp} must divide num_attention_heads {heads} of {model.name}"
        )
    if kv_heads % tp and tp % kv_heads:
        raise ScenarioError(
            f"tensor_parallel_size {tp} must divide, or be a multiple of, "
            f"num_key_value_heads {kv_heads} of {model.name}"
        )


def _kv_heads_per_gpu(model: ModelShape, tp: int) -> int:
    """KV heads each GPU holds: split when TP <= kv_heads, else one replica each (vLLM)."""
    return max(1, model.num_key_value_heads // tp)


def expected_experts_hit(tokens: float, num_experts: int, top_k: int,
                         routing_skew: float = 0.0) -> float:
    """Expected distinct experts that ``tokens`` tokens, each routed to ``top_k`` of
    ``num_experts``, touch in one layer.

    With marginal probability q_i that a token picks expert i (Σ q_i = k) and tokens
    routed independently, expert i is missed by all n tokens with probability
    (1 − q_i)^n, so E[hit] = Σ_i 1 − (1 − q_i)^n. Uniform routing (``routing_skew``
    0): q_i = k / E and E[hit] = E·(1 − (1 − k/E)^n) — exact for top-k without
    replacement too, since only the marginals enter. ``routing_skew`` s > 0 gives the
    experts Zipf popularity q_i ∝ i^(−s) (scaled to Σ q_i = k, each capped at 1), the
    uneven routing real traffic shows: fewer distinct experts per step. 0 tokens hit 0.
    """
    if tokens <= 0:
        return 0.0
    if routing_skew == 0.0:
        return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)
    q = _skewed_marginals(num_experts, top_k, routing_skew)
    return float(np.sum(1.0 - (1.0 - q) ** tokens))


def _skewed_marginals(num_experts: int, top_k: int, skew: float) -> np.ndarray:
    """Per-expert selection probabilities ∝ i^(−skew), Σ = k, none above 1: an expert
    whose share would pass 1 is picked by every token (1) and the rest of the k picks
    are spread over the experts not yet capped, in proportion, until none passes 1 (at
    most k rounds; a capped expert stays capped — spreading over it again left shares
    above 1 from skew ~3 on)."""
    ranks = np.arange(1, num_experts + 1, dtype=float)
    w = ranks ** (-skew)
    q = top_k * w / w.sum()
    capped = np.zeros(num_experts, dtype=bool)
    while True:
        over = q > 1.0
        if not over.any():
            return q
        capped |= over
        q[capped] = 1.0
        free = ~capped
        if free.any():   # weights relative to the most popular free expert: no 0 / 0
            w = (ranks[free] / ranks[free][0]) ** (-skew)
            q[free] = (top_k - capped.sum()) * w / w.sum()


def _mla_matmuls(model: ModelShape, tp: int) -> list[tuple[str, float, float, float]]:
    """MLA projections per GPU (name, params, in width, out width) as vLLM shards them:
    q_a / kv_a down-projections replicated (``fused_qkv_a_proj``, disable_tp), q_b and
    kv_b column-parallel, o row-parallel (vllm/model_executor/models/deepseek_v2.py).
    kv_b_proj is priced once per new token: in prefill it expands the new tokens'
    latent; in decode, absorbed into q and the output, it costs the same FLOPs
    (heads × kv_lora × (nope + v) per token). Re-expanding a cached prefix in chunked
    prefill is not priced."""
    h, heads = model.hidden_size, model.num_attention_heads / tp
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    kv_a = model.kv_lora_rank + model.qk_rope_head_dim
    rows = []
    if model.q_lora_rank:
        rows.append(("q_a_kv_a_proj", h * (model.q_lora_rank + kv_a), h,
                     model.q_lora_rank + kv_a))
        rows.append(("q_b_proj", model.q_lora_rank * heads * qk, model.q_lora_rank, heads * qk))
    else:
        rows.append(("kv_a_proj", h * kv_a, h, kv_a))
        rows.append(("q_proj", h * heads * qk, h, heads * qk))
    kv_b_out = heads * (model.qk_nope_head_dim + model.v_head_dim)
    rows.append(("kv_b_proj", model.kv_lora_rank * kv_b_out, model.kv_lora_rank, kv_b_out))
    rows.append(("o_proj", heads * model.v_head_dim * h, heads * model.v_head_dim, h))
    return rows


def _moe_layer_matmuls(model: ModelShape, tp: int, weight_bytes: float,
                       dp_attention: bool = False,
                       group_bytes: dict[str, float] | None = None,
                       attention_tp: int = 1,
                       fuse_shared_expert: bool = False) -> tuple[Matmul, ...]:
    """:func:`layer_matmuls` of a MoE or MLA shape: attention projections on every layer,
    the dense MLP on the dense layers, the shared expert and the router on the MoE
    layers (the routed experts are :func:`expert_work`). With ``dp_attention`` each GPU
    runs the attention projections whole for 1/TP of the step's tokens, or with
    ``attention_tp`` > 1 (DP ranks of several GPUs) a 1/attention_tp slice of them for
    attention_tp/TP of the tokens. ``group_bytes``:
    bytes per weight of the ``attention``, ``mlp`` and ``router`` groups where the
    checkpoint stores them apart (default ``weight_bytes`` for all). ``fuse_shared_expert``:
    no shared_expert row (it runs among the routed experts, :func:`expert_work`)."""
    h, layers = model.hidden_size, model.num_hidden_layers
    out: list[Matmul] = []
    per = group_bytes or {}

    def add(name: str, count: int, params: float, w_in: float, w_out: float,
            share: float = 1.0, group: str = "attention") -> None:
        if count > 0 and params > 0:
            out.append(Matmul(name, count, 2.0 * count * params * share,
                              count * params * per.get(group, weight_bytes),
                              count * (w_in + w_out) * ACTIVATION_BYTES * share, w_in, w_out))

    t_attn, share = (attention_tp, attention_tp / tp) if dp_attention else (tp, 1.0)
    if model.is_mla:
        for name, params, w_in, w_out in _mla_matmuls(model, t_attn):
            add(name, layers, params, w_in, w_out, share)
    else:
        q = model.q_size / t_attn
        qkv_out = q + 2 * _kv_heads_per_gpu(model, t_attn) * model.head_dim
        add("qkv_proj", layers, h * qkv_out + (qkv_out if model.attention_bias else 0), h,
            qkv_out, share)
        add("o_proj", layers, q * h, q, h, share)
    f, dense = model.intermediate_size, model.dense_layers
    add("gate_up_proj", dense, 2 * h * f / tp, h, 2 * f / tp, group="mlp")
    add("down_proj", dense, h * f / tp, f / tp, h, group="mlp")
    moe, fs = model.moe_layers, 0 if fuse_shared_expert else model.shared_expert_intermediate_size
    add("shared_expert", moe, (3 * h * fs + (h if model.shared_expert_gate else 0)) / tp, h,
        h + 3 * fs / tp, group="mlp")
    add("router", moe, model.router_params, h, model.num_experts,    # replicated on every rank
        group="router")
    return tuple(out)


def expert_work(model: ModelShape, tp: int, weight_bytes: float = 2,
                fuse_shared_expert: bool = False) -> ExpertWork | None:
    """The routed experts per GPU (None for a dense model): every expert's gate/up/down
    split over TP along its intermediate dimension (vLLM's fused MoE without expert
    parallelism), read in the weight dtype. ``fuse_shared_expert``: the shared expert, as
    shared width / expert width experts every token selects (SGLang's
    ``num_fused_shared_experts``), joins them."""
    if not model.is_moe:
        return None
    h, f, layers = model.hidden_size, model.moe_intermediate_size, model.moe_layers
    params = model.expert_params / tp
    return ExpertWork(layers=layers, num_experts=model.num_experts,
                      top_k=model.num_experts_per_tok, flops_per_pair=2.0 * layers * params,
                      weight_bytes_per_expert=layers * params * weight_bytes,
                      act_bytes_per_pair=layers * (2 * h + 3 * f / tp) * ACTIVATION_BYTES,
                      fused_shared=model.shared_expert_intermediate_size // f
                      if fuse_shared_expert else 0)


def layer_matmuls(model: ModelShape, tp: int, weight_bytes: float = 2,
                  dp_attention: bool = False,
                  quant: QuantFormat | None = None,
                  mlp_quant: QuantFormat | None = None,
                  group_bytes: dict[str, float] | None = None,
                  attention_tp: int = 1,
                  fuse_shared_expert: bool = False) -> tuple[Matmul, ...]:
    """The four per-layer matmuls (qkv_proj, o_proj, gate_up_proj, down_proj), per GPU,
    summed over ``model.num_hidden_layers``, with their activation traffic.

    Sharded Megatron-style as vLLM does: QKV and gate/up column-parallel,
    O and down row-parallel; KV heads split, or replicated beyond their count.
    A MoE or MLA shape gets its own list (:func:`_moe_layer_matmuls`; ``dp_attention``:
    data-parallel attention, its ranks of ``attention_tp`` GPUs each); each Matmul's
    ``count`` is the layers it runs on.
    Weight bytes: ``weight_bytes`` per parameter, or with a quantized ``quant`` its
    :meth:`~capsim.profiles.quantization.QuantFormat.tensor_bytes` of each per-GPU
    K × N weight (scales and zero points included) plus 16-bit biases (dense shapes;
    the caller passes MoE / MLA shapes the format's mean bytes per weight instead).
    A checkpoint with formats by tensor group: ``mlp_quant`` for gate/up/down of a dense
    shape (default ``quant``), ``group_bytes`` for a MoE / MLA shape's groups.
    ``fuse_shared_expert``: a MoE shape's shared expert priced with the routed experts
    (:func:`expert_work`), not here.
    """
    if model.is_moe or model.is_mla:
        return _moe_layer_matmuls(model, tp, weight_bytes, dp_attention, group_bytes,
                                  attention_tp, fuse_shared_expert)
    mlp_quant = quant if mlp_quant is None else mlp_quant
    h, f, layers = model.hidden_size, model.intermediate_size, model.num_hidden_layers
    q = model.q_size / tp
    qkv_out = q + 2 * _kv_heads_per_gpu(model, tp) * model.head_dim
    qkv_params = h * qkv_out + (qkv_out if model.attention_bias else 0)
    shapes = (  # (name, params per GPU, input width, output width, format)
        ("qkv_proj", qkv_params, h, qkv_out, quant),
        ("o_proj", q * h, q, h, quant),
        ("gate_up_proj", 2 * h * f / tp, h, 2 * f / tp, mlp_quant),
        ("down_proj", h * f / tp, f / tp, h, mlp_quant),
    )
    def stored(params: float, w_in: float, w_out: float, fmt: QuantFormat | None) -> float:
        if fmt is None or not fmt.quantized:
            return params * weight_bytes
        return fmt.tensor_bytes(w_in, w_out) + (params - w_in * w_out) * ACTIVATION_BYTES

    return tuple(
        Matmul(name, layers, 2.0 * layers * params, layers * stored(params, w_in, w_out, fmt),
               layers * (w_in + w_out) * ACTIVATION_BYTES, w_in, w_out)
        for name, params, w_in, w_out, fmt in shapes
    )


def lm_head(model: ModelShape, tp: int, weight_bytes: int) -> Matmul:
    """Vocab-parallel LM head: each GPU holds vocab / TP rows."""
    h, v = model.hidden_size, model.vocab_size / tp
    return Matmul("lm_head", 1, 2.0 * v * h, v * h * weight_bytes, (h + v) * ACTIVATION_BYTES)


def dp_attention_work(model: ModelShape, tp: int, kv_cache_dtype_bytes: int = 2,
                      attention_tp: int = 1) -> AttentionWork:
    """:func:`attention_work` under data-parallel attention: TP / ``attention_tp`` ranks
    of ``attention_tp`` GPUs each attend for their share of the step's sequences, so per
    GPU every coefficient is ``attention_work`` at ``attention_tp`` × attention_tp / TP
    (balanced ranks assumed; the slowest rank sets a real step). With ranks of one GPU
    (SGLang's default ``--dp-size`` = ``--tp``) every head is on it and MLA's latent is
    read once per sequence; a rank of several GPUs reads it on each (every TP rank holds
    the latent whole)."""
    a = attention_work(model, attention_tp, kv_cache_dtype_bytes)
    t = attention_tp
    return AttentionWork(layers=a.layers, flops_per_pair=a.flops_per_pair * t / tp,
                         kv_bytes_per_token=a.kv_bytes_per_token * t / tp,
                         new_bytes_per_token=a.new_bytes_per_token * t / tp,
                         decode_flops_per_pair=a.decode_flops_per_pair * t / tp,
                         window_tokens=a.window_tokens, window_layers=a.window_layers)


def attention_work(model: ModelShape, tp: int, kv_cache_dtype_bytes: int = 2) -> AttentionWork:
    """Attention coefficients per GPU over all layers (see :class:`AttentionWork`).

    flops: 4 × head_dim × heads / TP per query-key pair (QKᵀ and AV, PaLM
    appendix B). Bytes: K and V of every context token read once per
    sequence (FlashAttention streams K/V; query-tile re-reads are ignored),
    plus the new token's K/V write and its q / output activations.

    MLA: prefill 2 × heads / TP × (nope + rope + v) per pair (MHA over the expanded
    latent), decode 2 × heads / TP × (2 · kv_lora + rope) per pair (q·latent over
    kv_lora + rope, then p·latent over kv_lora); every rank reads the whole latent,
    ``kv_lora + rope`` elements per token and layer.
    """
    layers = model.num_hidden_layers
    window = model.sliding_window or model.attention_chunk_size or 0
    if model.is_mla:
        heads = model.num_attention_heads / tp
        kv_per_layer = model.kv_layer_bytes_per_token(kv_cache_dtype_bytes)
        prefill = 2.0 * heads * (model.qk_nope_head_dim + model.qk_rope_head_dim
                                 + model.v_head_dim)
        decode = 2.0 * heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
        q_out = heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim)
        return AttentionWork(
            layers=layers, flops_per_pair=layers * prefill, kv_bytes_per_token=layers * kv_per_layer,
            new_bytes_per_token=layers * (kv_per_layer + q_out * ACTIVATION_BYTES),
            decode_flops_per_pair=layers * decode, window_tokens=window,
            window_layers=model.window_layers)
    kv_per_layer = 2 * _kv_heads_per_gpu(model, tp) * model.head_dim * kv_cache_dtype_bytes
    flops = 4.0 * layers * model.q_size / tp
    return AttentionWork(
        layers=layers,
        flops_per_pair=flops,
        kv_bytes_per_token=layers * kv_per_layer,
        new_bytes_per_token=layers * (kv_per_layer + 2 * model.q_size / tp * ACTIVATION_BYTES),
        decode_flops_per_pair=flops, window_tokens=window, window_layers=model.window_layers)


def elementwise_bytes_per_token(model: ModelShape, tp: int) -> float:
    """Per-token HBM traffic of ONE layer's elementwise kernels (bytes).

    Fused add+RMSNorm twice (read x and residual, write both: 4h each), RoPE
    on q and k (read + write), SiLU·mul (read 2·ffn, write ffn).
    """
    h = model.hidden_size
    if model.is_moe or model.is_mla:
        return _moe_elementwise_bytes_per_token(model, tp)
    rope = 2 * (model.q_size / tp + _kv_heads_per_gpu(model, tp) * model.head_dim)
    act = 3 * model.intermediate_size / tp
    return (8 * h + rope + act) * ACTIVATION_BYTES


def _moe_elementwise_bytes_per_token(model: ModelShape, tp: int) -> float:
    """:func:`elementwise_bytes_per_token` of a MoE / MLA shape, averaged over the layers:
    SiLU·mul over the MLP width a token runs (dense layers: ffn; MoE layers: k experts +
    the shared expert); RoPE on the rope part of q and k (MLA: heads × rope + rope)."""
    h, layers = model.hidden_size, model.num_hidden_layers
    if model.is_mla:
        rope = 2 * (model.num_attention_heads / tp + 1) * model.qk_rope_head_dim
    else:
        rope = 2 * (model.q_size / tp + _kv_heads_per_gpu(model, tp) * model.head_dim)
    width = (model.dense_layers * model.intermediate_size + model.moe_layers * (
        model.num_experts_per_tok * model.moe_intermediate_size
        + model.shared_expert_intermediate_size)) / layers
    return (8 * h + rope + 3 * width / tp) * ACTIVATION_BYTES


def keys_per_query(pairs: float, new_tokens: int) -> int:
    """Whole number of keys each prefill query attends to on average: ``⌊pairs ÷ tokens⌋``."""
    return int(pairs / new_tokens)


def ring_all_reduce_s(message_bytes: Any, workers: Any, bandwidth_bytes_per_s: float,
                      latency_s: float) -> Any:
    """Ring all-reduce time: ``2(n−1)/n × bytes / bandwidth + 2(n−1) × latency``.

    The α-β model of Patarasuk & Yuan (JPDC 2009): reduce-scatter then
    all-gather, each n−1 steps of bytes/n over every link; NCCL's "bus
    bandwidth" divides by the same 2(n−1)/n. Works on floats or numpy arrays
    (``message_bytes`` in bytes, ``workers`` >= 1; 0 s for one worker).
    ``bandwidth_bytes_per_s`` is the per-direction link bandwidth times the
    interconnect efficiency.
    """
    hops = 2 * (workers - 1)
    return hops / workers * message_bytes / bandwidth_bytes_per_s + hops * latency_s


def one_shot_all_reduce_s(message_bytes: float, workers: int, bandwidth_bytes_per_s: float,
                          latency_s: float) -> float:
    """One-shot peer-to-peer all-reduce: ``latency + (n−1) × bytes / bandwidth``.

    Every GPU reads the whole message from each of its n−1 peers over NVLink and reduces
    it locally (vLLM's ``cross_device_reduce_1stage``, csrc/custom_all_reduce.cuh; the
    TensorRT-LLM one-shot kernel it follows). ``latency_s`` is the kernel's fixed cost
    (launch, the start / end barriers of flag writes to every peer);
    ``bandwidth_bytes_per_s`` the per-direction link bandwidth times the kernel's
    efficiency (:class:`capsim.profiles.hardware.CustomAllReduceCost`). 0 s for one worker.
    """
    if workers <= 1:
        return 0.0
    return latency_s + (workers - 1) * message_bytes / bandwidth_bytes_per_s


def two_shot_all_reduce_s(message_bytes: float, workers: int, bandwidth_bytes_per_s: float,
                          latency_s: float) -> float:
    """Two-shot peer-to-peer all-reduce: ``latency + 2(n−1)/n × bytes / bandwidth``.

    A reduce-scatter (each GPU reduces its 1/n of the message read from every peer), a
    barrier, then an all-gather of the reduced parts (vLLM's ``cross_device_reduce_2stage``,
    csrc/custom_all_reduce.cuh): the ring's bytes in two kernel phases instead of
    2(n−1) hops. Units as :func:`one_shot_all_reduce_s`. 0 s for one worker.
    """
    if workers <= 1:
        return 0.0
    return latency_s + 2 * (workers - 1) / workers * message_bytes / bandwidth_bytes_per_s



#: Random expert placements averaged for the busiest EP rank, and their seed (fixed:
#: a pricer is deterministic).
EP_PLACEMENT_SAMPLES = 256
EP_PLACEMENT_SEED = 0


def expert_rank_loads(num_experts: int, top_k: int, ep: int,
                      routing_skew: float = 0.0) -> np.ndarray:
    """Routing probabilities q_i (Σ over all experts = k) of the experts the busiest of
    ``ep`` expert-parallel ranks holds, shape (E / EP,).

    vLLM's default ``linear`` placement gives rank r the experts [r·E/EP, (r+1)·E/EP)
    (``determine_expert_map`` in vllm/model_executor/layers/fused_moe/layer.py); expert
    ids carry no popularity, so the skew's Zipf popularities
    (:func:`expected_experts_hit`) are placed at random: of
    :data:`EP_PLACEMENT_SAMPLES` seeded random placements, the one whose busiest rank's
    load is nearest the mean busiest load. Uniform routing: every rank holds k / EP of
    the load. EPLB's redundant hot experts: :func:`eplb_rank_loads`.
    """
    per_rank = num_experts // ep
    if routing_skew == 0.0 or ep == 1:
        return np.full(per_rank, top_k / num_experts) if routing_skew == 0.0 \
            else _skewed_marginals(num_experts, top_k, routing_skew)
    q = _skewed_marginals(num_experts, top_k, routing_skew)
    rng = np.random.default_rng(EP_PLACEMENT_SEED)
    order = np.argsort(rng.random((EP_PLACEMENT_SAMPLES, num_experts)), axis=1)
    ranks = q[order].reshape(EP_PLACEMENT_SAMPLES, ep, per_rank)
    loads = ranks.sum(axis=2)
    busiest = loads.argmax(axis=1)
    peak = loads[np.arange(EP_PLACEMENT_SAMPLES), busiest]
    pick = int(np.argmin(np.abs(peak - peak.mean())))
    return ranks[pick, busiest[pick]]


def eplb_rank_loads(num_experts: int, top_k: int, ep: int, routing_skew: float,
                    redundant: int) -> np.ndarray:
    """Routing probabilities of the physical experts the busiest of ``ep`` ranks holds
    under EPLB with ``redundant`` extra copies, shape ((E + R) / EP,).

    vLLM's EPLB (the global policy of ``rebalance_experts``, vllm/distributed/eplb/
    rebalance_algo.py at 07fb932a, adapted from DeepSeek's EPLB): each extra copy goes to
    the expert whose load per copy is the highest (``replicate_experts``), a token of an
    expert with r copies goes to one of them (q_i / r each), then the copies are packed
    heaviest first onto the least-loaded rank with a free slot, (E + R) / EP slots each
    (``balanced_packing``). Loads are the skew's Zipf popularities
    (:func:`expected_experts_hit`): the steady state EPLB's measured loads converge to.
    """
    q = _skewed_marginals(num_experts, top_k, routing_skew)
    copies = np.ones(num_experts, dtype=np.int64)
    for _ in range(redundant):
        copies[int(np.argmax(q / copies))] += 1
    loads = np.repeat(q / copies, copies)
    slots = loads.size // ep
    pack_load, pack_items = np.zeros(ep), np.zeros(ep, dtype=np.int64)
    packs: list[list[float]] = [[] for _ in range(ep)]
    for load in np.sort(loads)[::-1]:
        free = np.flatnonzero(pack_items < slots)
        j = int(free[np.argmin(pack_load[free])])
        packs[j].append(float(load))
        pack_load[j] += load
        pack_items[j] += 1
    return np.array(packs[int(np.argmax(pack_load))])


def all_to_all_s(message_bytes: Any, ranks: int, gpus_per_node: int | None,
                 intra_bandwidth_bytes_per_s: float, intra_latency_s: float,
                 inter_bandwidth_bytes_per_s: float = 0.0,
                 inter_latency_s: float = 0.0) -> Any:
    """One all-to-all: each of ``ranks`` GPUs sends ``message_bytes`` spread evenly over
    all ranks (itself included), seconds.

    The share for the other ranks of its node, (min(g, ranks) − 1) / ranks, goes over
    NVLink (the ``intra`` link, an NVSwitch gives every pair the full per-GPU bandwidth);
    the share for ranks on other nodes, (ranks − g) / ranks, over the scale-out link
    (one port per GPU). Both paths run at once: ``max(latencies) + max(bytes_i / bw_i)``
    (an upper bound of the slower path when one path has the larger latency and the
    other the larger transfer). 0 s for one rank. ``gpus_per_node`` None: one node.
    Works on floats or numpy arrays of ``message_bytes``.
    """
    if ranks <= 1:
        return 0.0 * message_bytes
    local = ranks if gpus_per_node is None else min(gpus_per_node, ranks)
    seconds = (local - 1) / ranks * message_bytes / intra_bandwidth_bytes_per_s
    latency = intra_latency_s if local > 1 else 0.0
    if local < ranks:
        remote = (ranks - local) / ranks * message_bytes / inter_bandwidth_bytes_per_s
        seconds = np.maximum(seconds, remote) if isinstance(seconds, np.ndarray) \
            else max(seconds, remote)
        latency = max(latency, inter_latency_s)
    return latency + seconds


def moe_all_to_all_bytes_per_token(model: ModelShape, ep: int) -> float:
    """Bytes one expert-parallel rank dispatches per token of the step, per MoE layer
    (the combine returns the same): top-k × hidden × activation bytes for each of its
    1/EP of the step's tokens (data-parallel attention balances tokens over the ranks).

    Each (token, expert) pair is sent once, as pplx and DeepEP's low-latency kernels do
    (vllm/model_executor/layers/fused_moe/pplx_prepare_finalize.py,
    deepep_ll_prepare_finalize.py); DeepEP's high-throughput kernels send a token once
    per destination rank (fewer bytes when several of its experts share a rank), which
    this does not model: an upper bound for them. bf16 activations (DeepEP's fp8
    dispatch not modelled).
    """
    return model.num_experts_per_tok * model.hidden_size * ACTIVATION_BYTES / ep


def pp_layer_partition(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage as vLLM splits them (``get_pp_indices`` in
    vllm/distributed/utils.py, no ``VLLM_PP_LAYER_PARTITION``): ⌊L / PP⌋ each, the
    remainder r given one layer each to the r stages before the last (the last stage
    also runs the final norm and the LM head; the first the embedding).
    Llama-3.1-405B's 126 layers over PP 4: (31, 32, 32, 31).

    Raises:
        ScenarioError: PP is not an integer >= 1 or exceeds the layers (a stage would
            hold none).
    """
    if not isinstance(pp, int) or pp < 1:
        raise ScenarioError(f"pipeline_parallel_size must be an integer >= 1, got {pp!r}")
    if pp > num_layers:
        raise ScenarioError(f"pipeline_parallel_size {pp} exceeds the model's {num_layers} "
                            "layers (every stage needs at least one)")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_shape(model: ModelShape, start: int, end: int) -> ModelShape:
    """The shape of layers [start, end) of ``model`` (one pipeline stage): its layer
    count, with the dense layers placed first (DeepSeek's ``first_k_dense_replace``;
    Llama 4's interleaved dense layers are placed first too, an approximation) and the
    windowed layers spread evenly (gpt-oss alternates them; Llama 4 has three in four):
    ``round(W·end / L) − round(W·start / L)`` of them, so the stages sum to the model."""
    layers = model.num_hidden_layers
    n = end - start
    dense = min(max(model.dense_layers - start, 0), n)

    def spread(count: int) -> int:
        return round(count * end / layers) - round(count * start / layers)

    update: dict[str, Any] = {"num_hidden_layers": n,
                              "sliding_window_layers": spread(model.sliding_window_layers),
                              "chunked_attention_layers": spread(model.chunked_attention_layers)}
    if model.is_moe:
        update["num_moe_layers"] = n - dense
    return model.model_copy(update=update)
