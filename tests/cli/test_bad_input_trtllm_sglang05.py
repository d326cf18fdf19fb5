"""Bad input to the features of 2026-12-07, refused at once (issue 31, "Before resolving"):
TensorRT-LLM batch waiting (``engine.batch_wait_timeout_iters`` /
``engine.batch_wait_max_tokens_ratio``) in scenarios, and a custom preset file (a copy of
sglang-0.5.yaml) with bad ``untuned_fp8_gemm``, ``all_reduce_fusion`` and
``host_overhead.eager_decode_above_graph_bs`` fields, and batch waiting in a custom preset's
``scheduler.knobs`` (a copy of trtllm.yaml).

Each case: exit code 2, one stderr line ``error: FILE: YAML.PATH: …`` naming the file the
bad value is in and its YAML path, no traceback, no simulation started, no file written;
``capsim validate`` and ``capsim run`` print the same line. The harness (``guarded``,
``_check``, ``refused_alike``) is test_bad_input_late.py's.
"""

from __future__ import annotations

import copy
import logging

import pytest
import yaml

from tests.cli.test_bad_input_late import guarded, refused_alike, set_dotted  # noqa: F401 - a fixture

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 8}}
WORKLOAD = {"num_requests": 8, "arrival": {"process": "concurrency", "users": 4},
            "classes": [CHAT]}
BASES = {
    # InferenceX's TensorRT-LLM batch waiting (40 iterations, 0.8 of max_num_tokens)
    "trt": {"name": "t", "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "engine": {"preset": "trtllm", "max_model_len": 4096,
                       "batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8},
            "workload": WORKLOAD},
    # gpt-oss-20b on 2 B200s under a copy of sglang-0.5.yaml (its all-reduce fusion applies)
    # InferenceX's batch waiting from a copy of trtllm.yaml's scheduler.knobs
    "ctrt": {"name": "t", "model": "llama-3.1-8b", "hardware": "h100-sxm",
             "engine": {"preset": "preset.yaml", "max_model_len": 4096}, "workload": WORKLOAD},
    "cus": {"name": "c", "model": "gpt-oss-20b", "hardware": "b200",
            "engine": {"preset": "preset.yaml", "max_model_len": 4096,
                       "tensor_parallel_size": 2},
            "workload": WORKLOAD},
}
BW, BR = "engine.batch_wait_timeout_iters", "engine.batch_wait_max_tokens_ratio"
U, A = "untuned_fp8_gemm", "all_reduce_fusion"
E = "host_overhead.eager_decode_above_graph_bs"
K = "scheduler.knobs"
NO_WAIT = {BW: "DEL", BR: "DEL"}

#: (id, base, scenario edits, preset-file edits, the file the error names ("scenario",
#: "preset"), the error's YAML path, a phrase of its message). Edits are {dotted path:
#: value}; "DEL" deletes.
CASES = [
    # -- batch waiting (scenario)
    ("iters-negative", "trt", {BW: -1}, None, "scenario", BW, "must be >= 0"),
    ("iters-string", "trt", {BW: "forty"}, None, "scenario", BW, "expected an integer"),
    ("iters-float", "trt", {BW: 40.5}, None, "scenario", BW, "expected an integer"),
    ("iters-true", "trt", {BW: True}, None, "scenario", BW, "expected an integer"),
    ("iters-list", "trt", {BW: [40]}, None, "scenario", BW, "expected an integer"),
    ("ratio-negative", "trt", {BR: -0.1}, None, "scenario", BR, "must be >= 0"),
    ("ratio-nan", "trt", {BR: float("nan")}, None, "scenario", BR, "finite"),
    ("ratio-inf", "trt", {BR: float("inf")}, None, "scenario", BR, "finite"),
    ("ratio-string", "trt", {BR: "eighty percent"}, None, "scenario", BR, ""),
    ("ratio-mapping", "trt", {BR: {"a": 1}}, None, "scenario", BR, ""),
    ("ratio-true", "trt", {BR: True}, None, "scenario", BR, "not a boolean"),
    # TensorRT-LLM refuses a ratio above 1 (tensorrt_llm/llmapi/llm_args.py, TorchLlmArgs
    # validate_batch_wait_max_tokens_ratio: "must be in range [0, 1]"); capsim took 5.0
    ("ratio-above-1", "trt", {BR: 5.0}, None, "scenario", BR, "must be <= 1 (got 5.0)"),
    ("ratio-1.5", "trt", {BR: 1.5}, None, "scenario", BR, "must be <= 1"),
    ("ratio-1e308", "trt", {BR: 1e308}, None, "scenario", BR, "must be <= 1"),
    ("variant-ratio-above-1", "trt", {"variants": [
        {"name": "v", "engine": {"batch_wait_max_tokens_ratio": 2}}]}, None, "scenario",
     "variants.0.engine.batch_wait_max_tokens_ratio", "must be <= 1"),
    ("iters-under-vllm", "trt", {"engine.preset": "vllm-v1", BR: "DEL"}, None, "scenario", BW,
     "belongs to the trtllm scheduler"),
    ("ratio-under-sglang", "trt", {"engine.preset": "sglang-0.5", BW: "DEL"}, None,
     "scenario", BR, "belongs to the trtllm scheduler"),
    ("ratio-under-tgi", "trt", {"engine.preset": "tgi", BW: "DEL"}, None, "scenario", BR,
     "belongs to the trtllm scheduler"),
    ("iters-typo", "trt", {"engine.batch_wait_timeout_iter": 40}, None, "scenario",
     "engine.batch_wait_timeout_iter", "batch_wait_timeout_iters"),
    ("variant-iters-under-vllm", "trt", {"engine.preset": "vllm-v1", **NO_WAIT, "variants": [
        {"name": "v", "engine": {"batch_wait_timeout_iters": 40}}]}, None, "scenario",
     "variants.0.engine.batch_wait_timeout_iters", "belongs to the trtllm scheduler"),
    # -- untuned_fp8_gemm (preset file)
    ("untuned-matmul-unknown", "cus", {}, {f"{U}.matmuls": ["q_a_kv_a_proj", "qkv_projj"]},
     "preset", f"{U}.matmuls", "unknown layer matmul(s) qkv_projj; valid:"),
    ("untuned-matmuls-empty", "cus", {}, {f"{U}.matmuls": []}, "preset", f"{U}.matmuls",
     "at least 1"),
    ("untuned-matmuls-string", "cus", {}, {f"{U}.matmuls": "o_proj"}, "preset",
     f"{U}.matmuls", "expected a list"),
    ("untuned-matmuls-null", "cus", {}, {f"{U}.matmuls": None}, "preset", f"{U}.matmuls",
     "expected a list"),
    ("untuned-block-k-zero", "cus", {}, {f"{U}.block_k": 0}, "preset", f"{U}.block_k", "> 0"),
    ("untuned-block-m-negative", "cus", {}, {f"{U}.block_m": -128}, "preset", f"{U}.block_m",
     "> 0"),
    ("untuned-block-n-string", "cus", {}, {f"{U}.block_n": "128x"}, "preset", f"{U}.block_n",
     "integer"),
    ("untuned-block-n-float", "cus", {}, {f"{U}.block_n": 127.5}, "preset", f"{U}.block_n",
     "integer"),
    ("untuned-k-step-zero", "cus", {}, {f"{U}.k_step_s": 0}, "preset", f"{U}.k_step_s", "> 0"),
    ("untuned-k-step-negative", "cus", {}, {f"{U}.k_step_s": -1e-6}, "preset",
     f"{U}.k_step_s", "> 0"),
    ("untuned-k-step-nan", "cus", {}, {f"{U}.k_step_s": float("nan")}, "preset",
     f"{U}.k_step_s", "finite"),
    ("untuned-k-step-inf", "cus", {}, {f"{U}.k_step_s": float("inf")}, "preset",
     f"{U}.k_step_s", "finite"),
    ("untuned-k-step-string", "cus", {}, {f"{U}.k_step_s": "fast"}, "preset",
     f"{U}.k_step_s", ""),
    ("untuned-hardware-empty", "cus", {}, {f"{U}.hardware": []}, "preset", f"{U}.hardware",
     "at least 1"),
    ("untuned-k-step-missing", "cus", {}, {f"{U}.k_step_s": "DEL"}, "preset",
     f"{U}.k_step_s", "required"),
    ("untuned-unknown-key", "cus", {}, {f"{U}.block_kk": 128}, "preset", f"{U}.block_kk",
     "unknown key"),
    ("untuned-list", "cus", {}, {U: [1, 2]}, "preset", U, "expected a mapping"),
    ("untuned-int", "cus", {}, {U: 5}, "preset", U, "expected a mapping"),
    # -- all_reduce_fusion (preset file)
    ("fusion-max-tokens-zero", "cus", {}, {f"{A}.max_tokens": 0}, "preset",
     f"{A}.max_tokens", "> 0"),
    ("fusion-max-tokens-negative", "cus", {}, {f"{A}.max_tokens": -2048}, "preset",
     f"{A}.max_tokens", "> 0"),
    ("fusion-max-tokens-float", "cus", {}, {f"{A}.max_tokens": 2048.5}, "preset",
     f"{A}.max_tokens", "integer"),
    ("fusion-max-tokens-string", "cus", {}, {f"{A}.max_tokens": "2k"}, "preset",
     f"{A}.max_tokens", "integer"),
    ("fusion-max-tokens-inf", "cus", {}, {f"{A}.max_tokens": float("inf")}, "preset",
     f"{A}.max_tokens", "integer"),
    # was a traceback (StopIteration): the priced pieces end at 2**62 tokens
    ("fusion-max-tokens-1e30", "cus", {}, {f"{A}.max_tokens": 10**30}, "preset",
     f"{A}.max_tokens", "must be <= 2147483647"),
    ("fusion-model-types-empty", "cus", {}, {f"{A}.model_types": []}, "preset",
     f"{A}.model_types", "at least 1"),
    ("fusion-model-types-string", "cus", {}, {f"{A}.model_types": "gpt_oss"}, "preset",
     f"{A}.model_types", "expected a list"),
    ("fusion-table-missing", "cus", {}, {f"{A}.table": "DEL"}, "preset", f"{A}.table",
     "required"),
    ("fusion-table-empty", "cus", {}, {f"{A}.table": ""}, "preset", f"{A}.table", ""),
    ("fusion-table-null", "cus", {}, {f"{A}.table": None}, "preset", f"{A}.table",
     "expected a string"),
    ("fusion-unknown-key", "cus", {}, {f"{A}.oneshot": True}, "preset", f"{A}.oneshot",
     "unknown key"),
    ("fusion-true", "cus", {}, {A: True}, "preset", A, "expected a mapping"),
    # -- batch waiting in a custom preset's scheduler.knobs (a copy of trtllm.yaml): named
    # the scenario's engine.* before, a field the scenario does not have
    ("preset-ratio-negative", "ctrt", {}, {"SOURCE": "trtllm", f"{K}.{BR[7:]}": -1.0},
     "preset", f"{K}.batch_wait_max_tokens_ratio", "must be >= 0"),
    ("preset-ratio-above-1", "ctrt", {}, {"SOURCE": "trtllm", f"{K}.{BR[7:]}": 3.0},
     "preset", f"{K}.batch_wait_max_tokens_ratio", "must be <= 1"),
    ("preset-ratio-string", "ctrt", {}, {"SOURCE": "trtllm", f"{K}.{BR[7:]}": "lots"},
     "preset", f"{K}.batch_wait_max_tokens_ratio", "expected a number"),
    ("preset-iters-negative", "ctrt", {}, {"SOURCE": "trtllm", f"{K}.{BW[7:]}": -5},
     "preset", f"{K}.batch_wait_timeout_iters", "must be >= 0"),
    ("preset-iters-float", "ctrt", {}, {"SOURCE": "trtllm", f"{K}.{BW[7:]}": 2.5},
     "preset", f"{K}.batch_wait_timeout_iters", "expected an integer"),
    # -- host_overhead.eager_decode_above_graph_bs (preset file)
    # without memory.static_fraction (cuda_graph_max_bs) or memory.cudagraph_capture (vLLM's
    # capture sizes) it changed nothing, silently
    ("eager-without-graph-sizes", "cus", {"model": "llama-3.1-8b", "hardware": "h100-sxm",
                                          "engine.tensor_parallel_size": 1},
     {"SOURCE": "trtllm", E: True}, "preset", "host_overhead",
     "eager_decode_above_graph_bs: true needs memory.static_fraction"),
    ("eager-string", "cus", {}, {E: "yes please"}, "preset", E, "expected true or false"),
    ("eager-int", "cus", {}, {E: 2}, "preset", E, "expected true or false"),
    ("eager-null", "cus", {}, {E: None}, "preset", E, "expected true or false"),
    ("eager-list", "cus", {}, {E: [True]}, "preset", E, "expected true or false"),
    ("eager-typo", "cus", {}, {"host_overhead.eager_decode_above_graph": True}, "preset",
     "host_overhead.eager_decode_above_graph", "eager_decode_above_graph_bs"),
]


def _preset(tmp_path, repo_root, edits: dict | None) -> None:
    """preset.yaml in ``tmp_path``: sglang-0.5.yaml (or ``edits["SOURCE"]``) with ``edits``
    applied."""
    edits = dict(edits or {})
    source = edits.pop("SOURCE", "sglang-0.5")
    doc = yaml.safe_load((repo_root / f"capsim/profiles/data/engines/{source}.yaml")
                         .read_text())
    for dotted, value in edits.items():
        set_dotted(doc, dotted, value)
    (tmp_path / "preset.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _scenario(tmp_path, base: str, edits: dict):
    doc = copy.deepcopy(BASES[base])
    for dotted, value in edits.items():
        set_dotted(doc, dotted, value)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
    return scenario


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_value_of_the_new_features_is_refused_alike_by_validate_and_run(
        case, tmp_path, guarded, capsys, repo_root):  # noqa: F811 - the fixture
    _, base, edits, preset_edits, in_file, path, phrase = case
    _preset(tmp_path, repo_root, preset_edits)
    scenario = _scenario(tmp_path, base, edits)
    files = {"scenario": scenario, "preset": tmp_path / "preset.yaml"}
    where = f"error: {files[in_file]}: {path}: "
    refused_alike(guarded, capsys, scenario, where, phrase, tmp_path)


def test_a_ratio_of_1_is_trtllms_bound_and_taken(tmp_path, guarded, capsys):  # noqa: F811
    scenario = _scenario(tmp_path, "trt", {BR: 1.0})
    code, out, err, _ = guarded(["validate", str(scenario)], capsys)
    assert code == 0 and err == "" and ": ok" in out


def test_a_fusion_table_the_gpu_lacks_is_said(tmp_path, repo_root, caplog):
    """all_reduce_fusion applies (gpt_oss on b200, TP 2, no DP attention) but names a table
    b200.yaml lacks: the unfused all-reduce is priced, and validate says so, as it does for
    tp_all_reduce.table (it said nothing)."""
    from capsim.scenario.load import load

    _preset(tmp_path, repo_root, {f"{A}.table": "nccl_magic"})
    scenario = _scenario(tmp_path, "cus", {})
    with caplog.at_level(logging.WARNING):
        load(scenario)
    lines = [r.getMessage() for r in caplog.records
             if "all_reduce_fusion.table" in r.getMessage()]
    assert len(lines) == 1
    assert "'nccl_magic'" in lines[0]
    assert "is not in b200's all_reduce_tables (it has: trtllm_auto)" in lines[0]


def test_the_shipped_fusion_table_is_said_nothing_of(tmp_path, repo_root, caplog):
    _preset(tmp_path, repo_root, None)
    scenario = _scenario(tmp_path, "cus", {})
    from capsim.scenario.load import load
    with caplog.at_level(logging.WARNING):
        load(scenario)
    assert not [r for r in caplog.records if "all_reduce_fusion" in r.getMessage()]


def test_the_sweep_has_at_least_60_cases():
    assert len(CASES) >= 60
