"""The MXFP4 experts' MoE path per GPU (``efficiency.fused_moe_mxfp4``), recomputed from
what each entry was fitted to or derived from, and how the pricer picks it.

- h100-sxm, b200 (``vllm``): launch_s fitted to the intercept of the gpt-oss-20b
  single-request ITL line (bf16 KV, vLLM 0.19.1) of the vLLM blog "The State of FP8
  KV-Cache and Attention Quantization in vLLM" (2026-04-22,
  https://vllm-project.github.io/2026/04/22/fp8-kvcache.html): H100 intercept 4.05 ms
  ("between 4.03 and 4.07" for its three KV variants), B200 3.15 ms. capsim's line is read
  off its own decode step at 1,000 and 100,000 cached tokens (one sequence, the vllm-v1
  preset's host terms, which the GPU step hides).
- mi300x (``vllm``): launch_s from ROCm/triton issue 970 (2026-09-08): triton_kernels'
  matmul_ogs MXFP4 gate/up call at a decode shape (gpt-oss-20b experts padded to K 3,072 x
  N 6,144, 4 experts, 1 token) takes 82.28 us with triton 3.6.0 on an MI300X; less its
  weight streaming at the HBM peak, a lower bound of the layer's fixed time.
"""

from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

#: The blog's gpt-oss-20b bf16-KV intercepts (ms) per GPU, and its slopes (ms per token).
BLOG_GPTOSS_BF16 = {"h100-sxm": (4.05, 8.94e-06), "b200": (3.15, 3.56e-06)}
#: ROCm/triton issue 970: MI300X, triton 3.6.0, gate/up call at M = 1 (us), its shape.
MI300X_GATE_UP_M1_US, MI300X_K, MI300X_N, MI300X_EXPERTS = 82.28, 3072, 6144, 4


def _line(hw, engine: str | None = "vllm", moe_backend: str = "auto", kv_bytes: int = 2,
          model: str = "gpt-oss-20b") -> tuple[float, float]:
    """(intercept ms, slope ms per cached token) of capsim's single-sequence decode step."""
    preset = load_engine_preset("vllm-v1")
    p = StepPricer(load_model(model), hw, 1, host=preset.host_overhead,
                   all_reduce=preset.tp_all_reduce, engine=engine, moe_backend=moe_backend,
                   kv_cache_dtype_bytes=kv_bytes)
    lo, hi = 1_000, 100_000
    s_lo, s_hi = (p.cost(decode_seqs=1, decode_ctx_tokens=n).seconds * 1e3 for n in (lo, hi))
    return (hi * s_lo - lo * s_hi) / (hi - lo), (s_hi - s_lo) / (hi - lo)


@pytest.mark.parametrize("gpu, fused_moe_us, fitted_us", [("h100-sxm", 29.6, 60.6),
                                                         ("b200", 27.5, 59.7)])
def test_launch_is_fitted_to_the_blogs_gpt_oss_intercept(gpu, fused_moe_us, fitted_us):
    """With fused_moe's terms capsim's intercept is short by 0.74 ms (H100) / 0.77 ms (B200,
    with its measured attention_decode); spread over gpt-oss-20b's 24 MoE layers that is
    31.0 / 32.2 us per layer on top of
    fused_moe's fixed time. The shipped entry closes it; the slope (attention) is untouched."""
    hw = load_hardware(gpu)
    own = hw.efficiency.fused_moe_mxfp4["vllm"]
    assert hw.efficiency.fused_moe.launch_s * 1e6 == pytest.approx(fused_moe_us)
    assert own.launch_s * 1e6 == pytest.approx(fitted_us)
    assert own.memory == hw.efficiency.fused_moe.memory         # assumed, not fitted
    measured, slope = BLOG_GPTOSS_BF16[gpu]
    before, before_slope = _line(hw, moe_backend="marlin")      # fused_moe's terms
    after, after_slope = _line(hw)
    layers = load_model("gpt-oss-20b").moe_layers
    fit_us = fused_moe_us + (measured - before) / layers * 1e3
    assert round(fit_us, 1) == pytest.approx(fitted_us)
    assert after == pytest.approx(measured, abs=0.002)
    assert after_slope == pytest.approx(before_slope, rel=1e-12)
    assert after_slope == pytest.approx(slope, rel=0.07)


def test_h100_fp8_kv_gpt_oss_line_and_the_head_dim_64_entry():
    """The same post's fp8-KV gpt-oss line on the H100 (intercept in 4.03-4.07 ms, slope
    7.14e-06) was held out until 2026-12-07 (capsim then: intercept 4.155 ms, slope 4.53e-06,
    -37 %, from the Llama fp8 entry); its slope against the bf16 line's is now what
    h100-sxm's attention_decode_fp8_head_dim.vllm.64 is fitted to (tests/cost/
    test_fp8_kv_attention.py): intercept 4.050 ms (3.31 with fused_moe's terms), slope
    6.68e-06, 0.799 of capsim's bf16 slope (8.37e-06) as measured, -6.4 % against 7.14e-06."""
    hw = load_hardware("h100-sxm")
    intercept, slope = _line(hw, kv_bytes=1)
    assert intercept == pytest.approx(4.050, abs=0.002)
    assert _line(hw, kv_bytes=1, moe_backend="marlin")[0] == pytest.approx(3.31, abs=0.01)
    assert slope == pytest.approx(6.68e-06, rel=0.01)
    assert slope / _line(hw, kv_bytes=2)[1] == pytest.approx(7.14e-06 / 8.94e-06, rel=1e-3)


def test_mi300x_launch_is_the_measured_gate_up_call_less_its_weight_streaming():
    """82.28 us for 4 x 3,072 x 6,144 MXFP4 weights (0.5 B each + one E8M0 byte per 32):
    40.1 MB, 7.57 us at 5.3 TB/s; 74.7 us fixed. The down call, the routing kernels and the
    top-k reduce are not in it: a lower bound of the layer's fixed time (two GEMM launches,
    12.1 us, without the entry)."""
    hw = load_hardware("mi300x")
    weight_bytes = MI300X_EXPERTS * MI300X_K * MI300X_N * (0.5 + 1 / 32)
    assert weight_bytes == pytest.approx(40.1e6, rel=1e-3)
    streaming_us = weight_bytes / hw.hbm_bandwidth_bytes_per_s * 1e6
    assert streaming_us == pytest.approx(7.57, abs=0.01)
    own = hw.efficiency.fused_moe_mxfp4["vllm"]
    assert own.launch_s * 1e6 == pytest.approx(round(MI300X_GATE_UP_M1_US - streaming_us, 1))
    assert own.memory == 1.0        # no cap measured on this path (fused_moe is aiter's call)
    assert "issues/970" in hw.sources["efficiency.fused_moe_mxfp4"]


def test_h200_carries_the_h100_entry_and_other_gpus_have_none():
    h100, h200 = load_hardware("h100-sxm"), load_hardware("h200-sxm")
    assert h200.efficiency.fused_moe_mxfp4 == h100.efficiency.fused_moe_mxfp4
    assert "fused_moe_mxfp4" in h200.derivation.classes
    assert load_hardware("a100-80gb").efficiency.fused_moe_mxfp4 is None


def test_mi325x_carries_the_mi300x_entry_its_weight_streaming_at_its_own_bandwidth():
    """Same gfx942 die, 304 CUs (ROCm's GPU hardware specifications): the MI300X's measured
    fixed time carries over ("derived"); the roofline streams the experts at 6 TB/s, so a
    decode step of gpt-oss-20b is no slower than on the MI300X."""
    mi300x, mi325x = load_hardware("mi300x"), load_hardware("mi325x")
    assert mi325x.efficiency.fused_moe_mxfp4 == mi300x.efficiency.fused_moe_mxfp4
    assert mi325x.sources["efficiency.fused_moe_mxfp4"].startswith("derived, uncalibrated: "
                                                                  "mi300x's")
    assert "gfx942" in mi325x.sources["efficiency.fused_moe_mxfp4"]
    intercept_300, _ = _line(mi300x)
    intercept_325, _ = _line(mi325x)
    assert intercept_325 < intercept_300
    assert intercept_325 > _line(mi325x, engine=None)[0]   # without the entry: 2 GEMM launches


@pytest.mark.parametrize("model, engine, backend, entry", [
    ("gpt-oss-20b", "vllm", "auto", "fused_moe_mxfp4"),      # vLLM's triton_kernels path
    ("gpt-oss-20b", "vllm", "marlin", "fused_moe"),          # --moe-backend marlin
    ("gpt-oss-20b", "sglang", "auto", "fused_moe"),          # no entry for the engine
    ("gpt-oss-20b", None, "auto", "fused_moe"),              # no engine named (roofline)
    ("qwen3-30b-a3b", "vllm", "auto", "fused_moe"),          # bf16 experts
])
def test_the_pricer_takes_the_entry_for_mxfp4_experts_of_its_engine(model, engine, backend,
                                                                  entry):
    hw = load_hardware("h100-sxm")
    m = load_model(model)
    p = StepPricer(m, hw, 1, engine=engine, moe_backend=backend)
    expected = getattr(hw.efficiency, entry)
    kernel = expected["vllm"] if entry == "fused_moe_mxfp4" else expected
    assert p.terms.expert_launch_s == pytest.approx(m.moe_layers * kernel.launch_s)


def test_an_unknown_moe_backend_is_refused():
    from capsim.common.errors import ScenarioError
    with pytest.raises(ScenarioError, match="unknown moe_backend 'cutlass'; valid: auto, marlin"):
        StepPricer(load_model("gpt-oss-20b"), load_hardware("h100-sxm"), 1,
                   moe_backend="cutlass")


@pytest.mark.parametrize("gpu, engine, moe_backend, expected", [
    ("b200", "vllm", "auto", "bf16"),       # FLASHINFER_TRTLLM_MXFP4_BF16, vLLM's default
    ("b200", "vllm", "marlin", "bf16"),     # Marlin is weight-only
    ("b200", "trtllm", "auto", "fp4"),      # no engine entry: the format's FP4 peak
    ("b200", None, "auto", "fp4"),
    ("h100-sxm", "vllm", "auto", "bf16"),   # no FP4 tensor cores: weight-only either way
    ("h100-sxm", None, "auto", "bf16"),
])
def test_vllm_multiplies_mxfp4_experts_with_16_bit_activations(gpu, engine, moe_backend,
                                                                 expected):
    """formats.yaml mxfp4 engine_compute: vLLM's MXFP4 MoE oracle (oracle/mxfp4.py at
    001eda31) ranks only BF16-activation backends by default, so on a B200 the experts'
    MMA runs at the bf16 peak (2.25 PFLOP/s), not the FP4 one (9 PFLOP/s)."""
    p = StepPricer(load_model("gpt-oss-20b"), load_hardware(gpu), 1, engine=engine,
                   moe_backend=moe_backend)
    assert p.expert_dtype == expected
    assert p.matmul_dtype == "bf16"          # gpt-oss's attention group is bf16 anyway


def test_b200_prefill_experts_cost_the_16_bit_rate_under_vllm():
    """An 8,192-token gpt-oss-20b prefill on a B200: the experts' compute at the bf16 peak
    (28.75 ms with the B200's measured gemm curve and the launch refitted with its measured
    attention_decode; 28.57 before that refit, 28.40 with the derived curve; it was 8.01 ms
    at the FP4 peak with the same entry); without an engine entry they keep the FP4 peak and
    fused_moe's fixed time (7.49 ms). The one-token decode the
    launch was fitted to stays memory-bound, so the fit (test above) does not move."""
    hw, model = load_hardware("b200"), load_model("gpt-oss-20b")

    def experts(engine, **kw):
        p = StepPricer(model, hw, 1, engine=engine)
        return next(o for o in p.breakdown(**kw) if o.name == "experts")

    assert experts("vllm", prefill_tokens=8192).compute_s * 1e3 == pytest.approx(28.75, abs=0.01)
    assert experts(None, prefill_tokens=8192).compute_s * 1e3 == pytest.approx(7.49, abs=0.01)
    one = experts("vllm", decode_seqs=1, decode_ctx_tokens=1000)
    assert one.memory_s > 10 * (one.compute_s - 24 * 60.6e-6)
