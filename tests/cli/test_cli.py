"""The command line: bad input gets one line and exit code 2; the tools print the seeds' numbers."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest
import yaml

GOOD = {
    "name": "cli", "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096},
    "workload": {"num_requests": 30, "arrival": {"process": "poisson", "rate_per_s": 5},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 200},
                              "output_tokens": {"dist": "fixed", "value": 20}}]},
    "variants": [{"name": "a"}, {"name": "b", "engine": {"max_num_batched_tokens": 1024}}],
}


def with_(doc: dict, dotted: str, value) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(doc))
    parts = dotted.split(".")
    node = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[parts[-1]] = value
    return doc


BAD = [
    ("engine.max_num_seq", 64, "engine.max_num_seq: unknown key 'max_num_seq' (did you mean 'max_num_seqs'?)"),
    ("hardware", "h900", "hardware: unknown hardware 'h900'"),
    ("model", "llama-9b", "model: unknown model 'llama-9b'"),
    ("workload.arrival.rate_per_s", -1, "workload.arrival.rate_per_s: "),
    ("engine.block_size", 0, "engine.block_size: "),
    ("engine.gpu_memory_utilization", 1.5, "engine.gpu_memory_utilization: "),
    ("variants.1.engine.max_num_seqs", 0, "variants.1.engine.max_num_seqs: "),
    ("slo", {"targets": {"itl_p98_ms": 5}}, "unknown SLO metric 'itl_p98_ms'"),
    ("seed", -1, "seed: must be >= 0"),
    # Speculative decoding (engine.speculative, vLLM's speculative_config).
    ("engine.speculative", {"method": "eagle", "num_speculative_tokens": 3,
                            "acceptance_rate": 1.0},
     "engine.speculative.acceptance_rate: must be < 1"),
    ("engine.speculative", {"method": "medusa", "num_speculative_tokens": 3,
                            "acceptance_rate": 0.7},
     "engine.speculative.method: Input should be 'eagle', 'eagle3', 'mtp', 'draft_model' or "
     "'ngram'"),
    ("engine.speculative", {"method": "eagle", "num_speculative_tokens": 0,
                            "acceptance_rate": 0.7},
     "engine.speculative.num_speculative_tokens: must be > 0"),
    ("engine.speculative", {"method": "eagle", "num_speculative_tokens": 100_000,
                            "acceptance_rate": 0.7},
     "engine.speculative.num_speculative_tokens: num_speculative_tokens 100000 does not fit"),
    ("engine.speculative", {"method": "mtp", "num_speculative_tokens": 1,
                            "acceptance_rate": 0.7},
     "engine.speculative.method: method mtp needs a model with multi-token-prediction layers"),
    ("engine.speculative", {"method": "draft_model", "num_speculative_tokens": 3,
                            "acceptance_rate": 0.7},
     "engine.speculative.method: method draft_model needs model"),
    ("engine.speculative", {"method": "draft_model", "model": "llama-2-7b",
                            "num_speculative_tokens": 3, "acceptance_rate": 0.7},
     "engine.speculative.model: the draft model llama-2-7b has vocab_size 32,000"),
    ("engine.speculative", {"method": "eagle", "num_speculative_tokens": 3,
                            "acceptance_rate": 0.7, "acceptance_rate_by_class": {"code": 0.8}},
     "engine.speculative.acceptance_rate_by_class: no workload class named 'code'"),
    ("engine.speculative", {"method": "eagle", "num_speculative_tokens": 3,
                            "acceptance_rate": 0.7, "acceptance_rate_by_class": {"chat": -0.1}},
     "acceptance_rate_by_class.chat must be in [0, 1), got -0.1"),
    ("variants.1.engine", {"scheduler": "static", "speculative": {
        "method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}},
     "variants.1.engine.speculative: speculative decoding is modelled on vLLM V1's continuous "
     "batching and SGLang's scheduler over paged KV; this engine runs scheduler static"),
    ("seed", True, "seed: expected an integer (got true)"),
    # More replicas than one run holds in memory (a fresh user's 100,000 ran out of it).
    ("cluster", {"num_replicas": 100_000}, "cluster.num_replicas: must be <= "
                                           "1024"),
    # YAML true is not 1.0 in a float field either (issue 'Fidelity I', bad input).
    ("engine.gpu_memory_utilization", True,
     "engine.gpu_memory_utilization: expected a number, not a boolean"),
    ("workload.arrival.rate_per_s", False,
     "workload.arrival.rate_per_s: expected a number, not a boolean"),
    # Engine presets and hardware overrides (issue "Fidelity I", bad input).
    ("engine.preset", "vllm-9", "engine.preset: unknown engine preset 'vllm-9'; valid: sglang, "
                                "sglang-0.3, sglang-0.4, sglang-0.5, sglang-0.5.10, tgi, trtllm, "
                                "trtllm-bench, "
                                "vllm-0.11, vllm-0.2.5, vllm-0.21, "
                                "vllm-0.5, vllm-0.6, vllm-0.6.4, vllm-0.8, vllm-0.9, vllm-v1"),
    ("variants.1.engine.preset", "trt", "variants.1.engine.preset: unknown engine preset 'trt'"),
    ("engine.mem_fraction_static", 0.8, "engine.mem_fraction_static: mem_fraction_static is not "
                                        "a knob of engine preset 'vllm-v1'"),
    ("engine.max_waiting_tokens", 10, "engine.max_waiting_tokens: max_waiting_tokens belongs to "
                                      "the tgi scheduler"),
    ("engine", {"preset": "trtllm", "preemption_mode": "swap"},
     "engine.preemption_mode: scheduler trtllm reserves each request's whole KV"),
    ("hardware_overrides", {"hbm_gb": 94}, "hardware_overrides.hbm_gb: unknown hardware profile "
                                           "field 'hbm_gb'; valid: "),
    ("variants.1.hardware_overrides", {"memory_total_gib": -3},
     "variants.1.hardware_overrides.memory_total_gib: "),
    # Physical bounds: the engines see at most the device memory; no GPU holds 2 TiB; a
    # CUDA context larger than the GPU is a typo'd SM count, not a fraction to lower.
    ("hardware_overrides", {"memory_total_gib": 1e9},
     "hardware_overrides.memory_total_gib: memory_total_gib 1e+09 is more than the device "
     "memory, hbm_bytes = 80 GiB: the engines see the device memory less the driver's reserve "
     "(valid: 0 < memory_total_gib <= 80; for a larger GPU set hbm_bytes too)"),
    ("hardware_overrides", {"memory_total_gib": 0}, "hardware_overrides.memory_total_gib: "),
    ("hardware_overrides", {"hbm_bytes": 10**17, "memory_total_gib": 100},
     "hardware_overrides.hbm_bytes: hbm_bytes 100,000,000,000,000,000 (93,132,257 GiB) is more "
     "than any GPU holds (valid: <= 2,199,023,255,552, 2,048 GiB)"),
    ("hardware_overrides", {"num_sms": 10**8},
     "hardware_overrides.num_sms: the CUDA context and communicators alone hold 195,312.75 GiB "
     "(the context's local memory is num_sms 100000000 × max_threads_per_sm 2048 × 1024 B), "
     "more than the GPU's 79.19 GiB: check the profile's num_sms and max_threads_per_sm"),
    # fp8-KV decode attention is per engine family, each factor a fraction of the peak.
    ("hardware_overrides", {"efficiency": {"attention_decode_fp8": {"vlm": {"memory": 0.8}}}},
     "hardware_overrides.efficiency.attention_decode_fp8.vlm: Input should be 'vllm', "
     "'sglang', 'tensorrt-llm' or 'tgi' (got 'vlm')"),
    ("hardware_overrides", {"efficiency": {"attention_decode_fp8": {"vllm": {"memory": 1.8}}}},
     "hardware_overrides.efficiency.attention_decode_fp8.vllm.memory: must be <= 1 (got "
     "1.8)"),
    # Multi-step scheduling exists in vLLM 0.6 only, and without chunked prefill.
    ("engine.num_scheduler_steps", 8, "engine.num_scheduler_steps: engine preset 'vllm-v1' has "
                                      "no multi-step scheduling (valid with: vllm-0.6, "
                                      "vllm-0.6.4)"),
    ("engine", {"preset": "vllm-0.6", "num_scheduler_steps": 8, "enable_chunked_prefill": True},
     "engine.num_scheduler_steps: multi-step scheduling runs without chunked prefill"),
    ("engine.num_scheduler_steps", 0, "engine.num_scheduler_steps: "),
    # vLLM V1's long_prefill_token_threshold: V1 presets, chunked prefill, never negative.
    ("engine", {"preset": "vllm-0.6", "long_prefill_token_threshold": 2048},
     "engine.long_prefill_token_threshold: engine preset 'vllm-0.6' has no "
     "long_prefill_token_threshold (vLLM V1's; valid with: vllm-0.11, vllm-0.21, vllm-0.8, "
     "vllm-0.9, vllm-v1)"),
    ("engine", {"long_prefill_token_threshold": 2048, "enable_chunked_prefill": False},
     "engine.long_prefill_token_threshold: it caps the prompt chunk a request gets per step: "
     "set enable_chunked_prefill: true"),
    ("engine", {"preset": "sglang", "long_prefill_token_threshold": 2048},
     "engine.long_prefill_token_threshold: long_prefill_token_threshold belongs to the "
     "continuous scheduler"),
    ("engine.long_prefill_token_threshold", -1, "engine.long_prefill_token_threshold: "),
    ("engine", {"preset": "tgi", "async_scheduling": True},
     "engine.async_scheduling: engine preset 'tgi' has no async_scheduling knob (its host "
     "work is serial with the GPU step; valid with: sglang, sglang-0.4, sglang-0.5, "
     "sglang-0.5.10, trtllm, trtllm-bench, vllm-0.11, vllm-0.21, vllm-v1)"),
    ("engine", {"async_scheduling": True, "speculative": {"method": "ngram",
                                                          "num_speculative_tokens": 3,
                                                          "acceptance_rate": 0.6}},
     "engine.async_scheduling: vLLM schedules asynchronously with EAGLE / MTP drafters only, "
     "not ngram"),
    ("engine.async_scheduling", "sometimes", "engine.async_scheduling: "),
    # vLLM's --moe-backend / SGLang's --moe-runner-backend: the values capsim prices apart,
    # each on its engine's presets only (capsim/profiles/moe_runners.py).
    ("engine.moe_backend", "cutlass", "engine.moe_backend: Input should be 'auto', 'marlin', "
                                      "'triton', 'flashinfer_trtllm', 'flashinfer_mxfp4' or "
                                      "'TRTLLM' "
                                      "(got 'cutlass')"),
    ("engine", {"preset": "sglang", "moe_backend": "marlin"},
     "engine.moe_backend: engine preset 'sglang-0.5.10' runs sglang: moe_backend 'marlin' is not "
     "a runner of SGLang's --moe-runner-backend that capsim prices (valid: auto, triton, "
     "flashinfer_trtllm, flashinfer_mxfp4)"),    # sglang is another name for sglang-0.5.10
    ("engine.moe_backend", "flashinfer_mxfp4",
     "engine.moe_backend: engine preset 'vllm-v1' runs vllm: moe_backend 'flashinfer_mxfp4' "
     "is not a runner of vLLM's --moe-backend that capsim prices (valid: auto, marlin, "
     "flashinfer_trtllm)"),
    # Marlin's MoE kernels are CUDA-only (vLLM fused_marlin_moe.py MarlinExpertsBase).
    ("variants", [{"name": "a"}, {"name": "b", "model": "gpt-oss-20b", "hardware": "mi300x",
                                  "engine": {"moe_backend": "marlin"}}],
     "variants.1.engine.moe_backend: vLLM's Marlin MoE kernels run on NVIDIA GPUs only (CUDA, "
     "compute capability >= 8.0); hardware 'mi300x' runs rocm (valid: auto)"),
    ("hardware_overrides", {"efficiency": {"fused_moe_mxfp4": {"vllm": {"launch_s": -1e-6}}}},
     "hardware_overrides.efficiency.fused_moe_mxfp4.vllm.launch_s: must be >= 0"),
    # A scheduler, preemption or KV layout the preset's engine does not have.
    ("engine.scheduler", "sglang", "engine.scheduler: engine preset 'vllm-v1' runs scheduler "
                                   "continuous, not sglang (valid: continuous, static)"),
    ("engine", {"preset": "sglang", "preemption_mode": "swap"},
     "engine.preemption_mode: engine preset 'sglang-0.5.10' preempts by recompute only"),
    ("engine.preemption_mode", "swap", "engine.preemption_mode: engine preset 'vllm-v1' "
                                       "preempts by recompute only"),
    ("engine", {"preset": "trtllm", "kv_allocator": "contiguous_max_model_len"},
     "engine.kv_allocator: scheduler trtllm runs on its engine's paged KV cache"),
    ("engine", {"preset": "tgi", "enable_chunked_prefill": True},
     "engine.enable_chunked_prefill: TGI 2.1 prefills whole prompts"),
    # Prefix caching: an engine without it refuses the knob rather than ignoring it.
    ("engine", {"preset": "tgi", "enable_prefix_caching": True},
     "engine.enable_prefix_caching: TGI 2.1 has no prefix caching (it came with TGI 2.3's "
     "radix allocator); valid: false"),
    ("variants.1.engine", {"scheduler": "static", "enable_prefix_caching": True},
     "variants.1.engine.enable_prefix_caching: static batching (scheduler static) runs without "
     "a prefix cache; valid: false"),
    ("variants.1.engine", {"kv_allocator": "contiguous_max_tokens", "enable_prefix_caching": True},
     "variants.1.engine.enable_prefix_caching: kv_allocator contiguous_max_tokens has no prefix "
     "cache (it reuses paged blocks); valid: false"),
    # TGI's launcher: max_batch_prefill_tokens >= max_input_tokens (launcher/src/main.rs).
    ("engine", {"preset": "tgi", "max_model_len": 16384},
     "engine.max_model_len: TGI refuses to start with max_num_batched_tokens (its "
     "max_batch_prefill_tokens) 4,145 below max_input_tokens = max_model_len - 1 = 16,383"),
    ("variants.1.set", {"engine.preset": "sglng"},
     "variants.1.set.engine.preset: unknown engine preset 'sglng'"),
    # vLLM V1 refuses a budget above the memory free at start-up (the CUDA context holds
    # 0.51 GiB of an H100: vllm/v1/worker/utils.py request_memory at v0.19.0).
    ("engine.gpu_memory_utilization", 0.995,
     "engine.gpu_memory_utilization: 0.995 × 79.19 GiB = 78.79 GiB per GPU is more than the "
     "78.68 GiB free when vLLM starts (the CUDA context and communicators hold 0.51 GiB), so "
     "vLLM refuses to start; lower gpu_memory_utilization to <= 0.9936"),
    # vLLM refuses to start when one max_model_len request does not fit in the KV cache
    # (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory): 17.6 GiB × 0.9 leaves
    # ~0.2 GiB after 14.99 GiB of weights and the profile run, 1,600-odd tokens < 4,096.
    # Weight quantization (issue "Models of 2026"): an fp4 format on a GPU without FP4
    # tensor cores, an unknown format, two names for the weight format.
    ("engine.quantization", "nvfp4", "engine.quantization: quantization nvfp4 needs fp4 tensor "
                                     "cores; hardware 'h100-sxm' has bf16, fp16, fp8, int8"),
    ("variants.1.engine", {"quantization": "nvfp4"},
     "variants.1.engine.quantization: quantization nvfp4 needs fp4 tensor cores"),
    ("engine.quantization", "int3", "engine.quantization: unknown quantization 'int3'; valid: "
                                    "fp8, fp8_channel, fp8_block, int8, awq, gptq, nvfp4, mxfp4"),
    ("engine", {"dtype": "fp8", "quantization": "awq"},
     "engine.quantization: dtype fp8 already means quantization fp8_channel"),
    ("variants.1.hardware_overrides", {"memory_total_gib": 17.6},
     "variants.1.hardware_overrides.memory_total_gib: one max_model_len (4,096) request needs "
     "0.50 GiB of KV cache per GPU, more than the "),
    # Expert parallelism and DP attention (issue 15, bad input): a dense model, and an EP
    # size that does not divide the experts (Mixtral's 8 over 16 GPUs).
    ("variants.1.engine.enable_expert_parallel", True,
     "variants.1.engine.enable_expert_parallel: enable_expert_parallel needs a "
     "mixture-of-experts model; llama-3.1-8b is dense"),
    ("engine.enable_dp_attention", True,
     "engine.enable_dp_attention: enable_dp_attention needs a mixture-of-experts model"),
    ("variants", [{"name": "a"}, {"name": "b", "model": "mixtral-8x7b", "engine": {
        "tensor_parallel_size": 16, "enable_expert_parallel": True}}],
     "variants.1.engine.tensor_parallel_size: expert parallel size 16 (tensor_parallel_size) "
     "must divide num_experts 8 of mixtral-8x7b"),
    ("engine.moe_routing_skew", -0.5, "engine.moe_routing_skew: "),
    ("engine.moe_routing_skew", 0.5, "engine.moe_routing_skew: moe_routing_skew needs a "
                                     "mixture-of-experts model; llama-3.1-8b is dense"),
    # Pipeline parallelism (issue 15, bad input): every stage needs a layer (vLLM's
    # get_pp_indices); Llama-3.1-8B has 32. The scale-out link must exist.
    ("engine.pipeline_parallel_size", 33, "engine.pipeline_parallel_size: "
     "pipeline_parallel_size 33 exceeds the model's 32 layers"),
    ("variants.1.engine.pipeline_parallel_size", 0, "variants.1.engine.pipeline_parallel_size: "),
    ("hardware_overrides", {"scale_out_link": "infiniband-xdr"},
     "hardware_overrides.scale_out_link: unknown link 'infiniband-xdr'"),
    ("hardware_overrides", {"scale_out_link": None},
     "gpus_per_node and scale_out_link must both be set"),
    # A name becomes file names (timeline_<name>.png) and table labels: at most 100
    # characters, and the echo of the bad value is cut (one screen line, not 5,000 v's).
    ("variants.0.name", "v" * 5000, "variants.0.name: String should have at most 100 "
                                    "characters (got 'vvvvv"),
    ("name", "n" * 300, "name: String should have at most 100 characters"),
    # TP 16 over nodes of 12: a TP group across nodes takes whole nodes (its all-reduces are
    # priced over NVLink in each node and the scale-out link between them).
    ("variants", [{"name": "a", "engine": {"tensor_parallel_size": 16},
                   "hardware_overrides": {"gpus_per_node": 12}}],
     "variants.0.engine.tensor_parallel_size: tensor_parallel_size 16 spans nodes of 12 "
     "h100-sxm[gpus_per_node=12] GPUs unevenly"),
    # Pooled fleets (issue 17 item 5): a class asking for a model no pool serves, a route to
    # a pool that does not exist, two pools with one name, a pool whose model does not fit
    # its GPUs (Llama-3.1-70B's 131 GiB of bf16 weights on one 80 GB H100).
    ("cluster", {"pools": [{"name": "h100"}, {"name": "h200", "hardware": "h200-sxm"}],
                 "route": [{"class": "chat", "pool": "h20"}]},
     "cluster.route.0.pool: no pool named 'h20'; valid: h100, h200"),
    ("cluster", {"pools": [{"name": "h100"}, {"name": "h100", "hardware": "h200-sxm"}]},
     "cluster.pools.1.name: pool name 'h100' is already used by pool 0; pool names must be "
     "unique"),
    ("cluster", {"pools": [{"name": "big", "model": "llama-3.1-70b"}]},
     "cluster.pools.0.model: "),
    ("cluster", {"pools": [{"name": "qwen", "model": "qwen2.5-7b"}]},
     "workload.classes.0.model: asks for model llama-3.1-8b (the variant's; a class names its "
     "own with model:), which no pool serves; pools serve: qwen2.5-7b"),
    ("workload.classes.0.model", "mistral-7b",
     "workload.classes.0.model: asks for model mistral-7b, which no pool serves; pools serve: "
     "llama-3.1-8b"),
    ("cluster", {"router": "cost"}, "cluster: router: cost picks among pools; give "
                                    "cluster.pools"),
    ("cluster", {"num_replicas": 2, "pools": [{"name": "h100"}]},
     "cluster: with pools, give num_replicas per pool (cluster.pools.N.num_replicas)"),
    ("cluster", {"pools": [{"name": "h100", "engine": {"max_num_seqs": 0}}]},
     "cluster.pools.0.engine.max_num_seqs: "),
    # A length beyond int64 was a traceback (OverflowError) when the trace was drawn.
    ("workload.classes.0.prompt_tokens", {"dist": "fixed", "value": 10**20},
     "workload.classes.0.prompt_tokens.value: must be <= "
     "2147483647"),
    ("workload.classes.0.output_tokens", {"dist": "uniform", "min": 1, "max": 2**63},
     "workload.classes.0.output_tokens.max: must be <= 2147483647"),
    # A key is listed as YAML spells it (a route rule's class:, not the field's name cls).
    ("cluster", {"pools": [{"name": "h100"}], "route": [{"class": "chat", "pool": "h100",
                                                         "weight": 2}]},
     "cluster.route.0.weight: unknown key 'weight'; valid keys: class, min_prompt_tokens, "
     "pool"),
    # In a tagged union the keys are the tagged member's, not the first member's: a
    # uniform length read "unknown key 'value' (did you mean 'value'?); valid keys: dist,
    # value", a diurnal schedule listed the piecewise one's keys.
    ("workload.classes.0.prompt_tokens", {"dist": "uniform", "min": 1, "max": 5, "value": 3},
     "workload.classes.0.prompt_tokens.value: unknown key 'value'; valid keys: dist, max, "
     "min\n"),
    ("workload.schedule", {"kind": "diurnal", "peak": 1, "trough": 0.5, "peak_hour": 20,
                           "step_s": 60},
     "workload.schedule.step_s: unknown key 'step_s'; valid keys: kind, peak, peak_hour, "
     "period_s, resolution_s, trough\n"),
    # YAML reads an unquoted 2024-01-01 as a date: say so, not datetime.date(2024, 1, 1).
    ("variants.0.name", datetime.date(2024, 1, 1),
     "variants.0.name: expected a string (got 2024-01-01, a date: quote it)\n"),
    # Arrivals near 1e300 s: a step added to the clock vanished, every latency read 0.
    ("workload.arrival.rate_per_s", 1e-300,
     "workload.arrival.rate_per_s: the 30 requests (num_requests 30 at rate_per_s 1e-300) "
     "arrive over "),
    # kv_cache_memory_gib 1e300: int() of 1e300 × 2^30 (inf) was a traceback.
    ("engine.kv_cache_memory_gib", 1e300,
     "engine.kv_cache_memory_gib: kv_cache_memory_gib 1e+300 per GPU exceeds the "),
    # Plain int / float fields took YAML true as 1: one request, a factor of 1.
    ("workload.num_requests", True, "workload.num_requests: expected an integer (got true)\n"),
    ("workload.schedule", {"kind": "piecewise", "step_s": 60, "factors": [True, 1]},
     "workload.schedule.factors.0: expected a number, not a boolean (got true)\n"),
    # A number inside a mapping took YAML true as 1 (a 1 ms target, a 1 ms class TTFT).
    ("slo", {"targets": {"itl_p99_ms": True}},
     "slo.targets.itl_p99_ms: expected a number, not a boolean (got true)\n"),
    ("workload.classes.0.slo", {"ttft_ms": True},
     "workload.classes.0.slo.ttft_ms: expected a number, not a boolean (got true)\n"),
    # sigma² overflowed a float: a traceback from the trace builder.
    ("workload.classes.0.prompt_tokens", {"dist": "lognormal", "mean": 600, "sigma": 1e300,
                                          "min": 16, "max": 4096},
     "workload.classes.0.prompt_tokens.sigma: must be <= 20 (got 1e+300)\n"),
    # The router's queue timeout (a gateway's): seconds, > 0, finite.
    ("cluster", {"router_queue_timeout_s": -5},
     "cluster.router_queue_timeout_s: must be > 0 (got -5)\n"),
    ("cluster", {"router_queue_timeout_s": float("inf")},
     "cluster.router_queue_timeout_s: must be a finite number (got inf)\n"),
    # The valid startup profiles are named once.
    ("cluster", {"num_replicas": 1, "autoscaling": {
        "signal": "running", "target": 8, "min_replicas": 1, "max_replicas": 2,
        "provisioning": {"profile": "vllm-v2"}}},
     "cluster.autoscaling.provisioning.profile: unknown startup profile 'vllm-v2'; valid: "
     "vllm-v1\n"),
]


@pytest.mark.parametrize("field,value,expected", BAD)
def test_bad_field_is_one_line_naming_file_and_path(tmp_path, run_cli, write_scenario, field,
                                                    value, expected):
    path = write_scenario(tmp_path, with_(GOOD, field, value))
    out_dir = tmp_path / "report"
    code, out, err = run_cli(["run", str(path), "-o", str(out_dir)])
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: ")
    assert expected in err
    assert "Traceback" not in err
    assert not out_dir.exists()


@pytest.mark.parametrize("scenario_engine,expected", [
    ({"scheduler": "continuous"}, "variants.1.engine.preset: engine preset 'trtllm' runs "
                                  "scheduler trtllm, not continuous (valid: trtllm) "
                                  "(engine.scheduler is set for the whole scenario"),
    ({"gpu_memory_utilization": 0.9}, "variants.1.engine.preset: gpu_memory_utilization is not "
                                      "a knob of engine preset 'trtllm'"),
])
def test_scenario_knob_against_a_variants_preset_names_the_variant(
        tmp_path, run_cli, write_scenario, scenario_engine, expected):
    """A knob in the scenario's engine: binds every variant; the variant whose preset lacks
    it is named, and the message says the knob is scenario-wide."""
    doc = with_(with_(GOOD, "engine", {"max_model_len": 4096, **scenario_engine}),
                "variants.1.engine", {"preset": "trtllm"})
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and err.count("\n") == 1
    assert expected in err


def test_prefix_caching_without_a_prefix_cache_is_off_unless_asked_for(tmp_path, run_cli,
                                                                       write_scenario):
    """vllm-v1's default (on) does not reach a static-batching variant, which resolves to
    off; the same knob set true for the whole scenario names the variant that cannot have
    it."""
    from capsim.scenario.load import load

    doc = with_(GOOD, "variants.1.engine", {"scheduler": "static"})
    runs = load(write_scenario(tmp_path, doc)).runs
    assert [rc.pool().engine.enable_prefix_caching for rc in runs] == [True, False]
    doc = with_(doc, "engine", {"max_model_len": 4096, "enable_prefix_caching": True})
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and err.count("\n") == 1
    assert ("variants.1.engine.scheduler: static batching (scheduler static) runs without a "
            "prefix cache, and engine.enable_prefix_caching: true is set for the whole "
            "scenario (move it into the variants that need it)") in err


def test_each_level_of_hardware_overrides_is_checked_on_its_own(tmp_path, run_cli,
                                                                  write_scenario):
    """A bad scenario-level override is named there even when a variant overrides too."""
    doc = with_(with_(GOOD, "hardware_overrides", {"memory_total_gib": -1}),
                "variants.1.hardware_overrides", {"memory_total_gib": 70})
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and ": hardware_overrides.memory_total_gib: " in err


def test_a_mapping_override_is_merged_into_the_profile(tmp_path, write_scenario):
    """{peak_flops_per_s: {fp8: …}} changes the fp8 peak and keeps the bf16 one
    (989 TFLOP/s dense, the H100 SXM datasheet)."""
    from capsim.scenario.load import load

    doc = with_(GOOD, "hardware_overrides", {"peak_flops_per_s": {"fp8": 1.5e15}})
    hw = load(write_scenario(tmp_path, doc)).runs[0].pool().hardware
    assert hw.peak_flops("fp8") == 1.5e15 and hw.peak_flops("bf16") == pytest.approx(989e12,
                                                                                       rel=0.01)


def test_hardware_override_is_applied_and_named(tmp_path, run_cli, write_scenario):
    """An H100 NVL's 94 GB without a new profile: the pool grows, the hardware says so."""
    doc = with_(GOOD, "variants.1.hardware_overrides", {"hbm_bytes": 94 * 2**30,
                                                        "memory_total_gib": 93.1})
    code, out, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0
    assert "b: 1 × h100-sxm[hbm_bytes=100931731456,memory_total_gib=93.1] TP1" in out
    stock, nvl = [int(line.split()[4].replace(",", "")) for line in out.splitlines()
                  if "GPU KV cache size" in line]
    assert nvl > stock


def test_missing_field_and_weights_that_do_not_fit(tmp_path, run_cli, write_scenario):
    doc = dict(GOOD)
    del doc["model"]
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and "model: required field is missing" in err
    big = with_(with_(GOOD, "model", "llama-3.1-70b"), "hardware", "a100-80gb")
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, big))])
    assert code == 2 and "engine.gpu_memory_utilization" in err and "do not fit" in err


def test_trace_errors_name_the_line(tmp_path, run_cli, write_scenario):
    csv = tmp_path / "t.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.6805900,100,20\n"
                   "2023-11-16 18:15:47.0000000,abc,20\n")
    doc = {k: v for k, v in GOOD.items() if k != "workload"}
    doc["workload"] = {"trace": {"path": "t.csv"}}
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and "line 3" in err and "abc" in err
    doc["workload"] = {"trace": {"path": "missing.csv"}}
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and "not found" in err


def test_a_trace_column_named_twice_is_one_line_not_the_first_of_them(tmp_path, run_cli,
                                                                      write_scenario):
    """pandas would read the first 'ContextTokens' and rename the second: refused instead."""
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n"
                                    "2023-11-16 18:15:46.6805900,100,20,5\n")
    doc = {k: v for k, v in GOOD.items() if k != "workload"}
    doc["workload"] = {"trace": {"path": "t.csv"}}
    out_dir = tmp_path / "report"
    code, _, err = run_cli(["run", str(write_scenario(tmp_path, doc)), "-o", str(out_dir)])
    assert code == 2 and "Traceback" not in err and not out_dir.exists()
    assert err == (f"error: {tmp_path / 't.csv'}: workload.trace.path: line 1: column "
                   "'ContextTokens' is named 2 times in the header (columns 2, 4); keep one\n")


@pytest.mark.parametrize("edit, expected", [
    (("version: 0.19.0", "versio: 0.19.0"),
     "bad.yaml: versio: unknown key 'versio' (did you mean 'version'?)"),
    (("  gpu_memory_utilization: 0.9", "  gpu_memory_utilization: 1.7"),
     "bad.yaml: defaults.gpu_memory_utilization: must be <= 1 "
     "(got 1.7)"),
    (("  max_num_seqs: 256", "  max_num_seq: 256"),
     "bad.yaml: defaults.max_num_seq: unknown key 'max_num_seq' (did you mean "
     "'max_num_seqs'?)"),
])
def test_a_preset_file_with_errors_inside_names_it_and_the_key_in_it(
        tmp_path, run_cli, write_scenario, repo_root, edit, expected):
    """Its defaults were blamed on the scenario's engine.gpu_memory_utilization, which the
    user never wrote; a typo'd key showed as its field missing."""
    text = (repo_root / "capsim/profiles/data/engines/vllm-v1.yaml").read_text()
    assert edit[0] in text
    (tmp_path / "bad.yaml").write_text(text.replace(edit[0], edit[1], 1))
    path = write_scenario(tmp_path, with_(GOOD, "engine.preset", "bad.yaml"))
    out_dir = tmp_path / "report"
    code, _, err = run_cli(["run", str(path), "-o", str(out_dir)])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {tmp_path}/{expected}")
    assert err.endswith(f" (engine.preset of {path})\n")
    assert not out_dir.exists()
    code, _, err = run_cli(["roofline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                            "--preset", str(tmp_path / "bad.yaml"), "--decode-batch", "8",
                            "--context", "100"])
    if "defaults." not in expected:          # roofline reads no engine knob
        # the option's one form, as for bad YAML: --preset FILE: YAML.PATH: message
        assert code == 2 and err == f"error: --preset {tmp_path}/{expected}\n"


def test_a_boolean_set_on_the_command_line_is_yamls_boolean(tmp_path, run_cli,
                                                             write_scenario):
    """``--set engine.async_scheduling=false`` is parsed as YAML, so it is the boolean false
    (validate names async scheduling off) and scenario.resolved.yaml writes it unquoted;
    the quoted string 'false' is refused (pydantic's lax booleans would take it)."""
    path = write_scenario(tmp_path, GOOD)
    code, out, _ = run_cli(["validate", str(path), "--set", "engine.async_scheduling=false"])
    assert code == 0 and "async scheduling off" in out
    code, _, _ = run_cli(["run", str(path), "-o", str(tmp_path / "r"), "--no-charts",
                          "--set", "engine.async_scheduling=false"])
    text = (tmp_path / "r" / "scenario.resolved.yaml").read_text()
    assert code == 0 and "  async_scheduling: false\n" in text
    code, _, err = run_cli(["validate", str(path), "--set", "engine.async_scheduling='false'"])
    assert code == 2 and err.endswith("engine.async_scheduling: expected true or false, "
                                      "unquoted (got 'false')\n")


def test_bad_set_and_missing_file(tmp_path, run_cli, write_scenario):
    path = write_scenario(tmp_path, GOOD)
    code, _, err = run_cli(["validate", str(path), "--set", "engine.max_num_seqs"])
    assert code == 2 and "dotted.key=value" in err
    code, _, err = run_cli(["validate", str(tmp_path / "nope.yaml")])
    assert code == 2 and "nope.yaml" in err


def test_run_writes_the_report_and_set_overrides(tmp_path, run_cli, write_scenario):
    path = write_scenario(tmp_path, GOOD)
    out_dir = tmp_path / "r"
    code, out, _ = run_cli(["run", str(path), "-o", str(out_dir), "--seed", "7",
                            "--set", "cluster.num_replicas=2"])
    assert code == 0
    for name in ("index.html", "summary.csv", "requests.csv", "scenario.resolved.yaml"):
        assert (out_dir / name).is_file()
    resolved = yaml.safe_load((out_dir / "scenario.resolved.yaml").read_text())
    assert resolved["seed"] == 7 and resolved["cluster"]["num_replicas"] == 2
    assert resolved["capsim_version"]
    assert "GPU KV cache size:" not in out          # start-up lines only with -v (issue 31)
    # How far to trust it (issue 'Fidelity II'): the terminal and the report name the
    # preset x GPU's measured cases (vLLM 0.19 on H100: the 7 kv_vllm0190_h100_* start-ups
    # and the 4 project-collected H100 serving cases of
    # benchmarks/fidelity/supplementary_cases.yaml) from capsim/profiles/data/trust.yaml.
    from capsim.profiles.trust import coverage
    line = coverage("vllm-v1", "h100-sxm").text()
    assert ("how far to trust it: vllm-v1 on h100-sxm: median |error| (n: figures) over 11 measured case(s), "
            "4 project-collected") in out
    assert line in (out_dir / "index.html").read_text()


def test_roofline_command_prints_the_seed_decode_step(run_cli):
    """Seed 000: Llama-2-7B decode, batch 32 at 512 context on an A100: ≈ 11 ms, memory-bound."""
    code, out, _ = run_cli(["roofline", "--model", "llama-2-7b", "--hardware", "a100-80gb",
                            "--decode-batch", "32", "--context", "512", "--ideal"])
    assert code == 0 and "memory-bound" in out
    ms = float(out.split("→")[1].split("ms")[0])
    assert ms == pytest.approx(11.03, rel=0.05)


def test_roofline_prices_the_presets_all_reduce(run_cli):
    """Llama-70B TP 4, 8 decode tokens on an H100: vLLM's one-shot kernel (the default
    preset) 0.95 ms of communication per step, NCCL's ring (TGI) 4.2 ms
    (tests/cost/test_all_reduce.py has the terms); an unknown preset is one line, exit 2."""
    base = ["roofline", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "4",
            "--decode-batch", "8", "--context", "100"]
    code, out, _ = run_cli(base)
    assert code == 0 and "comm 0.948 ms" in out
    code, out, _ = run_cli([*base, "--preset", "tgi"])
    assert code == 0 and "comm 4.244 ms" in out
    code, out, err = run_cli([*base, "--preset", "vllm-9"])
    assert code == 2 and err.startswith("error: --preset: unknown engine preset 'vllm-9'; valid: ")
    assert err.count("\n") == 1


def test_roofline_shows_the_experts_a_moe_step_reads(run_cli):
    """Qwen3-30B-A3B (128 experts, top 8): one decoding token reads 8 of them per MoE
    layer, 32 tokens 128·(1 − (1 − 8/128)^32) = 111.8, a 2,048-token prefill all 128;
    a skewed routing reads fewer."""
    base = ["roofline", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm"]
    code, out, _ = run_cli([*base, "--decode-batch", "1", "--context", "1000"])
    assert code == 0 and "experts: 8.0 of 128 read per MoE layer" in out
    code, out, _ = run_cli([*base, "--decode-batch", "32", "--context", "1000"])
    assert "experts: 111.8 of 128" in out and "87% of the expert weights" in out
    code, out, _ = run_cli([*base, "--prefill-tokens", "2048"])
    assert "experts: 128.0 of 128" in out
    code, out, _ = run_cli([*base, "--decode-batch", "32", "--context", "1000",
                            "--routing-skew", "1.0"])
    hit = float(out.split("experts: ")[1].split(" of")[0])
    assert 8 < hit < 111.8


def test_models_command_shows_moe_and_mla_rows(run_cli):
    code, out, _ = run_cli(["models"])
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    assert code == 0
    assert "671.03" in rows["deepseek-v3"] and "36.63" in rows["deepseek-v3"]
    assert "MLA" in rows["deepseek-v3"] and "8 of 256" in rows["deepseek-v3"]
    assert "72 (36 paged)" in rows["gpt-oss-120b"] and "18 sliding 128" in rows["gpt-oss-120b"]


def test_hardware_command_lists_profiles(run_cli):
    code, out, _ = run_cli(["hardware"])
    assert code == 0 and "a100-80gb" in out and "h100-sxm" in out


@pytest.mark.parametrize("what", ["scenario", "hardware", "model"])
def test_a_file_that_is_not_utf8_is_one_line(tmp_path, run_cli, write_scenario, what):
    """A Latin-1 file used to end in a UnicodeDecodeError traceback (issue 16, a fresh
    user's bad input)."""
    bad = tmp_path / ("config.json" if what == "model" else "bad.yaml")
    bad.write_bytes(b"name: caf\xe9\n")
    path = bad if what == "scenario" else write_scenario(tmp_path, with_(GOOD, what, str(bad)))
    code, out, err = run_cli(["validate", str(path)])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{bad}: " in err and "not UTF-8 text (byte 0xe9 at offset 9); save it as UTF-8" in err


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "capsim", "--version"], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and "capsim" in proc.stdout


@pytest.mark.parametrize("field,value,expected", [
    ("engine.block_size", 24, "engine.block_size: block_size must be a power of two"),
    ("engine.swap_space_gib", 600, "exceeds host_memory_gib"),
])
def test_kv_knobs_are_validated(tmp_path, run_cli, write_scenario, field, value, expected):
    doc = with_(with_(with_(GOOD, field, value), "engine.preemption_mode", "swap"),
                "engine.preset", "vllm-0.6")        # swap preemption: vLLM V0
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and expected in err and err.count("\n") == 1


@pytest.mark.parametrize("args,expected", [
    (["--set", "engine={max_num_seqs: 4"], "--set engine: value is not valid YAML"),
    (["--set", "name.foo=1"], "error: --set name.foo: cannot set 'foo' inside str value 'cli' "
                              "(at name)\n"),
    (["--set", "name=../x"], "name: expected letters, digits, '.', '_' and '-', from a letter "
                             "or digit (it names the report folder reports/<name>), e.g. "
                             "rag_mix (got '../x')\n"),
    (["--set", "engine.tensor_parallel_size=3"],
     "error: --set engine.tensor_parallel_size: tensor_parallel_size 3 must divide "
     "num_attention_heads 32"),
    (["--set", "slo.targets.itl_p99_ms=-60"], "target itl_p99_ms must be >= 0"),
    (["--set", "slo.targets.goodput_fraction=1.5"], "goodput_fraction is a fraction: 0..1"),
    (["--set", "slo.targets.ttft_p99_ms=.nan"],
     "slo.targets.ttft_p99_ms: must be a finite number (got nan)"),
    (["--set", "workload.duration_s=.inf"], "workload.duration_s: must be a finite number"),
    (["--set", "cluster.num_replicas=true"],
     "cluster.num_replicas: expected an integer (got true)"),
    (["--set", "engine.block_size=16.0"], "engine.block_size: expected an integer (got 16.0; "
                                         "an integer is written without a decimal point: 16)"),
    (["--set", "engine.block_size=7"], "use 8, 16, 32, ...), got 7\n"),   # said it twice
    (["--set", "variants.1.name=a"], "variants: variant names must be unique; repeated: a "
                                     "(with --set variants.1.name)\n"),
    (["--set", "variants.9.name=x"], "error: --set variants.9.name: list index must be 0..1 "
                                     "(at variants.9)\n"),
])
def test_more_bad_input_is_one_line(tmp_path, run_cli, write_scenario, args, expected):
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, GOOD)), *args])
    assert code == 2 and expected in err and err.count("\n") == 1


def test_a_rule_broken_with_set_names_the_keys_of_its_own_section(tmp_path, run_cli,
                                                                   write_scenario):
    """workload.duration_s beside the file's num_requests: the line named engine.max_num_seqs
    too, which has nothing to do with it."""
    path = write_scenario(tmp_path, GOOD)
    code, _, err = run_cli(["validate", str(path), "--set", "workload.duration_s=5",
                            "--set", "engine.max_num_seqs=8"])
    assert code == 2 and err == (f"error: {path}: workload: give exactly one of num_requests "
                                 "or duration_s for synthetic arrivals (with --set "
                                 "workload.duration_s)\n")


def test_a_missing_trace_names_the_scenario_and_a_normalised_path(tmp_path, run_cli,
                                                                  write_scenario):
    doc = with_(GOOD, "workload", {"trace": {"path": "sub/../missing.csv"}})
    path = write_scenario(tmp_path, doc)
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.count("\n") == 1
    assert err == (f"error: {path}: workload.trace.path: trace file not found: "
                   f"{tmp_path / 'missing.csv'} (paths in a scenario are relative to the "
                   f"scenario's directory, {tmp_path})\n")


def test_size_refuses_max_gpus_with_a_fixed_gpu_count(tmp_path, run_cli, write_scenario):
    code, _, err = run_cli(["size", str(write_scenario(tmp_path, GOOD)), "--gpus", "8",
                            "--max-gpus", "4"])
    assert code == 2 and "--max-gpus bounds the search" in err and err.count("\n") == 1


def test_a_negative_seed_is_refused_before_anything_runs(tmp_path, run_cli, write_scenario):
    out_dir = tmp_path / "report"
    code, _, err = run_cli(["run", str(write_scenario(tmp_path, GOOD)), "--seed", "-1",
                            "-o", str(out_dir)])
    assert code == 2 and "Invalid value for '--seed'" in err and err.count("\n") == 1
    assert not out_dir.exists()


def test_a_typo_on_a_required_key_names_the_typo(tmp_path, run_cli, write_scenario):
    doc = {("hardwre" if k == "hardware" else k): v for k, v in GOOD.items()}
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and "unknown key 'hardwre' (did you mean 'hardware'?)" in err


def test_output_directory_that_is_not_a_report_is_never_replaced(tmp_path, run_cli, write_scenario,
                                                                  monkeypatch):
    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    path = write_scenario(tmp_path, GOOD)
    code, _, err = run_cli(["run", str(path), "-o", str(keep)])
    assert code == 2 and "is not a capsim report" in err
    assert (keep / "notes.txt").read_text() == "mine"
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["run", str(path), "-o", "."])
    assert code == 2 and "working directory" in err
    code, _, err = run_cli(["size", str(path), "--rate", "0"])
    assert code == 2 and "--rate must be a finite number > 0" in err
    code, _, err = run_cli(["run", str(tmp_path)])
    assert code == 2 and err.count("\n") == 1 and "is a directory" in err


def test_models_command_lists_presets_with_seed_kv_figures(run_cli):
    """Seeds 001/002: Llama-2-7B 512 KiB/token, Llama-3.1-8B 128, Llama-3.1-70B 320."""
    code, out, _ = run_cli(["models"])
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    assert code == 0
    assert " 512 " in rows["llama-2-7b"] and " 128 " in rows["llama-3.1-8b"]
    assert " 320 " in rows["llama-3.1-70b"]


def test_a_repeated_key_is_refused_not_silently_dropped(tmp_path, run_cli):
    """PyYAML keeps the last of two equal keys; a second engine: section would silently
    replace the first. capsim refuses the file instead."""
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump(GOOD, sort_keys=False) + "seed: 7\nengine: {max_num_seqs: 8}\n")
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {path}: invalid YAML at line ") and "duplicate key" in err


def test_validate_warns_when_requests_exceed_max_model_len(tmp_path, run_cli, write_scenario):
    """They would be rejected one by one at run time (vLLM answers each with HTTP 400);
    validate says so up front."""
    doc = with_(GOOD, "workload.classes.0.prompt_tokens",
                {"dist": "uniform", "min": 4000, "max": 4090})
    code, out, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0
    assert out.count("warning: 7 of 30 requests will be rejected, e.g. prompt + output = ") == 2
    code, out, _ = run_cli(["validate", str(write_scenario(tmp_path, GOOD))])
    assert code == 0 and "warning" not in out


@pytest.mark.parametrize("field,value,expected", [
    ("engine.max_model_len", 10,
     "variants.0: variant a would reject every request (30 of 30), e.g. prompt + output = 220 "
     "tokens exceeds max_model_len 10; it would complete none (capsim run exits 2)\n"),
    ("variants.1.engine", {"preset": "trtllm", "enable_chunked_prefill": False,
                           "max_num_batched_tokens": 100},
     "variants.1: variant b would reject every request (30 of 30), e.g. its 200-token prompt "
     "exceeds max_num_batched_tokens 100 without chunked prefill;"),
])
def test_validate_refuses_a_variant_that_would_reject_every_request(
        tmp_path, run_cli, write_scenario, field, value, expected):
    """vLLM starts with max_model_len 10 (it bounds the length above only:
    _get_and_verify_max_len) and then rejects every request; capsim run writes the report
    and exits 2. validate said "ok" with a warning; it now gives run's verdict up front."""
    path = write_scenario(tmp_path, with_(GOOD, field, value))
    code, out, err = run_cli(["validate", str(path)])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {path}: ") and expected in err


def test_validate_and_run_warn_of_prompts_over_an_unchunked_budget(tmp_path, run_cli,
                                                                   write_scenario):
    """TensorRT-LLM without chunked context cannot run a prompt over max_num_tokens (8,192):
    validate says so before the run, run after it."""
    doc = with_(with_(GOOD, "engine", {"preset": "trtllm", "max_model_len": 16384}),
                "workload.classes.0.prompt_tokens", {"dist": "fixed", "value": 9000})
    doc["variants"] = [{"name": "a"}]
    path = write_scenario(tmp_path, doc)
    warning = ("30 of 30 requests will be rejected, e.g. its 9000-token prompt exceeds "
               "max_num_batched_tokens 8192 without chunked prefill")
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and f"variant a would reject every request ({warning.replace(' requests will be rejected', ')')}" in err
    code, out, err = run_cli(["run", str(path), "-o", str(tmp_path / "r")])
    assert code == 2                                # a variant that completed no request
    assert err.count("\n") == 1 and "Warning" not in err   # no plotting warning either
    assert ("warning: a: every request rejected (30 of 30), e.g. its 9000-token prompt exceeds "
            "max_num_batched_tokens 8192 without chunked prefill") in out


def test_a_variant_that_completes_no_request_is_an_error_after_the_report(
        tmp_path, run_cli, write_scenario):
    """Issue 16: with max_model_len 100 all 60 requests are rejected; run used to print a
    table of dashes and exit 0. The report is still written (it says why) and the terminal
    warns; then one error line names the variant and the exit code is 2."""
    doc = with_(with_(GOOD, "workload.num_requests", 60), "variants.1.engine",
                {"max_model_len": 100})
    path = write_scenario(tmp_path, doc)
    out_dir = tmp_path / "r"
    code, out, err = run_cli(["run", str(path), "-o", str(out_dir)])
    assert code == 2
    assert ("warning: b: every request rejected (60 of 60), e.g. prompt + output = 220 tokens "
            "exceeds max_model_len 100") in out
    assert "warning: a:" not in out
    assert err == (f"error: {path}: variants.1: 1 of 2 variant(s) completed no request (b: all "
                   f"60 requests rejected); the report says why: {out_dir / 'index.html'}\n")
    html = (out_dir / "index.html").read_text()
    assert ("b: every request was rejected (60 of 60), e.g. prompt + output = 220 tokens exceeds "
            "max_model_len 100 — it completed no request") in html
    assert "a: every request" not in html


def test_some_rejections_are_a_report_alert_not_an_error(tmp_path, run_cli, write_scenario):
    doc = with_(GOOD, "workload.classes", [
        {**GOOD["workload"]["classes"][0], "name": "short", "weight": 1},
        {**GOOD["workload"]["classes"][0], "name": "long", "weight": 1,
         "prompt_tokens": {"dist": "fixed", "value": 5000}}])
    out_dir = tmp_path / "r"
    code, out, err = run_cli(["run", str(write_scenario(tmp_path, doc)), "-o", str(out_dir),
                              "--no-charts"])
    summary = out_dir / "summary.csv"
    import pandas as pd

    row = pd.read_csv(summary).query("variant == 'a' and cls == 'all'").iloc[0]
    assert code == 0 and err == "" and 0 < row.num_rejected < 30
    text = (f"a: {row.num_rejected:,} of 30 requests rejected, e.g. prompt + output = 5020 "
            f"tokens exceeds max_model_len 4096")
    assert f"warning: {text}" in out
    assert (f"{text}; its latencies cover the {30 - row.num_rejected:,} that finished."
            in (out_dir / "index.html").read_text())


def test_roofline_warns_when_the_step_cannot_fit_on_the_gpu(run_cli):
    """Llama-3.1-70B in bf16 (≈131 GiB of weights, models/llama-3.1-70b) on one 48 GB L40S."""
    code, _, err = run_cli(["roofline", "--model", "llama-3.1-70b", "--hardware", "l40s",
                            "--decode-batch", "1", "--context", "100"])
    assert code == 0 and "warning: does not fit: 131.4 GiB per GPU" in err
    code, _, err = run_cli(["roofline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                            "--decode-batch", "32", "--context", "1000"])
    assert code == 0 and "warning" not in err


def test_merge_keys_still_work_and_may_be_overridden(tmp_path, run_cli):
    """`<<: *base` brings keys in that the mapping may override; only keys written twice
    in one mapping are an error."""
    text = yaml.safe_dump({k: v for k, v in GOOD.items() if k not in ("engine", "variants")},
                          sort_keys=False)
    text += ("engine: &eng {max_num_seqs: 64, max_model_len: 4096}\n"
             "variants:\n  - name: a\n    engine: {<<: *eng, max_num_seqs: 32}\n")
    path = tmp_path / "merge.yaml"
    path.write_text(text)
    code, out, _ = run_cli(["validate", str(path)])
    assert code == 0 and "a: 1 × h100-sxm TP1, continuous chunked, max_num_seqs 32" in out
    path.write_text(text.replace("max_num_seqs: 32}", "max_num_seqs: 32, max_num_seqs: 8}"))
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and "duplicate key 'max_num_seqs'" in err


def test_validate_warns_for_disaggregated_variants_too(run_cli, scenarios_dir):
    scenario = scenarios_dir / "rag_mix.yaml"
    code, out, _ = run_cli(["validate", str(scenario), "--set", "engine.max_model_len=4096"])
    assert code == 0
    # static, continuous, chunked-2048, chunked-512 and the two 1P1D variants
    assert out.count("538 of 2,075 requests will be rejected, e.g. prompt + output = 6068 "
                     "tokens exceeds ") == 6


def test_a_link_must_have_finite_numbers(tmp_path, run_cli, write_scenario):
    """An infinite KV-link latency used to pass validation and end the run with an
    invariant error (no request could finish): refused up front, like any non-finite number."""
    doc = with_(GOOD, "variants", [{"name": "split", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1},
        "link": {"bandwidth_gbit_per_s": 400, "latency_s": float("inf")}}}])
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and err.count("\n") == 1
    assert "variants.0.disaggregation.link: latency_s: must be a finite number" in err


def test_roofline_decode_needs_a_context(run_cli):
    """Decoding sequences attend over their context; pricing them over 0 tokens used to
    pass silently (the decode attention term vanished)."""
    code, _, err = run_cli(["roofline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                            "--decode-batch", "32"])
    assert code == 2 and err.count("\n") == 1
    assert "--decode-batch 32 needs --context C" in err


@pytest.mark.parametrize("args,expected", [
    (["--model", "x", "--hardware", "h100-sxm"], "error: --model: unknown model 'x'; valid presets: "),
    (["--model", "llama-3.1-8b", "--hardware", "x"], "error: --hardware: unknown hardware 'x'; valid: "),
])
def test_roofline_names_an_unknown_model_before_asking_for_a_step(run_cli, args, expected):
    """An unknown --model or --hardware is the error to see; it used to be hidden behind
    "nothing to price" when no --prefill-tokens / --decode-batch was given."""
    code, _, err = run_cli(["roofline", *args])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(expected)


def test_a_long_name_is_echoed_cut_with_its_length(tmp_path, run_cli, write_scenario):
    code, _, err = run_cli(["validate", str(write_scenario(
        tmp_path, with_(GOOD, "variants.0.name", "v" * 5000)))])
    assert code == 2 and err.count("\n") == 1 and len(err) < 300
    assert err.endswith("… (5,000 characters))\n")


@pytest.mark.parametrize("command", ["run", "sweep", "size"])
def test_an_unwritable_report_directory_is_refused_before_anything_runs(
        tmp_path, run_cli, write_scenario, command):
    """-o /proc/x used to fail with FileNotFoundError after the whole simulation; -o with a
    name longer than the file system allows with OSError (ENAMETOOLONG)."""
    doc = with_(GOOD, "sweep", {"engine.max_num_seqs": [8, 16]})
    doc["slo"] = {"targets": {"ttft_p99_ms": 1000}}
    path = write_scenario(tmp_path, doc)
    for out, why in (("/proc/x", "cannot create a directory in /proc"),
                     (str(tmp_path / ("x" * 300)), "file name too long")):
        code, stdout, err = run_cli([command, str(path), "-o", out])
        assert code == 2 and err.count("\n") == 1 and why in err, err
        assert "Traceback" not in err and "requests" not in stdout    # nothing ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # nothing left behind


def test_calibrate_checks_its_output_folder_before_fitting(tmp_path, run_cli, repo_root):
    result = repo_root / "tests" / "calibrate" / "fixtures" / "vllm_bench_serve.json"
    code, _, err = run_cli(["calibrate", "--hardware", "h100-sxm", "--from", str(result),
                            "-o", "/proc/x"])
    assert code == 2 and err == ("error: -o /proc/x: cannot write there: No such file or "
                                 "directory; give a directory you can write, e.g. reports/NAME\n")


def test_stale_temporary_report_folders_are_removed_live_ones_kept(tmp_path, run_cli,
                                                                    write_scenario):
    """A run killed hard leaves .r.tmp-*; the next report into r removes it once its writer
    (the owner file's process) is gone, and never touches one whose writer still runs or
    one without an owner file."""
    import os
    import socket
    import subprocess

    from capsim.report.outdir import OWNER_FILE

    host = socket.gethostname()
    dead = subprocess.run(["true"], check=True)                  # a pid that has exited
    gone_pid = subprocess.Popen(["true"])
    gone_pid.wait()
    folders = {".r.tmp-dead": f"{host} {gone_pid.pid}", ".r.tmp-live": f"{host} {os.getpid()}",
               ".r.tmp-other-host": "elsewhere 1", ".r.tmp-no-owner": None}
    for name, owner in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.csv").write_text("half")
        if owner is not None:
            (tmp_path / name / OWNER_FILE).write_text(owner)
    assert dead.returncode == 0
    code, _, _ = run_cli(["run", str(write_scenario(tmp_path, GOOD)), "-o", str(tmp_path / "r"),
                          "--no-charts"])
    assert code == 0
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".r."))
    assert left == [".r.tmp-live", ".r.tmp-no-owner", ".r.tmp-other-host"]
    assert not (tmp_path / "r" / OWNER_FILE).exists()             # the report has no marker


def test_yaml_nested_20000_deep_is_one_line_not_a_recursion_error(tmp_path, run_cli):
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 20000 + "]" * 20000 + "\n")
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.count("\n") == 1
    assert err == (f"error: {path}: invalid YAML at line 1, column 103: nested more than 100 "
                   "levels deep (a capsim file needs fewer than 10)\n")
    code, _, err = run_cli(["validate", str(path), "--set", "engine=" + "[" * 5000 + "]" * 5000])
    assert code == 2 and err.count("\n") == 1 and "nested more than 100 levels" in err


def test_json_nested_too_deep_is_one_line(tmp_path, run_cli):
    """json's decoder recurses per level: a model config.json or a benchmark result that deep
    used to end in RecursionError."""
    deep = "{\"a\": " + "[" * 100000 + "]" * 100000 + "}"
    (tmp_path / "config.json").write_text(deep)
    code, _, err = run_cli(["roofline", "--model", str(tmp_path), "--hardware", "h100-sxm",
                            "--prefill-tokens", "10"])
    assert code == 2 and err == (f"error: --model {tmp_path / 'config.json'}: malformed JSON: "
                                 "nested "
                                 "too deep to read\n")


def test_hidden_size_not_divisible_by_heads_is_refused(tmp_path, run_cli, write_scenario):
    """transformers derives head_dim = hidden_size // num_attention_heads; 4,100 / 32 leaves a
    remainder, so the config is wrong (or must give head_dim, as Gemma's does)."""
    import json

    config = {"model_type": "llama", "hidden_size": 4100, "intermediate_size": 14336,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "vocab_size": 128256, "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(config))
    doc = with_(GOOD, "model", str(tmp_path / "config.json"))
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and err.count("\n") == 1
    assert ("hidden_size 4100 is not a multiple of num_attention_heads 32, and no head_dim is "
            "given") in err and "Value error" not in err
    (tmp_path / "config.json").write_text(json.dumps({**config, "head_dim": 128}))
    code, _, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0


def test_tp_beyond_one_node_takes_whole_nodes_everywhere(
        tmp_path, run_cli, write_scenario):
    """A TP group across nodes takes whole nodes (8 GPUs on HGX H100, the profile's
    gpus_per_node; its all-reduces cross the scale-out link): roofline prices TP 16 and
    refuses TP 28 (3.5 nodes), and TP 16 is one node on a declared 72-GPU NVLink domain
    (GB200 NVL72)."""
    code, _, err = run_cli(["roofline", "--model", "llama-3.1-70b", "--hardware", "h100-sxm",
                            "--tp", "16", "--prefill-tokens", "100"])
    assert code == 0
    code, _, err = run_cli(["roofline", "--model", "qwen2.5-7b", "--hardware", "h100-sxm",
                            "--tp", "28", "--prefill-tokens", "100"])
    assert code == 2 and "spans nodes of 8 h100-sxm GPUs unevenly" in err \
        and err.count("\n") == 1
    doc = with_(with_(GOOD, "engine.tensor_parallel_size", 16),
                "hardware_overrides", {"gpus_per_node": 72})
    code, out, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0 and "h100-sxm[gpus_per_node=72] TP16" in out


def test_an_unsorted_trace_is_replayed_sorted_with_a_warning(tmp_path, run_cli, write_scenario):
    csv = tmp_path / "t.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.0,100,20\n"
                   "2023-11-16 18:15:48.0,100,20\n"
                   "2023-11-16 18:15:47.0,100,20\n")
    doc = {k: v for k, v in GOOD.items() if k != "workload"}
    doc["workload"] = {"trace": {"path": "t.csv"}}
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0
    assert err == (f"warning: {csv}: 1 of 3 rows arrive earlier than the row above them (first "
                   "at line 4, '2023-11-16 18:15:47.0'); replayed in arrival order\n")


@pytest.mark.parametrize("columns", ["80", "100"])
def test_the_run_summary_reads_in_a_narrow_terminal(tmp_path, run_cli, write_scenario,
                                                    monkeypatch, columns):
    """Issue 16: at 80 and 100 columns every figure printed as "4…". The summary folds into
    tables that fit; every figure of summary.csv's "all" rows is printed whole."""
    import pandas as pd

    from capsim.report.cells import fmt
    from capsim.report.run.table import console_columns
    from capsim.scenario.slo import SloConfig

    monkeypatch.setenv("COLUMNS", columns)
    doc = with_(GOOD, "slo", {"targets": {"ttft_p99_ms": 200, "itl_p99_ms": 60}})
    out_dir = tmp_path / "r"
    code, out, _ = run_cli(["run", str(write_scenario(tmp_path, doc)), "-o", str(out_dir),
                            "--no-charts"])
    assert code == 0 and "…" not in out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= int(columns)
    summary = pd.read_csv(out_dir / "summary.csv").query("cls == 'all'")
    for _, row in summary.iterrows():
        for c in console_columns(SloConfig(**doc["slo"])):
            figure = fmt(row[c.key], c.kind)
            assert any(f" {figure} " in line and line.lstrip("│ ").startswith(row.variant)
                       for line in lines), (c.key, figure)


def test_roofline_prices_a_weight_format(run_cli):
    """Llama-3.1-70B AWQ int4: ~37 GiB of weights fit one 48 GB L40S (bf16's 131 GiB do
    not); nvfp4 needs FP4 tensor cores, which an H100 lacks: one line, exit 2."""
    code, out, err = run_cli(["roofline", "--model", "llama-3.1-70b", "--hardware", "l40s",
                              "--decode-batch", "1", "--context", "100", "--quantization", "awq"])
    assert code == 0 and "warning" not in err and "memory-bound" in out
    code, _, err = run_cli(["roofline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                            "--decode-batch", "1", "--context", "100", "--quantization", "nvfp4"])
    assert code == 2 and err == ("error: --quantization nvfp4 needs fp4 tensor cores; hardware "
                                 "'h100-sxm' has bf16, fp16, fp8, int8\n")


def test_validate_names_the_weight_format_and_its_matmul_peak(tmp_path, run_cli, write_scenario):
    """GPTQ on an H100 runs weight-only (bf16 matmuls); AWQ weights load as 5.37 GiB
    (tests/profiles/test_quantization.py: 5,727,854,592 B + vLLM's RoPE cache)."""
    doc = with_(GOOD, "variants.1.engine", {"quantization": "gptq"})
    doc = with_(doc, "variants.0.engine", {"quantization": "awq"})
    code, out, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0
    assert "a: 1 × h100-sxm TP1, awq weights (bf16 matmuls), continuous chunked" in out
    assert "b: 1 × h100-sxm TP1, gptq weights (bf16 matmuls), continuous chunked" in out
    assert "Model loading took 5.37 GiB memory" in out


def test_roofline_prices_pipeline_stages_and_expert_parallelism(run_cli):
    """--pp: Llama-3.1-70B over 2 stages of 40 layers (vLLM's get_pp_indices); a 2,048-token
    prefill at TP 4 × PP 2 is the two stages plus one NVLink handoff, and with 2 batches
    in flight a step leaves at most every slowest stage. TP 8 × PP 2 spans two 8-GPU nodes:
    its handoff goes over InfiniBand (the profile's scale-out link) and costs more.
    --ep --dp-attention: DeepSeek-V3 on 8 H200s exchanges tokens by all-to-all instead of
    all-reducing every MoE layer (docs/how-it-works/moe-mla.md, Parallelism), so its step
    communicates less."""
    from capsim.cost.describe import describe_step

    d = describe_step("llama-3.1-70b", "h100-sxm", 4, prefill_tokens=2048, pp=2)
    p = d["pipeline"]
    assert p["partition"] == [40, 40]
    # (the last stage carries the profile's step overhead)
    assert d["seconds"] == pytest.approx(sum(p["stage_s"]) + sum(p["handoff_s"]), rel=1e-12)
    assert p["stage_s"][0] == pytest.approx(0.0773, abs=2e-4)
    assert p["bottleneck_s"] == max(p["stage_s"])
    two_nodes = describe_step("llama-3.1-70b", "h100-sxm", 8, prefill_tokens=2048, pp=2)
    assert two_nodes["pipeline"]["handoff_s"][0] > p["handoff_s"][0]
    code, out, _ = run_cli(["roofline", "--model", "llama-3.1-70b", "--hardware", "h100-sxm",
                            "--tp", "4", "--pp", "2", "--prefill-tokens", "2048"])
    assert code == 0 and "TP4 × PP2" in out and "GB per GPU column" in out
    assert "stages: 40 layers 77.291 ms, 40 layers 77.542 ms; handoffs 0.231 ms" in out
    tp = describe_step("deepseek-v3", "h200-sxm", 8, decode_batch=64, context=1000,
                       quantization="fp8_block")
    ep = describe_step("deepseek-v3", "h200-sxm", 8, decode_batch=64, context=1000,
                       quantization="fp8_block", expert_parallel=True, dp_attention=True)
    assert ep["comm_s"] < tp["comm_s"] / 4
    code, out, _ = run_cli(["roofline", "--model", "deepseek-v3", "--hardware", "h200-sxm",
                            "--tp", "8", "--ep", "--dp-attention", "--decode-batch", "64",
                            "--context", "1000", "--quantization", "fp8_block"])
    assert code == 0 and "TP8 EP DP-attention" in out


@pytest.mark.parametrize("preset,in_flight", [("vllm-v1", True), ("tgi", False),
                                               ("sglang-0.5", False), ("trtllm", False)])
def test_roofline_says_which_presets_keep_batches_in_flight(run_cli, preset, in_flight):
    """Only vLLM's continuous batching keeps PP batches in flight (engine/pipeline.py;
    docs/how-it-works/moe-mla.md, Parallelism); TGI's, SGLang's and TensorRT-LLM's policies
    run one at a time, so roofline does not promise them the slowest stage's rate."""
    code, out, _ = run_cli(["roofline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                            "--decode-batch", "8", "--context", "100", "--pp", "2",
                            "--preset", preset])
    text = " ".join(out.split())
    assert code == 0 and ("with 2 batches in flight a step leaves every" in text) == in_flight
    assert (f"{preset}'s scheduler runs one batch at a time under PP, so every step takes "
            "the sum" in text) != in_flight


@pytest.mark.parametrize("args,expected", [
    (["--model", "llama-3.1-70b", "--tp", "4", "--pp", "81"],
     "error: --pp 81 exceeds the model's 80 layers"),
    (["--model", "llama-3.1-70b", "--pp", "0"], "Invalid value for '--pp'"),
    (["--model", "llama-3.1-70b", "--tp", "4", "--ep"],
     "error: --ep: expert parallelism needs a mixture-of-experts model; llama-3.1-70b is dense"),
    (["--model", "llama-3.1-70b", "--tp", "4", "--dp-attention"],
     "error: --dp-attention: data-parallel attention needs a mixture-of-experts model"),
    (["--model", "mixtral-8x7b", "--tp", "16", "--ep", "--dp-attention"],
     "error: --ep: expert parallel size 16 must divide num_experts 8 of mixtral-8x7b"),
    # Each error names the option the user typed, not the scenario field it stands for.
    (["--model", "llama-3.1-70b", "--pp", "1000"],
     "error: --pp 1000 exceeds the model's 80 layers (every stage needs at least one)\n"),
    (["--model", "llama-3.1-70b", "--tp", "3"],
     "error: --tp 3 must divide num_attention_heads 64 of llama-3.1-70b\n"),
    (["--model", "qwen2.5-7b", "--tp", "28"],
     "error: --tp 28 spans nodes of 8 h100-sxm GPUs unevenly"),
    (["--model", "llama-3.1-70b", "--preset", "./nosuch.yaml"],
     "error: --preset nosuch.yaml: cannot read file: No such file or directory\n"),
    (["--model", "llama-3.1-70b", "--preset", "nosuch"],
     "error: --preset: unknown engine preset 'nosuch'; valid: sglang, sglang-0.3, sglang-0.4, "
     "sglang-0.5, "),
    (["--model", "llama-3.1-70b", "--quantization", "int3"],
     "error: unknown --quantization 'int3'; valid: bf16, fp8, fp8_channel, fp8_block, int8, "
     "awq, gptq, nvfp4, mxfp4\n"),
    (["--model", "llama-3.1-70b", "--quantization", "nvfp4"],
     "error: --quantization nvfp4 needs fp4 tensor cores; hardware 'h100-sxm' has bf16, fp16, "
     "fp8, int8\n"),
    (["--model", "llama-9b"], "error: --model: unknown model 'llama-9b'; valid presets: "),
    (["--model", "llama-3.1-8b", "--hardware", "h900"],
     "error: --hardware: unknown hardware 'h900'; valid: a100-40gb, "),
    # click's FloatRange(min=0) lets nan and inf through: the table was all nan.
    (["--model", "mixtral-8x7b", "--routing-skew", "nan"],
     "error: --routing-skew must be in [0, 100] (the Zipf exponent of expert popularity: 0 "
     "routes uniformly, 100 sends every token to the same top_k experts), got nan\n"),
    (["--model", "mixtral-8x7b", "--routing-skew", "inf"], "got inf\n"),
    # Issue 31: 1e9 ended in a NaN traceback; beyond 100 the routing no longer changes.
    (["--model", "mixtral-8x7b", "--routing-skew", "1e9"], "must be in [0, 100] (the Zipf "),
    # A routing skew on a dense model skewed nothing and was accepted without a word.
    (["--model", "llama-3.1-8b", "--routing-skew", "0.5"],
     "error: --routing-skew needs a mixture-of-experts model; llama-3.1-8b is dense\n"),
])
def test_roofline_refuses_bad_parallel_shapes_in_one_line(run_cli, args, expected):
    code, _, err = run_cli(["roofline", "--hardware", "h100-sxm", "--prefill-tokens", "512",
                            *args])
    assert code == 2 and expected in err
    if expected.startswith("error: "):
        assert err.count("\n") == 1


def test_a_pools_pipeline_stages_are_shown_and_pools_csv_keeps_integers(tmp_path, run_cli,
                                                                       write_scenario):
    """A pool of TP 2 × PP 2 (4 GPUs per replica) is named so by validate, the terminal's
    pools table and pools.csv (pipeline_parallel_size column); the fleet row, which has no
    one TP, leaves the shape empty without turning the column into floats (2, not 2.0)."""
    import pandas as pd

    doc = with_(GOOD, "cluster", {"pools": [
        {"name": "a", "engine": {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}},
        {"name": "b", "hardware": "h200-sxm"}]})
    doc["variants"] = [{"name": "v"}]
    path = write_scenario(tmp_path, doc)
    code, out, _ = run_cli(["validate", str(path)])
    assert code == 0
    assert "v: 2 pools on 5 GPUs" in out
    assert "a: 1 × h100-sxm TP2 × PP2, model llama-3.1-8b" in out
    assert "b: 1 × h200-sxm TP1, model llama-3.1-8b" in out
    code, out, _ = run_cli(["run", str(path), "-o", str(tmp_path / "r")])
    assert code == 0
    rows = {line.split("│")[2].strip(): line.split("│")[3].strip()
            for line in out.splitlines() if line.startswith("│ v ") and "-sxm" in line}
    assert rows == {"a": "h100-sxm TP2 × PP2", "b": "h200-sxm TP1",
                    "fleet": "h100-sxm+h200-sxm"}
    text = (tmp_path / "r" / "pools.csv").read_text().splitlines()
    assert text[0].startswith("pool,hardware,model,tensor_parallel_size,pipeline_parallel_size,"
                              "num_replicas,variant,cls,num_requests,num_finished,")
    assert text[1].startswith("a,h100-sxm,llama-3.1-8b,2,2,1,v,all,")
    assert text[3].startswith("fleet,h100-sxm+h200-sxm,llama-3.1-8b,,,2,v,all,30,30,0,")
    df = pd.read_csv(tmp_path / "r" / "pools.csv")
    assert df["num_finished"].tolist() == [df["num_requests"][0], df["num_requests"][1], 30]
    assert df["num_gpus"].tolist() == [4, 1, 5]


def test_validate_names_each_class_acceptance_rate(run_cli, scenarios_dir, tmp_path,
                                                   write_scenario):
    """scenarios/spec_decode.yaml: EAGLE k 3 with α 0.7 (chat) and 0.8 (code); expected
    tokens per step (1 − α^(k+1)) / (1 − α) = 2.53 and 2.95 (Leviathan et al. 2023, eq. 1).
    One rate for every class is printed once."""
    code, out, _ = run_cli(["validate", str(scenarios_dir / "spec_decode.yaml")])
    assert code == 0
    line = ("speculative eagle, k 3: acceptance by class: chat 0.7 (2.53 tokens per step "
            "expected), code 0.8 (2.95); drafter 0.47 GiB per GPU, 4,096 KV bytes per token")
    assert out.count(line) == 2                     # eagle-4-users, eagle-128-users
    doc = with_(GOOD, "engine.speculative", {"method": "eagle", "num_speculative_tokens": 3,
                                             "acceptance_rate": 0.7})
    code, out, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0 and out.count("speculative eagle, k 3: acceptance 0.7, 2.53 tokens per "
                                   "step expected; drafter") == 2


@pytest.mark.parametrize("command", ["hardware", "models", "engines"])
def test_listings_fold_to_a_narrow_terminal_without_cutting_a_name(run_cli, monkeypatch,
                                                                   command):
    """At 120 columns `capsim hardware` printed 'a100-4…' and 'h100-p…', the names a
    scenario must spell; the listings now fold as the summary does."""
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run_cli([command])
    assert code == 0 and "…" not in out
    assert max(len(line) for line in out.splitlines() if "│" in line) <= 100
    names = {"hardware": ["a100-40gb", "h100-pcie", "rtx-4090"],
             "models": ["llama-3.1-405b", "qwen3-235b-a22b"],
             "engines": ["sglang-0.3", "vllm-0.6.4"]}[command]
    assert all(f"│ {n} " in out for n in names)


def test_roofline_says_which_matmuls_take_the_untuned_fp8_gemm_floor(run_cli):
    """DeepSeek-V3 (block-fp8) TP 8 on an MI300X under sglang-0.5: the layer linears its
    untuned_fp8_gemm names are priced at least at the K-loop floor (1.964 us a 128-wide K
    step, sglang-0.5.yaml's fit to ROCm/aiter PR 1930), where compute and memory ms are the
    same number; the table said "memory" bound with nothing to say why (q_a_kv_a_proj: 942 MB
    in 6.7 ms on a 5.3 TB/s GPU). Under vllm-v1 (no such rule) nothing is said."""
    base = ["roofline", "--model", "deepseek-v3", "--hardware", "mi300x", "--tp", "8",
            "--decode-batch", "16", "--context", "2048"]
    code, out, _ = run_cli([*base, "--preset", "sglang-0.5"])
    assert code == 0
    assert ("q_a_kv_a_proj, q_b_proj, o_proj, gate_up_proj, down_proj: at least sglang-0.5's "
            "untuned block-fp8 GEMM floor (untuned_fp8_gemm: ceil(K / 128) steps × 1.964 µs"
            in " ".join(out.split()))
    row = next(line for line in out.splitlines() if "q_a_kv_a_proj" in line and "│" in line)
    cells = [c.strip() for c in row.split("│")]
    assert cells[5] == cells[6] == "6.709"      # compute ms == memory ms: the floor
    code, out, _ = run_cli(base)
    assert code == 0 and "untuned" not in out
