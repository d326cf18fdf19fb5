"""Where gpt-oss-20b's long-prompt TTFT gap on the H100 sits (issue 14; nothing shipped).

The held-out case load_vllm0191_h100_gptoss20b_random20k2k_c8_kvbf16_kvfp8 (8 users, ~20k
prompts) has median TTFT −19.5 % in capsim. The same source, the vLLM blog "The State of FP8
KV-Cache and Attention Quantization in vLLM" (2026-04-22, vllm-project/vllm-project.github.io
at c3a01c4, assets/figures/2026-04-22-fp8-kvcache/fig3_gptoss_20b.png and fig2_llama_8b.png,
lower panels "Median TTFT vs Input Length", bf16 KV, one H100, vLLM 0.19.1, concurrency 1,
128 output tokens), plots single-request TTFT against input length but publishes no
coefficients. The points below were read off those images, from marker centres against the
gridlines (±~15 ms at this scale). The post's points under 32k tokens are left out: Llama's
16k prompt in ~150 ms is too fast for its FLOPs.

The B200 panels of the same post (fig6_gptoss_b200.png, fig5_llama_b200.png; FlashInfer) are
read the same way: gpt-oss-20b is barely faster on the B200 than on the H100 (0.94–1.23×)
where Llama-3.1-8B is 1.9–2.1× faster, so the part of gpt-oss's prefill capsim misses does
not scale with the GPU's FLOP/s.

TTFT = a·L² + b·L splits prefill into the full-attention layers (a) and everything linear
in the prompt (b): GEMMs, experts, windowed layers, element-wise work. These tests pin the
docs/fidelity.md figures ("gpt-oss-20b's 20k-prompt TTFT"): capsim's one-user TTFT at each
length, the fits, and the attention efficiency each `a` implies.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.profiles.models import load_model
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.metrics.summary import summarize
from capsim.workload import TraceCache

H100_BF16_PEAK_FLOPS = 989.4e12          # h100-sxm.yaml peak_flops_per_s.bf16 (datasheet)
LENGTHS = np.array([32768, 49152, 65536, 81920, 98304, 114688, 131072])
#: Read off the figures (ms), bf16 KV.
MEASURED_MS = {
    "gpt-oss-20b": np.array([797, 1367, 2000, 2773, 3645, 4660, 5644]),
    "llama-3.1-8b": np.array([1321, 2329, 3546, 5142, 6799, 8779, 10151]),
}
MEASURED_B200_MS = {
    "gpt-oss-20b": np.array([850, 1425, 1950, 2619, 3318, 4073, 4586]),
    "llama-3.1-8b": np.array([690, 1179, 1767, 2525, 3331, 4251, 4872]),
}


def _fit(ms: np.ndarray) -> tuple[float, float, float]:
    """(a ms per (1k tokens)², b ms per 1k tokens, max relative residual) of a·L² + b·L."""
    k = LENGTHS / 1000
    design = np.c_[k ** 2, k]
    (a, b), *_ = np.linalg.lstsq(design, ms, rcond=None)
    return a, b, float(np.max(np.abs(design @ [a, b] / ms - 1)))


def _attention_efficiency(model_name: str, a_ms: float) -> float:
    """Fraction of the bf16 peak the full-attention layers run at if they take a·L²:
    4 · heads · head_dim FLOPs per causal (query, key) pair, L²/2 pairs per layer."""
    m = load_model(model_name)
    full = m.full_attention_layers
    flops_per_k2 = 4 * m.num_attention_heads * m.head_dim * 1000 ** 2 / 2 * full
    return flops_per_k2 / (a_ms * 1e-3) / H100_BF16_PEAK_FLOPS


def _capsim_ttft_ms(tmp_path, model_name: str, hardware: str = "h100-sxm") -> np.ndarray:
    quant = "  quantization: mxfp4\n" if model_name == "gpt-oss-20b" else ""
    # The 131,072-token point as 130,900: prompt + 128 output must fit max_model_len.
    variants = "".join(
        f"  - name: in{n}\n    set: {{workload.classes.0.prompt_tokens.value: {min(n, 130900)}}}\n"
        for n in LENGTHS)
    path = tmp_path / "c1.yaml"
    path.write_text(
        f"name: c1_ttft\nseed: 0\nmodel: {model_name}\nhardware: {hardware}\n"
        f"engine:\n  preset: vllm-v1\n  kv_cache_dtype: auto\n  max_model_len: 131072\n"
        f"{quant}"
        "workload:\n  num_requests: 3\n"
        "  arrival: {process: concurrency, users: 1, think_time_s: 0.0}\n"
        "  classes:\n    - {name: fixed, weight: 1, prompt_tokens: {dist: fixed, value: 1000},"
        " output_tokens: {dist: fixed, value: 128}}\n"
        f"variants:\n{variants}")
    loaded = load(str(path))
    traces = TraceCache(loaded.base_dir, str(loaded.path))
    return np.array([summarize(simulate(run, traces.get(run.workload, run.seed)),
                               loaded.spec.slo, loaded.class_slos)[0].ttft_p50_ms
                     for run in loaded.runs])


def test_measured_gptoss_curve_is_a_clean_quadratic():
    a, b, resid = _fit(MEASURED_MS["gpt-oss-20b"])
    assert a == pytest.approx(0.191, abs=0.001)
    assert b == pytest.approx(18.3, abs=0.1)
    assert resid < 0.011                                    # within 1.1 % at every length
    # FA3 with sinks, head_dim 64, 12 full-attention layers: 0.52 of the bf16 peak.
    assert _attention_efficiency("gpt-oss-20b", a) == pytest.approx(0.52, abs=0.005)
    # Llama's points fit less cleanly (8.9 %); 0.73 of peak at head_dim 128.
    a_l, b_l, resid_l = _fit(MEASURED_MS["llama-3.1-8b"])
    assert (a_l, b_l) == (pytest.approx(0.365, abs=0.001), pytest.approx(31.9, abs=0.1))
    assert 0.085 < resid_l < 0.09
    assert _attention_efficiency("llama-3.1-8b", a_l) == pytest.approx(0.73, abs=0.005)


def test_capsim_prices_gptoss_attention_slow_and_its_linear_work_short(tmp_path):
    ttft = _capsim_ttft_ms(tmp_path, "gpt-oss-20b")
    err = ttft / MEASURED_MS["gpt-oss-20b"] - 1
    np.testing.assert_allclose(err * 100, [-17.4, -12.9, -6.9, -3.6, -0.6, 1.1, 5.0], atol=0.15)
    a, b, _ = _fit(ttft)
    assert a == pytest.approx(0.256, abs=0.001)           # attention at ~0.384 of peak
    assert _attention_efficiency("gpt-oss-20b", a) == pytest.approx(0.388, abs=0.005)
    assert b == pytest.approx(11.7, abs=0.1)              # 36 % short of the measured 18.3


def test_gptoss_prefill_does_not_scale_with_the_gpu_as_llamas_does():
    speedup = {m: MEASURED_MS[m] / MEASURED_B200_MS[m] for m in MEASURED_MS}
    np.testing.assert_allclose(speedup["gpt-oss-20b"][[0, -1]], [0.94, 1.23], atol=0.005)
    np.testing.assert_allclose(speedup["llama-3.1-8b"][[0, -1]], [1.91, 2.08], atol=0.005)


def test_b200_gptoss_prefill_is_far_short_even_at_the_16_bit_expert_rate(tmp_path):
    """vLLM's default MXFP4 MoE on the B200 takes bf16 activations (formats.yaml mxfp4
    engine_compute), which moved these from −75.0 … −49.9 % to −65.4 … −42.8 %, and the
    B200's measured GEMM curves (tests/profiles/test_measured_gemm.py) to −65.1 … −42.6 %, and
    its measured prefill attention (FlashInfer at head_dim 128, up to 0.666 of peak against the
    derived 0.384; tests/profiles/test_measured_attention.py) to the figures below; the rest
    is unexplained."""
    err = _capsim_ttft_ms(tmp_path, "gpt-oss-20b", "b200") / MEASURED_B200_MS["gpt-oss-20b"] - 1
    np.testing.assert_allclose(err * 100, [-71.5, -70.9, -68.0, -66.9, -65.5, -64.2, -60.6],
                               atol=0.15)
