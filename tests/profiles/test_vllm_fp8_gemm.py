"""vLLM's own fp8 linear on the H100 and H200 (``efficiency.gemm_fp8_engine.vllm``), recomputed
from the kernel times it was fitted to.

Source: NVIDIA's aiconfigurator GEMM tables, https://github.com/ai-dynamo/aiconfigurator at
095f58a5, aic-core/src/aiconfigurator_core/systems/data/{h100_sxm,h200_sxm}/gemm/vllm/0.19.0/
gemm_perf.parquet, gemm_dtype fp8: collector/vllm/collect_gemm.py times one forward of a vLLM
0.19.0 RowParallelLinear with Fp8Config(activation_scheme dynamic) on a bf16 input, i.e. the
dynamic activation quantization kernel and CUTLASS scaled_mm together; latency in ms. The
figures below are, for each M, the sum of the measured latencies (µs) over the 196 shapes
N x K with N, K in SHAPE_SIDES, summed from the parquet files. The roofline is written out
here, independently of capsim's pricer.
"""

from __future__ import annotations

import pytest

from capsim.profiles.hardware import load_hardware

SHAPE_SIDES = [1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240,
               12288, 16384]
KNOTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]

#: profile -> µs summed over the 196 shapes, per knot M (in KNOTS order).
SUM_US = {
    "h100-sxm": [3396.2, 3469.1, 3474.7, 3503.6, 3502.7, 3799.2, 3710.6, 4266.2, 5457.5,
                 7348.5, 13092.8, 24980.0, 49759.3, 86756.2, 187621.6],
    "h200-sxm": [2730.1, 2792.3, 2781.5, 2794.6, 2795.2, 3387.9, 3042.6, 3658.9, 5101.4,
                 7010.0, 11897.7, 22044.1, 43713.9, 83315.4, 172108.9],
}


def _roof_s(hw, m: int) -> float:
    """Σ over the 196 shapes of max(2 M N K / fp8 peak, bytes / HBM): fp8 weights with fp32
    per-channel scales, 16-bit activations in and out."""
    peak, total = hw.peak_flops("fp8"), 0.0
    for n in SHAPE_SIDES:
        for k in SHAPE_SIDES:
            nbytes = n * k + 4 * n + 2 * m * k + 2 * m * n
            total += max(2 * m * n * k / peak, nbytes / hw.hbm_bandwidth_bytes_per_s)
    return total


@pytest.mark.parametrize("name", sorted(SUM_US))
def test_each_knot_is_the_measured_shapes_rooflines_over_their_time(name):
    """e(M) = Σ roofline / Σ (latency - launch_s) over the 196 shapes, within 0.5 %."""
    hw = load_hardware(name)
    c = hw.efficiency.gemm_fp8_engine["vllm"]
    assert c.tokens == KNOTS
    for m, e, sum_us in zip(KNOTS, c.efficiency, SUM_US[name]):
        expected = _roof_s(hw, m) / (sum_us * 1e-6 - len(SHAPE_SIDES) ** 2 * c.launch_s)
        assert e == pytest.approx(min(expected, 1.0), rel=0.005), (name, m)
    assert "aiconfigurator" in hw.sources["efficiency.gemm_fp8_engine"]
    assert "gemm/vllm/0.19.0" in hw.fitted_to["efficiency.gemm_fp8_engine"][0]["external"]


def test_only_vllm_takes_its_curve_the_other_engines_keep_gemm_fp8():
    eff = load_hardware("h100-sxm").efficiency
    own = eff.gemm_fp8_engine["vllm"]
    assert eff.matmul_curve("fp8", engine="vllm") is own
    for engine in ("tensorrt-llm", "sglang", None):
        assert eff.matmul_curve("fp8", engine=engine) is eff.gemm_fp8
    # block-scaled fp8 (DeepGEMM) and 16-bit weights are not vLLM's per-channel linear
    assert eff.matmul_curve("fp8", block_scaled=True, engine="vllm") is eff.gemm_fp8_block
    assert eff.matmul_curve("bf16", engine="vllm") is eff.gemm


def test_the_h100_vllm_linear_is_slower_than_the_derived_curve_at_prefill_sizes():
    """At M 2,048 / 4,096 the table's vLLM linear reaches e 0.606 / 0.594 of the fp8 roof
    (1,199 / 1,175 TFLOP/s); the speedup-derived gemm_fp8 (which TensorRT-LLM keeps) 0.667 /
    0.697."""
    eff = load_hardware("h100-sxm").efficiency
    own, derived = eff.gemm_fp8_engine["vllm"], eff.gemm_fp8
    for m, e_own, e_derived in ((2048, 0.606, 0.667), (4096, 0.594, 0.697)):
        assert own.efficiency[own.tokens.index(m)] == e_own
        assert derived.efficiency[derived.tokens.index(m)] == e_derived


def test_a_vllm_pricer_prices_an_fp8_prefill_slower_than_tensorrt_llm():
    """Same model, GPU and step: only the engine differs, so only the fp8 curve does."""
    hw = load_hardware("h100-sxm")
    vllm = hw.operator_rates("fp8", "fp8", "bf16", 2, "vllm")
    trt = hw.operator_rates("fp8", "fp8", "bf16", 2, "tensorrt-llm")
    assert vllm.matmul_curve is hw.efficiency.gemm_fp8_engine["vllm"]
    assert trt.matmul_curve is hw.efficiency.gemm_fp8
    assert vllm.lm_head_curve is trt.lm_head_curve is hw.efficiency.gemm


def test_an_unknown_engine_key_is_one_line_naming_the_file_and_the_key(tmp_path):
    from capsim.common.errors import ScenarioError
    from conftest import REPO

    text = (REPO / "capsim" / "profiles" / "data" / "hardware" / "h100-sxm.yaml").read_text()
    bad = tmp_path / "h100-bad.yaml"
    bad.write_text(text.replace("\n    vllm:                         # aiconfigurator vLLM",
                                "\n    vlm:                          # aiconfigurator vLLM"))
    with pytest.raises(ScenarioError) as err:
        load_hardware(str(bad))
    message = str(err.value)
    assert "\n" not in message and str(bad) in message
    assert "efficiency.gemm_fp8_engine.vlm" in message and "'vllm'" in message
