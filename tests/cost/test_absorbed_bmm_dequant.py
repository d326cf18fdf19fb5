"""SGLang 0.5.7's absorbed MLA decode on gfx942 (the sglang-0.5 preset's
``absorbed_bmm_dequant``): the fp8 ``w_kc`` / ``w_vc`` weights are cast to bf16 and
multiplied by their per-tensor scale every decode step before a bf16 bmm
(DeepseekV2AttentionMLA.forward_absorb_prepare / forward_absorb_core, the ``_is_hip`` branch
that is not gfx950, python/sglang/srt/models/deepseek_v2.py of the sglang 0.5.7 wheel). The
step: DeepSeek-V3 fp8_block, TP 8, one decode over 1,500 tokens of context (the SGLang
cookbook's MI300X c1 runs)."""

from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

STEP = dict(decode_seqs=1, decode_ctx_tokens=1500)
PREFILL = dict(prefill_tokens=1000, prefill_attn_pairs=1000 * 1001 / 2, prefill_kv_tokens=1000)


def _pricer(rule: bool, hardware: str = "mi300x", model: str = "deepseek-v3",
            quantization: str | None = "fp8_block", dp_attention: bool = False) -> StepPricer:
    p = load_engine_preset("sglang-0.5")
    return StepPricer(load_model(model), load_hardware(hardware), 8,
                      quantization=quantization, engine=p.engine, all_reduce=p.tp_all_reduce,
                      dp_attention=dp_attention,
                      shared_experts_fusion=p.shared_experts_fusion,
                      absorbed_bmm_dequant=p.absorbed_bmm_dequant if rule else None)


def test_the_rewrite_per_layer_from_its_kernels_and_bytes():
    """Per GPU at TP 8 each weight is 16 heads x 512 x 128 = 1,048,576 fp8 elements; per
    element the cast moves 1 + 2 bytes, the scale 2 + 2, and the bmm reads 2 where fp8 was
    priced: 8 bytes, 16.8 MB a layer for both weights at the MI300X's element-wise rate
    (5.3 TB/s x 0.629: 5.03 us), plus 4 kernels at its measured per-kernel time (3.1 us)."""
    pricer = _pricer(True)
    elems = 16 * 512 * 128
    assert pricer.absorbed_dequant_s() == pytest.approx(
        4 * 3.1e-6 + 2 * elems * 8 / (5.3e12 * 0.629), rel=1e-6)
    assert pricer.absorbed_dequant_s() * 1e6 == pytest.approx(17.43, abs=0.01)


def test_a_decode_step_pays_it_on_every_layer_and_a_prefill_does_not():
    with_rule, without = _pricer(True), _pricer(False)
    per_step = 61 * with_rule.absorbed_dequant_s()
    # Computed from capsim's MI300X profile at 3fa6f98: the c1 decode step 7.335 -> 8.398 ms.
    assert without.cost(**STEP).seconds * 1e3 == pytest.approx(7.335, abs=0.001)
    assert with_rule.cost(**STEP).seconds * 1e3 == pytest.approx(8.398, abs=0.001)
    assert (with_rule.cost(**STEP).seconds - without.cost(**STEP).seconds) == \
        pytest.approx(per_step, rel=1e-6)
    assert with_rule.cost(**PREFILL).seconds == pytest.approx(without.cost(**PREFILL).seconds)


def test_the_vectorised_decode_run_agrees_with_cost():
    pricer = _pricer(True)
    secs, _ = pricer.decode_costs([1, 4], [1500, 1500], [3, 2])
    assert secs[0] == pytest.approx(pricer.cost(**STEP).seconds, rel=1e-9)


def test_dp_attention_rewrites_all_128_heads_on_every_gpu():
    """SGLang's DP attention keeps the whole attention on each GPU: 8 x the elements."""
    tp8, dp = _pricer(True), _pricer(True, dp_attention=True)
    launch = 4 * 3.1e-6
    assert dp.absorbed_dequant_s() - launch == pytest.approx(
        8 * (tp8.absorbed_dequant_s() - launch), rel=1e-9)


@pytest.mark.parametrize("case", [
    dict(hardware="h200-sxm"),                        # CUDA dequantises once at load
    dict(model="llama-4-scout", quantization=None),   # no MLA
])
def test_it_applies_only_to_mla_on_gfx942(case):
    assert _pricer(True, **case).absorbed_dequant_s() == 0.0


def test_the_mi325x_is_gfx942_too():
    """Same die, same branch; only the element-wise rate's bandwidth differs (6 TB/s)."""
    assert _pricer(True, hardware="mi325x").absorbed_dequant_s() * 1e6 == pytest.approx(
        4 * 3.1 + 2 * 16 * 512 * 128 * 8 / (6.0e12 * 0.629) * 1e6, rel=1e-3)
