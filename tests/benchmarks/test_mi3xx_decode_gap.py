"""benchmarks/calibration/mi3xx_decode_gap.py: issue 30's decomposition of the MI300X /
MI325X decode steps (measured ITL against capsim's decode-only step). The measured figures
are the SGLang cookbook's (DeepSeek-V3.1 on 8 x MI300X, SGLang 0.5.7, sgl-cookbook 0e5d0fee;
Llama-4-Scout, SGLang 0.5.9, 855445bd) and InferenceX's (MI325X, SGLang 0.5.19), as
benchmarks/fidelity/supplementary_cases.yaml holds them; capsim's at this commit."""
from __future__ import annotations

import pytest
from support.scripts import load_script


@pytest.fixture(scope="module")
def rows():
    module = load_script("benchmarks/calibration/mi3xx_decode_gap.py")
    return {(case.split("_")[1], label): r for case, label, *r in module.rows()}


def test_deepseek_on_mi300x_at_one_user(rows):
    """23.92 ms measured (median ITL, 1k/1k c1); capsim 8.39 ms before the untuned Triton
    GEMM floor, 16.99 after: 6.9 ms a step still missing."""
    batch, measured, before, after = rows[("sglang057", "in1000_out1000_c1")]
    assert (batch, measured) == (1, 23.92)
    assert (round(before, 2), round(after, 2)) == (8.39, 16.99)


def test_llama4_scout_misses_2_ms_at_one_user_not_12(rows):
    """Llama-4-Scout (bf16: not the block-fp8 kernel) at c1: ITL 7.49 ms against 5.26; its
    +221 % throughput row is the run's one 48 s first request (P99 TTFT 48,091 ms, mean
    4,247 against a median of 68.6), not a step; at 16 users the step is within 0.4 ms."""
    _, measured, before, after = rows[("sglang059", "in1000_out1000_c1")]
    assert (measured, round(before, 2), round(after, 2)) == (7.49, 5.26, 5.26)
    _, measured, _, after = rows[("sglang059", "in1000_out1000_c16")]
    assert measured - after == pytest.approx(0.32, abs=0.01)


def test_the_mi325x_release_has_the_configs_and_still_misses_a_deepseek_remainder(rows):
    """SGLang 0.5.19 (sglang-0.5.10 preset: no untuned rule) at 4 users: 18.53 ms against
    8.72; about the 7-8 ms the 0.5.7 MI300X rows still miss after the rule."""
    _, measured, before, after = rows[("sglang0519", "c4")]
    assert before == after and measured - after == pytest.approx(9.81, abs=0.01)
