"""Start-up memory as vLLM 0.19 logs it (capsim.kv.memory with the vllm-v1 preset).

Every figure is a line of a public vLLM 0.19.0 start-up log on an H100 80GB
(torch total 79.19 GiB, gpu_memory_utilization 0.95, max_num_batched_tokens
8192, max_num_seqs 1024), quoted in ../shared/reference/measured/cases.yaml
under the case id each test names. Targets (issue "Fidelity I"): tokens and
blocks within 2 %, every memory term within 0.15 GiB. The vllm-v1 preset's two
fitted constants come from the Llama-3.1-8B TP1 and TP2 logs; the Qwen2.5-7B and
Llama-3.3-70B tests are held out.
"""

from __future__ import annotations

import pytest

from capsim.scenario.load import load

GIB = 2**30


@pytest.fixture
def pool(write_scenario, tmp_path):
    """``pool(model, tp, **engine)``: the resolved pool of a startup-only scenario on
    an H100 with vLLM 0.19's settings of the measured runs."""
    def make(model: str, tp: int, **engine):
        doc = {"name": "startup", "model": model, "hardware": "h100-sxm",
               "engine": {"preset": "vllm-v1", "tensor_parallel_size": tp,
                          "gpu_memory_utilization": 0.95, "max_model_len": 8192,
                          "enable_prefix_caching": False, **engine},
               "workload": {"num_requests": 1, "arrival": {"process": "poisson",
                                                           "rate_per_s": 1.0},
                            "classes": [{"name": "a", "weight": 1.0,
                                         "prompt_tokens": {"dist": "fixed", "value": 8},
                                         "output_tokens": {"dist": "fixed", "value": 8}}]}}
        return load(write_scenario(tmp_path, doc)).runs[0].pool()
    return make


def check(pool, *, tokens: int, blocks: int | None = None, **gib: float) -> None:
    """Tokens (and blocks) within 2 %, each logged GiB term within 0.15 GiB."""
    kv = pool.kv
    assert kv.num_tokens == pytest.approx(tokens, rel=0.02)
    if blocks is not None:
        assert kv.num_gpu_blocks == pytest.approx(blocks, rel=0.02)
    terms = kv.memory.gib()
    for name, logged in gib.items():
        assert terms[name] == pytest.approx(logged, abs=0.15), name


def test_llama31_8b_tp1(pool):
    """kv_vllm0190_h100_llama31_8b_tp1_bf16: "Model loading took 14.99 GiB"; "torch peak
    memory increase: 1.89GiB; non-torch forward increase memory: 0.25GiB"; "Available KV
    cache memory: 58.11 GiB"; "GPU KV cache size: 476,016 tokens" (29,751 blocks);
    "Maximum concurrency for 8,192 tokens per request: 58.11x"."""
    p = pool("llama-3.1-8b", 1)
    check(p, tokens=476_016, blocks=29_751, weights=14.99, activation_peak=1.89,
          non_torch=0.25, available_kv=58.11, budget=75.23)
    assert p.engine.max_num_seqs == 1024 and p.engine.max_num_batched_tokens == 8192
    assert p.kv.max_concurrency(8192) == pytest.approx(58.11, rel=0.02)
    # The sweep of the same case: the pool does not depend on max_model_len.
    assert p.kv.max_concurrency(32768) == pytest.approx(14.53, rel=0.02)


def test_llama31_8b_tp2(pool):
    """kv_vllm0190_h100_llama31_8b_tp2_bf16 (per GPU): weights 7.51, torch peak 1.89,
    non-torch 2.07, available 63.76 GiB; 1,044,688 tokens (65,293 blocks)."""
    check(pool("llama-3.1-8b", 2), tokens=1_044_688, blocks=65_293, weights=7.51,
          activation_peak=1.89, non_torch=2.07, available_kv=63.76)


def test_fp8_kv_cache_doubles_the_tokens_of_the_same_pool(pool):
    """kv_vllm0190_h100_llama31_8b_tp1_kvfp8: the same 58.11 GiB holds 952,032 tokens."""
    check(pool("llama-3.1-8b", 1, kv_cache_dtype="fp8"), tokens=952_032, blocks=59_502,
          available_kv=58.11)


@pytest.mark.parametrize("tp, tokens, weights, available", [
    (1, 1_096_000, 14.25, 58.53),       # kv_vllm0190_h100_qwen25_7b_tp1_bf16
    (2, 2_390_592, 7.12, 63.84),        # tp2_same_source
    (4, 5_043_280, 3.55, 67.34),        # tp4_same_source
])
def test_qwen25_7b_held_out(pool, tp, tokens, weights, available):
    """Held out (no preset constant was fitted to Qwen): kv_vllm0190_h100_qwen25_7b_tp1_bf16
    and its TP 2 / TP 4 rows; torch peak 2.21 GiB (Qwen's 152,064-token vocabulary)."""
    check(pool("qwen2.5-7b", tp), tokens=tokens, weights=weights, available_kv=available,
          activation_peak=2.21)


def test_qwen25_7b_fp8_kv_held_out(pool):
    """kv_vllm0190_h100_qwen25_7b_tp1_bf16, kv_fp8_same_source: 2,192,000 tokens."""
    check(pool("qwen2.5-7b", 1, kv_cache_dtype="fp8"), tokens=2_192_000, available_kv=58.53)


def test_llama33_70b_fp8_weights_tp2_held_out(pool):
    """kv_vllm0190_h100_llama33_70b_fp8dyn_tp2 (FP8 weights, kv_cache_dtype auto = bf16):
    "Model loading took 33.88 GiB" (fp8 linears + fp32 channel scales, bf16 embedding and
    LM head); torch peak 1.96, non-torch 2.1, available 37.28 GiB; 244,304 tokens."""
    p = pool("llama-3.1-70b", 2, dtype="fp8")
    assert p.engine.kv_dtype_bytes == 2
    check(p, tokens=244_304, blocks=15_269, weights=33.88, activation_peak=1.96,
          non_torch=2.1, available_kv=37.28)


# -- other engines' rules, as their sources compute them --------------------------------

def _terms(rule: str, fraction: float, **rule_fields):
    from capsim.kv.memory import memory_terms
    from capsim.profiles.engines import MemoryRule
    from capsim.profiles.models import load_model

    return memory_terms(load_model("llama-3.1-8b"),
                        MemoryRule(rule=rule, forward_bytes_per_token_intermediate=6,
                                   forward_bytes_per_token_hidden=6, non_torch_gib={1: 0.5},
                                   **rule_fields),
                        total_bytes=int(79.19 * GIB), fraction=fraction, tp=1,
                        weight_bytes=2, max_num_seqs=256, max_num_batched_tokens=8192,
                        num_sms=132)


@pytest.mark.parametrize("fraction", [0.9, 0.5, 0.15])
def test_trtllm_takes_its_fraction_of_what_the_profile_run_left(fraction):
    """TensorRT-LLM's PyTorch backend (tensorrt_llm/_torch/pyexecutor/_util.py
    KvCacheCreator._cal_max_memory at 0004396): KV = (total − peak) × free_gpu_memory_fraction,
    so even 0.15 leaves a KV cache (a fraction of the whole GPU would not fit the weights)."""
    t = _terms("trtllm", fraction)
    peak = t.weight_bytes + t.activation_peak_bytes + t.non_torch_bytes
    assert t.available_kv_bytes == int(fraction * (t.total_bytes - peak))
    assert t.available_kv_bytes / GIB == pytest.approx(fraction * 62.9, abs=0.1 * fraction)


def test_tgi_takes_a_share_of_its_fraction_of_the_gpu_less_the_peak():
    """TGI (server/text_generation_server/utils/import_utils.py get_cuda_free_memory and
    flash_causal_lm.warmup): free = fraction × total − used; KV = 0.95 × free."""
    t = _terms("tgi", 0.8, kv_fraction_of_free=0.95, context_gib=0.5)
    used = t.weight_bytes + t.activation_peak_bytes + t.non_torch_bytes + int(0.5 * GIB)
    assert t.available_kv_bytes == int(0.95 * (int(0.8 * t.total_bytes) - used))


def test_vllm_v0_refuses_a_max_model_len_its_cache_cannot_hold(write_scenario, tmp_path,
                                                               repo_root):
    """Measured case kv_vllm_issue10517_rtx3090_llama31_8b_maxlen_effect (vLLM V0, one RTX
    3090, gpu_memory_utilization 0.90): at max_model_len 20000 the engine starts; at 29000 the
    longer profile run leaves 23,648 tokens of KV and vLLM refuses ("The model's max seq len
    (29000) is larger than the maximum number of tokens that can be stored in KV cache")."""
    from capsim.common.errors import ScenarioError

    def scenario(max_model_len: int):
        doc = {"name": "rtx3090", "model": "llama-3.1-8b",
               "hardware": str(repo_root / "benchmarks/fidelity/hardware/rtx-3090.yaml"),
               "engine": {"preset": "vllm-0.6.4", "gpu_memory_utilization": 0.90,
                          "enable_chunked_prefill": False, "enable_prefix_caching": False,
                          "max_num_seqs": 256, "max_model_len": max_model_len},
               "workload": {"num_requests": 1, "arrival": {"process": "poisson",
                                                           "rate_per_s": 1.0},
                            "classes": [{"name": "a", "weight": 1.0,
                                         "prompt_tokens": {"dist": "fixed", "value": 8},
                                         "output_tokens": {"dist": "fixed", "value": 8}}]}}
        return write_scenario(tmp_path, doc)

    assert load(scenario(20000)).runs[0].pool().kv.num_tokens > 20000
    with pytest.raises(ScenarioError, match=r"one max_model_len \(29,000\) request .* vLLM "
                                            r"refuses to start; the cache holds 22,400 tokens"):
        load(scenario(29000))
