"""Bad input refused at once, by every command alike (issue 31, items 5-7): a sweep of
bad scenarios and options over every command (run, validate, sweep, size, compare,
calibrate, models, hardware, engines, roofline) and the features added since 2026-12-01
(fleets: autoscaling, failures, router timeout; pooled fleets and routes; speculative
decoding; disaggregation; closed loops; schedules and bursts; conversations; engine
knobs of each preset; MoE options and weight formats; sizing, sweeps, seeds; Hugging Face
configs; benchmark result files).

Each case must give exit code 2 and one stderr line ``error: …`` naming the file and the
field's YAML path (or the option) with the part of the message the case names; no
traceback, no file written, no simulation started, within :data:`HANG_S`. A scenario case
runs through ``capsim validate`` and ``capsim run``, which must print the same line (one
check path: what run refuses, validate refuses). A failed assertion starts with its kind
(TRACEBACK, SILENT ACCEPT, HANG, LATE FAILURE, WRONG MESSAGE, WROTE FILES), so a run's
failures count by kind: ``pytest tests/cli/test_bad_input_late.py | grep -c 'HANG:'``.
"""

from __future__ import annotations

import copy
import json
import signal
import time
from pathlib import Path

import pytest
import yaml

#: A case taking longer than this is a hang (in-process, SIGALRM). The slowest refusal
#: (36 M requests drawn, then refused for their results' memory) takes ~6 CPU-s: 60 s of
#: wall leaves room for a machine at load 8 (it took 32 s there), not for a hang.
HANG_S = 60

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 200},
        "output_tokens": {"dist": "fixed", "value": 20}}
BASE = {"name": "b", "model": "llama-3.1-8b", "hardware": "h100-sxm",
        "engine": {"max_model_len": 4096}, "cluster": {"num_replicas": 2},
        "workload": {"duration_s": 60, "arrival": {"process": "poisson", "rate_per_s": 5},
                     "classes": [CHAT]},
        "slo": {"ttft_ms": 1000, "targets": {"ttft_p99_ms": 3000}}}
BASES = {
    "b": BASE,
    "pooled": {**BASE, "cluster": {"router": "least_outstanding_tokens", "pools": [
        {"name": "h100", "hardware": "h100-sxm", "num_replicas": 1},
        {"name": "l40s", "hardware": "l40s", "model": "qwen2.5-7b", "num_replicas": 1,
         "engine": {"max_model_len": 4096}}]},
        "workload": {**BASE["workload"],
                     "classes": [CHAT, {**CHAT, "name": "code", "model": "qwen2.5-7b"}]}},
    "spec": {**BASE, "engine": {"max_model_len": 4096, "speculative": {
        "method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}}},
    "split": {**BASE, "variants": [{"name": "d", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1}, "link": "nvlink-4"}}]},
}
AUTOSCALED = {"signal": "running", "target": 4, "max_replicas": 4}
ONOFF = {"kind": "on_off", "on_s": 60, "off_s": 600, "factor": 2}
SPEC_DRAFT = {"method": "draft_model", "model": "llama-3.1-8b", "num_speculative_tokens": 3,
              "acceptance_rate": 0.7}
SPLIT = "variants.0.disaggregation"

#: (id, base, edits {dotted path: value, "DEL" deletes}, the error's YAML path, a phrase of
#: its message[, the second command]). Run by validate, then by run — or by the command
#: the section is for (``sweep``, ``size``: run ignores those sections); ``report``: run
#: writes the report that says why no request completed and exits 2, as issue 16 chose
#: (validate refuses it up front).
SCENARIO_BAD = [
    # -- issue 31 item 5: work that would exceed memory or hours, refused with the estimate
    ("autoscaler-every-microsecond", "b",
     {"cluster.autoscaling": {**AUTOSCALED, "interval_s": 1e-6}},
     "cluster.autoscaling.interval_s", "would tick the autoscaler at least 59,424,302 times"),
    # 30 requests (~6 s) at 1 µs: 6 million ticks were within the old limit and ran past 60 s
    ("autoscaler-every-microsecond-of-30-requests", "b",
     {"workload.duration_s": "DEL", "workload.num_requests": 30,
      "cluster.autoscaling": {**AUTOSCALED, "interval_s": 1e-6}},
     "cluster.autoscaling.interval_s", "more than 1,000,000"),
    ("failures-every-millisecond", "b", {"cluster.failures": {"mtbf_s": 0.001, "mttr_s": 0.001}},
     "cluster.failures.mtbf_s", "would fail and replace 2 replica(s) about 59,424 times"),
    ("failures-faster-than-a-reply", "b", {"cluster.failures": {"mtbf_s": 0.01, "mttr_s": 60}},
     "cluster.failures.mtbf_s", "is shorter than the longest reply takes alone"),
    ("a-variants-failures", "b", {"variants": [{"name": "v", "cluster": {
        "failures": {"mtbf_s": 0.001, "mttr_s": 0.001}}}]},
     "variants.0.cluster.failures.mtbf_s", "would fail and replace"),
    ("routing-skew-1e9", "b", {"model": "qwen3-30b-a3b", "engine.moe_routing_skew": 1e9},
     "engine.moe_routing_skew", "must be in [0, 100]"),
    ("routing-skew-nan", "b", {"model": "qwen3-30b-a3b", "engine.moe_routing_skew": float("nan")},
     "engine.moe_routing_skew", "must be a finite number"),
    ("alias-bomb-in-description", "b", {"description": "BOMB"},
     "", "aliases expand this to 435,848,050 values"),
    ("a-recursive-alias", "b", {"description": "LOOP"}, "", "a recursive alias"),
    ("requests-36-million", "b",
     {"workload.duration_s": 3600, "workload.arrival.rate_per_s": 10000},
     "workload.duration_s", "GiB of results"),
    ("piecewise-step-of-a-nanosecond", "b",
     {"workload.schedule": {"kind": "piecewise", "step_s": 1e-9, "factors": [1, 2]}},
     "workload.schedule.step_s", "pieces, more than 1,000,000"),
    ("bursts-of-a-nanosecond", "b", {"workload.bursts": {**ONOFF, "on_s": 1e-9, "off_s": 1e-9}},
     "workload.bursts.on_s", "pieces, more than 1,000,000"),
    ("markov-holding-of-a-microsecond", "b", {"workload.bursts": {"kind": "markov", "states": [
        {"factor": 1, "mean_s": 1e-6}, {"factor": 2, "mean_s": 1e-6}]}},
     "workload.bursts.states", "pieces, more than 1,000,000"),
    ("a-class-diurnal-resolution", "b", {"workload.classes.0.schedule": {
        "kind": "diurnal", "trough": 0.5, "peak_hour": 1, "resolution_s": 1e-5}},
     "workload.classes.0.schedule.resolution_s", "pieces, more than 1,000,000"),
    ("ten-million-turns", "b", {"workload.classes.0.conversation": {
        "turns": {"dist": "fixed", "value": 10**7}}},
     "workload.classes.0.conversation.turns", "at most 1,000 turns"),
    ("gamma-cv-1e300", "b", {"workload.arrival": {"process": "gamma", "rate_per_s": 5,
                                                  "cv": 1e300}},
     "workload.arrival.cv", "must be <= 100"),
    ("repair-in-1e300-s", "b", {"cluster.failures": {"at": [
        {"replica": 0, "at_s": 1, "repair_s": 1e300}]}},
     "cluster.failures.at.0.repair_s", "about 32 years"),
    ("provisioning-1e300-s", "b", {"cluster.autoscaling": {
        **AUTOSCALED, "provisioning": {"delay_s": 1e300}}},
     "cluster.autoscaling.provisioning.delay_s", "about 32 years"),
    ("router-timeout-1e300-s", "b", {"cluster.router_queue_timeout_s": 1e300},
     "cluster.router_queue_timeout_s", "about 32 years"),
    ("think-time-1e300-s", "b", {"workload.arrival": {"process": "concurrency", "users": 2,
                                                      "think_time_s": 1e300}},
     "workload.arrival.think_time_s", "about 32 years"),
    ("duration-1e10-s", "b", {"workload.duration_s": 1e10}, "workload.duration_s",
     "about 32 years"),
    ("cooldown-1e300-s", "b", {"cluster.autoscaling": {**AUTOSCALED,
                                                       "scale_down_cooldown_s": 1e300}},
     "cluster.autoscaling.scale_down_cooldown_s", "about 32 years"),
    ("mtbf-1e300-s", "b", {"cluster.failures": {"mtbf_s": 1e300, "mttr_s": 5}},
     "cluster.failures.mtbf_s", "about 32 years"),
    ("kv-cache-below-a-block", "b", {"engine.kv_cache_memory_gib": 1e-9},
     "engine.kv_cache_memory_gib", "less than one block"),
    # -- an MTP variant validate passed and run refused is now priced; validate and run
    #    share the pricers, so these are refused by both (item 5)
    ("mtp-on-a-dense-model", "spec", {"engine.speculative.method": "mtp"},
     "engine.speculative.method", "method mtp needs a model with multi-token-prediction"),
    ("expert-parallel-on-dense", "b", {"engine.enable_expert_parallel": True},
     "engine.enable_expert_parallel", "needs a mixture-of-experts model"),
    # -- issue 31 item 6: models capsim cannot price
    ("mxfp4-on-a-dense-llama", "b", {"engine.quantization": "mxfp4"},
     "engine.quantization", "stores only a mixture-of-experts model's experts in mxfp4"),
    ("a-mamba-config", "b", {"model": "FILE:mamba.json"}, "model_type",
     "model_type 'mamba' is not a model capsim prices"),
    ("a-config-without-model-type", "b", {"model": "FILE:notype.json"}, "model_type",
     "no model_type"),
    ("mixtral-without-experts", "b", {"model": "FILE:mixtral0.json"}, "num_local_experts",
     "must be >= 1 for model_type mixtral"),
    ("qwen-moe-without-experts", "b", {"model": "FILE:qwenmoe0.json"}, "num_experts",
     "must be >= 1 for model_type qwen3_moe"),
    ("head-dim-125", "b", {"model": "FILE:h4000.json"}, "",
     "head_dim 125 (hidden_size 4000 / num_attention_heads 32) is odd"),
    ("a-dense-mxfp4-checkpoint", "b", {"model": "FILE:mxfp4.json"},
     "quantization_config.quant_method", "quant_method mxfp4 stores only"),
    # 0 KV heads was read as absent (one per query head); MLA of width 0 priced as MHA
    ("zero-kv-heads", "b", {"model": "FILE:kvheads0.json"}, "num_key_value_heads",
     "must be > 0 (got 0)"),
    ("mla-of-width-0", "b", {"model": "FILE:mla0.json"}, "kv_lora_rank",
     "must be >= 1 for model_type deepseek_v3"),
    ("sliding-window-negative", "b", {"model": "FILE:window-1.json"}, "sliding_window",
     "must be a positive number of tokens or null (got -1)"),
    ("a-draft-model-of-mamba", "spec", {"engine.speculative": {**SPEC_DRAFT,
                                                               "model": "FILE:mamba.json"}},
     "model_type", "model_type 'mamba'"),
    ("a-pools-model-of-mamba", "pooled", {"cluster.pools.1.model": "FILE:mamba.json"},
     "model_type", "model_type 'mamba'"),
    # -- fleets: autoscaling, failures, router timeout
    ("autoscaling-without-target", "b", {"cluster.autoscaling": {"signal": "queue",
                                                                 "max_replicas": 4}},
     "cluster.autoscaling", "signal: queue needs target"),
    ("autoscaling-kv-use-above-1", "b", {"cluster.autoscaling": {
        "signal": "kv_use", "target": 1.5, "max_replicas": 4}},
     "cluster.autoscaling.target", "target for kv_use is a fraction"),
    ("autoscaling-min-above-max", "b", {"cluster.autoscaling": {**AUTOSCALED,
                                                                "min_replicas": 5}},
     "cluster.autoscaling.min_replicas", "must be <= max_replicas"),
    ("autoscaling-interval-0", "b", {"cluster.autoscaling": {**AUTOSCALED, "interval_s": 0}},
     "cluster.autoscaling.interval_s", "must be > 0"),
    ("autoscaling-tolerance-1", "b", {"cluster.autoscaling": {**AUTOSCALED, "tolerance": 1}},
     "cluster.autoscaling.tolerance", "must be < 1"),
    ("autoscaling-unknown-startup", "b", {"cluster.autoscaling": {
        **AUTOSCALED, "provisioning": {"profile": "vllm-v2"}}},
     "cluster.autoscaling.provisioning.profile", "unknown startup profile 'vllm-v2'"),
    ("autoscaling-delay-and-terms", "b", {"cluster.autoscaling": {
        **AUTOSCALED, "provisioning": {"delay_s": 5, "engine_init_s": 3}}},
     "cluster.autoscaling.provisioning.delay_s", "delay_s replaces the whole delay"),
    ("autoscaling-schedule-outside", "b", {"cluster.autoscaling": {
        "signal": "schedule", "max_replicas": 2, "schedule": {"replicas": [1, 9]}}},
     "cluster.autoscaling", "schedule.replicas must lie in"),
    ("autoscaling-replicas-outside", "b", {"cluster.num_replicas": 6,
                                           "cluster.autoscaling": AUTOSCALED},
     "cluster.num_replicas", "must lie in [min_replicas, max_replicas]"),
    ("autoscaling-beyond-1024", "b", {"cluster.autoscaling": {**AUTOSCALED,
                                                              "max_replicas": 5000}},
     "cluster.autoscaling.max_replicas", "must be <= 1024"),
    ("autoscaling-a-closed-loop", "b", {"workload.arrival": {"process": "concurrency",
                                                             "users": 4},
                                        "cluster.autoscaling": AUTOSCALED},
     "cluster.autoscaling", "autoscaling follows an open loop's load"),
    ("failure-of-replica-5", "b", {"cluster.failures": {"at": [
        {"replica": 5, "at_s": 1, "repair_s": 5}]}},
     "cluster.failures.at.0.replica", "replica 5 does not exist"),
    ("failure-repair-0", "b", {"cluster.failures": {"at": [
        {"replica": 0, "at_s": 1, "repair_s": 0}]}},
     "cluster.failures.at.0.repair_s", "must be > 0"),
    ("mtbf-without-mttr", "b", {"cluster.failures": {"mtbf_s": 3600}},
     "cluster.failures", "give mtbf_s and mttr_s together"),
    ("failures-in-flight-bad", "b", {"cluster.failures": {"mtbf_s": 3600, "mttr_s": 60,
                                                          "in_flight": "drop"}},
     "cluster.failures.in_flight", "Input should be 'retry' or 'fail'"),
    ("failures-under-static", "b", {"engine.scheduler": "static", "cluster.failures": {
        "at": [{"replica": 0, "at_s": 1, "repair_s": 5}]}},
     "cluster.failures", "not static"),
    ("failures-of-a-closed-loop", "b", {"workload.arrival": {"process": "concurrency",
                                                             "users": 4},
                                        "cluster.failures": {"at": [
                                            {"replica": 0, "at_s": 1, "repair_s": 5}]}},
     "cluster.failures", "replica failures need an open-loop workload"),
    ("failures-with-parallel-sampling", "b", {"workload.classes.0.n": 2, "cluster.failures": {
        "at": [{"replica": 0, "at_s": 1, "repair_s": 5}]}},
     "cluster.failures", "not modelled with parallel sampling"),
    ("router-timeout-negative", "b", {"cluster.router_queue_timeout_s": -1},
     "cluster.router_queue_timeout_s", "must be > 0"),
    ("router-timeout-a-string", "b", {"cluster.router_queue_timeout_s": "60s"},
     "cluster.router_queue_timeout_s", "expected a number in seconds"),
    ("replicas-beyond-1024", "b", {"cluster.num_replicas": 1025}, "cluster.num_replicas",
     "must be <= 1024"),
    ("router-unknown", "b", {"cluster.router": "random"}, "cluster.router",
     "Input should be 'round_robin'"),
    # -- pooled fleets
    ("pool-name-twice", "pooled", {"cluster.pools.1.name": "h100"}, "cluster.pools.1.name",
     "is already used by pool 0"),
    ("pool-name-with-a-space", "pooled", {"cluster.pools.0.name": "h 100"},
     "cluster.pools.0.name", "got 'h 100'"),
    ("route-to-no-pool", "pooled", {"cluster.route": [{"class": "chat", "pool": "h300"}]},
     "cluster.route.0.pool", "no pool named 'h300'"),
    ("route-of-no-class", "pooled", {"cluster.route": [{"class": "nope", "pool": "h100"}]},
     "cluster.route.0.class", "no workload class named 'nope'"),
    ("route-to-another-model", "pooled", {"cluster.route": [{"class": "code",
                                                             "pool": "h100"}]},
     "cluster.route.0.pool", "class 'code' asks for qwen2.5-7b"),
    ("route-min-prompt-0", "pooled", {"cluster.route": [{"min_prompt_tokens": 0,
                                                         "pool": "h100"}]},
     "cluster.route.0.min_prompt_tokens", "must be > 0"),
    ("class-asks-for-no-pools-model", "pooled", {"workload.classes.1.model": "mistral-7b"},
     "workload.classes.1.model", "which no pool serves"),
    ("pool-of-0-replicas", "pooled", {"cluster.pools.0.num_replicas": 0},
     "cluster.pools.0.num_replicas", "must be > 0"),
    ("pool-unknown-gpu", "pooled", {"cluster.pools.0.hardware": "h900"},
     "cluster.pools.0.hardware", "unknown hardware 'h900'"),
    ("pool-unknown-model", "pooled", {"cluster.pools.1.model": "qwen9"},
     "cluster.pools.1.model", "unknown model 'qwen9'"),
    ("pool-engine-knob", "pooled", {"cluster.pools.1.engine.max_num_seqs": 0},
     "cluster.pools.1.engine.max_num_seqs", "must be > 0"),
    ("pool-tp-3", "pooled", {"cluster.pools.0.tensor_parallel_size": 3},
     "cluster.pools.0.tensor_parallel_size", "must divide num_attention_heads 32"),
    ("pool-knob-beside-engine", "pooled", {"cluster.pools.0.max_num_seqs": 8},
     "cluster.pools.0.max_num_seqs", "an engine knob goes under engine:"),
    ("pool-autoscaling-no-target", "pooled", {"cluster.pools.0.autoscaling": {
        "signal": "queue", "max_replicas": 2}},
     "cluster.pools.0.autoscaling", "needs target"),
    ("pool-failure-replica-5", "pooled", {"cluster.pools.0.failures": {"at": [
        {"replica": 5, "at_s": 1, "repair_s": 5}]}},
     "cluster.pools.0.failures.at.0.replica", "replica 5 does not exist"),
    ("pool-failures-every-10-ms", "pooled", {"cluster.pools.0.failures": {
        "mtbf_s": 0.01, "mttr_s": 0.01}},
     "cluster.pools.0.failures.mtbf_s", "would fail and replace"),
    ("pool-autoscaler-every-ns", "pooled", {"cluster.pools.0.autoscaling": {
        **AUTOSCALED, "interval_s": 1e-9}},
     "cluster.pools.0.autoscaling.interval_s", "would tick the autoscaler"),
    ("pools-and-a-split", "pooled", {"variants": [{"name": "x", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1}, "link": "nvlink-4"}}]},
     "variants.0.disaggregation", "not both"),
    ("seventeen-pools", "pooled", {"cluster.pools": [
        {"name": f"p{i}", "hardware": "h100-sxm"} for i in range(17)]},
     "cluster.pools", "at most 16 pools"),
    # -- speculative decoding
    ("spec-method-medusa", "spec", {"engine.speculative.method": "medusa"},
     "engine.speculative.method", "Input should be 'eagle'"),
    ("spec-k-0", "spec", {"engine.speculative.num_speculative_tokens": 0},
     "engine.speculative.num_speculative_tokens", "must be > 0"),
    ("spec-k-a-million", "spec", {"engine.speculative.num_speculative_tokens": 10**6},
     "engine.speculative.num_speculative_tokens", "does not fit"),
    ("spec-acceptance-1", "spec", {"engine.speculative.acceptance_rate": 1.0},
     "engine.speculative.acceptance_rate", "must be < 1"),
    ("spec-acceptance-of-no-class", "spec", {"engine.speculative.acceptance_rate_by_class":
                                             {"nope": 0.5}},
     "engine.speculative.acceptance_rate_by_class", "no workload class named 'nope'"),
    ("spec-draft-without-model", "spec", {"engine.speculative.method": "draft_model"},
     "engine.speculative.method", "needs model: the draft model"),
    ("spec-draft-unknown", "spec", {"engine.speculative": {**SPEC_DRAFT, "model": "tiny-9b"}},
     "engine.speculative.model", "unknown model 'tiny-9b'"),
    ("spec-eagle-with-a-model", "spec", {"engine.speculative.model": "llama-3.1-8b"},
     "engine.speculative.model", "used by method draft_model only"),
    ("spec-with-pipeline", "spec", {"engine.pipeline_parallel_size": 2},
     "engine.speculative", "not modelled with pipeline_parallel_size > 1"),
    ("spec-under-static", "spec", {"engine.scheduler": "static"},
     "engine.speculative", "this engine runs scheduler static"),
    ("spec-sglang-topk-4", "spec", {"engine.preset": "sglang-0.5",
                                    "engine.scheduler": "sglang", "engine.speculative": {
                                        "method": "eagle", "speculative_num_steps": 3,
                                        "speculative_eagle_topk": 4, "acceptance_rate": 0.7}},
     "engine.speculative.speculative_eagle_topk", "not a tree of candidates; valid: 1"),
    # SGLang overrides it to k + 1 with a warning; capsim replaced it without a word
    ("spec-sglang-draft-tokens-9", "spec", {"engine.preset": "sglang-0.5",
                                            "engine.scheduler": "sglang", "engine.speculative": {
                                                "method": "eagle", "speculative_num_steps": 3,
                                                "speculative_num_draft_tokens": 9,
                                                "acceptance_rate": 0.7}},
     "engine.speculative.speculative_num_draft_tokens",
     "verifies speculative_num_steps + 1 tokens (valid: 4)"),
    ("spec-draft-async", "spec", {"engine.speculative": SPEC_DRAFT,
                                  "engine.async_scheduling": True},
     "engine.async_scheduling", "not draft_model"),
    ("spec-with-failures", "spec", {"cluster.failures": {"at": [
        {"replica": 0, "at_s": 1, "repair_s": 5}]}},
     "engine.speculative", "not modelled with cluster.failures"),
    # -- disaggregation
    ("split-unknown-link", "split", {f"{SPLIT}.link": "ib-xdr"}, f"{SPLIT}.link",
     "unknown link 'ib-xdr'"),
    ("split-negative-bandwidth", "split", {f"{SPLIT}.link": {"bandwidth_gbit_per_s": -1,
                                                             "latency_s": 0}},
     f"{SPLIT}.link", "must be > 0"),
    ("split-no-prefill", "split", {f"{SPLIT}.prefill.num_replicas": 0},
     f"{SPLIT}.prefill.num_replicas", "must be > 0"),
    ("split-router", "split", {f"{SPLIT}.router": "least_outstanding_tokens"},
     f"{SPLIT}.router", "Input should be 'least_kv' or 'round_robin'"),
    ("split-unknown-gpu", "split", {f"{SPLIT}.decode.hardware": "h900"},
     f"{SPLIT}.decode.hardware", "unknown hardware 'h900'"),
    ("split-autoscaled", "split", {"variants.0.cluster": {"autoscaling": AUTOSCALED}},
     "variants.0.cluster.autoscaling", "not to a disaggregated variant's pools"),
    ("split-static-prefill", "split", {f"{SPLIT}.prefill.engine": {"scheduler": "static"}},
     f"{SPLIT}.prefill.engine.scheduler", "this pool runs scheduler static"),
    ("split-speculative-decode", "split", {f"{SPLIT}.decode.engine": {"speculative": {
        "method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}}},
     f"{SPLIT}.decode.engine.speculative", "not modelled in a disaggregated pool"),
    ("split-tp-negative", "split", {f"{SPLIT}.decode.tensor_parallel_size": -1},
     f"{SPLIT}.decode.tensor_parallel_size", "must be >= 1"),
    # -- engine knobs of each preset, MoE options, weight formats
    ("long-prefill-unchunked", "b", {"engine.long_prefill_token_threshold": 512,
                                     "engine.enable_chunked_prefill": False},
     "engine.long_prefill_token_threshold", "set enable_chunked_prefill: true"),
    ("long-prefill-on-sglang", "b", {"engine.long_prefill_token_threshold": 512,
                                     "engine.preset": "sglang", "engine.scheduler": "sglang"},
     "engine.long_prefill_token_threshold", "belongs to the continuous scheduler"),
    ("async-on-vllm-0.6", "b", {"engine.preset": "vllm-0.6", "engine.async_scheduling": True},
     "engine.async_scheduling", "has no async_scheduling knob"),
    ("async-yes", "b", {"engine.async_scheduling": "yes"}, "engine.async_scheduling",
     "expected true or false"),
    ("multi-step-on-v1", "b", {"engine.num_scheduler_steps": 8},
     "engine.num_scheduler_steps", "has no multi-step scheduling"),
    ("marlin-on-amd", "b", {"model": "gpt-oss-20b", "hardware": "mi300x",
                            "engine.moe_backend": "marlin"},
     "engine.moe_backend", "run on NVIDIA GPUs only"),
    ("marlin-on-sglang", "b", {"model": "gpt-oss-20b", "engine.moe_backend": "marlin",
                               "engine.preset": "sglang", "engine.scheduler": "sglang"},
     "engine.moe_backend", "moe_backend 'marlin' is not a runner of SGLang's"),
    ("mxfp4-runner-on-fp8-experts", "b", {"model": "deepseek-v3", "hardware": "b200",
                                          "engine.quantization": "fp8_block",
                                          "engine.tensor_parallel_size": 8,
                                          "engine.moe_backend": "flashinfer_mxfp4",
                                          "engine.preset": "sglang", "engine.scheduler": "sglang"},
     "engine.moe_backend", "flashinfer_mxfp4 runs experts of mxfp4, not fp8_block (valid "
                           "here: auto, triton, flashinfer_trtllm)"),
    ("fusion-knob-on-vllm", "b", {"engine.disable_shared_experts_fusion": True},
     "engine.disable_shared_experts_fusion", "is SGLang's --disable-shared-experts-fusion"),
    ("routing-skew-on-dense", "b", {"engine.moe_routing_skew": 0.5},
     "engine.moe_routing_skew", "needs a mixture-of-experts model"),
    ("dp-attention-on-dense", "b", {"engine.enable_dp_attention": True},
     "engine.enable_dp_attention", "needs a mixture-of-experts model"),
    ("ep-not-dividing-experts", "b", {"model": "mixtral-8x7b", "engine.tensor_parallel_size": 3,
                                      "engine.enable_expert_parallel": True},
     "engine.tensor_parallel_size", "must divide"),
    # a billion copies were refused as weights that do not fit, at tensor_parallel_size
    ("redundant-experts-a-billion", "b", {"model": "qwen3-30b-a3b",
                                          "engine.tensor_parallel_size": 4,
                                          "engine.enable_expert_parallel": True,
                                          "engine.num_redundant_experts": 10**9},
     "engine.num_redundant_experts", "valid: num_redundant_experts <= 384"),
    ("nvfp4-on-hopper", "b", {"engine.quantization": "nvfp4"}, "engine.quantization",
     "needs fp4 tensor cores"),
    ("quantization-int3", "b", {"engine.quantization": "int3"}, "engine.quantization",
     "unknown quantization 'int3'"),
    ("gpt-oss-as-fp8", "b", {"model": "gpt-oss-20b", "engine.quantization": "fp8"},
     "engine.quantization", "does not match the checkpoint"),
    ("trt-policy-greedy", "b", {"engine.preset": "trtllm", "engine.scheduler": "trtllm",
                                "engine.capacity_scheduler_policy": "GREEDY"},
     "engine.capacity_scheduler_policy", "Input should be 'GUARANTEED_NO_EVICT'"),
    ("trt-batch-wait-on-vllm", "b", {"engine.batch_wait_timeout_iters": 40},
     "engine.batch_wait_timeout_iters", "belongs to the trtllm scheduler"),
    ("trt-batch-wait-ratio-negative", "b", {"engine.preset": "trtllm",
                                            "engine.scheduler": "trtllm",
                                            "engine.batch_wait_max_tokens_ratio": -0.8},
     "engine.batch_wait_max_tokens_ratio", "must be >= 0 (got -0.8)"),
    ("tgi-knob-on-vllm", "b", {"engine.max_waiting_tokens": 20},
     "engine.max_waiting_tokens", "belongs to the tgi scheduler"),
    ("sglang-knob-on-vllm", "b", {"engine.schedule_conservativeness": 0.5},
     "engine.schedule_conservativeness", "belongs to the sglang scheduler"),
    ("kv-memory-1e300", "b", {"engine.kv_cache_memory_gib": 1e300},
     "engine.kv_cache_memory_gib", "exceeds the"),
    ("block-size-2-30", "b", {"engine.block_size": 2**30}, "engine.gpu_memory_utilization",
     "less than one block"),
    ("max-num-seqs-2-40", "b", {"engine.max_num_seqs": 2**40}, "engine",
     "must be >= max_num_seqs"),
    ("max-model-len-1", "b", {"engine.max_model_len": 1}, "",
     "would reject every request", "report"),
    ("pipeline-a-million", "b", {"engine.pipeline_parallel_size": 10**6},
     "engine.pipeline_parallel_size", "exceeds the model's 32 layers"),
    ("tensor-a-million", "b", {"engine.tensor_parallel_size": 10**6},
     "engine.tensor_parallel_size", "must divide num_attention_heads"),
    # TP across nodes takes whole nodes (issue 30 item 4): 16 GPUs on nodes of 12 do not
    ("tp-16-on-nodes-of-12", "b", {"model": "llama-3.1-70b", "engine.tensor_parallel_size": 16,
                                   "hardware_overrides": {"gpus_per_node": 12}},
     "engine.tensor_parallel_size", "spans nodes of 12 h100-sxm[gpus_per_node=12] GPUs unevenly"),
    ("memory-fraction-tiny", "b", {"engine.gpu_memory_utilization": 1e-300},
     "engine.gpu_memory_utilization", "do not fit"),
    # -- workload: schedules, bursts, conversations, closed loops, lengths, traces
    ("schedule-of-zeros", "b", {"workload.schedule": {"kind": "piecewise", "factors": [0, 0]}},
     "workload.schedule.factors", "every factor is 0"),
    ("diurnal-trough-above-peak", "b", {"workload.schedule": {"kind": "diurnal", "trough": 2,
                                                              "peak": 1, "peak_hour": 3}},
     "workload.schedule.trough", "must be <= peak"),
    ("diurnal-hour-24", "b", {"workload.schedule": {"kind": "diurnal", "trough": 0.2,
                                                    "peak_hour": 24}},
     "workload.schedule.peak_hour", "must be < 24"),
    ("diurnal-period-ns", "b", {"workload.schedule": {"kind": "diurnal", "trough": 0.5,
                                                      "peak_hour": 1, "period_s": 1e-9}},
     "workload.schedule.resolution_s", "must be <= period_s"),
    ("markov-2-states-1-row", "b", {"workload.bursts": {"kind": "markov", "states": [
        {"factor": 1, "mean_s": 10}, {"factor": 2, "mean_s": 10}], "transitions": [[0, 1]]}},
     "workload.bursts.transitions", "must be a 2×2 matrix"),
    ("bursts-factor-0", "b", {"workload.bursts": {**ONOFF, "factor": 0}},
     "workload.bursts.factor", "must be > 0"),
    ("schedule-of-a-closed-loop", "b", {"workload.arrival": {"process": "concurrency",
                                                             "users": 4},
                                        "workload.schedule": {"kind": "piecewise",
                                                              "factors": [1]}},
     "workload.schedule", "shape an open loop's arrival rate"),
    ("conversation-in-a-closed-loop", "b", {"workload.arrival": {"process": "concurrency",
                                                                 "users": 4},
                                            "workload.classes.0.conversation": {
                                                "turns": {"dist": "fixed", "value": 3}}},
     "workload.classes", "cannot send"),
    ("users-0", "b", {"workload.arrival": {"process": "concurrency", "users": 0}},
     "workload.arrival.users", "must be > 0"),
    ("think-time-negative", "b", {"workload.arrival": {"process": "concurrency", "users": 2,
                                                       "think_time_s": -1}},
     "workload.arrival.think_time_s", "must be >= 0"),
    ("a-billion-users", "b", {"workload.arrival": {"process": "concurrency", "users": 10**9}},
     "workload.duration_s", "more than the limit of 50,000,000"),
    ("rate-1e-300", "b", {"workload.arrival.rate_per_s": 1e-300}, "workload.duration_s",
     "no request arrives"),
    ("a-trillion-requests", "b", {"workload.duration_s": "DEL", "workload.num_requests": 10**12},
     "workload.num_requests", "more than the limit of 50,000,000"),
    ("warm-up-everything", "b", {"workload.warmup_request_count": 10**6},
     "workload.warmup_request_count", "would be warm-up"),
    ("uniform-max-below-min", "b", {"workload.classes.0.output_tokens": {
        "dist": "uniform", "min": 10, "max": 1}},
     "workload.classes.0.output_tokens.min", "min must be ≤ max"),
    ("lognormal-sigma-1e300", "b", {"workload.classes.0.output_tokens": {
        "dist": "lognormal", "mean": 100, "sigma": 1e300, "min": 1, "max": 100}},
     "workload.classes.0.output_tokens.sigma", "must be <= 20"),
    ("weight-infinite", "b", {"workload.classes.0.weight": float("inf")},
     "workload.classes.0.weight", "must be a finite number"),
    ("prefix-fraction-1.5", "b", {"workload.classes.0.shared_prefix": {"tokens": 100,
                                                                       "fraction": 1.5}},
     "workload.classes.0.shared_prefix.fraction", "must be <= 1"),
    ("a-million-samples", "b", {"workload.classes.0.n": 10**6}, "",
     "would reject every request", "report"),
    ("trace-missing", "b", {"workload": {"trace": {"path": "nope.csv"}}}, "workload.trace.path",
     "trace file not found"),
    ("trace-columns-missing", "b", {"workload": {"trace": {"path": "t.csv",
                                                           "format": "columns"}}},
     "workload.trace", "format: columns needs columns"),
    ("empirical-missing", "b", {"workload.classes.0.prompt_tokens": {
        "dist": "empirical", "path": "nope.csv", "column": "x"}},
     "workload.classes.0.prompt_tokens.path", "empirical length file not found"),
    ("class-slo-typo", "b", {"workload.classes.0.slo": {"ttft_msec": 100}},
     "workload.classes.0.slo.ttft_msec", "did you mean 'ttft_ms'?"),
    ("goodput-fraction-2", "b", {"slo.targets": {"goodput_fraction": 2}}, "slo.targets",
     "is a fraction: 0..1"),
    # -- hardware overrides, variants, sweep and sizing sections, names
    ("override-unknown-field", "b", {"hardware_overrides": {"hbm_bw": 1}},
     "hardware_overrides.hbm_bw", "unknown hardware profile field 'hbm_bw'"),
    ("override-negative-bandwidth", "b", {"hardware_overrides": {
        "hbm_bandwidth_bytes_per_s": -1}},
     "hardware_overrides.hbm_bandwidth_bytes_per_s", "must be > 0"),
    ("override-unknown-link", "b", {"hardware_overrides": {"scale_out_link": "ib-xdr"}},
     "hardware_overrides.scale_out_link", "unknown link 'ib-xdr'"),
    ("override-memory-1e300", "b", {"hardware_overrides": {"hbm_bytes": 1e300}},
     "hardware_overrides.hbm_bytes", "expected an integer of bytes"),
    ("variants-named-twice", "b", {"variants": [{"name": "a"}, {"name": "a"}]}, "variants",
     "variant names must be unique"),
    ("variant-set-typo", "b", {"variants": [{"name": "a", "set": {
        "workload.arival.rate_per_s": 3}}]},
     "variants.0.set", "did you mean 'arrival'?"),
    ("variant-name-200-chars", "b", {"variants": [{"name": "x" * 200}]}, "variants.0.name",
     "at most 100 characters"),
    ("sweep-the-seed", "b", {"sweep": {"seed": [1, 2]}}, "sweep", "'seed' cannot be swept"),
    ("sweep-a-scalar", "b", {"sweep": {"engine.max_num_seqs": 64}},
     "sweep.engine.max_num_seqs", "give a list of values"),
    ("sweep-a-value-twice", "b", {"sweep": {"engine.max_num_seqs": [64, 64]}},
     "sweep.engine.max_num_seqs", "is listed twice"),
    ("sweep-1200-points", "b", {"sweep": {"engine.max_num_seqs": list(range(1, 41)),
                                          "workload.arrival.rate_per_s": list(range(1, 31))}},
     "sweep", "= 1,200 points, more than 1,000"),
    ("sweep-a-bad-value", "b", {"sweep": {"engine.max_num_seqs": [64, -1]}},
     "sweep.engine.max_num_seqs", "(sweep point engine.max_num_seqs=-1)", "sweep"),
    ("sweep-an-autoscaler-every-ns", "b", {"cluster.autoscaling": AUTOSCALED, "sweep": {
        "cluster.autoscaling.interval_s": [15, 1e-7]}},
     "sweep.cluster.autoscaling.interval_s", "would tick the autoscaler", "sweep"),
    ("sizing-unknown-gpu", "b", {"sizing": {"hardware": ["h900"]}}, "sizing.hardware.0",
     "unknown hardware 'h900'", "size"),
    ("sizing-no-tp", "b", {"sizing": {"tensor_parallel_size": []}},
     "sizing.tensor_parallel_size", "expected at least 1 item"),
    ("sizing-1001-seeds", "b", {"sizing": {"seeds": 1001}}, "sizing.seeds", "must be <= 1000"),
    # sizing.disaggregation: validate refuses what capsim size would (they were refused only
    # by size, after loading every option)
    ("sizing-split-unknown-link", "split", {"sizing": {"disaggregation": {"link": ["nvlink-9"]}}},
     "sizing.disaggregation.link.0", "unknown link 'nvlink-9'", "size"),
    ("sizing-split-ep-on-dense", "split", {"sizing": {"disaggregation": {"decode": [
        {"tensor_parallel_size": 1, "enable_expert_parallel": True}]}}},
     "sizing.disaggregation.decode.0.enable_expert_parallel", "llama-3.1-8b is dense", "size"),
    ("sizing-split-tp-3", "split", {"sizing": {"disaggregation": {"prefill": [
        {"tensor_parallel_size": 3}]}}},
     "sizing.disaggregation.prefill.0.tensor_parallel_size",
     "must divide num_attention_heads 32", "size"),
    ("sizing-split-without-a-split", "b", {"sizing": {"disaggregation": {"ratios": ["1P2D"]}}},
     "sizing.disaggregation", "no variant has a disaggregation: section", "size"),
    ("sizing-split-a-million-prefills", "split", {"sizing": {"disaggregation": {
        "ratios": ["1000000P1D"]}}},
     "sizing.disaggregation.ratios", "more than the 1,024 one run simulates", "size"),
    ("capsim-version-a-number", "b", {"capsim_version": 3}, "capsim_version",
     "expected a string"),
    ("engine-null", "b", {"engine": None}, "engine", "expected a mapping"),
    # -- issue 31 "Before resolving", a later sweep (each accepted, or a traceback, before)
    ("a-route-no-prompt-can-take", "pooled",
     {"cluster.route": [{"min_prompt_tokens": 100_000, "pool": "l40s"}]},
     "cluster.route.0.min_prompt_tokens", "can route no request: pool 'l40s' takes prompts "
     "of at most 4,095 tokens"),
    ("ngram-under-sglang-0.5", "spec", {"engine.preset": "sglang-0.5",
                                        "engine.speculative.method": "ngram"},
     "engine.speculative", "SGLang's NGRAM verifies a tree of n-gram candidates"),
    ("draft-model-under-sglang-0.4", "spec", {"engine.preset": "sglang-0.4",
                                              "engine.speculative": SPEC_DRAFT},
     "engine.speculative", "(it has EAGLE, EAGLE3, NEXTN)"),
    ("eagle-under-vllm-0.6", "spec", {"engine.preset": "vllm-0.6"},
     "engine.speculative", "V0's speculative decoding"),
    ("eagle-under-vllm-0.2.5", "spec", {"engine.preset": "vllm-0.2.5"},
     "engine.speculative", "(it has no speculative decoding)"),
    ("a-mooncake-line-not-utf8", "b",
     {"workload": {"trace": {"path": "FILE:latin1.jsonl", "format": "mooncake"}}},
     "workload.trace.path", "line 2: not UTF-8 text (byte 0xe9"),
    ("max-position-embeddings-1e15", "b", {"model": "FILE:positions1e15.json"},
     "max_position_embeddings", "must be <= 2147483647"),
    # a warning (another model's acceptance row) and then a refusal: one line, the refusal
    ("a-warning-then-a-refusal", "b", {
        "engine.speculative": {"method": "eagle3", "num_speculative_tokens": 3,
                               "acceptance": "eagle3-qwen3-8b-mtbench"},
        "workload.classes.0.prompt_tokens": {"dist": "fixed", "value": 5000}},
     "", "would reject every request", "report"),
]

#: (id, capsim arguments, the error line's start after ``error: ``, a phrase). ``{S}``: a
#: good scenario, ``{F}``: the folder of bad files (:func:`bad_files`), ``{W}``: an empty
#: folder of the case, which must stay empty.
CLI_BAD = [
    # issue 31 item 5: seeds and sizes that never end
    ("sweep-a-billion-seeds", "sweep {S} --seeds 1000000000 -o {W}/o",
     "--seeds must be in 1..1,000", ""),
    ("size-5000-seeds", "size {S} --seeds 5000 -o {W}/o", "--seeds must be in 1..1,000", ""),
    ("size-a-billion-gpus", "size {S} --gpus 1000000000 --executor serial -o {W}/o",
     "{S}: --gpus 1,000,000,000 makes up to 1,000,000,000 replicas", ""),
    ("size-search-to-a-billion", "size {S} --max-gpus 1000000000 --executor serial -o {W}/o",
     "{S}: sizing.max_gpus: max_gpus 1,000,000,000 makes up to", ""),
    ("size-rate-nan", "size {S} --rate nan -o {W}/o", "--rate must be a finite number", ""),
    ("size-rate-inf", "size {S} --rate inf -o {W}/o", "--rate must be a finite number", ""),
    ("size-rate-1e12", "size {S} --rate 1e12 --executor serial -o {W}/o",
     "{S}: --rate 1e+12 requests/s: valid: 0 < rate <=", ""),
    ("size-workers-negative", "size {S} --workers -3 -o {W}/o", "--workers must be >= 1", ""),
    ("size-headroom-a-billion", "size {S} --headroom 1000000000 --executor serial -o {W}/o",
     "{S}: sizing.max_gpus: --headroom 1000000000 is not smaller than the fleet", ""),
    ("sweep-no-section", "sweep {S} -o {W}/o", "{S}: sweep: no sweep: section", ""),
    ("sweep-executor-threads", "sweep {S} --executor threads -o {W}/o",
     "Invalid value for '--executor'", ""),
    ("run-workers-0", "run {S} --workers 0 -o {W}/o", "Invalid value for '--workers'", ""),
    ("run-seed-negative", "run {S} --seed -5 -o {W}/o", "Invalid value for '--seed'", ""),
    ("run-set-0-seqs", "run {S} --set engine.max_num_seqs=0 -o {W}/o",
     "--set engine.max_num_seqs: must be > 0", ""),
    ("validate-a-folder", "validate {W}", "Invalid value for 'SCENARIO'", ""),
    ("validate-a-binary", "validate {F}/bin.json", "{F}/bin.json: cannot read scenario", ""),
    ("validate-nested-too-deep", "validate {F}/deep.json",
     "{F}/deep.json: invalid YAML at line 1, column 101: nested more than 100", ""),
    # issue 31 item 6 through roofline and the templates
    ("roofline-mamba", "roofline --hardware h100-sxm --prefill-tokens 512 --model "
                       "{F}/mamba.json",
     "--model {F}/mamba.json: model_type: model_type 'mamba' is not a model capsim prices",
     ""),
    ("roofline-no-model-type", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                               "{F}/notype.json",
     "--model {F}/notype.json: model_type: no model_type", ""),
    ("roofline-mixtral-0", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                           "{F}/mixtral0.json",
     "--model {F}/mixtral0.json: num_local_experts: must be >= 1", ""),
    ("roofline-head-dim-125", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                              "{F}/h4000.json",
     "--model {F}/h4000.json: head_dim 125", ""),
    ("roofline-mxfp4-config", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                              "{F}/mxfp4.json",
     "--model {F}/mxfp4.json: quantization_config.quant_method: quant_method mxfp4", ""),
    ("roofline-mxfp4-dense", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                             "llama-3.1-8b --quantization mxfp4",
     "--quantization mxfp4 stores only a mixture-of-experts model's experts", ""),
    ("roofline-kv-heads-5", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                            "{F}/kvheads5.json",
     "--model {F}/kvheads5.json: num_attention_heads (32) must be a multiple", ""),
    ("roofline-top-8-of-4", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                            "{F}/topk8of4.json",
     "--model {F}/topk8of4.json: num_experts_per_tok (8) must be in 1..num_experts (4)", ""),
    ("roofline-binary-config", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                               "{F}/bin.json",
     "--model {F}/bin.json: cannot read file: not UTF-8 text", ""),
    ("roofline-skew-1e9", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                          "qwen3-30b-a3b --routing-skew 1e9",
     "--routing-skew must be in [0, 100]", ""),
    ("roofline-context-1e11", "roofline --hardware h100-sxm --model llama-3.1-8b "
                              "--decode-batch 4 --context 99999999999",
     "--context 99,999,999,999 exceeds llama-3.1-8b's max_position_embeddings", ""),
    ("roofline-prefill-1e11", "roofline --hardware h100-sxm --model llama-3.1-8b "
                              "--prefill-tokens 99999999999",
     "--prefill-tokens 99,999,999,999 is more tokens than one step can hold", ""),
    ("roofline-batch-1e8", "roofline --hardware h100-sxm --model llama-3.1-8b "
                           "--decode-batch 99999999 --context 100",
     "--decode-batch × --context 9,999,999,900", ""),
    ("roofline-pp-64", "roofline --hardware h100-sxm --prefill-tokens 5 --model llama-3.1-8b "
                       "--pp 64", "--pp 64 exceeds the model's 32 layers", ""),
    ("roofline-preset-unknown", "roofline --hardware h100-sxm --prefill-tokens 5 --model "
                                "llama-3.1-8b --preset vllm-9",
     "--preset: unknown engine preset 'vllm-9'", ""),
    ("roofline-bad-gpu-file", "roofline --hardware {F}/gpu.yaml --prefill-tokens 5 --model "
                              "llama-3.1-8b", "--hardware {F}/gpu.yaml: ",
     "required field is missing"),
    ("models-template-from-mamba", "models --template x --from {F}/mamba.json",
     "{F}/mamba.json: --from.model_type: model_type 'mamba'", ""),
    ("models-template-over-a-file", "models --template x -o {F}/mamba.json",
     "-o {F}/mamba.json: the file exists", ""),
    ("models-from-unknown", "models --template x --from llama-9b",
     "--from: unknown model 'llama-9b'", ""),
    ("models-o-alone", "models -o {W}/m.yaml", "--from and -o go with --template NAME", ""),
    ("hardware-from-unknown", "hardware --template x --from h900",
     "--from: unknown hardware 'h900'", ""),
    ("hardware-from-alone", "hardware --from h100-sxm",
     "--from and -o go with --template NAME", ""),
    ("engines-bogus-option", "engines --bogus", "No such option '--bogus'", ""),
    ("a-bogus-command", "bogus", "No such command 'bogus'", ""),
    # issue 31 item 7: result files, read alike by compare and calibrate --from
    ("compare-a-binary", "compare {F}/bin.json {S} -o {W}/o",
     "{F}/bin.json: not a text file", ""),
    ("calibrate-a-binary", "calibrate --hardware h100-sxm --from {F}/bin.json --scenario {S} "
                           "-o {W}/o", "{F}/bin.json: not a text file", ""),
    ("compare-empty", "compare {F}/empty.json {S} -o {W}/o", "{F}/empty.json: malformed JSON",
     ""),
    ("compare-not-a-result", "compare {F}/hello.json {S} -o {W}/o",
     "{F}/hello.json: not a supported benchmark result", ""),
    ("compare-negative-length", "compare {F}/neglen.json {S} -o {W}/o",
     "{F}/neglen.json: vllm bench serve result: request 0's input_lens is -5", ""),
    ("compare-no-lengths", "compare {F}/nolens.json {S} -o {W}/o",
     "{F}/nolens.json: vllm bench serve result: missing per-request input_lens", ""),
    ("compare-two-runs", "compare {F}/two.jsonl {S} -o {W}/o",
     "{F}/two.jsonl: vllm bench serve result holds 2 runs", ""),
    ("calibrate-two-runs", "calibrate --hardware h100-sxm --from {F}/two.jsonl --scenario {S} "
                           "-o {W}/o", "{F}/two.jsonl: vllm bench serve result holds 2 runs",
     ""),
    ("compare-run-9", "compare {F}/two.jsonl {S} --run 9 -o {W}/o",
     "{F}/two.jsonl: --run 9: the vllm bench serve result holds 2 run(s)", ""),
    ("compare-nested-too-deep", "compare {F}/deep.json {S} -o {W}/o",
     "{F}/deep.json: malformed JSON: nested too deep", ""),
    ("compare-no-such-variant", "compare {F}/two.jsonl {S} --run 0 --variant nope -o {W}/o",
     "{S}: --variant 'nope': no such variant", ""),
    ("calibrate-another-gpu", "calibrate --hardware a100-80gb --from {F}/two.jsonl --run 0 "
                              "--scenario {S} -o {W}/o",
     "{S}: variant 'default' (the first; choose with --variant) runs on h100-sxm", ""),
    ("calibrate-csv-columns", "calibrate --hardware h100-sxm --csv {F}/ab.csv "
                              "--model llama-3.1-8b -o {W}/o",
     "{F}/ab.csv: missing column(s) operator", ""),
    ("calibrate-csv-of-mamba", "calibrate --hardware h100-sxm --csv {F}/ab.csv "
                               "--model {F}/mamba.json -o {W}/o",
     "--model {F}/mamba.json: model_type: model_type 'mamba'", ""),
    ("calibrate-vidur-a-file", "calibrate --hardware h100-sxm --vidur {F}/ab.csv -o {W}/o",
     "Invalid value for '--vidur'", ""),
    ("calibrate-nothing", "calibrate --hardware h100-sxm -o {W}/o",
     "nothing to calibrate from", ""),
]

#: Sizing cases of a scenario (``capsim size`` refuses them): (id, edits, path, phrase).
SIZE_BAD = [
    ("size-a-closed-loop", {"workload.arrival": {"process": "concurrency", "users": 4}},
     "workload.arrival.process", "a closed loop (process: concurrency)"),
    ("size-without-targets", {"slo.targets": {}}, "slo.targets",
     "needs at least one run-level target"),
    ("size-all-at-once", {"workload.duration_s": "DEL", "workload.num_requests": 50,
                          "workload.arrival.rate_per_s": float("inf")},
     "workload.arrival.rate_per_s", "needs a finite request rate"),
    ("size-pooled-mixes", {"cluster": BASES["pooled"]["cluster"],
                           "workload": BASES["pooled"]["workload"],
                           "sizing": {"max_gpus": 10**6}},
     "sizing.max_gpus", "mixes to search, more than 200,000"),
    ("size-pooled-gpus", {"cluster": BASES["pooled"]["cluster"],
                          "workload": BASES["pooled"]["workload"]},
     "", "--gpus is not modelled for pooled fleets"),
]


def _laughs(levels: int) -> str:
    text = '&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
    for k in range(1, levels):
        text = f"&a{k} [{text}" + f",*a{k - 1}" * 8 + "]"
    return text


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, repo_root):
    """Bad model configs, result files and profiles, one folder for every case."""
    d = tmp_path_factory.mktemp("bad")
    llama = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 131072}
    configs = {"mamba": {"model_type": "mamba"}, "notype": {"model_type": None},
               "mixtral0": {"model_type": "mixtral", "num_local_experts": 0,
                            "num_experts_per_tok": 2},
               "qwenmoe0": {"model_type": "qwen3_moe", "num_experts": 0,
                            "num_experts_per_tok": 8, "moe_intermediate_size": 768},
               "h4000": {"hidden_size": 4000},
               "mxfp4": {"quantization_config": {"quant_method": "mxfp4"}},
               "kvheads5": {"num_key_value_heads": 5},
               "kvheads0": {"num_key_value_heads": 0},
               "window-1": {"model_type": "mistral", "sliding_window": -1},
               "mla0": {"model_type": "deepseek_v3", "kv_lora_rank": 0, "q_lora_rank": 1536,
                        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128},
               "topk8of4": {"model_type": "mixtral", "num_local_experts": 4,
                            "num_experts_per_tok": 8}}
    for name, edit in configs.items():
        doc = {k: v for k, v in {**llama, **edit}.items() if v is not None}
        (d / f"{name}.json").write_text(json.dumps(doc))
    (d / "positions1e15.json").write_text(json.dumps({**llama, "max_position_embeddings": 10**15}))
    (d / "latin1.jsonl").write_bytes(
        b'{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        b'{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [2], '
        b'"note": "caf\xe9"}\n')
    (d / "bin.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x01")
    (d / "empty.json").write_text("")
    (d / "hello.json").write_text('{"hello": 1}')
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "gpu.yaml").write_text("name: x\nhbm_bytes: -1\n")
    (d / "ab.csv").write_text("a,b\n1,2\n")
    result = json.loads((repo_root / "tests/calibrate/fixtures/vllm_bench_serve.json")
                        .read_text())
    (d / "neglen.json").write_text(json.dumps({**result, "input_lens": [-5, 1, 1, 1, 1]}))
    (d / "nolens.json").write_text(json.dumps({k: v for k, v in result.items()
                                               if k != "input_lens"}))
    (d / "two.jsonl").write_text(json.dumps(result) + "\n" + json.dumps(result) + "\n")
    return d


@pytest.fixture
def guarded(monkeypatch):
    """``run(argv)`` → (code, stdout, stderr, simulations started): the CLI in-process,
    stopped as a hang after HANG_S seconds."""
    from capsim.cli.main import main
    from capsim.engine import clock

    started = []
    real_init = clock.Environment.__init__

    def counting_init(self, *args, **kwargs):
        started.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(clock.Environment, "__init__", counting_init)

    def timeout(*_):
        raise TimeoutError

    def run(argv: list[str], capsys) -> tuple[object, str, str, int]:
        started.clear()
        previous = signal.signal(signal.SIGALRM, timeout)
        signal.alarm(HANG_S)
        t0 = time.monotonic()
        try:
            try:
                main(argv)
                code: object = 0
            except SystemExit as exc:
                code = exc.code
        except TimeoutError:
            code = "hang"
        except BaseException as exc:      # noqa: BLE001 - a traceback is what we count
            code = f"traceback {type(exc).__name__}: {exc}"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        out = capsys.readouterr()
        assert time.monotonic() - t0 < HANG_S + 5
        return code, out.out, out.err, len(started)
    return run


def _check(code, err: str, started: int, expected: list[str]) -> None:
    """One refused case: the kind of failure first in each assertion's message."""
    assert code != "hang", f"HANG: more than {HANG_S} s"
    assert not str(code).startswith("traceback") and "Traceback" not in err, \
        f"TRACEBACK: {code} {err}"
    assert code != 0, f"SILENT ACCEPT: exit 0, stderr {err!r}"
    assert started == 0, f"LATE FAILURE: refused after {started} simulation(s): {err}"
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, \
        f"WRONG MESSAGE: exit {code}, {err!r}"
    for part in expected:
        assert part in err, f"WRONG MESSAGE: {part!r} not in {err!r}"


def refused_alike(guarded, capsys, scenario: Path, where: str, phrase: str,
                  folder: Path) -> None:
    """``validate`` refuses ``scenario`` with one line starting ``where`` and holding
    ``phrase``; ``run`` refuses it with the same line before simulating; neither writes a
    file into ``folder``."""
    before = sorted(p.name for p in folder.iterdir())
    code, _, err, started = guarded(["validate", str(scenario)], capsys)
    _check(code, err, started, [phrase])
    assert err.startswith(where), f"WRONG MESSAGE: {err!r} does not start {where!r}"
    code, _, run_err, started = guarded(
        ["run", str(scenario), "--workers", "1", "-o", str(folder / "out")], capsys)
    _check(code, run_err, started, [])
    assert run_err == err, f"LATE FAILURE: run and validate differ: {run_err!r} vs {err!r}"
    assert sorted(p.name for p in folder.iterdir()) == before, "WROTE FILES"


def _files_at(value, files):
    """``value`` with each ``FILE:name`` string the path of ``name`` in ``files``."""
    if isinstance(value, str) and value.startswith("FILE:"):
        return str(files / value.removeprefix("FILE:"))
    if isinstance(value, dict):
        return {k: _files_at(v, files) for k, v in value.items()}
    return value


def set_dotted(doc, dotted: str, value) -> None:
    """Set ``doc``'s field at the YAML path ``dotted`` (list items by index, missing mappings
    made) to a copy of ``value``; ``"DEL"`` deletes the field instead."""
    parts = dotted.split(".")
    node = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    last = int(parts[-1]) if isinstance(node, list) else parts[-1]
    if value == "DEL":
        del node[last]
    else:
        node[last] = copy.deepcopy(value)


def _edited(base: str, edits: dict, files) -> dict:
    doc = copy.deepcopy(BASES[base])
    for dotted, value in edits.items():
        set_dotted(doc, dotted, _files_at(value, files))
    return doc


def _write(path, doc: dict) -> None:
    text = yaml.safe_dump(doc, sort_keys=False)
    if doc.get("description") in ("BOMB", "LOOP"):      # YAML only a file can hold
        value = _laughs(9) if doc["description"] == "BOMB" else "&x [1, *x]"
        text = text.replace(f"description: {doc['description']}", f"description: {value}")
    path.write_text(text)


@pytest.mark.parametrize("case", SCENARIO_BAD, ids=[c[0] for c in SCENARIO_BAD])
def test_a_bad_scenario_is_refused_alike_by_validate_and_run(case, tmp_path, guarded, capsys,
                                                             bad_files):
    _, base, edits, path, phrase, *second = case
    second = second[0] if second else "run"
    scenario = tmp_path / "s.yaml"
    _write(scenario, _edited(base, edits, bad_files))
    where = f": {path}: " if path else ": "
    code, out, err, started = guarded(["validate", str(scenario)], capsys)
    _check(code, err, started, [where, phrase])
    assert out == "", f"WRONG MESSAGE: validate printed {out!r}"
    out_dir = tmp_path / "out"
    argv = {"sweep": ["sweep", str(scenario), "--executor", "serial"],
            "size": ["size", str(scenario), "--executor", "serial"]}.get(
        second, ["run", str(scenario), "--workers", "1"]) + ["-o", str(out_dir)]
    code, _, second_err, started = guarded(argv, capsys)
    if second == "report":                  # issue 16: the report says why, then exit 2
        assert code == 2 and "completed no request" in second_err
        assert (out_dir / "index.html").exists()
        return
    _check(code, second_err, started, [])
    assert second_err == err, \
        f"LATE FAILURE: {second} and validate differ: {second_err!r} vs {err!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"], "WROTE FILES"


@pytest.mark.parametrize("case", SIZE_BAD, ids=[c[0] for c in SIZE_BAD])
def test_a_scenario_capsim_size_cannot_size_is_refused_at_once(case, tmp_path, guarded, capsys):
    _, edits, path, phrase = case
    scenario = tmp_path / "s.yaml"
    _write(scenario, _edited("b", edits, None))
    argv = ["size", str(scenario), "--executor", "serial", "-o", str(tmp_path / "out")]
    if "gpus" in case[0]:
        argv += ["--gpus", "2"]
    code, _, err, started = guarded(argv, capsys)
    _check(code, err, started, [f"{scenario}: " + (f"{path}: " if path else ""), phrase])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"], "WROTE FILES"


@pytest.mark.parametrize("case", CLI_BAD, ids=[c[0] for c in CLI_BAD])
def test_a_bad_option_or_file_is_one_line_and_writes_nothing(case, tmp_path, guarded, capsys,
                                                             bad_files):
    _, args, start, phrase = case
    scenario = tmp_path / "s.yaml"
    _write(scenario, BASE)
    work = tmp_path / "w"
    work.mkdir()
    subs = {"{S}": str(scenario), "{F}": str(bad_files), "{W}": str(work)}
    argv = args.split()
    for key, value in subs.items():
        argv = [a.replace(key, value) for a in argv]
        start = start.replace(key, value)
    before = sorted(p.name for p in bad_files.iterdir())
    code, _, err, started = guarded(argv, capsys)
    _check(code, err, started, [phrase])
    assert err.startswith(f"error: {start}"), f"WRONG MESSAGE: {err!r}"
    assert list(work.iterdir()) == [], "WROTE FILES"
    assert sorted(p.name for p in bad_files.iterdir()) == before, "WROTE FILES"


def test_the_sweep_has_150_cases_over_every_command():
    commands = {args.split()[0] for _, args, _, _ in CLI_BAD} | {"validate", "run", "size"}
    assert {"run", "validate", "sweep", "size", "compare", "calibrate", "models", "hardware",
            "engines", "roofline"} <= commands
    assert len(SCENARIO_BAD) + len(SIZE_BAD) + len(CLI_BAD) >= 150
