"""The H200's fused-MoE curve of one SGLang build (``efficiency.grouped_gemm_fp8_engine``
``sglang-0.5.14``), recomputed from the tables it comes from, and the presets that take it.

Tables: NVIDIA's aiconfigurator (ai-dynamo/aiconfigurator at 095f58a5),
``aic-core/src/aiconfigurator_core/systems/data/h200_sxm/moe/sglang/{0.5.10,0.5.14}/
moe_perf.parquet`` (SGLang's Triton ``fused_moe`` timed on an H200 in a CUDA graph,
fp8_block, balanced, moe_ep_size 1); aiconfigurator reads the 0.5.14 table for SGLang 0.5.12
(``moe/sglang/0.5.12/reuse.yaml``). The rows: 0.5.10's DeepSeek-V3 rows (the ones
``grouped_gemm_fp8`` was fitted to, tests/profiles/test_moe_aiconfigurator.py) times ``RATIO``,
the median of 0.5.14 / 0.5.10 at the same token count over Qwen3-235B-A22B at moe_tp_size 4 and
Qwen3-30B-A3B at 1 and 2 (the shapes that route alike in both tables);
benchmarks/calibration/sglang0512_h200_fused_moe.py computes it from the parquet files.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import Efficiency, load_hardware
from capsim.profiles.models import load_model
from capsim.scenario.load import load as load_scenario
from tests.profiles.test_moe_aiconfigurator import DSV3_TP4_US, DSV3_TP8_US

BUILD = "sglang-0.5.14"
#: num_tokens -> median over the three plain shapes of (0.5.14 µs / 0.5.10 µs), e.g. at 64
#: tokens 0.940 (Qwen3-235B TP 4: 200.2 -> 188.2 µs), 0.908, 0.904 (Qwen3-30B TP 1 / 2).
RATIO = {1: 0.652, 2: 0.727, 4: 0.797, 8: 0.851, 16: 0.887, 32: 0.906, 48: 0.937, 64: 0.908,
         80: 0.932, 96: 0.934, 128: 0.932, 160: 0.929, 192: 0.923, 256: 0.915, 320: 0.907,
         384: 0.913, 512: 0.903, 768: 0.861, 1024: 0.877, 1536: 0.886, 2048: 0.876,
         3072: 0.867, 4096: 0.825, 6144: 0.875, 8192: 0.882, 12288: 0.881, 16384: 0.848}
CASE = (Path(__file__).parents[2] / "benchmarks" / "fidelity" / "supplementary"
        / "load_sglang0512_8xh200_dsr1_fp8_tp8_random1k1k_8k1k_concurrency_sweep.yaml")


def _pricer(hw: str = "h200-sxm", build: str | None = BUILD, tp: int = 8) -> StepPricer:
    return StepPricer(load_model("deepseek-v3"), load_hardware(hw), tp,
                      quantization="fp8_block", moe_build=build)


def _layer_us(p: StepPricer, n: int) -> float:
    """capsim's µs for one MoE layer's fused-MoE call at ``n`` tokens."""
    x = p.terms.experts
    _, _, c, m = x.terms(n)
    return (max(c, m) + p.terms.expert_launch_s) / x.work.layers * 1e6


def test_build_curve_is_the_scaled_table():
    """Each knot: Σ roofline / Σ (0.5.10 row × RATIO − 14.6 µs) over the 54 DeepSeek-V3 rows
    (TP 8 and 4) whose rows per expert lie nearest it in log scale."""
    hw = load_hardware("h200-sxm")
    curve = hw.efficiency.grouped_gemm_fp8_engine[BUILD]
    assert curve.launch_s == pytest.approx(14.6e-6)
    assert curve.tokens == hw.efficiency.grouped_gemm_fp8.tokens
    sums = {k: [0.0, 0.0] for k in curve.tokens}
    for tp, table in ((8, DSV3_TP8_US), (4, DSV3_TP4_US)):
        x = _pricer(tp=tp).terms.experts
        for n, t_us in table.items():
            f, b, _, _ = x.terms(n)
            roof = max(f / hw.peak_flops_per_s["fp8"], b / hw.hbm_bandwidth_bytes_per_s)
            rows = max(int(n * x.work.top_k / x.hit(n)), 1)
            knot = curve.tokens[int(np.argmin([abs(math.log(k / rows)) for k in curve.tokens]))]
            sums[knot][0] += roof / x.work.layers
            sums[knot][1] += t_us * RATIO[n] * 1e-6 - curve.launch_s
    for knot, e in zip(curve.tokens, curve.efficiency):
        assert e == pytest.approx(sums[knot][0] / sums[knot][1], abs=0.0006), knot


@pytest.mark.parametrize("n, generic_us, build_us", [(4, 83.3, 78.3), (64, 413.4, 390.2),
                                                     (1024, 533.0, 473.1)])
def test_deepseek_v3_tp8_layer_under_the_build(n, generic_us, build_us):
    """One MoE layer of DeepSeek-V3 TP 8 on the H200: 4 tokens 83.3 -> 78.3 µs, 64 tokens
    (a c64 decode step) 413.4 -> 390.2 µs (−5.6 %), 1,024 tokens 533.0 -> 473.1 µs."""
    assert _layer_us(_pricer(build=None), n) == pytest.approx(generic_us, abs=0.1)
    assert _layer_us(_pricer(), n) == pytest.approx(build_us, abs=0.1)


def test_a_gpu_without_the_build_keeps_its_curve():
    """b200 has no entry for the build (SGLang runs flashinfer_trtllm there for DeepSeek-V3
    fp8): the same time with or without it."""
    assert "grouped_gemm_fp8_engine" not in load_hardware("b200").efficiency.model_fields_set
    assert _layer_us(_pricer("b200"), 64) == pytest.approx(_layer_us(_pricer("b200", None), 64))


def test_presets_name_their_build():
    """sglang-0.5.10 (0.5.12) reads the 0.5.14 build's curve; sglang-0.5 (0.5.7) none."""
    assert load_engine_preset("sglang-0.5.10").grouped_gemm_fp8_engine == BUILD
    assert load_engine_preset("sglang-0.5").grouped_gemm_fp8_engine is None


def test_the_measured_case_prices_with_the_build():
    """The 0.5.12 H200 case (preset sglang-0.5.10) hands the build to its pricer."""
    run = load_scenario(CASE).runs[0]
    assert run.pools[0].pricer(load_model("deepseek-v3")).moe_build == BUILD


def test_a_key_that_is_no_engine_build_is_refused():
    curve = {"tokens": [1, 2], "efficiency": [0.5, 0.6]}
    with pytest.raises(ValueError, match="not an engine build .*e.g. sglang-0.5.14"):
        Efficiency(compute=0.5, memory=0.5, grouped_gemm_fp8_engine={"sglang0.5.14": curve})


def test_a_hardware_file_with_a_bad_key_is_one_line(tmp_path):
    """Bad input: the file, the field's YAML path and what is valid, no traceback."""
    src = (Path(__file__).parents[2] / "capsim" / "profiles" / "data" / "hardware"
           / "h200-sxm.yaml").read_text()
    bad = tmp_path / "h200-bad.yaml"
    bad.write_text(src.replace("    sglang-0.5.14:                #", "    sglang:    #", 1))
    with pytest.raises(ScenarioError) as exc:
        load_hardware(str(bad))
    text = str(exc.value)
    assert "h200-bad.yaml" in text and "grouped_gemm_fp8_engine" in text
    assert "<family>-<version>" in text and "\n" not in text


def test_a_preset_naming_no_engine_build_is_one_line(tmp_path):
    """A preset's grouped_gemm_fp8_engine must read <family>-<version>: a typo is refused
    naming the file and the field, not silently priced with the generic curve."""
    src = (Path(__file__).parents[2] / "capsim" / "profiles" / "data" / "engines"
           / "sglang-0.5.10.yaml").read_text()
    bad = tmp_path / "sglang-bad.yaml"
    bad.write_text(src.replace("grouped_gemm_fp8_engine: sglang-0.5.14",
                               "grouped_gemm_fp8_engine: sglang0514", 1))
    with pytest.raises(ScenarioError) as exc:
        load_engine_preset(str(bad))
    text = str(exc.value)
    assert "sglang-bad.yaml" in text and "grouped_gemm_fp8_engine" in text
    assert "\n" not in text


def test_roofline_prices_the_presets_build():
    """capsim roofline's step (describe_step) at 64 decode sequences of 1,400 keys: the
    experts row 24.114 ms with the generic curve (sglang-0.5), 22.761 ms with the 0.5.14
    build's (sglang-0.5.10)."""
    from capsim.cost.describe import describe_step

    def experts_ms(build):
        d = describe_step("deepseek-v3", "h200-sxm", 8, decode_batch=64, context=1400,
                          quantization="fp8_block", moe_build=build,
                          shared_experts_fusion=load_engine_preset(
                              "sglang-0.5.10").shared_experts_fusion)
        return next(r for r in d["operators"] if r["name"] == "experts")["seconds"] * 1e3

    assert experts_ms(None) == pytest.approx(24.114, abs=0.002)
    assert experts_ms(BUILD) == pytest.approx(22.761, abs=0.002)
