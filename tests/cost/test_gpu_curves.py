"""Per-GPU efficiency curves in the pricer: H200 vs H100 (same die, more bandwidth) and the
fp8 GEMM curve for fp8 weights.

Issue "Fidelity II": with scalar efficiencies the H200 priced a 512-token Llama-3.1-8B
prefill at 11.0 ms against the H100's 17.7 ms (ratio 1.61; 1.25 on the grid's compute-bound
rows) although both have the same peak FLOP/s; TensorRT-LLM measured H200 / H100 = 0.99 on
that compute-bound work. With the H100's curves carried over, compute-bound work costs the
same on both and bandwidth-bound work is faster by the bandwidth ratio.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.cost.operators import attn_pairs, curve_efficiency
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import HardwareProfile, load_hardware
from capsim.profiles.models import load_model

BANDWIDTH_RATIO = 4.8e12 / 3.35e12          # H200 HBM3e / H100 HBM3, datasheets


def prefill(tokens: int) -> dict:
    return dict(prefill_tokens=tokens, prefill_attn_pairs=attn_pairs(tokens, 0),
                prefill_kv_tokens=tokens, logits_seqs=1)


def without_fixed_time(hw: HardwareProfile) -> HardwareProfile:
    """``hw`` with no kernel launch times and no step overhead: only roofline terms left."""
    eff = hw.efficiency
    update = {name: getattr(eff, name).model_copy(update={"launch_s": 0.0})
              for name in ("gemm", "gemm_fp8", "attention_prefill", "attention_decode",
                           "elementwise") if getattr(eff, name) is not None}
    return hw.model_copy(update={"efficiency": eff.model_copy(update=update),
                                 "step_overhead_s": 0.0})


def _h200_with_h100_gemms():
    """The H200 with the H100's GEMM curves and attention entries, as it was derived: the
    two tests below check the roofline's handling of bandwidth alone. The shipped H200's
    GEMM curves and GQA attention are measured on an H200 (tests/profiles/
    test_measured_gemm.py, test_measured_attention.py), so they differ from the H100's."""
    h100, h200 = load_hardware("h100-sxm"), load_hardware("h200-sxm")
    gemms = {k: getattr(h100.efficiency, k) for k in ("gemm", "gemm_fp8", "gemm_fp8_block",
                                                      "attention_prefill", "attention_decode")}
    return h200.model_copy(update={"efficiency": h200.efficiency.model_copy(update=gemms)})


@pytest.mark.parametrize("model, tp, dtype", [("llama-3.1-8b", 1, "bf16"),
                                              ("llama-3.1-8b", 1, "fp8"),
                                              ("llama-3.1-70b", 2, "fp8")])
@pytest.mark.parametrize("tokens", [512, 2048, 8192])
def test_h200_prices_a_compute_bound_prefill_like_the_h100(model, tp, dtype, tokens):
    """Same die, same peak: a prefill step's GEMMs and attention cost the same; only its
    memory-bound elementwise kernels run faster on the H200 (2-5 %, more with fp8 GEMMs
    that leave them a larger share; it was 1.61x at 512 tokens with scalar factors)."""
    m = load_model(model)
    h100 = StepPricer(m, load_hardware("h100-sxm"), tp, dtype).cost(**prefill(tokens))
    h200 = StepPricer(m, _h200_with_h100_gemms(), tp, dtype).cost(**prefill(tokens))
    assert h100.compute_bound and h200.compute_bound
    assert 1.0 <= h100.seconds / h200.seconds < 1.06


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("seqs, context", [(1, 512), (8, 2048), (64, 4096)])
def test_h200_decode_is_faster_by_its_bandwidth_ratio(dtype, seqs, context):
    """A decode step is bandwidth-bound in every operator: without the fixed kernel launch
    times and step overhead (the same on both GPUs) it is 4.8 / 3.35 = 1.43x faster on the
    H200; with them, between 1.15x and 1.43x."""
    m = load_model("llama-3.1-8b")
    step = dict(decode_seqs=seqs, decode_ctx_tokens=seqs * context)

    def seconds(name: str, strip: bool) -> float:
        hw = _h200_with_h100_gemms() if name == "h200-sxm" else load_hardware(name)
        return StepPricer(m, without_fixed_time(hw) if strip else hw, 1, dtype,
                          2 if dtype == "bf16" else 1).cost(**step).seconds

    assert seconds("h100-sxm", True) / seconds("h200-sxm", True) == pytest.approx(
        BANDWIDTH_RATIO, rel=1e-9)
    assert 1.15 < seconds("h100-sxm", False) / seconds("h200-sxm", False) < BANDWIDTH_RATIO


def test_fp8_weights_use_the_fp8_gemm_curve():
    """fp8 matmuls: launch + max(flops / fp8 peak, bytes / bw) / e_fp8(n); bf16 ones keep the
    bf16 curve. At 256 tokens a Llama-3.1-8B layer's fp8 GEMMs are the measured 1.76x faster
    than bf16, not 2x (tests/profiles/test_derived_efficiency.py)."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    eff = hw.efficiency
    for dtype, curve, peak in (("bf16", eff.gemm, 989.4e12), ("fp8", eff.gemm_fp8, 1978.9e12)):
        pricer = StepPricer(m, hw, 1, dtype)
        op = next(o for o in pricer.breakdown(prefill_tokens=256) if o.name == "gate_up_proj")
        roof = max(op.flops / peak, op.bytes / hw.hbm_bandwidth_bytes_per_s)
        assert op.seconds == pytest.approx(
            op.count * curve.launch_s + roof / float(curve_efficiency(curve, 256)), rel=1e-12)
    layer = {d: sum(o.seconds for o in StepPricer(m, without_fixed_time(hw), 1, d).breakdown(
        prefill_tokens=256) if o.name.endswith("_proj")) for d in ("bf16", "fp8")}
    assert layer["bf16"] / layer["fp8"] == pytest.approx(1.756, abs=0.005)


def test_without_an_fp8_curve_fp8_matmuls_use_the_gemm_curve_at_the_fp8_peak():
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    plain = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(
        update={"gemm_fp8": None})})
    assert plain.efficiency.matmul_curve("fp8") is plain.efficiency.gemm
    assert hw.efficiency.matmul_curve("fp8") is hw.efficiency.gemm_fp8
    assert hw.efficiency.matmul_curve("bf16") is hw.efficiency.gemm
    fp8 = StepPricer(m, without_fixed_time(plain), 1, "fp8").cost(**prefill(4096))
    bf16 = StepPricer(m, without_fixed_time(plain), 1, "bf16").cost(**prefill(4096))
    assert fp8.seconds < bf16.seconds          # half the GEMM time, same curve
    # above the table (16,384 tokens) the same curve is read directly
    big = StepPricer(m, hw, 1, "fp8")
    assert big.terms.gemm_inv(20_000) == pytest.approx(1 / hw.efficiency.gemm_fp8.efficiency[-1])


@pytest.mark.parametrize("hw", ["h100-sxm", "h200-sxm", "l40s"])
def test_fp8_decode_costs_equal_cost_bit_for_bit(hw):
    """The macro-step fast path with the fp8 curve stays exactly cost()'s."""
    pricer = StepPricer(load_model("llama-3.1-8b"), load_hardware(hw), 1, "fp8", 1)
    secs, _ = pricer.decode_costs([3, 200], [1000, 50_000], [5, 7])
    seqs = [3] * 5 + [200] * 7
    ctx = [1000 + 3 * i for i in range(5)] + [50_000 + 200 * i for i in range(7)]
    for s, n, c in zip(secs.tolist(), seqs, ctx):
        assert s == pricer.cost(decode_seqs=n, decode_ctx_tokens=c, logits_seqs=n).seconds
    assert np.all(secs > 0)
