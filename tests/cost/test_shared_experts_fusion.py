"""SGLang's shared-experts fusion (the sglang-0.5 / sglang-0.4 presets'
``shared_experts_fusion``): DeepSeek-V3/R1's shared expert priced inside the routed
experts' grouped GEMM as a 257th expert every token selects, not as its own dense GEMMs
(DeepseekV2ForCausalLM.determine_num_fused_shared_experts, python/sglang/srt/models/
deepseek_v2.py of the sglang 0.5.7 and 0.4.9 wheels). The step: DeepSeek-V3 fp8_block,
TP 8 on H200, a decode batch of 8 over 1,500 tokens of context each (issue 30's case)."""

from __future__ import annotations

import pytest

from capsim.cost.describe import describe_step
from capsim.cost.operators import expected_experts_hit
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

STEP = dict(decode_seqs=8, decode_ctx_tokens=8 * 1500)


def _pricer(fusion: bool, hardware: str = "h200-sxm", expert_parallel: bool = False,
            preset: str = "sglang-0.5", quantization: str = "fp8_block") -> StepPricer:
    p = load_engine_preset(preset)
    return StepPricer(load_model("deepseek-v3"), load_hardware(hardware), 8,
                      quantization=quantization, engine=p.engine, all_reduce=p.tp_all_reduce,
                      expert_parallel=expert_parallel,
                      shared_experts_fusion=p.shared_experts_fusion if fusion else None)


def _rows(pricer: StepPricer) -> dict:
    return {op.name: op for op in pricer.breakdown(**STEP)}


def test_the_shared_expert_moves_into_the_experts_row():
    fused, apart = _pricer(True), _pricer(False)
    assert fused.fuse_shared_expert and not apart.fuse_shared_expert
    f, a = _rows(fused), _rows(apart)
    assert "shared_expert" in a and "shared_expert" not in f
    # The same FLOPs: the shared expert (2048 wide, as one routed expert) now 8 more rows.
    assert f["experts"].flops == pytest.approx(a["experts"].flops + a["shared_expert"].flops)
    assert f["experts"].flops / a["experts"].flops == pytest.approx(9 / 8)
    # Its weights read once per layer like one more expert hit: 57.4 + 1 of 257.
    work = fused.terms.experts.work
    hit = expected_experts_hit(8, 256, 8)
    assert hit == pytest.approx(57.4, abs=0.05)
    extra = f["experts"].bytes - a["experts"].bytes
    assert extra == pytest.approx(work.weight_bytes_per_expert + 8 * work.act_bytes_per_pair)
    # Computed from capsim's H200 profile (the fused-MoE fixed time and the fp8_block GEMM
    # curve from SGLang 0.5.14's tables): the shared expert's 58 dense GEMMs (0.447 ms) become
    # 0.135 ms more of the grouped GEMM; the step 14.635 -> 14.323 ms (with 0.5.10's tables:
    # 0.581 ms, 16.400 -> 15.955 ms; 14.640 -> 14.329 before MLA decode's per-sequence time).
    assert a["shared_expert"].seconds * 1e3 == pytest.approx(0.447, abs=0.001)
    assert (f["experts"].seconds - a["experts"].seconds) * 1e3 == pytest.approx(0.135, abs=0.001)
    assert apart.cost(**STEP).seconds * 1e3 == pytest.approx(14.635, abs=0.001)
    assert fused.cost(**STEP).seconds * 1e3 == pytest.approx(14.323, abs=0.001)


def test_the_breakdown_sums_to_the_fused_step():
    """The fast path (base, memoised) and the per-operator reference agree when fused."""
    fused = _pricer(True)
    cost = fused.cost(**STEP)
    rows = fused.breakdown(**STEP)
    assert sum(op.flops for op in rows) == pytest.approx(cost.flops)
    assert sum(op.bytes for op in rows) == pytest.approx(cost.bytes)


def test_the_shared_expert_weights_count_once():
    assert _pricer(True).weight_bytes_per_gpu == pytest.approx(_pricer(False).weight_bytes_per_gpu)


@pytest.mark.parametrize("case", [
    dict(expert_parallel=True),                    # EP > 1 on CUDA turns it off (0.5.7, 0.4.9)
    dict(hardware="b200"),                         # sm100 fp8: flashinfer_trtllm MoE (0.5.7)
    dict(hardware="mi300x", preset="sglang-0.4"),  # 0.4.9: CUDA only
])
def test_sglang_conditions_turn_it_off(case):
    pricer = _pricer(True, **case)
    assert not pricer.fuse_shared_expert
    assert "shared_expert" in _rows(pricer)


def test_it_applies_on_rocm_in_05_and_on_b200_in_04():
    assert _pricer(True, hardware="mi300x").fuse_shared_expert        # 0.5.7: gfx942
    assert _pricer(True, hardware="b200", preset="sglang-0.4").fuse_shared_expert


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "llama-4-scout", "mixtral-8x7b"])
def test_other_moe_models_keep_their_shared_expert_apart(model):
    rule = load_engine_preset("sglang-0.5").shared_experts_fusion
    assert not rule.applies(load_model(model), "h200-sxm", "cuda", "bf16", False)


def test_vllm_presets_do_not_fuse():
    assert load_engine_preset("vllm-v1").shared_experts_fusion is None


def test_the_roofline_says_when_it_fuses():
    rule = load_engine_preset("sglang-0.5").shared_experts_fusion
    kw = dict(decode_batch=8, context=1500, quantization="fp8_block", engine="sglang")
    fused = describe_step("deepseek-v3", "h200-sxm", 8, shared_experts_fusion=rule, **kw)
    apart = describe_step("deepseek-v3", "h200-sxm", 8, **kw)
    assert fused["experts"]["shared_fused"] and not apart["experts"]["shared_fused"]
    assert "shared_expert" not in [op["name"] for op in fused["operators"]]
    piped = describe_step("deepseek-v3", "h200-sxm", 8, pp=2, shared_experts_fusion=rule, **kw)
    assert piped["experts"]["shared_fused"]
