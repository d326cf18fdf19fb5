"""H200 and B200 GEMM curves measured on the GPU (``gemm``, ``gemm_fp8``; H200 also
``gemm_fp8_block``), recomputed from the kernel times they were fitted to.

Source: NVIDIA's aiconfigurator GEMM tables, https://github.com/ai-dynamo/aiconfigurator
at 095f58a5, aic-core/src/aiconfigurator_core/systems/data/{h200_sxm,b200_sxm}/gemm/sglang/
0.5.10/gemm_perf.parquet: SGLang 0.5.10's GEMM ops (bf16 torch linear; fp8 per-token quant +
fp8_scaled_mm; fp8_block per-token-group quant + DeepGEMM; the H200's fp8_block from the
0.5.14 table of the same commit, gemm/sglang/0.5.14/gemm_perf.parquet) timed on each GPU by
collector/sglang/collect_gemm.py, latency in ms. The figures below are, for each M, the sum
of the measured latencies (µs) over the 196 shapes N x K with N, K in SHAPE_SIDES (the
table's LLM range), summed from the parquet file. The roofline is written out here,
independently of capsim's pricer.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.profiles.hardware import load_hardware

SHAPE_SIDES = [1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240,
               12288, 16384]
KNOTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]

#: (profile, curve) -> µs summed over the 196 shapes, per knot M (in KNOTS order).
SUM_US = {
    ("h200-sxm", "gemm"): [4384.0, 4443.2, 4376.8, 4402.7, 4343.6, 4394.1, 4520.5, 4649.6,
                           6165.5, 10520.5, 19933.4, 39218.3, 80336.7, 165467.5, 339537.9],
    ("h200-sxm", "gemm_fp8"): [3441.5, 3526.0, 3543.3, 3562.6, 3586.0, 3555.6, 3517.1,
                               3844.8, 5621.5, 7523.8, 12465.9, 23017.0, 46520.8, 99356.4,
                               201099.1],
    # SGLang 0.5.14's table (gemm/sglang/0.5.14/gemm_perf.parquet, same commit; 0.5.10's
    # sums, which the fit before used: 4318.1, 4193.3, 4143.2, 3922.2, 3795.3, ...).
    ("h200-sxm", "gemm_fp8_block"): [3397.5, 3380.3, 3375.6, 3157.2, 3166.4, 3170.5, 3094.8,
                                     3454.4, 6877.3, 9425.6, 15475.1, 26935.0, 49690.2,
                                     98895.5, 201782.1],
    ("b200", "gemm"): [3071.5, 3050.8, 3041.3, 2974.0, 3000.2, 3037.0, 2978.5, 3147.0, 3822.7,
                       5855.6, 10730.5, 19629.4, 38344.8, 76676.5, 154152.5],
    ("b200", "gemm_fp8"): [2670.7, 2691.1, 2738.0, 2697.1, 2717.6, 2788.0, 2788.7, 2865.6,
                           3398.5, 4892.6, 7779.0, 13927.1, 27149.4, 55588.1, 116241.7],
}


def _roof_s(hw, curve: str, m: int) -> float:
    """Σ over the 196 shapes of max(2 M N K / peak, bytes / HBM): 16-bit weights (bf16), fp8
    weights with fp32 per-channel scales (fp8) or per 128 x 128 block (fp8_block); 16-bit
    activations in and out."""
    peak = hw.peak_flops("bf16" if curve == "gemm" else "fp8")
    total = 0.0
    for n in SHAPE_SIDES:
        for k in SHAPE_SIDES:
            if curve == "gemm":
                weights = 2 * n * k
            elif curve == "gemm_fp8":
                weights = n * k + 4 * n
            else:
                weights = n * k + -(-n // 128) * -(-k // 128) * 4
            nbytes = weights + 2 * m * k + 2 * m * n
            total += max(2 * m * n * k / peak, nbytes / hw.hbm_bandwidth_bytes_per_s)
    return total


@pytest.mark.parametrize("name, curve", sorted(SUM_US))
def test_each_knot_is_the_measured_shapes_rooflines_over_their_time(name, curve):
    """e(M) = Σ roofline / Σ (latency - launch_s) over the 196 shapes, within 0.5 %: the
    curve prices the table's shapes at each knot to their measured total."""
    hw = load_hardware(name)
    c = getattr(hw.efficiency, curve)
    assert c.tokens == KNOTS
    shapes = len(SHAPE_SIDES) ** 2
    for m, e, sum_us in zip(KNOTS, c.efficiency, SUM_US[(name, curve)]):
        expected = _roof_s(hw, curve, m) / (sum_us * 1e-6 - shapes * c.launch_s)
        assert e == pytest.approx(min(expected, 1.0), rel=0.005), (name, curve, m)
    assert curve not in hw.derivation.classes
    assert "aiconfigurator" in hw.sources[f"efficiency.{curve}"]


def test_measured_small_gemms_stream_below_the_derived_curves_fraction():
    """The H100-derived curves these replace put 1-row GEMMs at 0.97 of HBM; measured on the
    H200 and B200: 0.79-0.83 (bf16), 0.66-0.70 (fp8, the activation quant included)."""
    for name in ("h200-sxm", "b200"):
        eff = load_hardware(name).efficiency
        assert 0.78 < eff.gemm.efficiency[0] < 0.84
        assert 0.64 < eff.gemm_fp8.efficiency[0] < 0.71
        assert np.all(np.array(eff.gemm_fp8.efficiency) < np.array(eff.gemm.efficiency))
