"""Decode attention over an fp8 KV cache: the engine's own fp8 kernel factors
(``efficiency.attention_decode_fp8``), fitted to published single-request ITL lines.

Source of every figure: the vLLM blog "The State of FP8 KV-Cache and Attention Quantization
in vLLM" (2026-04-22, https://vllm-project.github.io/2026/04/22/fp8-kvcache.html;
vllm-project/vllm-project.github.io _posts/2026-04-22-fp8-kvcache.md), vLLM 0.19.1, one GPU,
concurrency 1, 128 output tokens, input lengths 256 ... 125k, least-squares lines
ITL = slope x input_len + intercept. The slope is attention's time per cached token, so the
ratio of the fp8 and bf16 slopes is the fp8 kernel's time per cached token against the bf16
kernel's, and the intercept gap its fixed cost.

- H100 (FlashAttention 3), Llama-3.1-8B: slope 4.37e-05 (bf16 KV) and 2.37e-05 ms/token
  (fp8 KV), intercept 6.44 and 6.58 ms: the fit of ``h100-sxm``.
- B200 (FlashInfer), Llama-3.1-8B: 1.80e-05 and 9.72e-06 ms/token, 3.93 and 3.96 ms: the fit
  of ``b200``; its gpt-oss-20b lines (3.56e-06 and 2.06e-06 ms/token) are held out.
- H100 (FlashAttention 3), gpt-oss-20b (head_dim 64): 8.94e-06 and 7.14e-06 ms/token, intercepts
  "tightly clustered between 4.03 and 4.07 ms" (4.05 taken for both): the fit of ``h100-sxm``'s
  ``attention_decode_fp8_head_dim.vllm.64`` (FlashAttention 3 runs other fp8 decode tiles at
  head_dim <= 96 than at 128: vllm-project/flash-attention at 29210221, hopper/tile_size.h).
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import Efficiency, load_hardware
from capsim.profiles.models import load_model

#: (GPU, model): (bf16 slope, fp8 slope) ms per token, (bf16, fp8) intercept ms.
BLOG_LINES = {
    ("h100-sxm", "llama-3.1-8b"): ((4.37e-05, 2.37e-05), (6.44, 6.58)),
    ("b200", "llama-3.1-8b"): ((1.80e-05, 9.72e-06), (3.93, 3.96)),
    ("b200", "gpt-oss-20b"): ((3.56e-06, 2.06e-06), (3.15, 3.17)),
    ("h100-sxm", "gpt-oss-20b"): ((8.94e-06, 7.14e-06), (4.05, 4.05)),
}


def fitted_factors(gpu: str) -> tuple[float, float]:
    """(memory, launch_s) of the fp8 entry as the profile header derives them: memory =
    attention_decode's x (fp8 bytes / bf16 bytes) / (fp8 slope / bf16 slope); launch_s =
    attention_decode's + the intercept gap spread over Llama-3.1-8B's 32 layers."""
    (s16, s8), (i16, i8) = BLOG_LINES[(gpu, "llama-3.1-8b")]
    bf16 = load_hardware(gpu).efficiency.attention_decode
    layers = load_model("llama-3.1-8b").num_hidden_layers
    return bf16.memory * 0.5 / (s8 / s16), bf16.launch_s + (i8 - i16) * 1e-3 / layers


def decode_line(gpu: str, model: str, kv_bytes: int, engine: str | None = "vllm",
                contexts: tuple[int, ...] = (50_000, 100_000)) -> tuple[float, float]:
    """(slope ms per token, intercept ms) of one sequence's decode step over its context,
    through the pricer's hot path."""
    kw = {"quantization": "mxfp4"} if model == "gpt-oss-20b" else {}
    pricer = StepPricer(load_model(model), load_hardware(gpu), kv_cache_dtype_bytes=kv_bytes,
                        engine=engine, **kw)
    ms = [pricer.cost(decode_seqs=1, decode_ctx_tokens=c).seconds * 1e3 for c in contexts]
    slope = (ms[1] - ms[0]) / (contexts[1] - contexts[0])
    return slope, ms[0] - slope * contexts[0]


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_profile_entry_is_the_published_fit(gpu):
    """h100-sxm: memory 0.877 x 0.5 / 0.542 = 0.809, launch 16.39 + 140 / 32 = 20.765 us;
    b200: 0.955 x 0.5 / 0.540 = 0.884, 9.08 + 30 / 32 = 10.0175 us, on its measured
    attention_decode (tests/profiles/test_measured_attention.py; memory rounded as written)."""
    memory, launch_s = fitted_factors(gpu)
    own = load_hardware(gpu).efficiency.attention_decode_fp8["vllm"]
    assert own.memory == pytest.approx(memory, abs=5e-4)
    assert own.launch_s == pytest.approx(launch_s, abs=1e-12)
    assert own.memory == {"h100-sxm": 0.809, "b200": 0.884}[gpu]


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_fp8_decode_slope_is_the_measured_fraction_of_bf16(gpu):
    """The pricer's fp8 / bf16 slope ratio is the blog's (0.542 on the H100, 0.540 on the
    B200), not the 0.5 of halved bytes at one bandwidth fraction; the intercept gap is the
    blog's 0.14 / 0.03 ms (plus the new token's fp8 write, a few ns)."""
    (s16, s8), (i16, i8) = BLOG_LINES[(gpu, "llama-3.1-8b")]
    slope16, icpt16 = decode_line(gpu, "llama-3.1-8b", 2)
    slope8, icpt8 = decode_line(gpu, "llama-3.1-8b", 1)
    assert slope8 / slope16 == pytest.approx(s8 / s16, rel=1e-3)
    assert icpt8 - icpt16 == pytest.approx(i8 - i16, abs=2e-3)


def test_b200_held_out_gpt_oss_slope_ratio():
    """Held out: gpt-oss-20b on the B200 (head_dim 64, half its layers windowed to 128
    tokens, which add no slope at 50-100k tokens): measured fp8 / bf16 slope 0.579, capsim
    0.540 (-6.7 %)."""
    (s16, s8), _ = BLOG_LINES[("b200", "gpt-oss-20b")]
    ratio = decode_line("b200", "gpt-oss-20b", 1)[0] / decode_line("b200", "gpt-oss-20b", 2)[0]
    assert ratio == pytest.approx(0.540, abs=2e-3)
    assert ratio / (s8 / s16) - 1 == pytest.approx(-0.067, abs=0.005)


@pytest.mark.parametrize("engine", [None, "tensorrt-llm", "sglang"])
def test_engines_without_an_entry_halve_the_bytes_at_the_bf16_factors(engine):
    """Only vLLM's fp8 kernel is measured: other engines (and a pricer without an engine)
    price an fp8 KV cache with attention_decode, exactly half the bf16 slope."""
    slope16, icpt16 = decode_line("h100-sxm", "llama-3.1-8b", 2, engine)
    slope8, icpt8 = decode_line("h100-sxm", "llama-3.1-8b", 1, engine)
    assert slope8 / slope16 == pytest.approx(0.5, rel=1e-9)
    assert icpt8 == pytest.approx(icpt16, abs=1e-4)


def test_a_bf16_cache_and_gpus_without_an_entry_are_unchanged():
    h100 = load_hardware("h100-sxm").efficiency
    assert h100.decode_attention(2, "vllm") == h100.attention_decode
    a100 = load_hardware("a100-80gb").efficiency
    assert a100.attention_decode_fp8 is None
    assert a100.decode_attention(1, "vllm") == a100.attention_decode


def test_decode_runs_match_single_steps_with_fp8_kv():
    """Macro-steps price decode runs through decode_costs; with the fp8 entry they stay
    bit-for-bit equal to step-by-step cost()."""
    pricer = StepPricer(load_model("llama-3.1-8b"), load_hardware("h100-sxm"),
                        kv_cache_dtype_bytes=1, engine="vllm")
    seqs, ctx0, lengths = [8, 5], [160_000, 100_000], [40, 30]
    seconds, _ = pricer.decode_costs(seqs, ctx0, lengths)
    singles = [pricer.cost(decode_seqs=n, decode_ctx_tokens=c + n * i, logits_seqs=n).seconds
               for n, c, m in zip(seqs, ctx0, lengths) for i in range(m)]
    assert np.array_equal(seconds, np.array(singles))


def test_h100_head_dim_64_entry_is_the_published_gpt_oss_fit():
    """memory = attention_decode's 0.877 x 0.5 / (7.14e-06 / 8.94e-06) = 0.877 x 0.626 = 0.549;
    launch_s attention_decode's 16.39 us (no intercept gap resolved: 4.03-4.07 ms for both)."""
    eff = load_hardware("h100-sxm").efficiency
    (s16, s8), (i16, i8) = BLOG_LINES[("h100-sxm", "gpt-oss-20b")]
    own = eff.attention_decode_fp8_head_dim["vllm"][64]
    assert own.memory == pytest.approx(eff.attention_decode.memory * 0.5 / (s8 / s16), abs=5e-4)
    assert own.memory == 0.549
    assert own.launch_s == eff.attention_decode.launch_s == 1.639e-05
    assert i8 == i16


def test_h100_gpt_oss_fp8_slope_is_the_measured_fraction_of_bf16():
    """The pricer's gpt-oss-20b fp8 / bf16 slope ratio is the post's 0.799 (0.540 before the
    head_dim 64 entry, from the Llama entry); the intercept is the bf16 one's within 0.01 ms
    (the post: 4.03-4.07 ms for both)."""
    (s16, s8), _ = BLOG_LINES[("h100-sxm", "gpt-oss-20b")]
    slope16, icpt16 = decode_line("h100-sxm", "gpt-oss-20b", 2)
    slope8, icpt8 = decode_line("h100-sxm", "gpt-oss-20b", 1)
    assert slope8 / slope16 == pytest.approx(s8 / s16, rel=1e-3)
    assert slope8 / slope16 == pytest.approx(0.799, abs=1e-3)
    assert abs(icpt8 - icpt16) < 0.01


def test_head_dim_entry_applies_to_its_head_dim_engine_and_gpu_only():
    """head_dim 128 (Llama) keeps the vllm entry; another engine, a bf16 cache and the B200
    (FlashInfer, whose gpt-oss slope ratio 0.579 is near Llama's) are unchanged; the H200
    carries the H100's entry (same die and kernel, derived)."""
    h100 = load_hardware("h100-sxm").efficiency
    assert h100.decode_attention(1, "vllm", 128) == h100.attention_decode_fp8["vllm"]
    assert h100.decode_attention(1, "vllm") == h100.attention_decode_fp8["vllm"]
    assert h100.decode_attention(1, "sglang", 64) == h100.attention_decode
    assert h100.decode_attention(2, "vllm", 64) == h100.attention_decode
    b200 = load_hardware("b200").efficiency
    assert b200.attention_decode_fp8_head_dim is None
    assert b200.decode_attention(1, "vllm", 64) == b200.attention_decode_fp8["vllm"]
    h200 = load_hardware("h200-sxm")
    assert h200.efficiency.decode_attention(1, "vllm", 64) == h100.decode_attention(1, "vllm", 64)
    assert "attention_decode_fp8_head_dim" in h200.derivation.classes


def test_head_dim_keys_survive_a_json_mode_round_trip():
    """``capsim calibrate`` writes profiles from JSON-mode dumps, which spell the head_dim key
    as text ("64"): it is read back as the integer 64."""
    eff = load_hardware("h100-sxm").efficiency
    dumped = eff.model_dump(mode="json")
    assert list(dumped["attention_decode_fp8_head_dim"]["vllm"]) == ["64"]
    back = Efficiency.model_validate(dumped)
    assert back.attention_decode_fp8_head_dim == eff.attention_decode_fp8_head_dim
    assert back.decode_attention(1, "vllm", 64).memory == 0.549
