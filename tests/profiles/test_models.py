"""Model shapes: parameter counts, KV bytes per token, FLOPs, HF config loading.

Seeds: "seed 000" is ../shared/seeds/000_24f44efa48c62f69.txt, "seed 001" is
../shared/seeds/001_7500b850301599ee.txt, "seed 002" is
../shared/seeds/002_be97687ecafaf8fa.txt. Parameter totals are the ones the
Hugging Face model pages report (sum of the safetensors tensors).
"""

from __future__ import annotations

import json

import pytest

from capsim.common.errors import ScenarioError
from capsim.profiles.hf_config import MODEL_TYPES
from capsim.profiles.models import (ModelShape, list_models, load_model, model_from_hf_config,
                                    model_names)

KIB = 2**10


# -- KV bytes per token -----------------------------------------------------------


def test_llama2_7b_kv_bytes_per_token_is_512_kib():
    """Seed 000 ("512 KiB per token" at Llama-2-7B shape) and seed 001's formula:
    2 × 32 layers × 32 KV heads × 128 × 2 bytes = 524,288."""
    assert load_model("llama-2-7b").kv_bytes_per_token() == 524_288 == 512 * KIB


def test_llama3_70b_kv_bytes_per_token_is_320_kib():
    """Seed 001, LLaMA-3-70B: 2 × 80 × 8 × 128 × 2 = 327,680 bytes (320 KB)."""
    assert load_model("llama-3.1-70b").kv_bytes_per_token() == 327_680 == 320 * KIB


def test_llama31_8b_kv_bytes_per_token_is_128_kib():
    """Seed 002 Q6: "each token's KV takes 128 KiB" for Llama 3.1 8B."""
    assert load_model("llama-3.1-8b").kv_bytes_per_token() == 131_072 == 128 * KIB


def test_fp8_kv_halves_bytes_per_token():
    """Seed 001: P_bytes is 1 for an 8-bit cache."""
    assert load_model("llama-3.1-8b").kv_bytes_per_token(kv_dtype_bytes=1) == 64 * KIB


# -- parameter counts ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, published",
    [
        ("llama-3.1-8b", 8.03e9),    # HF meta-llama/Llama-3.1-8B: 8.03B params
        ("llama-2-7b", 6.74e9),      # HF meta-llama/Llama-2-7b-hf: 6.74B params
        ("llama-3.1-70b", 70.6e9),   # HF meta-llama/Llama-3.1-70B: 70.6B params
        ("llama-2-70b", 69.0e9),     # HF meta-llama/Llama-2-70b-hf: 69B params
        ("mistral-7b", 7.24e9),      # HF mistralai/Mistral-7B-v0.1: 7.24B params
        ("qwen2.5-7b", 7.62e9),      # HF Qwen/Qwen2.5-7B model card: 7.61B params
        ("qwen2.5-72b", 72.7e9),     # HF Qwen/Qwen2.5-72B model card: 72.7B params
    ],
)
def test_params_total_matches_published_size(name, published):
    """Within 0.5 % of the size the model card / HF page reports."""
    assert load_model(name).params_total == pytest.approx(published, rel=0.005)


def test_params_total_exact_for_llama31_8b():
    """HF safetensors total for meta-llama/Llama-3.1-8B is 8,030,261,248 parameters;
    the seed 002 weight figure is 16.06 GB at 2 bytes each."""
    model = load_model("llama-3.1-8b")
    assert model.params_total == 8_030_261_248
    assert model.weight_bytes() == pytest.approx(16.06e9, rel=1e-3)


def test_per_operator_params_llama31_8b():
    """Shapes from the HF config: h=4096, q=32×128, kv=8×128, ffn=14336, vocab 128256."""
    model = load_model("llama-3.1-8b")
    assert model.head_dim == 128
    assert model.qkv_params == 4096 * (4096 + 2 * 1024)
    assert model.o_params == 4096 * 4096
    assert model.mlp_params == 3 * 4096 * 14336
    assert model.embedding_params == model.lm_head_params == 128256 * 4096


def test_qkv_bias_counted_for_qwen():
    """Qwen2 q/k/v projections have biases (Qwen2 modeling code); Llama's do not."""
    qwen = load_model("qwen2.5-7b")
    out = 3584 + 2 * 4 * 128
    assert qwen.attention_bias
    assert qwen.qkv_params == 3584 * out + out


def test_tied_embeddings_counted_once():
    tied = load_model("llama-3.1-8b").model_copy(update={"tie_word_embeddings": True})
    untied = load_model("llama-3.1-8b")
    assert untied.params_total - tied.params_total == untied.lm_head_params


def test_head_dim_defaults_to_hidden_over_heads():
    shape = ModelShape(name="x", hidden_size=4096, intermediate_size=11008, num_hidden_layers=2,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=100,
                       max_position_embeddings=128)
    assert shape.head_dim == 128


# -- FLOPs ---------------------------------------------------------------------------


def test_flops_per_token_is_two_per_matmul_weight_plus_attention():
    """Kaplan et al. 2020 §2.1 (2N per token) + PaLM appendix B (4·L·H·Q·T attention)."""
    model = load_model("llama-3.1-8b")
    matmul = 32 * (model.qkv_params + model.o_params + model.mlp_params) + model.lm_head_params
    assert model.flops_per_token(0) == 2 * matmul
    assert model.flops_per_token(1000) - model.flops_per_token(0) == 4 * 32 * 32 * 128 * 1000
    # Seed 002 rounds this to 2 × 8.03e9; the embedding lookup is not a matmul.
    assert model.flops_per_token(0) == pytest.approx(2 * 8.03e9, rel=0.07)


# -- loading ---------------------------------------------------------------------------


def test_unknown_model_lists_presets():
    with pytest.raises(ScenarioError) as err:
        load_model("gpt-9")
    message = str(err.value)
    assert "gpt-9" in message
    for name in ("llama-3.1-8b", "llama-2-7b", "qwen2.5-72b", "mistral-7b"):
        assert name in message


def test_every_preset_loads_and_cites_its_hf_config():
    names = model_names()
    assert set(names) == {"llama-2-7b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
                          "llama-3.1-405b", "mistral-7b", "qwen2.5-7b", "qwen2.5-72b",
                          "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3",
                          "gpt-oss-20b", "gpt-oss-120b", "llama-4-scout"}
    for model in list_models():
        assert model.source.startswith("https://huggingface.co/")
        assert model.source.endswith("config.json")


# Trimmed copy of the keys of Qwen/Qwen2.5-7B config.json.
QWEN_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06, "sliding_window": 131072, "use_sliding_window": False,
}


def test_load_hf_config_json_file(tmp_path):
    """A HF config.json gives the same shape as the preset (bias inferred from model_type)."""
    path = tmp_path / "Qwen2.5-7B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(QWEN_CONFIG))
    model = load_model(str(path))
    preset = load_model("qwen2.5-7b")
    assert model.name == "Qwen2.5-7B"
    assert model.attention_bias
    assert model.params_total == preset.params_total
    assert model.kv_bytes_per_token() == preset.kv_bytes_per_token() == 57_344


def test_load_hf_config_directory(tmp_path):
    config = {k: v for k, v in QWEN_CONFIG.items() if k != "num_key_value_heads"}
    config["model_type"] = "llama"
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = load_model(str(tmp_path))
    assert model.num_key_value_heads == 28          # MHA when the key is absent
    assert not model.attention_bias


def test_bad_json_names_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ScenarioError) as err:
        load_model(str(path))
    assert err.value.file == str(path)


def test_missing_field_names_file_and_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in QWEN_CONFIG.items() if k != "hidden_size"}))
    with pytest.raises(ScenarioError) as err:
        load_model(str(path))
    assert err.value.file == str(path)
    assert err.value.path == "hidden_size"


def test_moe_config_of_an_unknown_model_type_is_refused(tmp_path):
    """Experts in a family without a reader: one error naming model_type and the
    supported ones."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN_CONFIG, "model_type": "qwen2", "num_local_experts": 8}))
    with pytest.raises(ScenarioError, match="mixture-of-experts") as err:
        load_model(str(path))
    assert err.value.path == "model_type"
    assert "'qwen2'" in str(err.value) and "deepseek_v3" in str(err.value)


def test_preset_format_yaml_is_strict(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nhidden_size: 64\nintermediate_size: 128\nnum_hidden_layers: 2\n"
                    "num_attention_heads: 4\nnum_key_value_heads: 4\nvocab_size: 10\n"
                    "max_position_embeddings: 64\nhiden_size: 3\n")
    with pytest.raises(ScenarioError) as err:
        load_model(str(path))
    assert err.value.path == "hiden_size"


def test_missing_file_is_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="not found"):
        load_model(str(tmp_path / "absent.json"))


@pytest.mark.parametrize("value", ["yes", "false", 1])
def test_a_lax_boolean_in_a_config_is_refused(tmp_path, value):
    # Profile booleans are YAML / JSON true / false only, as the scenario's are: pydantic
    # would take 'yes', 'false' and 1 (and so read "false" as true of a bias flag).
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN_CONFIG, "tie_word_embeddings": value}))
    with pytest.raises(ScenarioError) as exc:
        load_model(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg and "tie_word_embeddings" in msg
    assert "expected true or false" in msg


# -- issue 31: models capsim cannot price are refused, naming the field -----------------


@pytest.mark.parametrize("edit, path, message", [
    # A state-space model has no attention and no KV cache: it was priced as a Llama.
    ({"model_type": "mamba"}, "model_type",
     "model_type 'mamba' is not a model capsim prices: it models decoder-only transformers "
     "with attention and gated MLPs of model_type llama, mistral, qwen2, qwen3 (dense) and "
     "mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, llama4, llama4_text "
     "(experts or MLA)"),
    ({"model_type": None}, "model_type",
     "no model_type (transformers' AutoConfig needs one) is not a model capsim prices"),
    # A Mixtral without experts loaded as dense.
    ({"model_type": "mixtral", "num_local_experts": 0, "num_experts_per_tok": 2},
     "num_local_experts", "must be >= 1 for model_type mixtral, a mixture-of-experts family "
     "(got 0; 0 experts would price it as a dense model)"),
    # vLLM's Mxfp4Config quantizes fused-MoE layers only (formats.yaml mxfp4 groups).
    ({"model_type": "llama", "quantization_config": {"quant_method": "mxfp4"}},
     "quantization_config.quant_method",
     "quant_method mxfp4 stores only a mixture-of-experts model's experts quantized (vLLM's "
     "mxfp4 method leaves linear layers 16-bit), and this llama config has none"),
    # 1e15 positions loaded, then the scenario was refused at engine.gpu_memory_utilization
    # for 238,418,594 GiB of model weights per GPU: a message about memory, not the field.
    ({"max_position_embeddings": 10**15}, "max_position_embeddings",
     "must be <= 2147483647 (got 1000000000000000)"),
])
def test_a_config_capsim_cannot_price_is_refused_naming_the_field(tmp_path, edit, path,
                                                                  message):
    config = {**QWEN_CONFIG, **edit}
    config = {k: v for k, v in config.items() if v is not None}
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    with pytest.raises(ScenarioError) as err:
        load_model(str(file))
    assert (err.value.file, err.value.path) == (str(file), path)
    assert err.value.message.startswith(message)


def test_an_odd_head_dim_cannot_be_rotated():
    """hidden_size 4000 over 32 heads is head_dim 125 (no remainder: 4,100 / 32 is refused
    by test_cli's remainder test): RoPE rotates each head's two halves (transformers'
    rotate_half at head_dim // 2 against ceil(head_dim / 2) frequencies), so 125 cannot
    be a RoPE model's head; 128 given explicitly is fine."""
    base = {**QWEN_CONFIG, "model_type": "llama", "hidden_size": 4000,
            "num_attention_heads": 32, "num_key_value_heads": 8}
    with pytest.raises(ScenarioError, match=r"head_dim 125 \(hidden_size 4000 / "
                                            r"num_attention_heads 32\) is odd: rotary"):
        model_from_hf_config(base, name="odd")
    assert model_from_hf_config({**base, "head_dim": 128}, name="even").head_dim == 128


def test_a_preset_file_names_a_model_type_capsim_prices(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nmodel_type: mamba\nhidden_size: 64\nintermediate_size: 128\n"
                    "num_hidden_layers: 2\nnum_attention_heads: 4\nnum_key_value_heads: 4\n"
                    "vocab_size: 10\nmax_position_embeddings: 64\n")
    with pytest.raises(ScenarioError, match="model_type 'mamba' is not a model capsim prices"):
        load_model(str(path))
    assert all(load_model(n).model_type in ("", *MODEL_TYPES) for n in model_names())
