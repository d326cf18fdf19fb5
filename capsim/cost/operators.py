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
  (vocab-parallel matmul for the sequences that sample).

Tensor parallelism: 2 all-reduces per layer (after o_proj and down_proj)
plus one after the vocab-parallel embedding, each of tokens × hidden × 2
bytes, priced by the ring all-reduce α-β model (:func:`ring_all_reduce_s`),
and a gather of the vocab-sharded logits to rank 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import Curve
from capsim.profiles.models import ModelShape

#: Bytes per activation element (bf16/fp16 activations, as vLLM runs them).
ACTIVATION_BYTES = 2


#: Bytes per weight element for each weight format the roofline prices.
WEIGHT_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class Matmul:
    """A weight matmul as coefficients of its row count n (per GPU, over ``count`` layers).

    flops = ``flops_per_row × n``; HBM bytes = ``weight_bytes + act_bytes_per_row × n``.
    """

    name: str
    count: int
    flops_per_row: float
    weight_bytes: float
    act_bytes_per_row: float


@dataclass(frozen=True, slots=True)
class AttentionWork:
    """Attention work per GPU over ``layers`` layers, as coefficients of the batch.

    flops = ``flops_per_pair × query-key pairs``; bytes = ``kv_bytes_per_token ×
    KV tokens read + new_bytes_per_token × new tokens`` (KV write, q and output).
    """

    layers: int
    flops_per_pair: float
    kv_bytes_per_token: float
    new_bytes_per_token: float


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


def layer_matmuls(model: ModelShape, tp: int, weight_bytes: int = 2) -> tuple[Matmul, ...]:
    """The four per-layer matmuls (qkv_proj, o_proj, gate_up_proj, down_proj), per GPU,
    summed over ``model.num_hidden_layers``, with their activation traffic.

    Sharded Megatron-style as vLLM does: QKV and gate/up column-parallel,
    O and down row-parallel; KV heads split, or replicated beyond their count.
    """
    h, f, layers = model.hidden_size, model.intermediate_size, model.num_hidden_layers
    q = model.q_size / tp
    qkv_out = q + 2 * _kv_heads_per_gpu(model, tp) * model.head_dim
    qkv_params = h * qkv_out + (qkv_out if model.attention_bias else 0)
    shapes = (  # (name, params per GPU, input width, output width)
        ("qkv_proj", qkv_params, h, qkv_out),
        ("o_proj", q * h, q, h),
        ("gate_up_proj", 2 * h * f / tp, h, 2 * f / tp),
        ("down_proj", h * f / tp, f / tp, h),
    )
    return tuple(
        Matmul(name, layers, 2.0 * layers * params, layers * params * weight_bytes,
               layers * (w_in + w_out) * ACTIVATION_BYTES)
        for name, params, w_in, w_out in shapes
    )


def lm_head(model: ModelShape, tp: int, weight_bytes: int) -> Matmul:
    """Vocab-parallel LM head: each GPU holds vocab / TP rows."""
    h, v = model.hidden_size, model.vocab_size / tp
    return Matmul("lm_head", 1, 2.0 * v * h, v * h * weight_bytes, (h + v) * ACTIVATION_BYTES)


def attention_work(model: ModelShape, tp: int, kv_cache_dtype_bytes: int = 2) -> AttentionWork:
    """Attention coefficients per GPU over all layers (see :class:`AttentionWork`).

    flops: 4 × head_dim × heads / TP per query-key pair (QKᵀ and AV, PaLM
    appendix B). Bytes: K and V of every context token read once per
    sequence (FlashAttention streams K/V; query-tile re-reads are ignored),
    plus the new token's K/V write and its q / output activations.
    """
    layers = model.num_hidden_layers
    kv_per_layer = 2 * _kv_heads_per_gpu(model, tp) * model.head_dim * kv_cache_dtype_bytes
    return AttentionWork(
        layers=layers,
        flops_per_pair=4.0 * layers * model.q_size / tp,
        kv_bytes_per_token=layers * kv_per_layer,
        new_bytes_per_token=layers * (kv_per_layer + 2 * model.q_size / tp * ACTIVATION_BYTES))


def elementwise_bytes_per_token(model: ModelShape, tp: int) -> float:
    """Per-token HBM traffic of ONE layer's elementwise kernels (bytes).

    Fused add+RMSNorm twice (read x and residual, write both: 4h each), RoPE
    on q and k (read + write), SiLU·mul (read 2·ffn, write ffn).
    """
    h = model.hidden_size
    rope = 2 * (model.q_size / tp + _kv_heads_per_gpu(model, tp) * model.head_dim)
    act = 3 * model.intermediate_size / tp
    return (8 * h + rope + act) * ACTIVATION_BYTES


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

