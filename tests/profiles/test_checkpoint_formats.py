"""Weight formats by tensor group, as a checkpoint stores them (``quantization_config``),
and the fused-MoE activation peak.

gpt-oss keeps attention, the router, embeddings and LM head in bf16 and its experts in
MXFP4 (config.json ``quantization_config: {quant_method: mxfp4, modules_to_not_convert:
[model.layers.*.self_attn, model.layers.*.mlp.router, model.embed_tokens, lm_head]}``,
huggingface.co/openai/gpt-oss-120b). The published checkpoints are 60.8 GiB (gpt-oss-120b)
and 12.8 GiB (gpt-oss-20b): "gpt-oss-120b & gpt-oss-20b Model Card", OpenAI 2025
(arXiv 2508.10925), Table 1 "Checkpoint Size" — 65.3 GB and 13.7 GB, the safetensors of
the two Hugging Face repositories.
"""

from __future__ import annotations

import json

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.cost.pricer import StepPricer
from capsim.kv.memory import activation_peak_bytes, weight_bytes_per_gpu
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.hf_config import checkpoint_formats
from capsim.profiles.models import load_model
from capsim.profiles.quantization import load_quant_format
from capsim.profiles.weight_layout import weight_layout
from capsim.scenario.load import load

GIB = 2**30

GPT_OSS_QUANT = {"quant_method": "mxfp4",
                 "modules_to_not_convert": ["model.layers.*.self_attn",
                                            "model.layers.*.mlp.router",
                                            "model.embed_tokens", "lm_head"]}


@pytest.mark.parametrize("name, published_gib", [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)])
def test_gpt_oss_weights_are_the_published_checkpoint(name, published_gib):
    """Experts in MXFP4 (4 bits + an E8M0 scale per 32 = 0.53125 bytes), everything else
    bf16: the model card's checkpoint size to 0.1 GiB (bf16 throughout: 3-3.6×)."""
    m = load_model(name)
    assert m.weight_formats == {"experts": "mxfp4"}
    got = weight_bytes_per_gpu(m, 1, 2)
    assert got / GIB == pytest.approx(published_gib, abs=0.05)
    assert m.weight_bytes(2) / got > 3
    # An explicit quantization: mxfp4 is the checkpoint's own format: the same bytes.
    assert weight_bytes_per_gpu(m, 1, 2, quant=load_quant_format("mxfp4")) == got


def test_gpt_oss_120b_on_one_h100_holds_kv_after_its_60_gib():
    """vLLM serves gpt-oss-120b on one 80 GB H100 (OpenAI's guide): with the checkpoint's
    formats capsim fits it and leaves KV room; bf16 experts would not fit at all."""
    m = load_model("gpt-oss-120b")
    pricer = StepPricer(m, load_hardware("h100-sxm"))
    assert pricer.matmul_dtype == "bf16" and pricer.expert_dtype == "bf16"   # weight-only
    b200 = StepPricer(m, load_hardware("b200"))
    assert b200.matmul_dtype == "bf16" and b200.expert_dtype == "fp4"         # FP4 experts
    step = dict(prefill_tokens=4096, prefill_attn_pairs=4096 * 4097 / 2, prefill_kv_tokens=4096)
    assert b200.cost(**step).seconds < pricer.cost(**step).seconds


def test_quantization_config_becomes_formats_by_group():
    """gpt-oss's list keeps attention 16-bit and quantizes the experts (MXFP4 is experts
    only in vLLM: formats.yaml mxfp4 groups, so a dense MLP it would not name stays 16-bit
    too); DeepSeek-V3's fp8 config (128 × 128 blocks) quantizes every group; a method
    capsim has no format for (compressed-tensors) records nothing (engine.quantization
    decides)."""
    assert checkpoint_formats(GPT_OSS_QUANT) == {"experts": "mxfp4"}
    assert checkpoint_formats({"quant_method": "mxfp4"}) == {"experts": "mxfp4"}
    assert checkpoint_formats({"quant_method": "fp8", "fmt": "e4m3",
                               "weight_block_size": [128, 128]}) == {
        "attention": "fp8_block", "mlp": "fp8_block", "experts": "fp8_block"}
    assert checkpoint_formats({"quant_method": "awq", "modules_to_not_convert": ["self_attn"]},
                              moe=False) == {"mlp": "awq"}
    assert checkpoint_formats({"quant_method": "compressed-tensors"}) == {}
    assert checkpoint_formats(None) == {}


def test_a_gpt_oss_config_json_reads_to_the_preset_formats(tmp_path):
    """The 20b's config.json keys (tests/profiles/test_moe_models.py): every layer MoE, no
    dense MLP, so only the experts are recorded, as in the preset."""
    from tests.profiles.test_moe_models import GPT_OSS_20B

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_20B))
    m = load_model(str(path))
    assert m.weight_formats == {"experts": "mxfp4"}
    assert weight_bytes_per_gpu(m, 1, 2) == weight_bytes_per_gpu(load_model("gpt-oss-20b"), 1, 2)



def test_the_deepseek_v3_preset_is_its_fp8_checkpoint():
    """DeepSeek-V3's config.json quantization_config (quant_method fp8, weight_block_size
    [128, 128]; huggingface.co/deepseek-ai/DeepSeek-V3) gives fp8 blocks for every group,
    and the preset says the same: ~671e9 weights at 1 byte plus block scales and the bf16
    vocabulary, 626.9 GiB (the published checkpoint is ~685 GB with the 14B MTP module)."""
    m = load_model("deepseek-v3")
    assert m.weight_formats == checkpoint_formats(
        {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]})
    assert weight_bytes_per_gpu(m, 1, 2) / 2**30 == pytest.approx(626.9, abs=0.05)

def test_another_quantization_than_the_checkpoints_is_refused():
    """vLLM: "Quantization method specified in the model config (mxfp4) does not match the
    quantization method specified in the `quantization` argument (nvfp4)"."""
    m = load_model("gpt-oss-120b")
    with pytest.raises(ScenarioError, match="quantization nvfp4 does not match the checkpoint "
                                            "of gpt-oss-120b .experts mxfp4"):
        weight_layout(m, "nvfp4")
    layout = weight_layout(m, None)
    assert (layout.attention.name, layout.mlp.name, layout.experts.name) == \
        ("bf16", "bf16", "mxfp4")


@pytest.mark.parametrize("change, path, expected", [
    ({"engine": {"quantization": "fp8"}}, "engine.quantization",
     "quantization fp8 does not match the checkpoint of gpt-oss-120b"),
    ({"engine": {"dtype": "fp8"}}, "engine.dtype",
     "quantization fp8_channel does not match the checkpoint of gpt-oss-120b"),
])
def test_scenario_with_a_mismatched_format_is_one_line(tmp_path, run_cli, change, path,
                                                       expected):
    doc = {"name": "g", "model": "gpt-oss-120b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 8192, **change["engine"]},
           "workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1},
                        "classes": [{"name": "c", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 100},
                                     "output_tokens": {"dist": "fixed", "value": 10}}]}}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc))
    code, _, err = run_cli(["validate", str(f)])
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: {expected}" in err


def test_validate_sizes_gpt_oss_on_one_h100(tmp_path):
    """The weights vLLM logs as "Model loading took" are the checkpoint's ~60.8 GiB (less
    nothing: one GPU), and the KV cache gets what is left of 0.9 × 79.19 GiB."""
    doc = {"name": "g", "model": "gpt-oss-120b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 8192},
           "workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1},
                        "classes": [{"name": "c", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 100},
                                     "output_tokens": {"dist": "fixed", "value": 10}}]}}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc))
    pool = load(f).runs[0].pool()
    w = pool.kv.memory.weight_bytes / GIB
    assert 60.7 < w < 61.0                          # + vLLM's RoPE cache (a few MiB)
    assert pool.kv.num_tokens > 100_000


def test_moe_activation_peak_follows_the_fused_moe_caches():
    """vLLM's profile run over T = 8,192 tokens: the fused-MoE layer holds k rows of
    2·I_moe + I_moe per token (a = 6 bytes per element in vllm-v1's rule) and its k × h
    output cache. gpt-oss-120b: k = 4 × 2,880 = 11,520 (4 × its dense-equivalent 2,880);
    Qwen3-30B-A3B: 8 × 768 = 6,144; under expert parallelism the experts are whole
    on each GPU, so the caches are not divided by TP."""
    rule = load_engine_preset("vllm-v1").memory
    t = 8192
    m = load_model("gpt-oss-120b")
    fwd = activation_peak_bytes(m, 1, rule, 1, t, 132, with_sampler=False)
    want = t * (6 * 4 * 2880 + 2 * 4 * 2880 + 6 * 2880) + rule.profile_constant_gib * GIB
    assert fwd == int(want)
    q = load_model("qwen3-30b-a3b")
    tp4 = activation_peak_bytes(q, 4, rule, 1, t, 132, with_sampler=False)
    ep4 = activation_peak_bytes(q, 4, rule, 1, t, 132, with_sampler=False,
                                expert_parallel=True)
    const = rule.profile_constant_gib * GIB
    h = q.hidden_size
    assert tp4 - const == pytest.approx(t * (6 * 8 * 768 / 4 + 2 * 8 * h + 6 * h), abs=1)
    assert ep4 - const == pytest.approx(t * (6 * 8 * 768 + 2 * 8 * h + 6 * h), abs=1)
    # A dense model is unchanged: T × (6 I / TP + 6 h).
    d = load_model("llama-3.1-8b")
    assert activation_peak_bytes(d, 1, rule, 1, t, 132, with_sampler=False) - const == \
        pytest.approx(t * (6 * 14336 + 6 * 4096), abs=1)


@pytest.mark.parametrize("method", ["bitsandbytes", "compressed-tensors"])
def test_a_quant_method_capsim_does_not_read_is_said(method, caplog):
    """A 4-bit bitsandbytes checkpoint priced as bf16 without a word was a silent accept
    (issue 31's bad-input sweep): the shape loads, 16-bit, and a warning names the file,
    the field and the methods capsim reads."""
    from capsim.profiles.hf_config import shape_fields
    config = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "vocab_size": 128256, "quantization_config": {"quant_method": method}}
    with caplog.at_level("WARNING", logger="capsim"):
        data = shape_fields(config, file="m/config.json")
    assert "weight_formats" not in data
    assert [r.getMessage() for r in caplog.records] == [
        f"m/config.json: quantization_config.quant_method '{method}' is not read (capsim "
        "reads mxfp4, fp8, awq, gptq): the weights are priced as engine.quantization says, "
        "16-bit when unset"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="capsim"):
        shape_fields({**config, "quantization_config": {"quant_method": "awq"}}, file="x")
    assert caplog.records == []
