"""MLA decode attention at FlashMLA's published rates (``efficiency.attention_decode_mla``):
the FlashMLA README (deepseek-ai/FlashMLA at 9241ae3e, "Performance") gives the dense MLA
decoding kernel up to 3000 GB/s memory-bound and 660 TFLOPS compute-bound on H800 SXM5
(= H100 SXM5 in SMs, clocks and HBM3)."""

from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model


def _decode_attention(p: StepPricer, seqs: int, ctx: int):
    rows = {op.name: op for op in p.breakdown(decode_seqs=seqs, decode_ctx_tokens=seqs * ctx)}
    return rows["attention_decode"]


def test_memory_bound_tp8_reads_the_latent_at_3000_gb_s():
    """TP 8: 16 heads per GPU, 30 FLOP per latent byte (FlashMLA's ratio ≈ 2 × heads),
    memory-bound: the latent KV streams at 3000 GB/s on an H100 SXM (the H800's HBM3)."""
    hw = load_hardware("h100-sxm")
    p = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block")
    op = _decode_attention(p, 64, 4096)
    launch = 61 * hw.efficiency.attention_decode_mla.launch_s
    assert not op.compute_bound
    assert op.bytes / (op.memory_s - launch) == pytest.approx(3000e9, rel=0.001)


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
    """H200: 0.871 of its 4.8 TB/s, fitted to SGLang's MLA decode on an H200
    (tests/profiles/test_mla_decode_aiconfigurator.py; FlashMLA's H800 0.896 before)."""
    hw = load_hardware("h200-sxm")
    p = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block")
    op = _decode_attention(p, 64, 4096)
    launch = 61 * hw.efficiency.attention_decode_mla.launch_s
    assert op.bytes / (op.memory_s - launch) == pytest.approx(0.871 * 4.8e12, rel=0.001)


def test_models_without_mla_keep_attention_decode():
    """Dense GQA (Llama) and an fp8 KV cache of a GQA model keep their own entries."""
    hw = load_hardware("h100-sxm")
    p = StepPricer(load_model("llama-3.1-8b"), hw, 1)
    assert p.rates.attention_decode == hw.efficiency.attention_decode
    fp8 = StepPricer(load_model("llama-3.1-8b"), hw, 1, kv_cache_dtype_bytes=1, engine="vllm")
    assert fp8.rates.attention_decode == hw.efficiency.attention_decode_fp8["vllm"]
    mla = StepPricer(load_model("deepseek-v3"), hw, 8, kv_cache_dtype_bytes=1, engine="vllm")
    assert mla.rates.attention_decode == hw.efficiency.attention_decode_mla
