"""The engine preset's rules said where a user looks (issue 31's new-user polish): one line
per rule that applies to a variant in ``capsim validate`` and ``capsim run``, and every rule
of a preset with its source in ``capsim engines PRESET``.

The figures are the shipped presets' data: TensorRT-LLM's batch waiting at InferenceX's
40 iterations / 0.8 (load_trtllm130rc14_8xb200_dsr1_fp8_tp8_random1k1k_concurrency_sweep)
over trtllm.yaml's max_num_tokens 8192 (0.8 × 8192 = 6,554 tokens); SGLang 0.5's fused
all-reduce up to 2,048 tokens (FUSE_ALLREDUCE_MAX_BATCH_SIZE, sglang-0.5.yaml sources), its
cuda_graph_max_bs 512 above 160 GB (memory.static_fraction's source) and aiter's untuned
K step of 1.964 µs (untuned_fp8_gemm, fitted_to aiter PR 1930).
"""

from __future__ import annotations

import copy

import pytest

from capsim.scenario.load import load
from capsim.scenario.preset_rules import (applied_rule_lines, engine_rule_lines,
                                          preset_rules, run_rule_lines)
from capsim.profiles.engines import load_engine_preset

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 8}}
BASE = {
    "name": "rules", "model": "gpt-oss-20b", "hardware": "b200",
    "engine": {"preset": "sglang-0.5", "tensor_parallel_size": 2, "max_model_len": 4096},
    "workload": {"num_requests": 8, "arrival": {"process": "concurrency", "users": 4},
                 "classes": [CHAT]},
}
TRT = {"model": "llama-3.1-8b", "hardware": "h100-sxm",
       "engine": {"preset": "trtllm", "tensor_parallel_size": 1,
                  "batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8}}
FUSED = "all-reduce + RMSNorm fused up to 2,048 tokens (FlashInfer, table trtllm_auto; " \
        "sglang-0.5 on b200)"
EAGER = "decode batches above 512 sequences run eagerly (cuda_graph_max_bs; sglang-0.5 on b200)"
WAIT = "batch waiting: new prompts wait up to 40 iterations or 6,554 tokens (0.8 × " \
       "max_num_tokens) while decoding (trtllm)"


def _lines(tmp_path, write_scenario, variants: list[dict]) -> dict[str, list[str]]:
    doc = copy.deepcopy(BASE)
    doc["variants"] = variants
    loaded = load(write_scenario(tmp_path, doc), [])
    return {rc.variant: run_rule_lines(rc) for rc in loaded.runs}


def test_each_rule_that_applies_is_one_line(tmp_path, write_scenario):
    lines = _lines(tmp_path, write_scenario, [
        {"name": "fused"}, {"name": "trt", **TRT},
        {"name": "mi", "model": "deepseek-v3", "hardware": "mi300x",
         "engine": {"tensor_parallel_size": 8}}])
    assert lines["fused"] == [FUSED, EAGER]
    assert lines["trt"] == [WAIT]
    assert lines["mi"][0] == ("untuned block-fp8 GEMM (aiter's Triton): >= 1.964 µs per "
                              "128-wide K step in q_a_kv_a_proj, q_b_proj, o_proj, gate_up_proj, "
                              "down_proj (sglang-0.5 on mi300x)")


@pytest.mark.parametrize("variant, absent", [
    # TP 1: nothing to all-reduce
    ({"engine": {"tensor_parallel_size": 1}}, FUSED),
    # a batch that never exceeds the captured graphs
    ({"engine": {"max_num_seqs": 512}}, EAGER),
    # another GPU: SGLang fuses on sm100 only
    ({"hardware": "h200-sxm"}, "all-reduce + RMSNorm fused"),
    # another model type (llama): not in all_reduce_fusion.model_types
    ({"model": "llama-3.1-8b"}, "all-reduce + RMSNorm fused"),
])
def test_a_rule_that_does_not_apply_says_nothing(tmp_path, write_scenario, variant, absent):
    lines = _lines(tmp_path, write_scenario, [{"name": "v", **variant}])
    assert not any(absent in line for line in lines["v"])


@pytest.mark.parametrize("iters, ratio", [(40, 0.0), (0, 0.8), (0, 0.0)])
def test_batch_waiting_with_a_zero_limit_never_waits(tmp_path, write_scenario, iters, ratio):
    # TensorRT-LLM stops waiting when either limit is met, and a 0 limit is met at once
    # (py_executor.py _waiting_requests at 0004396720054fd8e205cbf616f21f0b57c6b412)
    trt = copy.deepcopy(TRT)
    trt["engine"].update(batch_wait_timeout_iters=iters, batch_wait_max_tokens_ratio=ratio)
    assert _lines(tmp_path, write_scenario, [{"name": "v", **trt}])["v"] == []


def test_vllm_names_its_capture_size_and_nothing_at_256_seqs(tmp_path, write_scenario):
    """vllm-v1 on a B200 admits 1,024 sequences by default and captures decode graphs up to
    min(2 x 1,024, 512) (vLLM 0.11 config/scheduler.py cuda_graph_sizes); at max_num_seqs 256
    every decode batch is captured, so no line."""
    doc = {**BASE, "model": "llama-3.1-8b", "engine": {"max_model_len": 4096}}
    loaded = load(write_scenario(tmp_path, doc), [])
    assert applied_rule_lines(loaded.runs[0].pool(), loaded.runs[0].model) == [
        "decode batches above 512 sequences run eagerly (the largest CUDA-graph capture size; "
        "vllm-v1 on b200)"]
    doc["engine"] = {"max_model_len": 4096, "max_num_seqs": 256}
    loaded = load(write_scenario(tmp_path, doc), [])
    assert applied_rule_lines(loaded.runs[0].pool(), loaded.runs[0].model) == []


def test_run_groups_a_rule_by_the_variants_it_applies_to(tmp_path, write_scenario):
    doc = copy.deepcopy(BASE)
    doc["variants"] = [{"name": "tp2"}, {"name": "tp1", "engine": {"tensor_parallel_size": 1}}]
    loaded = load(write_scenario(tmp_path, doc), [])
    assert engine_rule_lines(loaded.runs, ["tp2", "tp1"]) == [f"{FUSED}: tp2", EAGER]


def test_validate_and_run_print_the_lines(tmp_path, write_scenario, run_cli):
    doc = copy.deepcopy(BASE)
    doc["variants"] = [{"name": "fused"}, {"name": "trt", **TRT}]
    path = write_scenario(tmp_path, doc)
    code, out, err = run_cli(["validate", str(path)])
    assert code == 0, err
    assert f"    preset rule: {FUSED}" in out and f"    preset rule: {WAIT}" in out
    code, out, err = run_cli(["run", str(path), "-o", str(tmp_path / "r"), "--workers", "1"])
    assert code == 0, err
    flat = " ".join(out.split())                 # folded to the terminal's width
    assert f"engine sglang-0.5 (SGLang 0.5.7): fused preset rule: {FUSED} preset rule: " \
           f"{EAGER}" in flat
    assert f"engine trtllm (TensorRT-LLM 1.0.0): trt preset rule: {WAIT}" in flat


def test_split_and_pooled_lines_name_the_pool(tmp_path, write_scenario, run_cli):
    doc = copy.deepcopy(BASE)
    doc["variants"] = [{"name": "pd", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1},
        "link": "infiniband-ndr"}}]
    path = write_scenario(tmp_path, doc)
    code, out, err = run_cli(["validate", str(path)])
    assert code == 0, err
    assert f"      preset rule: {FUSED}" in out     # under each pool's line
    loaded = load(path, [])
    assert run_rule_lines(loaded.runs[0]) == [f"prefill: {FUSED}", f"prefill: {EAGER}",
                                              f"decode: {FUSED}", f"decode: {EAGER}"]


def test_engines_preset_lists_every_rule_with_its_source(run_cli):
    code, out, err = run_cli(["engines", "sglang-0.5"])
    assert code == 0, err
    flat = " ".join(out.split())
    keys = [r.key for r in preset_rules(load_engine_preset("sglang-0.5"))]
    assert keys == ["tp_all_reduce", "all_reduce_fusion", "shared_experts_fusion",
                    "untuned_fp8_gemm", "absorbed_bmm_dequant",
                    "host_overhead.eager_decode_above_graph_bs"]
    for key in keys:
        assert f" {key}: " in flat
    assert ("all_reduce_fusion: all-reduce + RMSNorm fused (FlashInfer) up to 2,048 tokens for "
            "gpt_oss/deepseek_v3 on b200") in flat
    assert "source: python/sglang/srt/server_args.py of the sglang 0.5.6.post1 wheel" in flat
    assert "none given" not in flat             # every shipped rule has its source


def test_engines_trtllm_says_batch_waiting_is_off_by_default(run_cli):
    code, out, err = run_cli(["engines", "trtllm"])
    assert code == 0, err
    flat = " ".join(out.split())
    assert ("scheduler.knobs.batch_wait_timeout_iters: batch waiting (batch_wait_timeout_iters "
            "/ batch_wait_max_tokens_ratio): off (both 0); on with both above 0 in engine:") in flat
    assert "source: LLM API TorchLlmArgs batch_wait_timeout_iters 0" in flat


@pytest.mark.parametrize("arg, start", [
    ("sglang-9", "error: unknown engine preset 'sglang-9'; valid: sglang, sglang-0.3"),
    ("", "error: empty; valid: sglang"),
    ("DIR", "error: DIR is a directory; name an engine preset YAML in it"),
    ("DIR/none.yaml", "error: file not found: DIR/none.yaml"),
    ("gone/x", "error: file not found: gone/x (searched CWD: the working directory)"),
])
def test_engines_bad_preset_is_one_error_line(run_cli, tmp_path, monkeypatch, arg, start):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["engines", arg.replace("DIR", str(tmp_path))])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(start.replace("DIR", str(tmp_path)).replace("CWD", str(tmp_path))), err


def test_engines_reads_a_preset_file_of_ones_own(run_cli, tmp_path, monkeypatch):
    with open("capsim/profiles/data/engines/sglang-0.5.yaml") as f:
        doc = f.read().replace("name: sglang-0.5\n", "name: mine\n", 1)
    (tmp_path / "mine.yaml").write_text(doc)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["engines", "mine.yaml"])
    assert code == 0, err
    assert "rules of mine" in out and "all_reduce_fusion: all-reduce + RMSNorm" in out


def test_engines_without_a_preset_still_lists_them_all(run_cli):
    code, out, err = run_cli(["engines"])
    assert code == 0, err
    assert "trtllm-bench" in out and "rules of" not in out
