"""engine.disable_shared_experts_fusion (SGLang's --disable-shared-experts-fusion) in a
scenario: off by default, so an SGLang pool of DeepSeek-V3 fuses the shared expert into
the routed experts' kernel (its MTP drafter too: DeepseekV3ForCausalLMNextN runs the same
rule, python/sglang/srt/models/deepseek_nextn.py of the sglang 0.5.7 wheel); true keeps
it apart; a vLLM pool never fuses and refuses the knob (tests/cli/test_bad_input_late.py)."""

from __future__ import annotations

import yaml

from capsim.profiles.models import load_model
from capsim.scenario.load import load

MTP = {"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.8}
DOC = {
    "name": "fusion", "model": "deepseek-v3", "hardware": "h200-sxm",
    "engine": {"tensor_parallel_size": 8, "max_model_len": 16384},
    "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 500},
                              "output_tokens": {"dist": "fixed", "value": 50}}]},
    "variants": [
        {"name": "sglang", "engine": {"preset": "sglang-0.5", "speculative": MTP}},
        {"name": "sglang-apart", "engine": {"preset": "sglang-0.5", "speculative": MTP,
                                            "disable_shared_experts_fusion": True}},
        {"name": "sglang-ep", "engine": {"preset": "sglang-0.5",
                                         "enable_expert_parallel": True}},
        {"name": "vllm", "engine": {"preset": "vllm-v1"}}],
}


def test_the_knob_and_the_preset_decide_the_fusion(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(DOC))
    pools = {rc.variant: rc.pool() for rc in load(path).runs}
    model = load_model("deepseek-v3")
    fused = {name: pool.pricer(model).fuse_shared_expert for name, pool in pools.items()}
    assert fused == {"sglang": True, "sglang-apart": False, "sglang-ep": False,
                     "vllm": False}
    assert pools["sglang"].draft_pricer().fuse_shared_expert
    assert not pools["sglang-apart"].draft_pricer().fuse_shared_expert


def test_the_knob_on_a_model_sglang_never_fuses_is_refused(tmp_path):
    """Llama-3.1-8B has no shared expert: the knob would change nothing, and was accepted
    without a word (a new user's bad-input sweep)."""
    import pytest

    from capsim.common.errors import ScenarioError
    doc = {**DOC, "model": "llama-3.1-8b", "engine": {"max_model_len": 16384},
           "variants": [DOC["variants"][1] | {"engine": {"preset": "sglang-0.5",
                                                         "disable_shared_experts_fusion": True}}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError) as err:
        load(path)
    assert err.value.path == "variants.0.engine.disable_shared_experts_fusion"
    assert ("variants.0.engine.disable_shared_experts_fusion: SGLang fuses the shared expert "
            "of deepseek_v3 models with 256 routed experts and 1 shared only; model "
            "'llama-3.1-8b' has none it would fuse, so the knob changes nothing (valid: false)"
            in str(err.value))
