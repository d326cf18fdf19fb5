"""Bad input found by the new-user pass on the newest features (issue 31 item 5's rule:
refused at once in one line naming the file and YAML path, or, where the engine itself
starts, warned), through the harness of test_bad_input_trtllm_sglang05.py (a copy of
sglang-0.5.yaml / trtllm.yaml as the scenario's preset) and test_bad_input_late.py.

Found: a host term or a K step of 1e30 s in a preset, or a GPU's step overhead or link
latency of 1e30 s, passed validation and ended the run in an IndexError traceback (the
run's timeline cannot bin such times); eager_decode_above_graph_bs with no eager floor
changed nothing, silently; TensorRT-LLM batch waiting with one limit 0, or under attention
DP, changed nothing, silently.
"""

from __future__ import annotations

import logging

import pytest

from tests.cli.test_bad_input_late import guarded, refused_alike  # noqa: F401 - a fixture
from tests.cli.test_bad_input_trtllm_sglang05 import _preset, _scenario

HO, U = "host_overhead", "untuned_fp8_gemm"
LONG = "must be <= 1e+09 s (about 32 years"

#: (id, base, scenario edits, preset-file edits, the file named, YAML path, a phrase).
CASES = [
    ("k-step-1e30", "cus", {}, {f"{U}.k_step_s": 1e30}, "preset", f"{U}.k_step_s",
     "must be <= 0.001 (got 1e+30)"),
    ("per-step-1e30", "cus", {}, {f"{HO}.per_step_s": 1e30}, "preset", f"{HO}.per_step_s",
     LONG),
    ("request-before-1e30", "cus", {}, {f"{HO}.request_before_s": 1e30}, "preset",
     f"{HO}.request_before_s", LONG),
    ("residual-1e30", "cus", {}, {f"{HO}.residual_s": 1e30}, "preset", f"{HO}.residual_s",
     LONG),
    ("eager-op-1e30", "cus", {}, {f"{HO}.eager_prefill_op_s": 1e30}, "preset",
     f"{HO}.eager_prefill_op_s", "must be <= 0.001"),
    ("per-seq-1e30", "cus", {}, {f"{HO}.per_seq_s": 1e30}, "preset", f"{HO}.per_seq_s",
     "must be <= 0.001"),
    ("per-token-1e30", "cus", {}, {f"{HO}.per_prefill_token_s": 1e30}, "preset",
     f"{HO}.per_prefill_token_s", "must be <= 0.001"),
    ("eager-decode-no-floor", "cus", {}, {f"{HO}.eager_prefill_op_s": 0.0}, "preset", HO,
     "eager_decode_above_graph_bs: true prices nothing with eager_decode_op_s and eager_prefill_op_s 0"),
    ("gpu-step-overhead-1e30", "cus", {"hardware_overrides": {"step_overhead_s": 1e30}}, None,
     "scenario", "hardware_overrides.step_overhead_s", LONG),
    ("gpu-nvlink-latency-1e30", "cus", {"hardware_overrides": {"nvlink_latency_s": 1e30}},
     None, "scenario", "hardware_overrides.nvlink_latency_s", LONG),
    ("gpu-pcie-latency-1e30", "cus", {"hardware_overrides": {"pcie_latency_s": 1e30}},
     None, "scenario", "hardware_overrides.pcie_latency_s", LONG),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_at_once_by_validate_and_run(case, tmp_path, guarded, capsys,  # noqa: F811
                                             repo_root):
    _, base, edits, preset_edits, in_file, path, phrase = case
    _preset(tmp_path, repo_root, preset_edits)
    scenario = _scenario(tmp_path, base, edits)
    files = {"scenario": scenario, "preset": tmp_path / "preset.yaml"}
    where = f"error: {files[in_file]}: {path}: "
    refused_alike(guarded, capsys, scenario, where, phrase, tmp_path)


def test_the_bounds_hold_every_shipped_value(repo_root):
    """1e9 s per step / request and 1 ms per sequence, token, operator or K step: the
    shipped presets' largest are 4.3 ms, 8.3 ms, 0.144 ms, 0, 0.151 ms and 1.964 µs."""
    from capsim.profiles.engines import engine_preset_names, load_engine_preset
    assert len([load_engine_preset(n) for n in engine_preset_names()]) >= 15


# -- TensorRT-LLM batch waiting that never waits: TensorRT-LLM starts, capsim warns
# (py_executor.py at 0004396720054fd8e205cbf616f21f0b57c6b412: _waiting_requests stops
# waiting once iterations >= batch_wait_timeout_iters or tokens >= ratio x max_num_tokens;
# _schedule skips it under attention DP)
BW, BR = "engine.batch_wait_timeout_iters", "engine.batch_wait_max_tokens_ratio"


@pytest.mark.parametrize("edits, path, phrase", [
    ({BR: 0.0}, BW, "batch_wait_timeout_iters 40 with batch_wait_max_tokens_ratio 0 never "
                    "holds a prompt back"),
    ({BW: 0}, BR, "batch_wait_timeout_iters 0 with batch_wait_max_tokens_ratio 0.8 never "
                  "holds a prompt back"),
    ({"variants": [{"name": "v", "engine": {"batch_wait_max_tokens_ratio": 0.0}}]},
     "variants.0.engine.batch_wait_max_tokens_ratio", None),
])
def test_batch_waiting_with_a_zero_limit_is_warned(tmp_path, caplog, edits, path, phrase):
    from capsim.scenario.load import load

    scenario = _scenario(tmp_path, "trt", edits)
    with caplog.at_level(logging.WARNING, logger="capsim"):
        load(scenario)
    lines = [r.getMessage() for r in caplog.records if "holds a prompt back" in r.getMessage()]
    if phrase is None:          # the variant's 0 ratio with the scenario's 40 iterations
        assert lines == [f"{scenario}: engine.batch_wait_timeout_iters: batch_wait_timeout_"
                         "iters 40 with batch_wait_max_tokens_ratio 0 never holds a prompt "
                         "back: TensorRT-LLM stops waiting once either limit is reached, and "
                         "a 0 limit is reached at once (valid: both above 0, e.g. 40 and "
                         "0.8, or both 0)"]
        return
    assert len(lines) == 1 and lines[0].startswith(f"{scenario}: {path}: {phrase}")


def test_batch_waiting_under_attention_dp_is_warned(tmp_path, caplog):
    from capsim.scenario.load import load

    scenario = _scenario(tmp_path, "trt", {
        "model": "deepseek-v3", "hardware": "b200", "engine.tensor_parallel_size": 8,
        "engine.enable_dp_attention": True, "engine.enable_expert_parallel": True})
    with caplog.at_level(logging.WARNING, logger="capsim"):
        load(scenario)
    assert [r.getMessage() for r in caplog.records if "attention DP" in r.getMessage()] == [
        f"{scenario}: {BW}: TensorRT-LLM skips batch waiting under attention DP "
        "(enable_dp_attention: true), so it changes nothing here"]


def test_both_limits_set_or_both_0_say_nothing(tmp_path, caplog):
    from capsim.scenario.load import load

    for edits in ({}, {BW: 0, BR: 0.0}):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="capsim"):
            load(_scenario(tmp_path, "trt", edits))
        assert not [r for r in caplog.records if "batch_wait" in r.getMessage()]
