"""Start-up memory as vLLM 0.19 logs it (capsim.kv.memory with the vllm-v1 preset).

Every figure is a line of a public vLLM 0.19.0 start-up log on an H100 80GB
(torch total 79.19 GiB, gpu_memory_utilization 0.95, max_num_batched_tokens
8192, max_num_seqs 1024), quoted in ../shared/reference/measured/cases.yaml
under the case id each test names. The tolerances are the README's claims (Fidelity
section): tokens, blocks and concurrency within 0.1 % for vLLM 0.19 (0.5 % for the RTX
3090's vLLM 0.6.4), every memory term within 0.15 GiB. The vllm-v1 preset's two
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


#: The README's KV-capacity claims: vLLM 0.19 within 0.1 %, the RTX 3090 within 0.5 %.
VLLM_019_REL, RTX3090_REL = 0.001, 0.005


def check(pool, *, tokens: int, blocks: int | None = None, rel: float = VLLM_019_REL,
          **gib: float) -> None:
    """Tokens (and blocks) within ``rel``, each logged GiB term within 0.15 GiB."""
    kv = pool.kv
    assert kv.num_tokens == pytest.approx(tokens, rel=rel)
    if blocks is not None:
        assert kv.num_gpu_blocks == pytest.approx(blocks, rel=rel)
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
    assert p.kv.max_concurrency(8192) == pytest.approx(58.11, rel=VLLM_019_REL)
    # The sweep of the same case: the pool does not depend on max_model_len.
    assert p.kv.max_concurrency(32768) == pytest.approx(14.53, rel=VLLM_019_REL)


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
    (29000) is larger than the maximum number of tokens that can be stored in KV cache");
    capsim's pool there: 23,536 tokens (-0.5 %)."""
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
                                            r"refuses to start; the cache holds 23,536 tokens"):
        load(scenario(29000))


# -- the CUDA context and the CUDA graphs ---------------------------------------------------

MIB = 2**20


def test_cuda_context_is_a_base_plus_the_gpus_local_memory_reservation(write_scenario, tmp_path,
                                                                        repo_root):
    """The context = the preset's base + SMs × resident threads per SM × 1 KiB of stack.
    On an H100 SXM (132 × 2048) that is vLLM 0.19's "worker init memory snapshot: ...
    cuda_memory=0.51GiB" (kv_vllm0190_h100_llama31_8b_tp1_bf16, the base's source); on an
    RTX 3090 (82 SMs × 1536) it predicts 0.37 GiB where vLLM 0.6.4 logged non_torch_memory
    0.35 GiB (kv_vllm_issue10517_rtx3090_llama31_8b_maxlen_effect, held out)."""
    from capsim.kv.memory import cuda_context_bytes
    from capsim.profiles.engines import load_engine_preset
    from capsim.profiles.hardware import load_hardware

    rule = load_engine_preset("vllm-0.6.4").memory
    h100 = load_hardware("h100-sxm")
    rtx = load_hardware(str(repo_root / "benchmarks/fidelity/hardware/rtx-3090.yaml"))
    assert (h100.num_sms, h100.max_threads_per_sm, rtx.num_sms, rtx.max_threads_per_sm) == (
        132, 2048, 82, 1536)
    h100_ctx = cuda_context_bytes(rule, h100.num_sms, h100.max_threads_per_sm)
    rtx_ctx = cuda_context_bytes(rule, rtx.num_sms, rtx.max_threads_per_sm)
    assert h100_ctx / GIB == pytest.approx(0.51, abs=0.005)
    assert rtx_ctx / GIB == pytest.approx(0.35, abs=0.03)
    assert h100_ctx - rtx_ctx == (132 * 2048 - 82 * 1536) * 1024
    # A GPU profile without the thread count: the base alone.
    assert cuda_context_bytes(rule, 132, None) == int(0.2522 * GIB)


@pytest.mark.parametrize("max_model_len,blocks", [(20000, 1952), (29000, 1478)])
def test_rtx3090_v0_pool_counts_that_gpus_cuda_context(write_scenario, tmp_path, repo_root,
                                                       max_model_len, blocks):
    """kv_vllm_issue10517_rtx3090_llama31_8b_maxlen_effect (vLLM 0.6.4, RTX 3090, 0.90):
    "non_torch_memory=0.35GiB", "GPU blocks: 1952" at max_model_len 20000 and "# GPU blocks:
    1478" at 29000 (kv_cache_size 3.81 / 2.89 GiB). The 29000 profile run is sized by
    max_num_batched_tokens 29000 under a max_model_len that fits (vLLM refused to serve it)."""
    doc = {"name": "rtx3090", "model": "llama-3.1-8b",
           "hardware": str(repo_root / "benchmarks/fidelity/hardware/rtx-3090.yaml"),
           "engine": {"preset": "vllm-0.6.4", "gpu_memory_utilization": 0.90,
                      "enable_chunked_prefill": False, "enable_prefix_caching": False,
                      "max_num_seqs": 256, "max_model_len": 20000,
                      "max_num_batched_tokens": max_model_len},
           "workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                        "classes": [{"name": "a", "weight": 1.0,
                                     "prompt_tokens": {"dist": "fixed", "value": 8},
                                     "output_tokens": {"dist": "fixed", "value": 8}}]}}
    p = load(write_scenario(tmp_path, doc)).runs[0].pool()
    check(p, tokens=blocks * 16, blocks=blocks, rel=RTX3090_REL, non_torch=0.35,
          available_kv={20000: 3.81, 29000: 2.89}[max_model_len])


def test_cudagraph_capture_sizes_follow_vllm_019():
    """vllm/config/vllm.py _set_cudagraph_sizes at v0.19.0: 51 sizes up to 512 (the case
    kv_vllm0190_h100_llama31_8b_tp1_bf16 logs "capture sizes 1..512 (51 sizes)"); FULL graphs
    only for sizes <= max_num_seqs (cudagraph_dispatcher.initialize_cudagraph_keys)."""
    from capsim.kv.memory import cudagraph_capture_sizes, cudagraph_count
    from capsim.profiles.engines import load_engine_preset

    sizes = cudagraph_capture_sizes(1024, 8192)
    assert len(sizes) == 51 and sizes[:5] == [1, 2, 4, 8, 16] and sizes[-2:] == [496, 512]
    assert cudagraph_capture_sizes(64, 8192) == [1, 2, 4] + list(range(8, 129, 8))
    assert cudagraph_capture_sizes(1024, 100) == [1, 2, 4] + list(range(8, 97, 8))
    rule = load_engine_preset("vllm-v1").memory
    assert cudagraph_count(rule, 1024, 8192) == 102
    assert cudagraph_count(rule, 256, 2048) == 51 + 35
    assert cudagraph_count(load_engine_preset("vllm-0.6.4").memory, 256, 8192) == 0


def test_vllm_011_captures_every_multiple_of_8():
    """vllm/config/__init__.py _set_cudagraph_sizes at v0.11.0: [1, 2, 4] + range(8, top + 1,
    8), top = min(2 max_num_seqs, 512) (vllm/config/scheduler.py cuda_graph_sizes), sizes above
    max_num_batched_tokens dropped: 67 sizes at 1,024 / 8,192 where 0.19 has 51."""
    from capsim.kv.memory import cudagraph_capture_sizes, cudagraph_count
    from capsim.profiles.engines import load_engine_preset

    sizes = cudagraph_capture_sizes(1024, 8192, step_16_from=None)
    assert sizes == [1, 2, 4] + list(range(8, 513, 8)) and len(sizes) == 67
    assert cudagraph_count(load_engine_preset("vllm-0.11").memory, 1024, 8192) == 2 * 67


def test_vllm_011_profiles_the_sorting_sampler(write_scenario, tmp_path):
    """vLLM 0.11 without FlashInfer sorts the vocabulary in the profile run's dummy sampler
    (topk_topp_sampler.py forward_native at v0.11.0): 38 bytes per logit at the sort (the
    preset's sources itemise them) against 0.19's 14, and its budget is not rounded up.
    Llama-3.1-70B FP8 (Llama-3.3-70B's shapes) on one H200 at the server defaults (8,192
    tokens, 1,024 sequences): 1,024 x 128,256 x 38 + the hidden states (8,192 + 2 x 1,024
    rows x 8,192 x 2 bytes) + 32 MiB = 4.84 GiB, against 1.96 GiB under vllm-v1."""
    doc = {"name": "v011", "model": "llama-3.1-70b", "hardware": "h200-sxm",
           "engine": {"preset": "vllm-0.11", "quantization": "fp8"},
           "workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                        "classes": [{"name": "a", "weight": 1.0,
                                     "prompt_tokens": {"dist": "fixed", "value": 8},
                                     "output_tokens": {"dist": "fixed", "value": 8}}]},
           "variants": [{"name": "v011"}, {"name": "v019", "engine": {"preset": "vllm-v1"}}]}
    v011, v019 = (r.pool().kv for r in load(write_scenario(tmp_path, doc)).runs)
    expected = 1024 * 128256 * 38 + (8192 + 2 * 1024) * 8192 * 2 + 32 * 2**20
    assert v011.memory.activation_peak_bytes == expected
    assert expected / GIB == pytest.approx(4.84, abs=0.005)
    assert v019.memory.activation_peak_bytes / GIB == pytest.approx(1.96, abs=0.005)
    assert v011.memory.budget_bytes == int(v011.memory.total_bytes * 0.9)
    assert v011.memory.cudagraph_estimate_bytes == 0
    assert v011.num_tokens < v019.num_tokens


@pytest.mark.parametrize("model,tp,extra,pool_gib,estimate_gib", [
    ("llama-3.1-8b", 1, {}, 0.91, 0.84),            # fitted
    ("llama-3.1-8b", 2, {}, 0.76, 1.69),            # fitted
    ("qwen2.5-7b", 1, {}, 0.87, 0.61),              # held out
    ("llama-3.1-70b", 2, {"dtype": "fp8"}, 1.79, None),   # held out, no estimate logged
])
def test_cuda_graphs_beside_the_budget_as_vllm_019_logs_them(pool, model, tp, extra, pool_gib,
                                                             estimate_gib):
    """"Graph capturing finished in N secs, took X GiB" and "Estimated CUDA graph memory: X
    GiB total" of kv_vllm0190_h100_llama31_8b_tp1_bf16 (0.91 / 0.84), ..._tp2_bf16 (0.76 /
    1.69), kv_vllm0190_h100_qwen25_7b_tp1_bf16 (0.87 / 0.61) and
    kv_vllm0190_h100_llama33_70b_fp8dyn_tp2 (1.79), each within 0.15 GiB. vLLM 0.19 subtracts
    neither (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): the KV memory does not include
    them, and they fit in the 5 % left beside the budget."""
    m = pool(model, tp, **extra).kv.memory
    assert m.cudagraph_pool_bytes / GIB == pytest.approx(pool_gib, abs=0.15)
    if estimate_gib is not None:
        assert m.cudagraph_estimate_bytes / GIB == pytest.approx(estimate_gib, abs=0.15)
    assert m.cudagraph_bytes == 0 and m.graphs_fit
    assert m.non_kv_bytes == m.weight_bytes + m.activation_peak_bytes + m.non_torch_bytes
    lines = m.log_lines()
    assert f"Graph capturing finished, took {m.cudagraph_pool_bytes / GIB:.2f} GiB (beside the " \
           "budget;" in lines[-1]


def test_the_graph_headroom_is_what_the_fraction_leaves_less_context_and_communicators(pool):
    """kv_vllm0190_h100_llama31_8b_tp1_bf16 / _tp2_bf16: 79.19 GiB − 75.23 requested − the
    init snapshot's non-torch memory (0.51 GiB at TP 1, 1.51 at TP 2) is free beside the
    budget: 3.45 / 2.45 GiB, more than the 0.91 / 0.76 GiB of graphs."""
    for tp, outside, room in ((1, 0.51, 3.45), (2, 1.51, 2.45)):
        m = pool("llama-3.1-8b", tp).kv.memory
        assert m.outside_budget_bytes / GIB == pytest.approx(outside, abs=0.005)
        assert m.graph_headroom_bytes / GIB == pytest.approx(room, abs=0.01)


def test_graphs_that_do_not_fit_beside_the_budget_warn(tmp_path, run_cli, write_scenario):
    """At gpu_memory_utilization 0.985 an H100 keeps 79.19 × 0.015 − 0.51 = 0.68 GiB beside the
    budget, less than Llama-3.1-8B's 0.91 GiB of graphs: vLLM 0.19 would run out of memory
    capturing them (or in the sampler warm-up after them); validate warns once and names
    the fraction that fits (still exit 0: the pool itself is sized)."""
    doc = {"name": "tight", "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"gpu_memory_utilization": 0.985, "max_model_len": 8192},
           "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1},
                        "classes": [{"name": "a", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 16},
                                     "output_tokens": {"dist": "fixed", "value": 4}}]}}
    path = write_scenario(tmp_path, doc)
    code, out, err = run_cli(["validate", str(path)])
    assert code == 0
    assert err == (f"warning: {path}: engine.gpu_memory_utilization: CUDA graphs take 0.91 GiB "
                   "per GPU beside the gpu_memory_utilization budget, where only 0.68 GiB is "
                   "free (79.19 GiB − budget 78.00 − CUDA context and communicators 0.51): the "
                   "engine would run out of memory capturing them or right after; lower "
                   "gpu_memory_utilization to <= 0.9821\n")


def test_vllm_021_charges_the_graph_estimate_to_the_kv_budget(pool):
    """vLLM >= 0.21 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default, preset
    vllm-0.21): KV = requested − non-KV − the estimate, and vLLM logs the utilization that is
    equivalent to without it; what stays beside the budget is the pool less the estimate.
    Same start-up as kv_vllm0190_h100_llama31_8b_tp1_bf16 (estimate 0.84 GiB, pool 0.91)."""
    base = pool("llama-3.1-8b", 1).kv.memory
    m = pool("llama-3.1-8b", 1, preset="vllm-0.21").kv.memory
    assert m.cudagraph_bytes == m.cudagraph_estimate_bytes == base.cudagraph_estimate_bytes
    assert m.available_kv_bytes == base.available_kv_bytes - m.cudagraph_estimate_bytes
    assert m.available_kv_bytes / GIB == pytest.approx(58.11 - 0.84, abs=0.01)
    assert m.graphs_beside_budget_bytes == m.cudagraph_pool_bytes - m.cudagraph_estimate_bytes
    assert m.non_kv_bytes / GIB == pytest.approx(17.12 + 0.84, abs=0.01)
    lines = m.log_lines()
    assert "Estimated CUDA graph memory: 0.84 GiB total" in lines
    assert ("CUDA graph memory profiling is enabled. The current gpu_memory_utilization=0.9500 "
            "is equivalent to gpu_memory_utilization=0.9394 without CUDA graph memory "
            "profiling.") in lines
    assert "(its estimate charged to the budget;" in lines[-1]
