"""Speculative and shared-experts input a new user's bad-input sweep found accepted without
a word, or refused with a message that did not say what was missing (issue 31, "Before
resolving"):

- an acceptance row measured on another model (the Qwen3-8B EAGLE-3 row on Llama-3.1-8B)
  is warned about, naming the file, the field and both models; DeepSeek-R1's MTP row on the
  deepseek-v3 preset is not (its ``models:`` list it: R1 is V3's architecture);
- ``disable_shared_experts_fusion: true`` where SGLang does not fuse anyway (expert
  parallelism on CUDA: python/sglang/srt/models/deepseek_v2.py
  determine_num_fused_shared_experts of the sglang 0.5.7 wheel) is warned about;
- a speculative method the engine version does not have (``--speculative-algorithm``
  choices of the 0.4.7 / 0.4.9 wheels: EAGLE, EAGLE3, NEXTN; no speculative option in
  0.3.0; none in vLLM 0.2.5) or runs in a way capsim does not model (SGLang 0.5.7's NGRAM
  tree, vLLM V0's batch-expansion scoring) is refused;
- a by-class map naming every class needs no default; one that leaves a class out says
  the default is what is missing.
"""

from __future__ import annotations

import copy
import logging

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.scenario.load import load

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 200},
        "output_tokens": {"dist": "fixed", "value": 20}}
DOC = {"name": "s", "model": "llama-3.1-8b", "hardware": "h100-sxm",
       "engine": {"max_model_len": 4096},
       "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1},
                    "classes": [CHAT, {**CHAT, "name": "code"}]}}
EAGLE = {"method": "eagle", "num_speculative_tokens": 3}


def _load(tmp_path, **edits):
    doc = copy.deepcopy(DOC)
    for dotted, value in edits.items():
        node = doc
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, load(path)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_row_measured_on_another_model_is_warned_about(tmp_path, caplog):
    spec = {"method": "eagle3", "num_speculative_tokens": 3,
            "acceptance": "eagle3-qwen3-8b-mtbench"}
    with caplog.at_level(logging.WARNING, logger="capsim"):
        path, _ = _load(tmp_path, engine__speculative=spec)
    assert _warnings(caplog) == [
        f"{path}: engine.speculative.acceptance: row eagle3-qwen3-8b-mtbench of "
        "capsim/profiles/data/speculative/acceptance.yaml was measured on Qwen/Qwen3-8B (its "
        "models: Qwen3-8B), not on this scenario's model 'llama-3.1-8b'; another model's "
        "drafts are accepted at another rate: give acceptance_rate_by_position measured on "
        "this model"]


def test_a_row_on_its_own_model_is_not_warned_about(tmp_path, caplog):
    spec = {"method": "eagle3", "num_speculative_tokens": 3,
            "acceptance": "eagle3-llama31-8b-mtbench"}
    with caplog.at_level(logging.WARNING, logger="capsim"):
        _load(tmp_path, engine__speculative=spec)
    assert _warnings(caplog) == []


def test_deepseek_r1s_mtp_row_on_the_v3_shape_is_not_warned_about(tmp_path, caplog):
    """The supplementary fidelity case runs vLLM PR 12755's R1 row on deepseek-v3."""
    spec = {"method": "mtp", "num_speculative_tokens": 1, "acceptance": "mtp-deepseek-r1"}
    with caplog.at_level(logging.WARNING, logger="capsim"):
        _load(tmp_path, model="deepseek-v3", hardware="h200-sxm",
              engine={"tensor_parallel_size": 8, "max_model_len": 4096, "speculative": spec})
    assert not [w for w in _warnings(caplog) if "acceptance" in w]


def test_the_fusion_knob_under_expert_parallelism_is_warned_about(tmp_path, caplog):
    engine = {"preset": "sglang-0.5", "tensor_parallel_size": 8, "max_model_len": 4096,
              "enable_expert_parallel": True, "disable_shared_experts_fusion": True}
    with caplog.at_level(logging.WARNING, logger="capsim"):
        path, _ = _load(tmp_path, model="deepseek-v3", hardware="h200-sxm", engine=engine)
    assert _warnings(caplog) == [
        f"{path}: engine.disable_shared_experts_fusion: SGLang (engine preset 'sglang-0.5') "
        "does not fuse the shared expert under expert parallelism on CUDA, so "
        "disable_shared_experts_fusion: true changes nothing here"]


def test_the_fusion_knob_where_it_turns_fusion_off_is_not_warned_about(tmp_path, caplog):
    engine = {"preset": "sglang-0.5", "tensor_parallel_size": 8, "max_model_len": 4096,
              "disable_shared_experts_fusion": True}
    with caplog.at_level(logging.WARNING, logger="capsim"):
        _load(tmp_path, model="deepseek-v3", hardware="h200-sxm", engine=engine)
    assert not [w for w in _warnings(caplog) if "fusion" in w]


@pytest.mark.parametrize("preset,method,phrase", [
    ("sglang-0.5", "ngram", "SGLang's NGRAM verifies a tree of n-gram candidates"),
    ("sglang-0.4", "ngram", "has no such speculative method (it has EAGLE, EAGLE3, NEXTN)"),
    ("sglang-0.4", "draft_model", "has no such speculative method"),
    ("sglang-0.3", "eagle", "(it has no speculative decoding); valid: none"),
    # vLLM V0: none in 0.2.5; 0.5.4-0.6.x score proposals by batch expansion without
    # chunked prefill (vllm/config.py, spec_decode/spec_decode_worker.py of those sdists)
    ("vllm-0.2.5", "ngram", "(it has no speculative decoding); valid: none"),
    ("vllm-0.5", "eagle", "(it has draft_model (not modelled), ngram (not modelled))"),
    ("vllm-0.6", "ngram", "V0's speculative decoding (vllm/spec_decode/spec_decode_worker.py"),
])
def test_a_method_the_engine_version_lacks_is_refused(tmp_path, preset, method, phrase):
    spec = {"method": method, "num_speculative_tokens": 3, "acceptance_rate": 0.5}
    if method == "draft_model":
        spec["model"] = "llama-3.1-8b"
    with pytest.raises(ScenarioError) as err:
        _load(tmp_path, engine={"preset": preset, "max_model_len": 4096, "speculative": spec})
    assert err.value.path == "engine.speculative"
    assert f"method {method} under engine preset '{preset}'" in str(err.value)
    assert phrase in str(err.value)


def test_sglang_05_keeps_its_chain_drafters(tmp_path):
    spec = {**EAGLE, "method": "eagle3", "acceptance_rate": 0.6}
    _, loaded = _load(tmp_path, engine={"preset": "sglang-0.5", "max_model_len": 4096,
                                        "speculative": spec})
    assert loaded.runs[0].pool().spec.method == "eagle3"


def test_a_by_class_map_naming_every_class_needs_no_default(tmp_path):
    spec = {**EAGLE, "acceptance_rate_by_class": {"chat": 0.6, "code": 0.8}}
    _, loaded = _load(tmp_path, engine__speculative=spec)
    assert loaded.runs[0].pool().spec.alpha_by_class == (0.6, 0.8)


def test_a_by_class_map_leaving_a_class_out_says_the_default_is_missing(tmp_path):
    spec = {**EAGLE, "acceptance_rate_by_class": {"chat": 0.6}}
    with pytest.raises(ScenarioError) as err:
        _load(tmp_path, engine__speculative=spec)
    assert err.value.path == "engine.speculative.acceptance_rate"
    assert ("class code not in acceptance_rate_by_class and no default given: add "
            "acceptance_rate" in str(err.value))


def test_a_pools_warning_names_the_pools_field(tmp_path, caplog):
    """A pool is resolved as a synthesized variant: its warnings named ``variants.0`` of a
    scenario without variants (its errors were already re-pointed at the pool)."""
    spec = {"method": "eagle3", "num_speculative_tokens": 3,
            "acceptance": "eagle3-qwen3-8b-mtbench"}
    pools = [{"name": "a", "hardware": "h100-sxm", "engine": {"speculative": spec}},
             {"name": "b", "hardware": "a100-80gb"}]
    with caplog.at_level(logging.WARNING, logger="capsim"):
        path, _ = _load(tmp_path, cluster={"pools": pools})
    assert [w.split(": row ")[0] for w in _warnings(caplog)] == [
        f"{path}: cluster.pools.0.engine.speculative.acceptance"]


def test_a_refused_speculative_block_prints_no_warning_before_its_error(tmp_path, caplog):
    """DeepSeek-V3's MTP row on Llama-3.1-8B: one line, the refusal (Llama has no MTP
    layers), not the row's model warning first."""
    spec = {"method": "mtp", "num_speculative_tokens": 1, "acceptance": "mtp-deepseek-v3"}
    with caplog.at_level(logging.WARNING, logger="capsim"), pytest.raises(ScenarioError):
        _load(tmp_path, engine__speculative=spec)
    assert _warnings(caplog) == []


def test_a_preset_file_listing_a_method_capsim_does_not_know_is_refused_at_its_field(tmp_path):
    """A preset of the user's own whose ``speculative_methods`` names a method outside vLLM's
    names (``warp``) is refused at that field of the preset file: before, the scenario's
    method was refused with the preset's list as "valid: warp", a name the scenario schema
    itself refuses."""
    from importlib import resources
    doc = yaml.safe_load(resources.files("capsim.profiles").joinpath(
        "data", "engines", "vllm-v1.yaml").read_text(encoding="utf-8"))
    doc["name"] = "myv1"
    doc["speculative_methods"] = {"methods": {"warp": "WARP"}}
    preset = tmp_path / "myv1.yaml"
    preset.write_text(yaml.safe_dump(doc), encoding="utf-8")
    scenario = {"name": "t", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
                "engine": {"preset": str(preset), "max_model_len": 4096},
                "workload": {"num_requests": 5,
                             "arrival": {"process": "poisson", "rate_per_s": 1.0},
                             "classes": [{"name": "c", "weight": 1,
                                          "prompt_tokens": {"dist": "fixed", "value": 100},
                                          "output_tokens": {"dist": "fixed", "value": 10}}]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    with pytest.raises(ScenarioError) as err:
        load(path)
    text = str(err.value)
    assert str(preset) in text and "speculative_methods" in text
    assert "unknown speculative method(s) warp; valid: eagle, eagle3, mtp, draft_model, ngram" \
        in text
