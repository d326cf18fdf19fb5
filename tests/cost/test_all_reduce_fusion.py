"""SGLang's fused all-reduce + residual + RMSNorm (``all_reduce_fusion`` of the sglang-0.5
preset; capsim/profiles/engines.py ``AllReduceFusion``, capsim/cost/communication.py).

What SGLang does (python/sglang/srt/server_args.py of the sglang 0.5.6.post1 wheel,
_handle_model_specific_adjustments; srt/layers/communicator.py): GptOssForCausalLM on
Blackwell and DeepseekV3ForCausalLM on sm100, without DP attention on one node, turn on
enable_flashinfer_allreduce_fusion; a forward of at most 2,048 tokens then runs 2 × layers − 1
of its all-reduces as FlashInfer's trtllm_allreduce_fusion (the last layer's MoE output and
the embedding's all-reduce stay SGLang's custom kernel).

The fused kernel is priced at b200.yaml's ``all_reduce_tables.trtllm_auto`` rows (TensorRT-LLM
1.3.0rc20's AllReduce, AUTO, on B200; ai-dynamo/aiconfigurator at 095f58a5): TP 8 at 4,096 B
5.783 µs, 8,192 B 5.635 µs, 524,288 B 10.944 µs, 1,048,576 B 17.780 µs.
"""
from __future__ import annotations

import pytest

from capsim.cost.communication import Communication
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

US = 1e-6
B200 = load_hardware("b200")
GPT_OSS = load_model("gpt-oss-120b")          # 36 layers, hidden 2,880 (5,760 B a token)
SGLANG = load_engine_preset("sglang-0.5")
FUSION = SGLANG.all_reduce_fusion
FUSED = 2 * 36 - 1


def _pair(model=GPT_OSS, hw=B200):
    plain = Communication(model, hw, 8, SGLANG.tp_all_reduce)
    fused = Communication(model, hw, 8, SGLANG.tp_all_reduce, fusion=FUSION)
    return plain, fused


def _custom_one(plain: Communication, n: int) -> float:
    """One custom all-reduce of n tokens (the plain step's 2 × 36 + 1 all-reduces share it)."""
    fixed, per_token = plain.terms(n)
    latency = B200.tp_link_latency_s
    return (fixed - latency + per_token * n) / (2 * 36 + 1)


def test_the_preset_rule_is_the_wheels():
    assert FUSION.model_types == ["gpt_oss", "deepseek_v3"]
    assert FUSION.hardware == ["b200"] and FUSION.max_tokens == 2048
    assert FUSION.table == "trtllm_auto"


@pytest.mark.parametrize("n, table_us", [
    # 1 token: 5,760 B, between the 4,096 B (5.783 us) and 8,192 B (5.635 us) rows
    (1, 5.783 + (5.635 - 5.783) * (5760 - 4096) / 4096),
    # 100 tokens (SGLang's c100 decode batch): 576,000 B, between 524,288 and 1,048,576 B
    (100, 10.944 + (17.780 - 10.944) * (576000 - 524288) / 524288),
])
def test_below_the_limit_71_all_reduces_cost_the_measured_table(n, table_us):
    """gpt-oss-120b at TP 8 on B200: 71 of the step's 73 all-reduces are the fused kernel at
    the table's value, the other two (embedding, last layer) SGLang's custom kernel."""
    plain, fused = _pair()
    delta = fused.seconds(n, 0) - plain.seconds(n, 0)
    assert delta == pytest.approx(FUSED * (table_us * US - _custom_one(plain, n)), rel=1e-9)


def test_the_fusion_is_cheaper_than_the_custom_kernel_at_decode_batches():
    """At 1 token SGLang's custom one-shot costs ~7.3 us on B200 TP 8 (b200.yaml
    custom_all_reduce), the table 5.72 us; at 100 tokens (576,000 B, custom two-shot) ~23 us
    against 11.6 us: the step's communication falls by ~0.1 and ~0.77 ms."""
    plain, fused = _pair()
    assert plain.seconds(1, 0) - fused.seconds(1, 0) == pytest.approx(0.099e-3, abs=0.01e-3)
    assert plain.seconds(100, 0) - fused.seconds(100, 0) == pytest.approx(0.772e-3, abs=0.01e-3)


@pytest.mark.parametrize("n", [2048, 2049, 4096, 16384])
def test_from_2048_tokens_every_all_reduce_is_the_custom_one(n):
    """communicator.py fuses only forwards of <= 2,048 tokens (``hidden_states.shape[0] <=
    2048``, FUSE_ALLREDUCE_MAX_BATCH_SIZE): capsim's pieces cover n < 2,048 (a 2,048-token
    step is priced unfused, one token off the engine's rule)."""
    plain, fused = _pair()
    assert fused.seconds(n, 3) == plain.seconds(n, 3)


def test_the_pieces_are_continuous_where_the_table_and_kernels_switch():
    """The summed pieces break wherever either does; at each break the step's seconds move
    by less than one all-reduce's launch (no piece is lost or doubled)."""
    _, fused = _pair()
    for limit in (fused.split_tokens, *fused._limits):
        if limit >= 2048:
            break
        jump = abs(fused.seconds(limit, 0) - fused.seconds(limit - 1, 0))
        assert jump < 73 * 25 * US


@pytest.mark.parametrize("model, hw, dp, expect", [
    ("gpt-oss-120b", "b200", False, True),
    ("deepseek-v3", "b200", False, True),
    ("deepseek-v3", "b200", True, False),       # DP attention: SGLang leaves it off
    ("gpt-oss-120b", "h100-sxm", False, False),  # Hopper: not turned on
    ("llama-3.1-70b", "b200", False, False),     # another architecture
])
def test_where_the_rule_applies(model, hw, dp, expect):
    m, gpu = load_model(model), load_hardware(hw)
    assert FUSION.applies(m, gpu.name, dp, True) is expect
    assert FUSION.applies(m, gpu.name, dp, False) is False    # across nodes: off


def test_the_pricer_prices_sglang_on_b200_with_it_and_other_presets_without():
    """The gpt-oss-120b decode step at batch 100 on 8 x B200: sglang-0.5 (the rule) against
    the same pricer without it; vllm-v1 has no rule."""
    kw = dict(all_reduce=SGLANG.tp_all_reduce, quantization="mxfp4", engine="sglang")
    with_rule = StepPricer(GPT_OSS, B200, 8, all_reduce_fusion=FUSION, **kw)
    without = StepPricer(GPT_OSS, B200, 8, **kw)
    a = with_rule.cost(decode_seqs=100, decode_ctx_tokens=40_000)
    b = without.cost(decode_seqs=100, decode_ctx_tokens=40_000)
    assert b.comm_s - a.comm_s == pytest.approx(0.772e-3, abs=0.01e-3)
    assert a.seconds < b.seconds
    assert load_engine_preset("vllm-v1").all_reduce_fusion is None


def test_a_profile_without_the_table_keeps_the_custom_kernel():
    hw = B200.model_copy(update={"all_reduce_tables": {}})
    plain = Communication(GPT_OSS, hw, 8, SGLANG.tp_all_reduce)
    fused = Communication(GPT_OSS, hw, 8, SGLANG.tp_all_reduce, fusion=FUSION)
    assert fused.seconds(100, 1) == plain.seconds(100, 1)
