"""vLLM's ``moe_backend: flashinfer_trtllm`` on a GPU outside the Blackwell family is refused,
as vLLM refuses it at start-up: an explicit --moe-backend goes to the MoE oracle's
``_return_or_raise``, which raises when the experts class does not support the device, and
``TrtLlmFp8Experts._supports_current_device`` is ``is_cuda() and
is_device_capability_family(100)`` (vllm/model_executor/layers/fused_moe/experts/
trtllm_fp8_moe.py at 903fcbb2). The GPU profiles say their compute capability (NVIDIA's CUDA
GPUs list: H100 / H200 9.0, B200 10.0); a profile that says none keeps the old warning."""

from __future__ import annotations

import logging

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import HardwareProfile, load_hardware
from capsim.scenario.load import load

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 8}}
DOC = {"name": "h", "model": "gpt-oss-120b", "hardware": "h200-sxm",
       "engine": {"max_model_len": 4096, "moe_backend": "flashinfer_trtllm"},
       "workload": {"num_requests": 8, "arrival": {"process": "concurrency", "users": 4},
                    "classes": [CHAT]}}


@pytest.mark.parametrize("gpu, cc", [("h100-sxm", "9.0"), ("h200-sxm", "9.0"), ("h20", "9.0"),
                                     ("a100-80gb", "8.0"), ("l40s", "8.9")])
def test_vllm_flashinfer_trtllm_off_blackwell_is_refused(tmp_path, write_scenario, gpu, cc):
    with pytest.raises(ScenarioError) as exc:
        load(write_scenario(tmp_path, {**DOC, "hardware": gpu}), [])
    e = exc.value
    assert e.path == "engine.moe_backend"
    assert e.message == (
        f"moe_backend flashinfer_trtllm runs FlashInfer's TRT-LLM-gen MoE kernels, which vLLM "
        f"runs on Blackwell (compute capability 10.x) GPUs only (it refuses them at start-up "
        f"elsewhere); hardware '{gpu}' has compute capability {cc} (valid: auto, marlin, or a "
        f"compute capability 10.x GPU)")


def test_on_a_b200_it_loads(tmp_path, write_scenario):
    loaded = load(write_scenario(tmp_path, {**DOC, "hardware": "b200"}), [])
    assert loaded.runs[0].pool().engine.moe_backend == "flashinfer_trtllm"


def test_validate_refuses_it_in_one_line(tmp_path, write_scenario, run_cli):
    code, out, err = run_cli(["validate", str(write_scenario(tmp_path, DOC))])
    assert code == 2 and err.count("\n") == 1 and "engine.moe_backend: " in err, err


def test_a_profile_without_compute_capability_only_warns(tmp_path, write_scenario, caplog):
    with open("capsim/profiles/data/hardware/h200-sxm.yaml") as f:
        gpu = yaml.safe_load(f)
    del gpu["compute_capability"], gpu["sources"]["compute_capability"]
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(gpu))
    with caplog.at_level(logging.WARNING, logger="capsim"):
        load(write_scenario(tmp_path, {**DOC, "hardware": "gpu.yaml"}), [])
    assert any("has no measured flashinfer_trtllm curve" in r.getMessage()
               for r in caplog.records)


def test_every_cuda_profile_says_its_compute_capability_and_rocm_none():
    from capsim.profiles.hardware import hardware_names
    for name in hardware_names():
        hw = load_hardware(name)
        assert (hw.compute_capability is None) == (hw.platform == "rocm"), name
        if hw.compute_capability:
            assert "compute_capability" in hw.sources, name
    assert load_hardware("b200").compute_capability == "10.0"


@pytest.mark.parametrize("value, phrase", [("9", "not MAJOR.MINOR (valid: e.g. \"9.0\""),
                                           ("sm_90", "not MAJOR.MINOR"),
                                           (8.65, "not MAJOR.MINOR"),   # not rounded to 8.7
                                           (True, "valid string")])
def test_a_malformed_compute_capability_is_refused(value, phrase):
    with open("capsim/profiles/data/hardware/h100-sxm.yaml") as f:
        doc = yaml.safe_load(f)
    doc["compute_capability"] = value
    with pytest.raises(Exception) as exc:
        HardwareProfile.model_validate(doc)
    assert phrase in str(exc.value)


def test_a_rocm_profile_with_one_is_refused():
    with open("capsim/profiles/data/hardware/mi300x.yaml") as f:
        doc = yaml.safe_load(f)
    doc["compute_capability"] = "9.0"
    with pytest.raises(Exception) as exc:
        HardwareProfile.model_validate(doc)
    assert "compute_capability is NVIDIA's (CUDA); a rocm GPU has none" in str(exc.value)


@pytest.mark.parametrize("value, text", [(9.0, "9.0"), (10, "10.0"), (8.9, "8.9")])
def test_an_unquoted_compute_capability_reads_as_text(value, text):
    with open("capsim/profiles/data/hardware/h100-sxm.yaml") as f:
        doc = yaml.safe_load(f)
    doc["compute_capability"] = value            # YAML's 9.0 unquoted is a float
    assert HardwareProfile.model_validate(doc).compute_capability == text
