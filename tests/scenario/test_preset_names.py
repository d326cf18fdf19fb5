"""A misspelt name in a rule list of a user's own engine preset (``all_reduce_fusion.hardware``,
``model_types``, ``untuned_fp8_gemm.hardware``, ``off_on`` entries) makes the rule silently
never apply: it is warned, naming the file, the YAML path, the name and the known ones. A GPU
profile of the user's own (beside the scenario, or in a ``hardware/`` folder) is not a typo.

The preset is a copy of the shipped sglang-0.5.yaml with one list edited.
"""

from __future__ import annotations

import copy
import logging

import pytest
import yaml

from capsim.profiles.engines import engine_preset_names
from capsim.scenario.load import load

SHIPPED = "capsim/profiles/data/engines/sglang-0.5.yaml"
CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 8}}
DOC = {"name": "t", "model": "gpt-oss-20b", "hardware": "b200",
       "engine": {"preset": "preset.yaml", "max_model_len": 4096, "tensor_parallel_size": 2},
       "workload": {"num_requests": 8, "arrival": {"process": "concurrency", "users": 4},
                    "classes": [CHAT]}}


def _preset(tmp_path, edit) -> None:
    with open(SHIPPED) as f:
        doc = yaml.safe_load(f)
    doc["name"] = "my-sglang"
    edit(doc)
    (tmp_path / "preset.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _gpu(directory, name: str) -> None:
    with open("capsim/profiles/data/hardware/b200.yaml") as f:
        doc = yaml.safe_load(f)
    doc["name"] = name
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _warnings(tmp_path, write_scenario, caplog, doc=DOC) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="capsim"):
        load(write_scenario(tmp_path, copy.deepcopy(doc)), [])
    return [r.getMessage() for r in caplog.records if "never applies" in r.getMessage()]


@pytest.mark.parametrize("where, edit, path, name", [
    ("all_reduce_fusion", lambda d: d["all_reduce_fusion"].update(hardware=["b20"]),
     "all_reduce_fusion.hardware.0", "GPU 'b20'"),
    ("all_reduce_fusion", lambda d: d["all_reduce_fusion"].update(
        model_types=["gpt_oss", "deepseek-v3"]),
     "all_reduce_fusion.model_types.1", "model_type 'deepseek-v3'"),
    ("untuned_fp8_gemm", lambda d: d["untuned_fp8_gemm"].update(hardware=["mi300x", "mi325"]),
     "untuned_fp8_gemm.hardware.1", "GPU 'mi325'"),
    ("absorbed_bmm_dequant", lambda d: d["absorbed_bmm_dequant"].update(hardware=["MI300X"]),
     "absorbed_bmm_dequant.hardware.0", "GPU 'MI300X'"),
    ("shared_experts_fusion", lambda d: d["shared_experts_fusion"]["off_on"][0].update(
        expert_formats=["fp8", "fp8-block"]),
     "shared_experts_fusion.off_on.0.expert_formats.1", "expert format 'fp8-block'"),
])
def test_a_typo_in_a_rule_list_is_warned(tmp_path, write_scenario, caplog, where, edit, path,
                                         name):
    _preset(tmp_path, edit)
    (line,) = _warnings(tmp_path, write_scenario, caplog)
    assert line.startswith(f"{tmp_path / 'preset.yaml'}: {path}: unknown {name}, so this rule "
                           "never applies to it (known: ")
    known = "b200" if "GPU" in name else ("gpt_oss" if "model_type" in name else "fp8_block")
    assert known in line.split("(known: ")[1]


def test_the_cli_prints_the_warning_once_and_runs(tmp_path, write_scenario, run_cli):
    _preset(tmp_path, lambda d: d["all_reduce_fusion"].update(hardware=["b20"]))
    doc = {**DOC, "variants": [{"name": "a"}, {"name": "b"}]}
    code, out, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0, err
    assert err.count("all_reduce_fusion.hardware.0: unknown GPU 'b20'") == 1
    assert "all-reduce + RMSNorm fused" not in out           # it does not apply, as warned


def test_capsim_engines_on_a_preset_file_warns_its_typos_as_run_does(tmp_path, run_cli,
                                                                    monkeypatch):
    _preset(tmp_path, lambda d: d["all_reduce_fusion"].update(hardware=["b20", "my-b200"]))
    _gpu(tmp_path / "hardware", "my-b200")          # a GPU of the user's beside it: no typo
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["engines", "preset.yaml"])
    assert code == 0, err
    assert err.count("all_reduce_fusion.hardware.0: unknown GPU 'b20'") == 1
    assert "my-b200'" not in err and "all_reduce_fusion" in out
    code, _, err = run_cli(["engines", "sglang-0.5"])     # a shipped preset: nothing to say
    assert (code, err) == (0, "")


def test_a_preset_file_that_keeps_a_shipped_name_is_warned(tmp_path, write_scenario, caplog,
                                                           run_cli, monkeypatch):
    _preset(tmp_path, lambda d: d.update(name="sglang-0.5", version="0.5.7-mine"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="capsim"):
        load(write_scenario(tmp_path, copy.deepcopy(DOC)), [])
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (f"{tmp_path / 'preset.yaml'}: name: 'sglang-0.5' is the name of a shipped "
                    "preset, so capsim's tables and lines will call this file by it and its "
                    "'how far to trust it' line will quote that preset's measured errors "
                    "(valid: a name of your own, e.g. 'my-sglang-0.5')")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["engines", "preset.yaml"])
    assert code == 0 and err.count("is the name of a shipped preset") == 1


@pytest.mark.parametrize("edit, path, message", [
    (lambda d: d["defaults"].update(max_num_seqs="many"), "defaults.max_num_seqs",
     "expected an integer (got 'many')"),
    (lambda d: d["defaults"].update(max_num_seq=12), "defaults.max_num_seq",
     "unknown key 'max_num_seq' (did you mean 'max_num_seqs'?)"),
    (lambda d: d["conditional_defaults"][0]["set"].update(max_num_batched_tokens="lots"),
     "conditional_defaults.0.set.max_num_batched_tokens", "expected an integer of tokens"),
])
def test_capsim_engines_refuses_a_preset_file_s_bad_knobs_as_validate_does(
        tmp_path, write_scenario, run_cli, monkeypatch, edit, path, message):
    _preset(tmp_path, edit)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["engines", "preset.yaml"])
    assert code == 2 and out == ""
    assert err.startswith(f"error: {tmp_path / 'preset.yaml'}: {path}: {message}")
    code, _, err_validate = run_cli(["validate", str(write_scenario(tmp_path, DOC))])
    assert code == 2 and f"preset.yaml: {path}: {message}" in err_validate


@pytest.mark.parametrize("folder", ["", "hardware"])
def test_a_gpu_profile_of_the_users_own_is_not_a_typo(tmp_path, write_scenario, caplog,
                                                      folder):
    _gpu(tmp_path / folder if folder else tmp_path, "my-b200")
    _preset(tmp_path, lambda d: d["all_reduce_fusion"].update(hardware=["b200", "my-b200"]))
    assert _warnings(tmp_path, write_scenario, caplog) == []


def test_a_gpu_profile_elsewhere_is_known_where_the_variant_runs_on_it(tmp_path,
                                                                       write_scenario, caplog):
    _gpu(tmp_path / "gpus", "my-b200")
    _preset(tmp_path, lambda d: d["all_reduce_fusion"].update(hardware=["b200", "my-b200"]))
    assert _warnings(tmp_path, write_scenario, caplog,
                     {**DOC, "hardware": "gpus/my-b200.yaml"}) == []


def test_the_shipped_presets_and_an_unedited_copy_warn_nothing(tmp_path, write_scenario,
                                                               caplog):
    _preset(tmp_path, lambda d: None)
    assert _warnings(tmp_path, write_scenario, caplog) == []
    assert "sglang-0.5" in engine_preset_names()
    assert _warnings(tmp_path, write_scenario, caplog,
                     {**DOC, "engine": {**DOC["engine"], "preset": "sglang-0.5"}}) == []


def test_every_shipped_rule_list_names_known_things():
    # what "Shipped presets are held to known names by their tests" in preset_names.py means
    from capsim.profiles.engines import load_engine_preset
    from capsim.profiles.hardware import hardware_names
    from capsim.profiles.hf_config import MODEL_TYPES
    from capsim.profiles.quantization import quant_format_names
    from capsim.scenario.preset_names import _KINDS, _rule_lists

    known = {"GPU": set(hardware_names()), "model_type": set(MODEL_TYPES),
             "expert format": set(quant_format_names())}
    checked = 0
    for name in engine_preset_names():
        for at, names in _rule_lists(load_engine_preset(name)):
            assert set(names) <= known[_KINDS[at.rsplit(".", 1)[-1]]], (name, at, names)
            checked += 1
    assert checked >= 10          # sglang-0.4 / 0.5 / 0.5.10's lists


@pytest.mark.parametrize("edit, doc, path, message", [
    # aiter's Triton GEMM (SGLang's ROCm path) listed for an NVIDIA GPU
    (lambda d: d["untuned_fp8_gemm"].update(hardware=["mi300x", "h200-sxm"]),
     {"model": "deepseek-v3", "hardware": "h200-sxm", "engine.tensor_parallel_size": 8},
     "untuned_fp8_gemm.hardware.1",
     "untuned_fp8_gemm runs on rocm GPUs only, and 'h200-sxm' is a cuda GPU"),
    # FlashInfer's fused all-reduce listed for an AMD GPU
    (lambda d: d["all_reduce_fusion"].update(hardware=["b200", "mi300x"]),
     {"hardware": "mi300x"}, "all_reduce_fusion.hardware.1",
     "all_reduce_fusion runs on cuda GPUs only, and 'mi300x' is a rocm GPU"),
    (lambda d: d["absorbed_bmm_dequant"].update(hardware=["b200"]),
     {"model": "deepseek-v3", "engine.tensor_parallel_size": 8},
     "absorbed_bmm_dequant.hardware.0",
     "absorbed_bmm_dequant runs on rocm GPUs only, and 'b200' is a cuda GPU"),
])
def test_a_rule_listing_a_gpu_of_the_wrong_platform_is_refused(tmp_path, write_scenario, edit,
                                                               doc, path, message):
    from capsim.common.errors import ScenarioError
    from tests.cli.test_bad_input_late import set_dotted

    _preset(tmp_path, edit)
    scenario = copy.deepcopy(DOC)
    for dotted, value in doc.items():
        set_dotted(scenario, dotted, value)
    with pytest.raises(ScenarioError) as exc:
        load(write_scenario(tmp_path, scenario), [])
    assert exc.value.file == str(tmp_path / "preset.yaml") and exc.value.path == path
    assert exc.value.message.startswith(message)


def test_a_wrong_platform_gpu_the_variant_does_not_run_on_is_not_checked(tmp_path,
                                                                          write_scenario):
    _preset(tmp_path, lambda d: d["untuned_fp8_gemm"].update(hardware=["mi300x", "h200-sxm"]))
    assert load(write_scenario(tmp_path, copy.deepcopy(DOC)), []).runs   # on a b200
