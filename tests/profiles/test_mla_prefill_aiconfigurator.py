"""MLA prefill attention on H200 and B200 (``efficiency.attention_prefill_mla``) against the
kernel tables it was fitted to, and which models take it.

Kernel tables: NVIDIA's aiconfigurator (ai-dynamo/aiconfigurator at 095f58a5),
``aic-core/src/aiconfigurator_core/systems/data/{h200_sxm,b200_sxm}/mla/sglang/0.5.10/
context_mla_perf.parquet``: SGLang 0.5.10's MLA prefill layer (RadixAttention extend, no
cached prefix, causal) with the backend SGLang picks for DeepSeek-V3 (H200 ``fa3``, B200
``trtllm_mla``), CUDA graph, ``collector/sglang/collect_mla.py``: ``num_heads`` per GPU (16 =
DeepSeek-V3 at ``tp_size`` 8), ``batch_size`` sequences of ``isl`` tokens each, ``latency``
ms per layer. Fitted: the 83 rows of 16 heads, bf16 KV, isl 64-32,768, batches 1-256; each
knot of keys per query ((isl + 1) / 2) is Σ flops / bf16 peak over Σ (t − launch_s) of the
rows nearest it, launch_s the value (of 8.23 / 12 / 16 µs) with the smaller median error.
Rows below: batch 1 and 16, µs rounded to 0.1 µs.
"""

from __future__ import annotations

import pytest

from capsim.cost.describe import describe_step
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

#: isl -> µs, batch 1, 16 heads, bf16 KV: H200 (fa3) and B200 (trtllm_mla).
H200_B1_US = {64: 13.5, 128: 15.7, 256: 19.6, 512: 26.5, 1024: 48.2, 1536: 93.5, 2048: 141.3,
              3072: 299.0, 4096: 497.9, 6144: 1083.3, 8192: 1716.1, 10240: 2978.5,
              12288: 4245.1, 16384: 7494.4, 32768: 29737.5}
B200_B1_US = {64: 14.6, 128: 16.6, 256: 18.8, 512: 24.8, 1024: 35.1, 1536: 47.3, 2048: 57.6,
              3072: 94.8, 4096: 137.0, 6144: 230.7, 8192: 357.9, 10240: 511.7,
              12288: 692.4, 16384: 1134.2, 32768: 4236.4}


def _layer_us(hw: str, isl: int, tp: int = 8) -> float:
    """capsim's µs for one layer's prefill attention of one DeepSeek-V3 prompt."""
    d = describe_step("deepseek-v3", hw, tp, prefill_tokens=isl, quantization="fp8_block",
                      engine="sglang")
    row = next(o for o in d["operators"] if o["name"] == "attention_prefill")
    return row["seconds"] / row["count"] * 1e6


def test_long_prompt_is_the_top_knot():
    """At 32,768 tokens the table's batch-1 row is compute at the top knot: 16 heads x
    32,768 x 32,769 / 2 pairs x 2 x (192 + 128) FLOPs = 5.50 TFLOP in 29.7 ms on H200 is
    0.187 of the 989 TFLOPS bf16 peak (FA3 on MLA's 192-wide heads); 4.24 ms on B200 is 0.576
    of 2.25 PFLOPS."""
    flops = 16 * 32768 * 32769 / 2 * 2 * (192 + 128)
    assert flops / 29737.5e-6 / 989.4e12 == pytest.approx(0.187, abs=0.001)
    assert flops / 4236.4e-6 / 2.25e15 == pytest.approx(0.577, abs=0.001)
    assert load_hardware("h200-sxm").efficiency.attention_prefill_mla.compute_curve \
        .efficiency[-1] == 0.187
    assert load_hardware("b200").efficiency.attention_prefill_mla.compute_curve \
        .efficiency[-1] == 0.574


@pytest.mark.parametrize("hw, table, lo, hi", [
    ("h200-sxm", H200_B1_US, -0.11, 0.14), ("b200", B200_B1_US, -0.19, 0.16)])
def test_pricer_reproduces_batch_one(hw, table, lo, hi):
    """Batch 1 (over all 83 fitted rows the median |error| is 1.8 % on H200, 4.2 % on B200):
    H200 -10 ... +13 % (the H100-derived attention_prefill before: -52 ... -1 %, -47 % at
    8,192 tokens); B200 -18 ... +15 % (before: -45 ... +50 %)."""
    errs = {n: _layer_us(hw, n) / t - 1 for n, t in table.items()}
    assert lo < min(errs.values()) and max(errs.values()) < hi, errs
    assert errs[32768] == pytest.approx(0.0, abs=0.02)


@pytest.mark.parametrize("hw", ["h200-sxm", "b200"])
def test_only_mla_models_take_it(hw):
    """DeepSeek-V3 prefill takes attention_prefill_mla; Llama keeps attention_prefill."""
    p = load_hardware(hw)
    mla = StepPricer(load_model("deepseek-v3"), p, 8, quantization="fp8_block")
    assert mla.rates.attention_prefill == p.efficiency.attention_prefill_mla
    gqa = StepPricer(load_model("llama-3.1-8b"), p, 1)
    assert gqa.rates.attention_prefill == p.efficiency.attention_prefill


def test_profile_without_entry_keeps_attention_prefill():
    h100 = load_hardware("h100-sxm")
    assert h100.efficiency.attention_prefill_mla is None
    p = StepPricer(load_model("deepseek-v3"), h100, 8, quantization="fp8_block")
    assert p.rates.attention_prefill == h100.efficiency.attention_prefill
