"""The fused-MoE grouped GEMMs of fp8 experts over rows per expert
(``efficiency.grouped_gemm_fp8``), recomputed from the kernel table it was derived from,
a second H200 table checked against the H200's own fit, and the experts read at a batch
by hand.

Kernel table: vLLM ``benchmarks/kernels/benchmark_moe.py`` (the whole ``fused_moe`` call,
top-k softmax included, in a CUDA graph), Qwen3-30B-A3B ``fp8_w8a8`` TP 1 on H100, the
"Main" (default Triton config) table of https://github.com/vllm-project/vllm/pull/24700.
Checked, not fitted: SGLang's ``tuning_fused_moe_triton.py`` (the same Triton kernel),
Qwen3-235B-A22B fp8 TP 8 on H200, default config, https://github.com/sgl-project/sglang/pull/11730
(the H200 curve itself: tests/profiles/test_moe_aiconfigurator.py).
"""

from __future__ import annotations

import pytest

from capsim.cost.operators import expected_experts_hit
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

#: batch -> kernel µs, PR 24700 "Main" (Qwen3-30B-A3B fp8_w8a8 TP 1, H100).
QWEN3_30B_FP8_TP1_H100_MAIN_US = {
    1: 44.54, 2: 59.94, 4: 90.46, 8: 129.77, 16: 185.40, 24: 215.99, 32: 238.37, 48: 257.83,
    64: 262.73, 96: 270.98, 128: 273.72, 256: 355.49, 512: 391.86, 1024: 536.33,
    1536: 727.31, 2048: 911.64, 3072: 1279.17, 4096: 1647.57}
#: batch -> kernel µs, SGLang PR 11730 "Without tuned kernel" (Qwen3-235B-A22B fp8 TP 8, H200).
QWEN3_235B_FP8_TP8_H200_US = {1: 31.70, 2: 36.56, 4: 49.67, 8: 66.87, 16: 92.36, 24: 117.38,
                              32: 124.99}


def _pricer(hw: str, model: str, tp: int) -> StepPricer:
    return StepPricer(load_model(model), load_hardware(hw), tp, weight_dtype="fp8")


def _layer_us(p: StepPricer, n: int) -> float:
    """capsim's µs for one MoE layer's routed experts at ``n`` tokens (the fused-MoE call)."""
    _, _, c, m = p.terms.experts.terms(n)
    return (max(c, m) + p.terms.expert_launch_s) / p.terms.experts.work.layers * 1e6


def _derived_e(p: StepPricer, n: int, t_us: float) -> tuple[int, float]:
    """(rows per expert, e) one table row gives: the ideal roofline over (time − fixed)."""
    x, hw = p.terms.experts, load_hardware("h100-sxm")
    f, b, _, _ = x.terms(n)
    ideal_s = max(f / hw.peak_flops_per_s["fp8"], b / hw.hbm_bandwidth_bytes_per_s)
    layers, launch_s = x.work.layers, hw.efficiency.fused_moe.launch_s
    rows = int(n * x.work.top_k / x.hit(n))
    return rows, ideal_s / layers / (t_us * 1e-6 - launch_s)


def test_h100_curve_is_the_table():
    """Each knot is one table row's e (rows 1: the mean of batches 1-24, 0.677-0.767)."""
    p = _pricer("h100-sxm", "qwen3-30b-a3b", 1)
    by_rows: dict[int, list[float]] = {}
    for n, t in QWEN3_30B_FP8_TP1_H100_MAIN_US.items():
        rows, e = _derived_e(p, n, t)
        by_rows.setdefault(rows, []).append(e)
    curve = load_hardware("h100-sxm").efficiency.grouped_gemm_fp8
    assert curve.tokens == [1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256]
    assert len(by_rows[1]) == 6
    for rows, e in zip(curve.tokens, curve.efficiency):
        assert e == pytest.approx(sum(by_rows[rows]) / len(by_rows[rows]), abs=0.0005)


def test_pricer_reproduces_the_h100_table():
    """All 18 batches within −5.1 … +4.0 % (batch 4, rows 1 at e 0.676, is the worst)."""
    p = _pricer("h100-sxm", "qwen3-30b-a3b", 1)
    errs = {n: _layer_us(p, n) / t - 1 for n, t in QWEN3_30B_FP8_TP1_H100_MAIN_US.items()}
    assert all(-0.052 < e < 0.041 for e in errs.values()), errs
    assert errs[4] == pytest.approx(-0.051, abs=0.001)
    assert abs(errs[4096]) < 0.002


def test_second_h200_table_against_the_h200_fit():
    """H200 has its own curve, fitted to aiconfigurator's SGLang table
    (tests/profiles/test_moe_aiconfigurator.py). Against this second H200 measurement of
    the same Triton kernel, nothing fitted to it (SGLang's default config, where the
    aiconfigurator table ran the tuned one: 31.7 against 37.6 µs at batch 1): -30 / -19 /
    -14 / -4 / +2 / -4 / -19 % at batches 1-32 with the fixed time of SGLang 0.5.14's table,
    14.6 µs (median |error| 14 %; with 0.5.10's 29.6 µs: +18 / +22 / +16 / +19 / +19 / +9 /
    -7 %, 18 %; the H100-derived curve before: +10 / +10 / -1 / -3 / -7 / -16 / -17 %)."""
    assert load_hardware("h200-sxm").efficiency.grouped_gemm_fp8 != \
        load_hardware("h100-sxm").efficiency.grouped_gemm_fp8
    p = _pricer("h200-sxm", "qwen3-235b-a22b", 8)
    errs = [_layer_us(p, n) / t - 1 for n, t in QWEN3_235B_FP8_TP8_H200_US.items()]
    assert errs == pytest.approx([-0.30, -0.19, -0.14, -0.04, 0.02, -0.04, -0.19], abs=0.01)


def test_experts_read_by_hand_deepseek_v3():
    """256 experts, top-8, uniform routing: E·(1 − (1 − 8/256)^n); by hand (31/32)^8 =
    0.77570 → 57.42 experts at batch 8, (31/32)^64 = 0.13108 → 222.44 at 64; 1,024 tokens
    read all 256."""
    assert expected_experts_hit(8, 256, 8) == pytest.approx(57.42, abs=0.01)
    assert expected_experts_hit(64, 256, 8) == pytest.approx(222.44, abs=0.01)
    assert expected_experts_hit(1024, 256, 8) == pytest.approx(256.0, abs=1e-6)
    p = StepPricer(load_model("deepseek-v3"), load_hardware("h200-sxm"), 8,
                   quantization="fp8_block")
    assert p.experts_hit(8) == pytest.approx(57.42, abs=0.01)


def test_deepseek_v3_decode_streams_at_the_curve():
    """DeepSeek-V3 fp8_block TP 8 on H200, batch 8: 64 pairs over 57.4 experts = 1 row each,
    so the weights stream at the H200 curve's e(1) = 0.513 of 4.8 TB/s, plus the curve's own
    fixed time, 14.6 µs per MoE layer (SGLang 0.5.14's table; fused_moe's 29.6 µs before)."""
    hw = load_hardware("h200-sxm")
    p = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block")
    x = p.terms.experts
    assert x.curve is hw.efficiency.grouped_gemm_fp8
    _, b, _, m = x.terms(8)
    assert m == pytest.approx(b / (hw.hbm_bandwidth_bytes_per_s * 0.513), rel=1e-9)
    assert p.terms.expert_launch_s == pytest.approx(58 * 14.6e-6)


def test_only_fp8_experts_take_the_curve():
    """bf16 experts keep the dense curve capped at fused_moe.memory; a profile without the
    entry (b200) keeps its fp8 experts on gemm_fp8."""
    bf16 = StepPricer(load_model("mixtral-8x7b"), load_hardware("h100-sxm"), 2)
    assert bf16.terms.experts.curve == load_hardware("h100-sxm").efficiency.gemm
    assert bf16.terms.experts.inv(1) == pytest.approx(1 / 0.919)
    b200 = load_hardware("b200")
    assert b200.efficiency.grouped_gemm_fp8 is None
    p = StepPricer(load_model("qwen3-30b-a3b"), b200, 1, weight_dtype="fp8")
    assert p.terms.experts.curve == b200.efficiency.gemm_fp8
