"""trtllm-bench's batch-limit estimate (capsim/profiles/bench_tuning.py), checked by hand
against tensorrt_llm/bench/build/tuning.py's arithmetic (calc_engine_setting,
finetune_setting) for the shipped preset's constants."""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.profiles.bench_tuning import DatasetTuning, bench_batch_limits
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.files import packaged_file
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

TUNING = load_engine_preset("trtllm-bench").dataset_tuning
H100 = load_hardware("h100-sxm").memory_total_bytes            # 79.19 GiB


def limits(isl, osl, model="llama-3.1-8b", fmt="fp8_channel", kv=1, tp=1, pp=1, frac=0.95,
           memory=H100):
    return bench_batch_limits(TUNING, load_model(model), fmt, kv, memory, tp, pp, frac, isl,
                              osl)


# Llama-3.1-8B, fp8 weights (8,030,261,248 parameters = 7.479 GiB) and fp8 KV (2 x 32 layers x
# 8 heads x 128 = 65,536 B/token) on one H100 (79.19 GiB): 0.95 x (79.19 - 7.479) = 68.13 GiB.
@pytest.mark.parametrize("isl, osl, expected", [
    # 68.13 GiB / (22,000 x 65,536 B) = 50.7 requests -> 64 (the floor); 50.7 x 11 = 558 -> 2048
    (20000, 2000, (64, 2048)),
    # 4,360 requests, capped at 4,096 (a multiple of 256); 4,096 x 2 = 8,192 (a multiple of 1,024)
    (128, 128, (4096, 8192)),
    # 558 requests -> 640 (multiples of 128 below 1,024); 1,116 tokens -> 2048
    (1000, 1000, (640, 2048)),
    # 513 requests -> 640; 513 x 17 = 8,720 tokens -> 9,216 (multiples of 1,024 from 8,192)
    (2048, 128, (640, 9216)),
    # 203 requests -> 224 (multiples of 32 below 256); 2,232 tokens -> 2,304 (of 256 below 4,096)
    (5000, 500, (224, 2304)),
])
def test_llama31_8b_fp8_on_one_h100(isl, osl, expected):
    assert limits(isl, osl) == expected


def test_llama33_70b_fp8_tp2_sees_both_gpus_and_the_tp_floor_of_kv_heads():
    """70.55e9 parameters at 1 B = 65.71 GiB on 2 x 79.19 GiB: 0.95 x 92.67 = 88.04 GiB; 2 x 80
    layers x max(2, 8) heads x 128 = 163,840 B/token: 26.2 requests of 22,000 tokens -> 64;
    at 128/128, 2,254 requests -> 2,304 and 4,508 tokens -> 4,608 (multiples of 512)."""
    assert limits(20000, 2000, model="llama-3.1-70b", tp=2) == (64, 2048)
    assert limits(128, 128, model="llama-3.1-70b", tp=2) == (2304, 4608)


def test_pipeline_stages_divide_the_batch_and_16_bit_weights_count_twice():
    # bf16 weights (14.96 GiB) and KV (131,072 B/token): 0.95 x 64.23 = 61.02 GiB -> 249.9
    # requests of 2,000 tokens -> 256 (a multiple of 32 below 256); PP 2 (two GPUs' memory):
    # 9,175 requests, capped at 4,096, / 2 stages = 2,048 at 128/128, and 4,096 tokens.
    assert limits(1000, 1000, fmt=None, kv=2) == (256, 2048)
    assert limits(128, 128, pp=2) == (2048, 4096)


def test_a_weight_format_the_rule_does_not_tune_gets_buildconfig_defaults():
    """AWQ / GPTQ / INT8 / MXFP4 are not in TUNED_QUANTS: BuildConfig's 2048 / 8192."""
    assert limits(20000, 2000, fmt="awq") == (2048, 8192)


def test_trtllm_bench_refuses_a_gpu_that_holds_no_request():
    with pytest.raises(ValueError, match="not one request of 20000 \\+ 2000 tokens"):
        limits(20000, 2000, model="llama-3.1-70b", tp=1, memory=66 * 2**30)
    with pytest.raises(ValueError, match="weights"):
        limits(128, 128, model="llama-3.1-70b", fmt=None, tp=1)


def test_an_unknown_format_or_an_open_ended_step_missing_is_refused():
    doc = TUNING.model_dump()
    with pytest.raises(ValueError, match="unknown weight format"):
        DatasetTuning.model_validate({**doc, "weight_bytes_per_param": {"fp9": 1.0}})
    steps = [{"below": 256, "multiple": 32}]
    with pytest.raises(ValueError, match="last entry of batch_steps"):
        DatasetTuning.model_validate({**doc, "batch_steps": steps})


def test_a_users_preset_file_with_a_bad_tuning_value_is_one_line(tmp_path):
    with packaged_file("engines", "trtllm-bench", "engine preset") as shipped:
        body = shipped.read_text().replace("min_batch_size: 64", "min_batch_size: -1")
    user = tmp_path / "p.yaml"
    user.write_text(body)
    with pytest.raises(ScenarioError) as err:
        load_engine_preset(user)
    assert err.value.path == "dataset_tuning.min_batch_size" and "\n" not in str(err.value)
