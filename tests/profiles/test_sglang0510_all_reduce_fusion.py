"""sglang-0.5.10's FlashInfer all-reduce + RMSNorm fusion (``all_reduce_fusion``).

Source: python/sglang/srt/server_args.py of the sglang 0.5.12 wheel (PyPI),
_handle_model_specific_adjustments: on for DeepseekV3ForCausalLM (and gpt-oss, Qwen3-MoE, ...)
at TP > 1 on sm90 / sm100, no DP attention, one node; layers/communicator.py
FUSE_ALLREDUCE_MAX_BATCH_SIZE 2048. Priced on b200 only (the preset's sources say why not on
the H200 yet), at b200's trtllm_auto table.
"""
from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model


def _comm_ms(hw: str, fused: bool, **step) -> float:
    p = load_engine_preset("sglang-0.5.10")
    s = StepPricer(load_model("deepseek-v3"), load_hardware(hw), 8, quantization="fp8_block",
                   all_reduce=p.tp_all_reduce,
                   all_reduce_fusion=p.all_reduce_fusion if fused else None)
    return s.cost(**step).comm_s * 1e3


def test_the_rule_is_the_wheels():
    f = load_engine_preset("sglang-0.5.10").all_reduce_fusion
    assert f.model_types == ["deepseek_v3", "gpt_oss", "qwen3_moe"]
    assert f.hardware == ["b200"] and f.max_tokens == 2048 and f.table == "trtllm_auto"


@pytest.mark.parametrize("seqs, plain_ms, fused_ms", [(1, 0.918, 0.728), (64, 3.040, 2.021)])
def test_b200_deepseek_tp8_decode_takes_the_fused_kernel(seqs, plain_ms, fused_ms):
    """DeepSeek-V3 TP 8 decode on B200: 1 sequence 0.918 -> 0.728 ms of communication per
    step, 64 sequences 3.040 -> 2.021 ms (the fused all-reduces at b200's trtllm_auto)."""
    step = {"decode_seqs": seqs, "decode_ctx_tokens": seqs * 1500}
    assert _comm_ms("b200", False, **step) == pytest.approx(plain_ms, abs=0.002)
    assert _comm_ms("b200", True, **step) == pytest.approx(fused_ms, abs=0.002)


def test_above_2048_tokens_and_on_the_h200_nothing_changes():
    """A 4,096-token prefill on B200 keeps the custom kernel; the H200 is not in the rule."""
    assert _comm_ms("b200", True, prefill_tokens=4096) == pytest.approx(
        _comm_ms("b200", False, prefill_tokens=4096))
    step = {"decode_seqs": 64, "decode_ctx_tokens": 64 * 1500}
    assert _comm_ms("h200-sxm", True, **step) == pytest.approx(1.705, abs=0.002)
    assert _comm_ms("h200-sxm", False, **step) == pytest.approx(1.705, abs=0.002)
