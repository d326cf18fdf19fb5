"""MLA decode attention (``efficiency.attention_decode_mla``): compute at FlashMLA's published
rate (deepseek-ai/FlashMLA at 9241ae3e, README "Performance": the dense MLA decoding kernel up
to 660 TFLOPS compute-bound on H800 SXM5, = H100 SXM5 in SMs and clocks); memory, launch and
the per-sequence time fitted to aiconfigurator's SGLang 0.5.10 generation-MLA tables of each
GPU (tests/profiles/test_mla_decode_aiconfigurator.py)."""

from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model


def _decode_attention(p: StepPricer, seqs: int, ctx: int):
    rows = {op.name: op for op in p.breakdown(decode_seqs=seqs, decode_ctx_tokens=seqs * ctx)}
    return rows["attention_decode"]


def _fixed_s(hw, seqs: int) -> float:
    """The entry's launch and per-sequence time over DeepSeek-V3's 61 layers."""
    mla = hw.efficiency.attention_decode_mla
    return 61 * (mla.launch_s + seqs * mla.seq_s)


def test_memory_bound_tp8_reads_the_latent_at_the_fitted_fraction():
    """TP 8: 16 heads per GPU, 30 FLOP per latent byte (FlashMLA's ratio ≈ 2 × heads),
    memory-bound: the latent KV streams at 0.878 of an H100 SXM's 3.35 TB/s (2,941 GB/s;
    FlashMLA's README: 3000 GB/s on the H800), on top of the launch and per-sequence time."""
    hw = load_hardware("h100-sxm")
    p = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block")
    op = _decode_attention(p, 64, 4096)
    assert not op.compute_bound
    assert op.bytes / (op.memory_s - _fixed_s(hw, 64)) == pytest.approx(0.878 * 3.35e12,
                                                                          rel=0.001)


def test_compute_bound_dp_attention_runs_at_660_tflops():
    """Data-parallel attention: all 128 heads on each rank, 240 FLOP per latent byte,
    compute-bound (FlashMLA's "h_q × s_q >= 128" case): 660 TFLOPS."""
    hw = load_hardware("h100-sxm")
    p = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block",
                   dp_attention=True, expert_parallel=True)
    op = _decode_attention(p, 64, 4096)
    launch = 61 * hw.efficiency.attention_decode_mla.launch_s
    assert op.compute_bound
    assert op.flops / (op.compute_s - launch) == pytest.approx(660e12, rel=0.001)


def test_h200_streams_at_its_measured_fraction():
    """H200: 0.895 of its 4.8 TB/s, fitted with the per-sequence time to SGLang's MLA decode
    on an H200 (tests/profiles/test_mla_decode_aiconfigurator.py; 0.871 without it,
    FlashMLA's H800 0.896 before that)."""
    hw = load_hardware("h200-sxm")
    p = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block")
    op = _decode_attention(p, 64, 4096)
    assert op.bytes / (op.memory_s - _fixed_s(hw, 64)) == pytest.approx(0.895 * 4.8e12,
                                                                          rel=0.001)


def test_models_without_mla_keep_attention_decode():
    """Dense GQA (Llama) and an fp8 KV cache of a GQA model keep their own entries."""
    hw = load_hardware("h100-sxm")
    p = StepPricer(load_model("llama-3.1-8b"), hw, 1)
    assert p.rates.attention_decode == hw.efficiency.attention_decode
    fp8 = StepPricer(load_model("llama-3.1-8b"), hw, 1, kv_cache_dtype_bytes=1, engine="vllm")
    assert fp8.rates.attention_decode == hw.efficiency.attention_decode_fp8["vllm"]
    mla = StepPricer(load_model("deepseek-v3"), hw, 8, kv_cache_dtype_bytes=1, engine="vllm")
    assert mla.rates.attention_decode == hw.efficiency.attention_decode_mla
