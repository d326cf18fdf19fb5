"""Bad input to the features of 2026-12-06, refused at once (issue 31, "Before resolving"):
the speculative engine presets ``vllm-0.8`` / ``vllm-0.9`` and their ``host_overhead.draft_*``
fields, ``engine.moe_backend`` with each engine's MoE runner names, and the GPU profiles'
``efficiency.fused_moe_runners`` curves -- in scenarios, in a custom preset file and in a
custom GPU profile file.

Each case: exit code 2, one stderr line ``error: FILE: YAML.PATH: …`` naming the file the
bad value is in and its YAML path, no traceback, no simulation started, no file written;
``capsim validate`` and ``capsim run`` print the same line. The harness (``guarded``,
``_check``, ``refused_alike``) is test_bad_input_late.py's.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.cli.test_bad_input_late import guarded, refused_alike, set_dotted  # noqa: F401 - a fixture

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 200},
        "output_tokens": {"dist": "fixed", "value": 20}}
WORKLOAD = {"duration_s": 60, "arrival": {"process": "poisson", "rate_per_s": 2},
            "classes": [CHAT]}
EAGLE = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}
BASES = {
    # EAGLE under vLLM 0.8.5
    "spec": {"name": "s", "model": "llama-3.1-8b", "hardware": "h100-sxm",
             "engine": {"preset": "vllm-0.8", "max_model_len": 4096, "speculative": EAGLE},
             "workload": WORKLOAD, "slo": {"ttft_ms": 1000}},
    # gpt-oss-120b (MXFP4 experts) on a B200
    "oss": {"name": "o", "model": "gpt-oss-120b", "hardware": "b200",
            "engine": {"max_model_len": 4096, "moe_backend": "flashinfer_trtllm"},
            "workload": WORKLOAD, "slo": {"ttft_ms": 1000}},
    # DeepSeek-V3 (block-fp8 experts) on 8 B200s under SGLang
    "ds": {"name": "d", "model": "deepseek-v3", "hardware": "b200",
           "engine": {"preset": "sglang", "max_model_len": 4096, "tensor_parallel_size": 8,
                      "moe_backend": "flashinfer_trtllm"},
           "workload": WORKLOAD, "slo": {"ttft_ms": 1000}},
}
#: A custom preset file (a copy of vllm-0.9.yaml) and GPU file (a copy of b200.yaml),
#: named by the scenario.
PRESET = {"engine.preset": "FILE:preset.yaml"}
GPU = {"hardware": "FILE:gpu.yaml"}
HO = "host_overhead"
RUN = "efficiency.fused_moe_runners"
CURVE = {"tokens": [1, 16], "efficiency": [0.5, 0.4], "launch_s": 2.0e-5}

#: (id, base, scenario edits, preset-file edits, GPU-file edits, the file the error names
#: ("scenario", "preset", "gpu"), the error's YAML path, a phrase of its message).
#: Edits are {dotted path: value}; "DEL" deletes; "FILE:name" is the custom file's path.
CASES = [
    # -- engine.speculative under the vllm-0.8 / vllm-0.9 presets (scenario)
    ("spec-k-string", "spec", {"engine.speculative.num_speculative_tokens": "three"}, None, None,
     "scenario", "engine.speculative.num_speculative_tokens", "integer"),
    ("spec-k-negative", "spec", {"engine.speculative.num_speculative_tokens": -1}, None, None,
     "scenario", "engine.speculative.num_speculative_tokens", "> 0"),
    ("spec-k-float", "spec", {"engine.speculative.num_speculative_tokens": 2.5}, None, None,
     "scenario", "engine.speculative.num_speculative_tokens", "integer"),
    ("spec-k-null", "spec", {"engine.speculative.num_speculative_tokens": None}, None, None,
     "scenario", "engine.speculative.num_speculative_tokens", ""),
    ("spec-k-huge", "spec", {"engine.speculative.num_speculative_tokens": 10**12}, None, None,
     "scenario", "engine.speculative.num_speculative_tokens", ""),
    ("spec-acceptance-negative", "spec", {"engine.speculative.acceptance_rate": -0.1}, None,
     None, "scenario", "engine.speculative.acceptance_rate", ""),
    ("spec-acceptance-nan", "spec", {"engine.speculative.acceptance_rate": float("nan")}, None,
     None, "scenario", "engine.speculative.acceptance_rate", ""),
    ("spec-acceptance-string", "spec", {"engine.speculative.acceptance_rate": "high"}, None,
     None, "scenario", "engine.speculative.acceptance_rate", ""),
    ("spec-method-unknown", "spec", {"engine.speculative.method": "eagle4"}, None, None,
     "scenario", "engine.speculative.method", "eagle"),
    ("spec-method-missing", "spec", {"engine.speculative.method": "DEL"}, None, None,
     "scenario", "engine.speculative.method", ""),
    ("spec-a-list", "spec", {"engine.speculative": ["eagle", 3]}, None, None,
     "scenario", "engine.speculative", ""),
    ("spec-a-string", "spec", {"engine.speculative": "eagle"}, None, None,
     "scenario", "engine.speculative", ""),
    ("spec-unknown-key", "spec", {"engine.speculative.draft_launch_s": 1e-5}, None, None,
     "scenario", "engine.speculative.draft_launch_s", ""),
    ("spec-draft-knob-in-engine", "spec", {"engine.draft_launch_s": 1e-5}, None, None,
     "scenario", "engine.draft_launch_s", ""),
    ("spec-host-overhead-in-engine", "spec", {"engine.host_overhead": {"draft_launch_s": 0}},
     None, None, "scenario", "engine.host_overhead", ""),
    ("preset-0.8-typo", "spec", {"engine.preset": "vllm-0.8.5"}, None, None,
     "scenario", "engine.preset", "vllm-0.8"),
    ("preset-0.9-upper", "spec", {"engine.preset": "VLLM-0.9"}, None, None,
     "scenario", "engine.preset", "vllm-0.9"),
    ("preset-a-number", "spec", {"engine.preset": 0.9}, None, None,
     "scenario", "engine.preset", ""),
    ("preset-null", "spec", {"engine.preset": None}, None, None,
     "scenario", "engine.preset", ""),
    ("preset-empty", "spec", {"engine.preset": ""}, None, None,
     "scenario", "engine.preset", ""),
    ("preset-0.8-sglang-knob", "spec", {"engine.mem_fraction_static": 0.8}, None, None,
     "scenario", "engine.mem_fraction_static", ""),
    ("preset-0.9-async", "spec", {"engine.preset": "vllm-0.9", "engine.async_scheduling": True},
     None, None, "scenario", "engine.async_scheduling", ""),
    ("preset-0.8-variant-typo", "spec", {"variants": [{"name": "v", "engine": {
        "preset": "vllm-0.88"}}]}, None, None, "scenario", "variants.0.engine.preset", ""),
    ("preset-0.9-pp2-spec", "spec", {"engine.preset": "vllm-0.9",
                                     "engine.pipeline_parallel_size": 2}, None, None,
     "scenario", "engine.speculative", "pipeline_parallel_size"),
    ("preset-file-missing", "spec", {"engine.preset": "nope/preset.yaml"}, None, None,
     "scenario", "engine.preset", ""),
    # -- engine.moe_backend (scenario)
    ("runner-unknown", "oss", {"engine.moe_backend": "cutlass_fp4"}, None, None,
     "scenario", "engine.moe_backend", "flashinfer_trtllm"),
    ("runner-case", "oss", {"engine.moe_backend": "FlashInfer_TRTLLM"}, None, None,
     "scenario", "engine.moe_backend", "flashinfer_trtllm"),
    ("runner-number", "oss", {"engine.moe_backend": 1}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-null", "oss", {"engine.moe_backend": None}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-empty", "oss", {"engine.moe_backend": ""}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-list", "oss", {"engine.moe_backend": ["flashinfer_trtllm"]}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-mapping", "oss", {"engine.moe_backend": {"name": "triton"}}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-sglang-on-vllm", "oss", {"engine.moe_backend": "flashinfer_mxfp4"}, None, None,
     "scenario", "engine.moe_backend", "valid: auto, marlin, flashinfer_trtllm"),
    ("runner-trtllm-on-vllm", "oss", {"engine.moe_backend": "TRTLLM"}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-triton-on-trtllm", "ds", {"engine.preset": "trtllm", "engine.moe_backend": "triton"},
     None, None, "scenario", "engine.moe_backend", "TRTLLM"),
    ("runner-on-tgi", "oss", {"engine.preset": "tgi", "engine.moe_backend": "triton"}, None,
     None, "scenario", "engine.moe_backend", "valid: auto"),
    ("runner-marlin-on-sglang", "ds", {"engine.moe_backend": "marlin"}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-mxfp4-on-fp8-experts", "ds", {"engine.moe_backend": "flashinfer_mxfp4"}, None,
     None, "scenario", "engine.moe_backend", "not fp8_block"),
    ("runner-sglang-trtllm-on-mxfp4", "oss", {"engine.preset": "sglang"}, None, None,
     "scenario", "engine.moe_backend", "flashinfer_mxfp4"),
    ("runner-TRTLLM-on-mxfp4", "oss", {"engine.preset": "trtllm", "engine.moe_backend": "TRTLLM"},
     None, None, "scenario", "engine.moe_backend", "not mxfp4"),
    ("runner-TRTLLM-on-bf16-experts", "ds", {"engine.preset": "trtllm", "model": "qwen3-30b-a3b",
                                             "engine.tensor_parallel_size": 1,
                                             "engine.moe_backend": "TRTLLM"}, None, None,
     "scenario", "engine.moe_backend", "not bf16"),
    ("runner-vllm-trtllm-on-int8", "ds", {"engine.preset": "vllm-v1", "model": "qwen3-30b-a3b",
                                          "engine.tensor_parallel_size": 1,
                                          "engine.quantization": "int8"}, None, None,
     "scenario", "engine.moe_backend", ""),
    ("runner-in-variant-wrong-engine", "ds", {"engine.moe_backend": "auto", "variants": [
        {"name": "v", "engine": {"moe_backend": "flashinfer_mxfp4"}}]}, None, None,
     "scenario", "variants.0.engine.moe_backend", ""),
    ("runner-variant-preset-switch", "ds", {"variants": [{"name": "v", "engine": {
        "preset": "tgi"}}]}, None, None, "scenario", "variants.0.engine.preset",
     "tgi has no MoE runner knob in capsim (valid: auto) (engine.moe_backend is set for the "
     "whole scenario: move it into the variants that need it)"),
    ("runner-marlin-on-mi300x", "oss", {"hardware": "mi300x", "engine.moe_backend": "marlin"},
     None, None, "scenario", "engine.moe_backend", "CUDA"),
    ("runner-flashinfer-on-mi300x", "oss", {"hardware": "mi300x"}, None, None,
     "scenario", "engine.moe_backend", "moe_backend flashinfer_trtllm runs FlashInfer's TRT-LLM-gen"
     " MoE kernels, built for NVIDIA GPUs (CUDA) only; hardware 'mi300x' runs rocm (valid: auto)"),
    ("runner-sglang-flashinfer-on-mi300x", "ds", {"hardware": "mi300x"}, None, None,
     "scenario", "engine.moe_backend", "hardware 'mi300x' runs rocm (valid: auto, triton)"),
    ("runner-sglang-mxfp4-on-mi325x", "oss", {"hardware": "mi325x", "engine.preset": "sglang",
                                             "engine.moe_backend": "flashinfer_mxfp4"},
     None, None, "scenario", "engine.moe_backend", "FlashInfer's TRT-LLM-gen MXFP4 MoE kernels"),
    ("runner-flashinfer-on-mi300x-variant", "oss", {"engine.moe_backend": "auto",
                                                    "variants": [{"name": "v", "hardware":
                                                                  "mi300x", "engine": {
                                                                      "moe_backend":
                                                                      "flashinfer_trtllm"}}]},
     None, None, "scenario", "variants.0.engine.moe_backend", "CUDA"),
    ("trtllm-preset-on-mi300x", "spec", {"engine.preset": "trtllm", "engine.speculative": "DEL",
                                         "hardware": "mi300x"}, None, None,
     "scenario", "engine.preset", "engine preset 'trtllm' (TensorRT-LLM) runs on cuda GPUs only; "
     "hardware 'mi300x' is a rocm GPU (valid: a cuda GPU, or another engine preset)"),
    ("trtllm-bench-variant-on-mi325x", "spec", {"engine.speculative": "DEL", "variants": [
        {"name": "v", "hardware": "mi325x", "engine": {"preset": "trtllm-bench"}}]}, None, None,
     "scenario", "variants.0.engine.preset", "'trtllm-bench' (TensorRT-LLM (trtllm-bench)) runs "
     "on cuda GPUs only"),
    ("custom-preset-platforms-unknown", "spec", PRESET, {"platforms": ["tpu"]}, None,
     "preset", "platforms.0", "'cuda' or 'rocm'"),
    ("custom-preset-platforms-empty", "spec", PRESET, {"platforms": []}, None,
     "preset", "platforms", "at least 1 item"),
    ("custom-preset-cuda-only-on-mi300x", "spec", {**PRESET, "hardware": "mi300x"},
     {"platforms": ["cuda"]}, None, "scenario", "engine.preset",
     "runs on cuda GPUs only; hardware 'mi300x' is a rocm GPU"),
    ("runner-hardware-overrides-bad-curve", "oss", {"hardware_overrides": {
        "efficiency": {"fused_moe_runners": {"flashinfer_trtllm": {"mxfp4": {
            "tokens": [1], "efficiency": [2.0]}}}}}},
     None, None, "scenario",
     "hardware_overrides.efficiency.fused_moe_runners.flashinfer_trtllm.mxfp4.efficiency",
     "must be in (0, 1]"),
    ("runner-hardware-overrides-typo", "oss", {"hardware_overrides": {
        "efficiency": {"fused_moe_runners": {"flashinfer_trtlm": {"mxfp4": CURVE}}}}},
     None, None, "scenario", "hardware_overrides.efficiency.fused_moe_runners",
     "flashinfer_trtlm: no engine's MoE runner named"),
    ("runner-pool-wrong-engine", "ds", {"engine.moe_backend": "auto", "cluster": {"pools": [
        {"name": "p", "num_replicas": 1, "engine": {"moe_backend": "flashinfer_mxfp4"}}]}},
     None, None, "scenario", "cluster.pools.0.engine.moe_backend", ""),
    # -- a custom preset file (vllm-0.9.yaml's copy) with bad draft_* fields
    ("draft-launch-negative", "spec", PRESET, {f"{HO}.draft_launch_s": -1e-5}, None,
     "preset", f"{HO}.draft_launch_s", ">= 0"),
    ("draft-launch-string", "spec", PRESET, {f"{HO}.draft_launch_s": "35us"}, None,
     "preset", f"{HO}.draft_launch_s", "number"),
    ("draft-launch-inf", "spec", PRESET, {f"{HO}.draft_launch_s": float("inf")}, None,
     "preset", f"{HO}.draft_launch_s", ""),
    ("draft-launch-nan", "spec", PRESET, {f"{HO}.draft_launch_s": float("nan")}, None,
     "preset", f"{HO}.draft_launch_s", ""),
    ("draft-launch-huge", "spec", PRESET, {f"{HO}.draft_launch_s": 1e9}, None,
     "preset", f"{HO}.draft_launch_s", "must be <= 0.001 (got "),
    ("draft-launch-in-ms", "spec", PRESET, {f"{HO}.draft_launch_s": 35.12}, None,
     "preset", f"{HO}.draft_launch_s", "must be <= 0.001 (got "),
    ("draft-launch-null", "spec", PRESET, {f"{HO}.draft_launch_s": None}, None,
     "preset", f"{HO}.draft_launch_s", ""),
    ("draft-step-negative", "spec", PRESET, {f"{HO}.draft_step_launches": -1}, None,
     "preset", f"{HO}.draft_step_launches", ">= 0"),
    ("draft-step-float", "spec", PRESET, {f"{HO}.draft_step_launches": 4.5}, None,
     "preset", f"{HO}.draft_step_launches", "integer"),
    ("draft-step-bool", "spec", PRESET, {f"{HO}.draft_step_launches": True}, None,
     "preset", f"{HO}.draft_step_launches", ""),
    ("draft-step-huge", "spec", PRESET, {f"{HO}.draft_step_launches": 10**15}, None,
     "preset", f"{HO}.draft_step_launches", "must be <= 100000 (got "),
    ("draft-update-huge", "spec", PRESET, {f"{HO}.draft_update_launches": 10**6}, None,
     "preset", f"{HO}.draft_update_launches", "must be <= 100000 (got "),
    ("draft-pass-negative", "spec", PRESET, {f"{HO}.draft_pass_launches": -10}, None,
     "preset", f"{HO}.draft_pass_launches", ">= 0"),
    ("draft-pass-string", "spec", PRESET, {f"{HO}.draft_pass_launches": "ten"}, None,
     "preset", f"{HO}.draft_pass_launches", "integer"),
    ("draft-update-negative", "spec", PRESET, {f"{HO}.draft_update_launches": -15}, None,
     "preset", f"{HO}.draft_update_launches", ">= 0"),
    ("draft-update-list", "spec", PRESET, {f"{HO}.draft_update_launches": [15]}, None,
     "preset", f"{HO}.draft_update_launches", ""),
    ("draft-graph-unknown", "spec", PRESET, {f"{HO}.draft_cuda_graph": "partial"}, None,
     "preset", f"{HO}.draft_cuda_graph", "piecewise"),
    ("draft-graph-bool", "spec", PRESET, {f"{HO}.draft_cuda_graph": False}, None,
     "preset", f"{HO}.draft_cuda_graph", ""),
    ("draft-graph-null", "spec", PRESET, {f"{HO}.draft_cuda_graph": None}, None,
     "preset", f"{HO}.draft_cuda_graph", ""),
    ("draft-field-typo", "spec", PRESET, {f"{HO}.draft_launches": 12}, None,
     "preset", f"{HO}.draft_launches", ""),
    ("draft-field-top-level", "spec", PRESET, {"draft_launch_s": 1e-5}, None,
     "preset", "draft_launch_s", ""),
    ("draft-host-overhead-a-list", "spec", PRESET, {HO: [1, 2]}, None,
     "preset", HO, ""),
    ("draft-counts-without-launch-s", "spec", PRESET, {f"{HO}.draft_launch_s": 0}, None,
     "preset", HO, "draft_step_launches, draft_pass_launches, draft_update_launches price "
     "nothing without draft_launch_s (valid: draft_launch_s > 0"),
    ("draft-counts-without-launch-s-key", "spec", PRESET, {f"{HO}.draft_launch_s": "DEL"}, None,
     "preset", HO, "price nothing without draft_launch_s"),
    ("draft-launch-s-without-pass", "spec", PRESET, {f"{HO}.draft_pass_launches": 0}, None,
     "preset", HO, "draft_launch_s prices no launch with draft_pass_launches 0 (valid: "),
    ("draft-launch-s-alone", "spec", PRESET, {f"{HO}.draft_pass_launches": "DEL",
                                              f"{HO}.draft_step_launches": "DEL",
                                              f"{HO}.draft_update_launches": "DEL"}, None,
     "preset", HO, "draft_launch_s prices no launch with draft_pass_launches 0"),
    ("preset-file-empty", "spec", PRESET, {"REPLACE": ""}, None, "preset", "", ""),
    ("preset-file-a-list", "spec", PRESET, {"REPLACE": "- 1\n- 2\n"}, None, "preset", "", ""),
    ("preset-file-tab", "spec", PRESET, {"REPLACE": "name: x\n\tengine: vllm\n"}, None,
     "preset", "", ""),
    ("preset-file-no-memory", "spec", PRESET, {"memory": "DEL"}, None, "preset", "memory", ""),
    ("preset-file-duplicate-key", "spec", PRESET,
     {"APPEND": "host_overhead:\n  draft_launch_s: 1.0\n"}, None, "preset", "",
     "duplicate key 'host_overhead'"),
    # -- a custom GPU file (b200.yaml's copy) with bad fused_moe_runners
    ("curve-efficiency-above-1", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4.efficiency": [1.5] * 10}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("curve-efficiency-zero", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4.efficiency": [0.0] * 10}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("curve-efficiency-negative", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4.efficiency": [-0.5] * 10}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("curve-lengths-differ", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4.efficiency": [0.5, 0.4]}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("curve-tokens-descending", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4": {**CURVE, "tokens": [16, 1]}}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("curve-tokens-zero", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4": {**CURVE, "tokens": [0, 16]}}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("curve-launch-negative", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4": {**CURVE, "launch_s": -1e-5}}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4.launch_s", ""),
    ("curve-launch-inf", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4": {**CURVE, "launch_s": float("inf")}}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4.launch_s", ""),
    ("curve-launch-string", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4": {**CURVE, "launch_s": "fast"}}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4.launch_s", ""),
    ("curve-empty-lists", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4": {"tokens": [], "efficiency": []}}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4.tokens", "at least 1 item"),
    ("curve-missing-efficiency", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4": {"tokens": [1, 2]}}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4.efficiency", ""),
    ("curve-unknown-field", "oss", GPU, None,
     {f"{RUN}.flashinfer_trtllm.mxfp4.launch_us": 18.5}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4.launch_us", ""),
    ("curve-a-number", "oss", GPU, None, {f"{RUN}.flashinfer_trtllm.mxfp4": 0.5}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("curve-null", "oss", GPU, None, {f"{RUN}.flashinfer_trtllm.mxfp4": None}, "gpu",
     f"{RUN}.flashinfer_trtllm.mxfp4", ""),
    ("runners-a-list", "oss", GPU, None, {RUN: ["flashinfer_trtllm"]}, "gpu", RUN, ""),
    ("runner-key-typo", "oss", GPU, None, {f"{RUN}.flashinfer_trtlm": {"mxfp4": CURVE}}, "gpu",
     RUN, "flashinfer_trtlm: no engine's MoE runner named 'flashinfer_trtlm' reads a curve "
     "here (valid: flashinfer_mxfp4, flashinfer_trtllm, triton)"),
    ("runner-key-auto", "oss", GPU, None, {f"{RUN}.auto": {"mxfp4": CURVE}}, "gpu",
     RUN, "auto: no engine's MoE runner named 'auto'"),
    ("runner-key-marlin", "oss", GPU, None, {f"{RUN}.marlin": {"mxfp4": CURVE}}, "gpu",
     RUN, "marlin: no engine's MoE runner named 'marlin'"),
    ("runner-key-TRTLLM", "oss", GPU, None, {f"{RUN}.TRTLLM": {"fp8_block": CURVE}}, "gpu",
     RUN, "TRTLLM: no engine's MoE runner named 'TRTLLM'"),
    ("runner-key-without-curves", "oss", GPU, None, {f"{RUN}.flashinfer_cutlass": {}}, "gpu",
     RUN, "flashinfer_cutlass: no engine's MoE runner"),
    ("format-key-typo", "oss", GPU, None, {f"{RUN}.flashinfer_mxfp4.mxfp8": CURVE}, "gpu",
     RUN, "flashinfer_mxfp4.mxfp8: flashinfer_mxfp4 runs no experts of format 'mxfp8' "
     "(valid: mxfp4)"),
    ("format-key-other-runners", "oss", GPU, None, {f"{RUN}.flashinfer_mxfp4.fp8_block": CURVE},
     "gpu", RUN, "flashinfer_mxfp4 runs no experts of format 'fp8_block' (valid: mxfp4)"),
    ("format-key-typo-any-format-runner", "oss", GPU, None, {f"{RUN}.triton.fp8block": CURVE},
     "gpu", RUN, "triton runs no experts of format 'fp8block' (valid: bf16, fp8,"),
    ("format-key-number", "oss", GPU, None, {f"{RUN}.flashinfer_mxfp4.4": CURVE}, "gpu",
     RUN, "runs no experts of format '4'"),
    ("runner-formats-a-list", "oss", GPU, None, {f"{RUN}.flashinfer_mxfp4": [CURVE]}, "gpu",
     f"{RUN}.flashinfer_mxfp4", ""),
    ("runners-under-wrong-key", "oss", GPU, None, {"fused_moe_runners": {
        "flashinfer_trtllm": {"mxfp4": CURVE}}}, "gpu", "fused_moe_runners", ""),
    ("gpu-file-missing-name", "oss", GPU, None, {"name": "DEL"}, "gpu", "name", ""),
    ("gpu-file-empty", "oss", GPU, None, {"REPLACE": ""}, "gpu", "", ""),
    ("gpu-file-binary", "oss", GPU, None, {"REPLACE": "\x00\x01\x02"}, "gpu", "", ""),
]


def _file(tmp_path, name: str, source, edits: dict | None) -> None:
    """``name`` in ``tmp_path``: ``source`` (a shipped YAML) with ``edits`` applied."""
    doc = yaml.safe_load(source.read_text())
    edits = dict(edits or {})
    replace, append = edits.pop("REPLACE", None), edits.pop("APPEND", None)
    for dotted, value in edits.items():
        set_dotted(doc, dotted, value)
    text = replace if replace is not None else yaml.safe_dump(doc, sort_keys=False)
    (tmp_path / name).write_text(text + (append or ""))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_value_of_the_new_features_is_refused_alike_by_validate_and_run(
        case, tmp_path, guarded, capsys, repo_root):  # noqa: F811 - the fixture
    _, base, edits, preset_edits, gpu_edits, in_file, path, phrase = case
    data = repo_root / "capsim/profiles/data"
    _file(tmp_path, "preset.yaml", data / "engines/vllm-0.9.yaml", preset_edits)
    _file(tmp_path, "gpu.yaml", data / "hardware/b200.yaml", gpu_edits)
    doc = copy.deepcopy(BASES[base])
    for dotted, value in edits.items():
        if isinstance(value, str) and value.startswith("FILE:"):
            value = value.removeprefix("FILE:")
        set_dotted(doc, dotted, value)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
    files = {"scenario": scenario, "preset": tmp_path / "preset.yaml",
             "gpu": tmp_path / "gpu.yaml"}
    where = f"error: {files[in_file]}: " + (f"{path}: " if path else "")
    refused_alike(guarded, capsys, scenario, where, phrase, tmp_path)


def test_the_sweep_has_at_least_80_cases():
    assert len(CASES) >= 80
