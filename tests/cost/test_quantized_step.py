"""Step cost with quantized weights: weight bytes follow the format, the matmul runs at the
format's peak with its GEMM curve, and the LM head / embedding stay 16-bit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.common.errors import ScenarioError
from capsim.cost.operators import attn_pairs
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.profiles.quantization import load_quant_format

LAYER_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
# Llama-3.1-8B per-GPU (K, N) of each layer matmul at TP 1
SHAPES = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
          "down_proj": (14336, 4096)}


def ops(pricer: StepPricer, **step) -> dict:
    return {op.name: op for op in pricer.breakdown(**step)}


@pytest.mark.parametrize("fmt", ["awq", "gptq", "fp8_block", "int8"])   # MXFP4: experts only
def test_layer_weight_bytes_are_the_formats_and_the_lm_head_stays_bf16(fmt):
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    bf16 = ops(StepPricer(m, hw), decode_seqs=1, decode_ctx_tokens=100)
    q = ops(StepPricer(m, hw, quantization=fmt), decode_seqs=1, decode_ctx_tokens=100)
    f = load_quant_format(fmt)
    for name, (k, n) in SHAPES.items():
        act = bf16[name].bytes - 32 * k * n * 2                  # activations, unchanged
        assert q[name].bytes == pytest.approx(32 * f.tensor_bytes(k, n) + act, rel=1e-12)
    assert q["lm_head"] == bf16["lm_head"]
    assert q["embedding"] == bf16["embedding"]


def test_int4_weight_only_decode_reads_a_quarter_and_computes_at_the_bf16_peak():
    """AWQ on an H100: a batch-1 decode's layer GEMMs are memory-bound and read 0.2598 of
    the bf16 bytes (0.5195 / 2 per weight); a 4,096-token prefill's are compute-bound at
    the same bf16 peak and curve (Marlin), so they cost the same."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    bf16, awq = StepPricer(m, hw), StepPricer(m, hw, quantization="awq")
    assert awq.matmul_dtype == "bf16"
    d_bf16, d_awq = ops(bf16, decode_seqs=1, decode_ctx_tokens=100), \
        ops(awq, decode_seqs=1, decode_ctx_tokens=100)
    for name in LAYER_OPS:
        assert d_awq[name].compute_s == d_bf16[name].compute_s
        assert not d_awq[name].compute_bound
    weights = sum(d_awq[n].bytes for n in LAYER_OPS) / sum(d_bf16[n].bytes for n in LAYER_OPS)
    assert weights == pytest.approx((0.5 + 2.5 / 128) / 2, rel=1e-3)
    step = dict(prefill_tokens=4096, prefill_attn_pairs=attn_pairs(4096, 0),
                prefill_kv_tokens=4096)
    p_bf16, p_awq = ops(bf16, **step), ops(awq, **step)
    for name in LAYER_OPS:
        assert p_awq[name].compute_bound
        assert p_awq[name].seconds == p_bf16[name].seconds
    whole = awq.cost(decode_seqs=1, decode_ctx_tokens=100).seconds \
        / bf16.cost(decode_seqs=1, decode_ctx_tokens=100).seconds
    # not 0.26: the bf16 LM head (1.05 GB, a fifth of what AWQ reads), launches and the
    # 0.3 ms step overhead remain
    assert 0.45 < whole < 0.55


def test_nvfp4_on_b200_runs_the_layer_gemms_at_the_fp4_peak():
    """W4A4: the compute side is the bf16 one × 2.25 / 9 PFLOPS (same gemm curve)."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("b200")
    bf16, fp4 = StepPricer(m, hw), StepPricer(m, hw, quantization="nvfp4")
    assert fp4.matmul_dtype == "fp4"
    step = dict(prefill_tokens=8192, prefill_attn_pairs=attn_pairs(8192, 0),
                prefill_kv_tokens=8192)
    a, b = ops(bf16, **step), ops(fp4, **step)
    launch = 32 * hw.efficiency.gemm.launch_s
    for name in LAYER_OPS:
        assert b[name].compute_s - launch == pytest.approx((a[name].compute_s - launch) / 4,
                                                           rel=1e-12)
    assert b["lm_head"].compute_s == a["lm_head"].compute_s


def test_mxfp4_experts_on_hopper_are_weight_only_and_attention_stays_16_bit():
    """vLLM's Mxfp4Config quantizes the fused-MoE experts only (formats.yaml mxfp4 groups):
    attention and dense layers keep the bf16 peak; the experts run weight-only on the H100
    and on FP4 tensor cores on the B200 (no engine named: the format's own compute)."""
    m = load_model("qwen3-30b-a3b")
    h100, b200 = load_hardware("h100-sxm"), load_hardware("b200")
    on_h100, on_b200 = (StepPricer(m, hw, quantization="mxfp4") for hw in (h100, b200))
    assert (on_h100.matmul_dtype, on_h100.expert_dtype) == ("bf16", "bf16")
    assert (on_b200.matmul_dtype, on_b200.expert_dtype) == ("bf16", "fp4")
    with pytest.raises(ScenarioError, match="llama-3.1-8b is dense, so nothing would be "):
        StepPricer(load_model("llama-3.1-8b"), h100, quantization="mxfp4")


def test_legacy_fp8_dtype_is_fp8_channel():
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    step = dict(decode_seqs=8, decode_ctx_tokens=8000)
    assert StepPricer(m, hw, weight_dtype="fp8").cost(**step) == \
        StepPricer(m, hw, quantization="fp8_channel").cost(**step)


PRICER = StepPricer(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 2, quantization="awq")
counts = st.integers(min_value=0, max_value=20_000)


@settings(max_examples=100, deadline=None)
@given(seqs=counts, ctx=st.integers(0, 32_000), chunk=counts)
def test_fast_path_equals_the_reference_breakdown_with_quantized_weights(seqs, ctx, chunk):
    """The LM head's own (16-bit) curve table is read above and below 16,384 rows."""
    if seqs + chunk == 0:
        return
    kwargs = dict(prefill_tokens=chunk, prefill_attn_pairs=attn_pairs(chunk, 0),
                  prefill_kv_tokens=chunk, decode_seqs=seqs, decode_ctx_tokens=seqs * ctx)
    cost, ops_ = PRICER.cost(**kwargs), PRICER.breakdown(**kwargs)
    assert sum(op.seconds for op in ops_) + cost.comm_s + cost.overhead_s == pytest.approx(
        cost.seconds, rel=1e-12)
    assert sum(op.bytes for op in ops_) == pytest.approx(cost.bytes, rel=1e-12)


@pytest.mark.parametrize("name, fmt, gpu, tp, dtype", [
    ("mixtral-8x7b", "awq", "a100-80gb", 1, "bf16"),
    ("qwen3-30b-a3b", "mxfp4", "h100-sxm", 1, "bf16"),      # Hopper: MXFP4 weight-only
    ("qwen3-235b-a22b", "fp8_block", "h200-sxm", 8, "fp8"),   # (DeepSeek-V3 is fp8 as shipped)
])
def test_moe_shapes_take_the_formats_mean_bytes_per_weight(name, fmt, gpu, tp, dtype):
    """MoE / MLA linears and experts are priced per parameter: the format's mean bytes per
    weight (0.5195 for AWQ g128, 0.53125 for MXFP4, 1.0002 for fp8 blocks) replaces 2; the
    vocabulary stays bf16, so the whole is a little above that ratio of bf16. (gpt-oss
    records its checkpoint's formats by tensor group: tests/profiles/test_checkpoint_formats.py.)"""
    m, hw = load_model(name), load_hardware(gpu)
    q, b = StepPricer(m, hw, tp, quantization=fmt), StepPricer(m, hw, tp)
    per = load_quant_format(fmt).bytes_per_weight(m.hidden_size)
    ratio = q.weight_bytes_per_gpu / b.weight_bytes_per_gpu
    assert per / 2 < ratio < per / 2 + 0.06
    assert q.matmul_dtype == dtype
    step = dict(decode_seqs=8, decode_ctx_tokens=8000)
    assert q.cost(**step).seconds < b.cost(**step).seconds
