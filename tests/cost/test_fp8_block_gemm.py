"""Block-scaled fp8 layer matmuls (``efficiency.gemm_fp8_block``) against the DeepGEMM
README's tables (deepseek-ai/DeepGEMM at 327ec92f, "Performance": H800 SXM5, NVCC 12.8,
DeepSeek-V3/R1 shapes without TP). H800 = H100 SXM5 in SMs, clocks and HBM3."""

from __future__ import annotations

import math

import pytest

from capsim.cost.operator_terms import OperatorTerms
from capsim.cost.operators import ACTIVATION_BYTES, Matmul, curve_efficiency
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

#: (groups, M per group, N, K, TFLOPS): "Normal GEMMs for dense models" (groups 1),
#: "Grouped GEMMs ... (masked layout)" and "(contiguous layout)".
DEEPGEMM_H800 = [
    (1, 64, 2112, 7168, 206), (1, 64, 24576, 1536, 289), (1, 64, 32768, 512, 219),
    (1, 64, 7168, 16384, 336), (1, 64, 4096, 7168, 287), (1, 64, 7168, 2048, 295),
    (1, 128, 2112, 7168, 352), (1, 128, 24576, 1536, 535), (1, 128, 32768, 512, 358),
    (1, 128, 7168, 16384, 645), (1, 128, 4096, 7168, 533), (1, 128, 7168, 2048, 510),
    (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815),
    (2, 512, 4096, 7168, 1040), (2, 512, 7168, 2048, 916),
    (1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925),
    (1, 4096, 2112, 7168, 1127), (1, 4096, 24576, 1536, 1212), (1, 4096, 32768, 512, 775),
    (1, 4096, 7168, 16384, 1520), (1, 4096, 4096, 7168, 1410), (1, 4096, 7168, 2048, 1168),
    (4, 8192, 4096, 7168, 1346), (4, 8192, 7168, 2048, 1214)]


def _priced_s(hw, groups: int, m: int, n: int, k: int) -> float:
    """The pricer's matmul row (launch excluded) for ``groups`` block-fp8 GEMMs of m x n x k."""
    block = math.ceil(n / 128) * math.ceil(k / 128) * 4          # fp32 scale per 128 x 128
    op = Matmul("gemm", groups, 2.0 * groups * n * k, groups * (n * k + block),
                groups * (n + k) * ACTIVATION_BYTES)
    curve = hw.efficiency.gemm_fp8_block
    g = 1.0 / float(curve_efficiency(curve, m))
    _, _, c, mem = OperatorTerms._matmul_row(op, m, g, 0.0, hw.peak_flops_per_s["fp8"],
                                             hw.hbm_bandwidth_bytes_per_s)
    return max(c, mem)


def _measured_s(groups: int, m: int, n: int, k: int, tflops: float) -> float:
    return 2.0 * groups * m * n * k / (tflops * 1e12)


def test_each_m_of_the_table_sums_to_its_measured_time():
    """Per M (the rows a step would run together), Σ priced = Σ measured within 0.5 %
    (each knot is that ratio; contiguous 4096 rows are a check: -2 %)."""
    hw = load_hardware("h100-sxm")
    by_m: dict[int, list[float]] = {}
    for g, m, n, k, t in DEEPGEMM_H800:
        if (g, m) == (8, 4096):
            continue
        s = by_m.setdefault(m, [0.0, 0.0])
        s[0] += _priced_s(hw, g, m, n, k)
        s[1] += _measured_s(g, m, n, k, t)
    assert sorted(by_m) == hw.efficiency.gemm_fp8_block.tokens
    for m, (priced, measured) in by_m.items():
        assert priced / measured == pytest.approx(1.0, abs=0.005), m


def test_every_row_within_the_shape_spread():
    """One curve over M cannot follow every shape: rows priced within -33 ... +14 % of
    their time (the narrow N = 2112 rows at M 64 / 128 run 29-33 % slower than priced;
    7168 x 16384 up to 14 % faster)."""
    hw = load_hardware("h100-sxm")
    errs = [_priced_s(hw, g, m, n, k) / _measured_s(g, m, n, k, t) - 1
            for g, m, n, k, t in DEEPGEMM_H800]
    assert min(errs) > -0.34 and max(errs) < 0.15
    assert min(errs) == pytest.approx(-0.332, abs=0.002)


def test_only_block_scaled_fp8_takes_the_curve():
    """fp8_block's layer matmuls (the shared expert among them) take gemm_fp8_block;
    per-tensor fp8 keeps gemm_fp8, bf16 gemm; the routed experts and LM head are not moved."""
    hw = load_hardware("h100-sxm")
    eff = hw.efficiency
    ds = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block")
    assert ds.rates.matmul_curve == eff.gemm_fp8_block
    assert ds.rates.lm_head_curve == eff.gemm
    assert ds.terms.experts.curve == eff.grouped_gemm_fp8
    assert "shared_expert" in [op.name for op in ds.terms.matmuls]
    assert StepPricer(load_model("llama-3.1-8b"), hw, 1, quantization="fp8").rates.matmul_curve \
        == eff.gemm_fp8
    assert StepPricer(load_model("llama-3.1-8b"), hw, 1).rates.matmul_curve == eff.gemm


def test_deepseek_v3_decode_shared_expert_streams_at_the_m64_fraction():
    """DeepSeek-V3 fp8_block TP 8 on H100, 8 decode tokens: below DeepGEMM's 64-row block
    the shared expert's weights stream at e(64) = 0.732 of 3.35 TB/s."""
    hw = load_hardware("h100-sxm")
    p = StepPricer(load_model("deepseek-v3"), hw, 8, quantization="fp8_block")
    row = {op.name: op for op in p.breakdown(decode_seqs=8, decode_ctx_tokens=8 * 1024)}
    shared = row["shared_expert"]
    launch = 58 * hw.efficiency.gemm_fp8_block.launch_s
    assert shared.memory_s - launch == pytest.approx(
        shared.bytes / (hw.hbm_bandwidth_bytes_per_s * 0.732), rel=1e-6)
