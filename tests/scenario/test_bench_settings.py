"""Preset trtllm-bench: the batch limits trtllm-bench throughput picks from its dataset
(capsim/scenario/bench_settings.py), resolved for a scenario's workload; trtllm-serve's
fixed budget (preset trtllm) still refuses a prompt longer than it."""

from __future__ import annotations

import copy

import pytest

from capsim.scenario.bench_settings import DatasetLengths, dataset_lengths
from capsim.scenario.load import load
from capsim.scenario.workload import WorkloadConfig


def _fixed(isl, osl, name="c", weight=1):
    return {"name": name, "weight": weight, "prompt_tokens": {"dist": "fixed", "value": isl},
            "output_tokens": {"dist": "fixed", "value": osl}}


#: The TensorRT-LLM 1.0 perf-overview's 20000/2000 cell of Llama-3.1-8B FP8 on one H100
#: (case tput_trtllm_v10_h100_fp8_llama31_8b_isl_osl_grid), as a user writes it.
DOC = {"name": "b", "model": "llama-3.1-8b", "hardware": "h100-sxm",
       "engine": {"preset": "trtllm-bench", "dtype": "fp8", "kv_cache_dtype": "fp8",
                  "free_gpu_memory_fraction": 0.95},
       "workload": {"num_requests": 4, "arrival": {"process": "constant", "rate_per_s": 1e9},
                    "classes": [_fixed(20000, 2000)]}}


def _engine(tmp_path, write_scenario, isl_osl=(20000, 2000), **engine):
    doc = copy.deepcopy(DOC)
    doc["engine"].update(engine)
    doc["workload"]["classes"] = [_fixed(*isl_osl)]
    return load(write_scenario(tmp_path, doc)).runs[0].pool().engine


def test_a_20k_2k_dataset_gets_trtllm_benchs_own_limits(tmp_path, write_scenario):
    """50.7 requests of 22,000 tokens fit 0.95 x (79.19 - 7.48) GiB: max_batch_size 64
    (the floor); max_num_tokens 2048 from the estimate, raised without chunked context to
    the longest prompt + 64 = 20,064; max_seq_len = 22,000; chunked context, block reuse off;
    GUARANTEED_NO_EVICT (trtllm-bench's --scheduler_policy default)."""
    eng = _engine(tmp_path, write_scenario)
    assert (eng.max_num_seqs, eng.max_num_batched_tokens, eng.max_model_len) == (64, 20064, 22000)
    assert not eng.chunked and not eng.enable_prefix_caching and eng.block_size == 32
    assert eng.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"


def test_knobs_the_scenario_gives_stay_and_the_rest_is_estimated(tmp_path, write_scenario):
    # both given: trtllm-bench uses them as they are
    eng = _engine(tmp_path, write_scenario, max_num_seqs=32, max_num_batched_tokens=24000)
    assert (eng.max_num_seqs, eng.max_num_batched_tokens) == (32, 24000)
    # --max_batch_size alone: the budget is the estimate's (its floor used the estimated 64)
    eng = _engine(tmp_path, write_scenario, max_num_seqs=48)
    assert (eng.max_num_seqs, eng.max_num_batched_tokens) == (48, 20064)
    # chunked context on: no floor, the estimate's 2048 tokens (a 20k prompt runs in chunks)
    eng = _engine(tmp_path, write_scenario, enable_chunked_prefill=True)
    assert (eng.max_num_seqs, eng.max_num_batched_tokens, eng.chunked) == (64, 2048, True)
    # --kv_cache_free_gpu_mem_fraction moves the estimate: at 1000/1000, 0.95 x 71.71 GiB
    # holds 558 requests (-> 640), 0.5 x 71.71 GiB 294 (-> 384)
    assert _engine(tmp_path, write_scenario, (1000, 1000)).max_num_seqs == 640
    assert _engine(tmp_path, write_scenario, (1000, 1000),
                   free_gpu_memory_fraction=0.5).max_num_seqs == 384
    assert _engine(tmp_path, write_scenario, max_model_len=30000).max_model_len == 30000


def test_dataset_lengths_weigh_classes_and_add_the_shared_prefix():
    """Mean ISL = ceil(0.75 x 1000 + 0.25 x (500 + 0.5 x 300)) = 913; mean OSL = ceil(0.75 x
    200 + 0.25 x 63.5) = 166 (uniform 1..126); longest prompt 500 + 300 = 800 < 1000."""
    chat = _fixed(1000, 200, "a", 3)
    rag = {"name": "b", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 500},
           "output_tokens": {"dist": "uniform", "min": 1, "max": 126},
           "shared_prefix": {"tokens": 300, "fraction": 0.5}}
    wl = WorkloadConfig.model_validate({"num_requests": 1, "arrival": {"process": "poisson",
                                                                       "rate_per_s": 1},
                                        "classes": [chat, rag]})
    assert dataset_lengths(wl) == DatasetLengths(mean_isl=913, mean_osl=166, max_isl=1000,
                                                 max_seq_len=1200)
    lognormal = {"name": "l", "weight": 1, "prompt_tokens": {"dist": "lognormal", "mean": 600,
                                                             "sigma": 1, "min": 1, "max": 4096},
                 "output_tokens": {"dist": "normal", "mean": 9000, "std": 1, "min": 1,
                                   "max": 2000}}
    wl = wl.model_copy(update={"classes": [WorkloadConfig.model_validate(
        {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1},
         "classes": [lognormal]}).classes[0]]})
    assert dataset_lengths(wl) == DatasetLengths(600, 2000, 4096, 6096)   # mean clipped to max


def test_a_workload_without_stated_lengths_needs_both_knobs(tmp_path, run_cli, write_scenario):
    """A trace states no mean or longest length up front: one line naming the preset's
    field and the two knobs, exit 2; giving both knobs runs."""
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0.0,100,10\n0.5,200,20\n")
    doc = copy.deepcopy(DOC)
    doc["workload"] = {"trace": {"path": "t.csv"}}
    path = write_scenario(tmp_path, doc)
    code, out, err = run_cli(["validate", str(path)])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {path}: engine.preset: preset trtllm-bench picks "
                          "max_num_seqs and max_num_batched_tokens from the dataset's mean")
    assert "give engine.max_num_seqs and engine.max_num_batched_tokens" in err
    doc["engine"].update(max_num_seqs=64, max_num_batched_tokens=8192)
    code, _, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0


def test_a_gpu_trtllm_bench_would_not_start_on_is_one_line(tmp_path, run_cli, write_scenario):
    doc = copy.deepcopy(DOC)
    doc["variants"] = [{"name": "v", "engine": {"preset": "trtllm-bench"},
                        "hardware_overrides": {"memory_total_gib": 8.0}}]
    path = write_scenario(tmp_path, doc)
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {path}: variants.0.engine.preset: trtllm-bench would not "
                          "start: not one request of 20000 + 2000 tokens fits")


def test_trtllm_serve_still_refuses_the_20k_prompt_that_trtllm_bench_serves(
        tmp_path, run_cli, write_scenario):
    """Preset trtllm (trtllm-serve's 8,192-token budget, no chunked context) refuses every
    20,000-token prompt, as TensorRT-LLM does; trtllm-bench's own settings serve them."""
    doc = copy.deepcopy(DOC)
    doc["variants"] = [{"name": "serve", "engine": {"preset": "trtllm"}}]
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and ("variant serve would reject every request (4 of 4), e.g. its "
                          "20000-token prompt exceeds max_num_batched_tokens 8192 without "
                          "chunked prefill") in err
    doc["variants"] = [{"name": "bench"}]
    code, out, _ = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0 and "rejected" not in out
