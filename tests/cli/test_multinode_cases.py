"""The multi-node cases issue 30 could not write (item 4), each through ``capsim validate`` and
``capsim run``: both accept it, or both refuse it with the same one line (exit 2, no
traceback, nothing written)."""

from __future__ import annotations

import pytest
import yaml

CLASS = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 1000},
         "output_tokens": {"dist": "fixed", "value": 64}}


def _doc(model: str, hardware: str, engine: dict, **extra) -> dict:
    return {"name": "multinode", "model": model, "hardware": hardware,
            "engine": {"max_model_len": 4096, **engine},
            "workload": {"num_requests": 24, "arrival": {"process": "concurrency", "users": 8},
                         "classes": [CLASS]}, **extra}


def _both(tmp_path, run_cli, doc: dict) -> tuple[int, str, str]:
    """(exit code, validate's stdout, the error line) after checking that run agrees."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code_v, out_v, err_v = run_cli(["validate", str(path)])
    out_dir = tmp_path / "out"
    code_r, _, err_r = run_cli(["run", str(path), "--workers", "1", "--no-charts", "-o",
                                str(out_dir)])
    assert code_v == code_r, (err_v, err_r)
    assert "Traceback" not in err_v + err_r
    if code_v:
        assert code_v == 2 and err_v == err_r and err_v.count("\n") == 1
        assert not out_dir.exists()
    else:
        assert (out_dir / "summary.csv").exists()
    return code_v, out_v, err_v


#: SGLang's "--tp 16 --nnodes 2": DeepSeek-V3 on two 8-GPU H100 nodes.
TP16 = _doc("deepseek-v3", "h100-sxm", {"preset": "sglang", "tensor_parallel_size": 16})
#: Wide EP over 32 H200s with DP attention ranks of TP 4 (SGLang --tp 32 --dp-size 8
#: --enable-dp-attention; vLLM --data-parallel-size 8 --tensor-parallel-size 4
#: --enable-expert-parallel).
EP32 = _doc("deepseek-v3", "h200-sxm", {"preset": "sglang", "tensor_parallel_size": 32,
                                        "enable_expert_parallel": True,
                                        "enable_dp_attention": True, "data_parallel_size": 8})


def test_tp16_over_two_h100_nodes_runs(tmp_path, run_cli):
    code, out, _ = _both(tmp_path, run_cli, TP16)
    assert code == 0 and "1 × h100-sxm TP16," in out


def test_tp16_over_nodes_of_12_is_refused_by_both(tmp_path, run_cli):
    doc = {**TP16, "hardware_overrides": {"gpus_per_node": 12}}
    code, _, err = _both(tmp_path, run_cli, doc)
    assert code == 2 and "engine.tensor_parallel_size: tensor_parallel_size 16 spans nodes " \
                         "of 12 h100-sxm[gpus_per_node=12] GPUs unevenly" in err


def test_wide_ep_over_32_gpus_with_dp_attention_ranks_of_tp4_runs(tmp_path, run_cli):
    code, out, _ = _both(tmp_path, run_cli, EP32)
    assert code == 0 and "1 × h200-sxm TP32 EP DP8-attention × TP4," in out


@pytest.mark.parametrize("engine,path,phrase", [
    ({"data_parallel_size": 3}, "engine.data_parallel_size",
     "data_parallel_size 3 must divide tensor_parallel_size 32"),
    ({"data_parallel_size": 2}, "engine.data_parallel_size",
     "a data-parallel attention rank of 16 GPUs (tensor_parallel_size 32 / data_parallel_size "
     "2) spans nodes of 8 h200-sxm GPUs; valid: data_parallel_size >= 4"),
    ({"enable_dp_attention": False}, "engine.data_parallel_size",
     "data_parallel_size 8 counts data-parallel attention ranks (SGLang --dp-size) and needs "
     "enable_dp_attention: true"),
])
def test_dp_attention_ranks_that_cannot_be_are_refused_by_both(tmp_path, run_cli, engine, path,
                                                               phrase):
    doc = {**EP32, "engine": {**EP32["engine"], **engine}}
    code, _, err = _both(tmp_path, run_cli, doc)
    assert code == 2 and f": {path}: {phrase}" in err


#: Wide EP over a GB200 NVL72's 72 GPUs (one NVLink domain), DP attention ranks of TP 4:
#: 256 experts do not fill 72 ranks evenly; EPLB's 32 redundant copies make 288 = 72 × 4.
NVL72 = _doc("deepseek-v3", "b200", {"tensor_parallel_size": 72, "enable_expert_parallel": True,
                                     "enable_dp_attention": True, "data_parallel_size": 18,
                                     "moe_routing_skew": 0.5},
             hardware_overrides={"gpus_per_node": 72})


def test_wide_ep_over_72_gpus_needs_redundant_experts(tmp_path, run_cli):
    code, _, err = _both(tmp_path, run_cli, NVL72)
    assert code == 2 and ("engine.enable_expert_parallel: expert parallel size 72 "
                          "(tensor_parallel_size) must divide num_experts 256 of deepseek-v3; "
                          "EPLB's num_redundant_experts can make up the difference") in err


def test_wide_ep_over_72_gpus_with_32_redundant_experts_runs(tmp_path, run_cli):
    doc = {**NVL72, "engine": {**NVL72["engine"], "num_redundant_experts": 32}}
    code, out, _ = _both(tmp_path, run_cli, doc)
    assert code == 0 and "TP72 EP DP18-attention × TP4" in out


def test_redundant_experts_without_ep_are_refused_by_both(tmp_path, run_cli):
    doc = {**TP16, "engine": {**TP16["engine"], "num_redundant_experts": 16}}
    code, _, err = _both(tmp_path, run_cli, doc)
    assert code == 2 and "engine.num_redundant_experts: num_redundant_experts 16 (EPLB)" in err


def test_mtp_on_16_gpus_runs(tmp_path, run_cli):
    """Fixed before this issue's item 4 (the MoE drafter's pricer crosses the scale-out
    link); here run as well as validate."""
    doc = _doc("deepseek-v3", "h200-sxm", {
        "tensor_parallel_size": 16, "enable_expert_parallel": True, "enable_dp_attention": True,
        "speculative": {"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.8}})
    code, out, _ = _both(tmp_path, run_cli, doc)
    assert code == 0 and "TP16 EP DP-attention" in out


def test_eagle_under_the_sglang_preset_is_judged_alike(tmp_path, run_cli):
    """Accepted or refused, validate and run agree (speculation under SGLang is issue 30
    item 5's)."""
    doc = _doc("llama-3.1-8b", "h100-sxm", {"preset": "sglang", "speculative": {
        "method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}})
    code, _, err = _both(tmp_path, run_cli, doc)
    assert code == 0 or "engine.speculative:" in err
