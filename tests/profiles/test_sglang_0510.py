"""The sglang-0.5.10 preset (SGLang 0.5.10 and later, read from the sglang 0.5.12 wheel on PyPI,
python/sglang/srt/...): what differs from sglang-0.5 (0.5.3-0.5.9), each test naming its source,
and a bad ``piecewise_cuda_graph`` section refused at its field."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.models import load_model

NEW, OLD = load_engine_preset("sglang-0.5.10"), load_engine_preset("sglang-0.5")


def test_label_and_what_is_unchanged():
    """The scheduler, its knobs, the memory rule's tables, the all-reduce and the fusion rule are
    0.5.7's (the 0.5.12 wheel's server_args.py _handle_gpu_memory_settings, environ.py,
    schedule_policy.py read again)."""
    assert NEW.label == "sglang-0.5.10 (SGLang 0.5.12)"
    assert NEW.scheduler == OLD.scheduler and NEW.tp_all_reduce == OLD.tp_all_reduce
    assert NEW.defaults == OLD.defaults and NEW.conditional_defaults == OLD.conditional_defaults
    assert NEW.shared_experts_fusion == OLD.shared_experts_fusion
    assert NEW.host_overhead.eager_prefill_op_s == OLD.host_overhead.eager_prefill_op_s


def test_what_changed_from_05():
    """server_args.py of the 0.5.12 wheel: the piecewise prefill graph on by default, 4 GiB (not
    2) reserved for an EAGLE-family drafter, spec v2 (the overlap scheduler kept with a drafter:
    SGLANG_ENABLE_SPEC_V2 True in environ.py); no bf16 rewrite of the absorbed MLA weights on
    gfx942 (forward_mla.py: fp8 Triton bmm under graph capture, PR 22938)."""
    assert OLD.piecewise_cuda_graph is None and NEW.piecewise_cuda_graph is not None
    assert (OLD.memory.static_fraction.speculative_mib,
            NEW.memory.static_fraction.speculative_mib) == (2048, 4096)
    assert OLD.host_overhead.serial_with_speculation
    assert not NEW.host_overhead.serial_with_speculation
    assert OLD.absorbed_bmm_dequant is not None and NEW.absorbed_bmm_dequant is None


def test_graph_limits_by_model_and_gpu():
    """DeepSeek-V3 (MLA) on H200: 2,048 tokens; on B200 with FP8 block experts (SGLang picks
    flashinfer_trtllm, which turns the graph off) and on ROCm: 0; a dense GQA model: any
    length."""
    rule, dsv3 = NEW.piecewise_cuda_graph, load_model("deepseek-v3")
    assert rule.max_tokens(dsv3, "h200-sxm", "cuda", "fp8_block", False) == 2048
    assert rule.max_tokens(dsv3, "b200", "cuda", "fp8_block", False) == 0
    assert rule.max_tokens(dsv3, "b200", "cuda", "bf16", False) == 2048
    assert rule.max_tokens(dsv3, "mi325x", "rocm", "fp8_block", False) == 0
    assert rule.max_tokens(dsv3, "h200-sxm", "cuda", "fp8_block", True) == 0
    assert rule.max_tokens(load_model("llama-3.1-70b"), "h200-sxm", "cuda", "bf16",
                           False) == float("inf")


def test_engines_lists_it(run_cli):
    code, out, _ = run_cli(["engines"])
    rows = [" ".join(line.split()) for line in out.splitlines()
            if line.startswith("│ sglang-0.5.10 ")]
    assert code == 0 and len(rows) == 1
    assert rows[0].startswith("│ sglang-0.5.10 │ SGLang │ 0.5.12 │")


@pytest.mark.parametrize("section, where, expected", [
    ({"mla_max_tokens": 0, "platforms": ["cuda"]}, "piecewise_cuda_graph.mla_max_tokens",
     "must be > 0 (got 0)"),
    ({"mla_max_tokens": 2048, "platforms": ["xpu"]}, "piecewise_cuda_graph.platforms.0",
     "'cuda' or 'rocm'"),
    ({"mla_max_tokens": 2048, "platforms": ["cuda"], "off_on": [{"hardware": ["b200"]}]},
     "piecewise_cuda_graph.off_on.0.model_types", "required"),
])
def test_a_bad_section_is_refused_at_its_field(tmp_path, section, where, expected):
    """A user's own preset: one line naming the file, the field's YAML path and what is valid."""
    doc = yaml.safe_load(resources.files("capsim.profiles").joinpath(
        "data", "engines", "sglang-0.5.10.yaml").read_text(encoding="utf-8"))
    doc["name"], doc["piecewise_cuda_graph"] = "mine", section
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ScenarioError) as err:
        load_engine_preset(path)
    assert err.value.file == str(path) and err.value.path == where
    assert expected in err.value.message and "\n" not in str(err.value)
