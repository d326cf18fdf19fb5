"""Mixture-of-experts, MLA and windowed-attention shapes: parameter counts against the
publishers' figures, KV bytes per token, and HF config.json readers per model_type.

Published figures: DeepSeek-V3 "671B total, 36.6B activated including 0.9B for the
output head" (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md); gpt-oss "116.83B / 5.13B
active" and "20.91B / 3.61B" (OpenAI gpt-oss model card, Table 1); Mixtral-8x7B "46.7B
total, 12.9B active" (Jiang et al. 2024, "Mixtral of experts"); Qwen3-30B-A3B "30.5B /
3.3B activated" and Qwen3-235B-A22B "235B / 22B" (Qwen model cards); Llama-4-Scout
"109B total / 17B active" (Meta model card, vision encoder included); Llama-3.1-405B
405B (Meta model card).

``params_active`` leaves out the embedding table (a lookup), as DeepSeek and OpenAI
count; Mistral AI, Qwen and Meta count it, so their figures are compared with
``params_active + embedding_params``.
"""

from __future__ import annotations

import json

import pytest

from capsim.common.errors import ScenarioError
from capsim.profiles.models import load_model


@pytest.mark.parametrize("name, total, rel", [
    ("deepseek-v3", 671e9, 0.002),
    ("gpt-oss-120b", 116.83e9, 0.001),
    ("gpt-oss-20b", 20.91e9, 0.001),
    ("mixtral-8x7b", 46.7e9, 0.002),
    ("qwen3-30b-a3b", 30.5e9, 0.002),
    ("qwen3-235b-a22b", 235e9, 0.002),
    ("llama-3.1-405b", 405e9, 0.005),
    ("llama-4-scout", 109e9, 0.02),       # the text model; the card's total has the vision encoder
])
def test_total_parameters_match_the_published_count(name, total, rel):
    assert load_model(name).params_total == pytest.approx(total, rel=rel)


@pytest.mark.parametrize("name, active, with_embedding, rel", [
    ("deepseek-v3", 36.6e9, False, 0.002),
    ("gpt-oss-120b", 5.13e9, False, 0.002),
    ("gpt-oss-20b", 3.61e9, False, 0.002),
    ("mixtral-8x7b", 12.9e9, True, 0.002),
    ("qwen3-30b-a3b", 3.3e9, True, 0.02),     # the card rounds to 0.1B: 3.35B here
    ("qwen3-235b-a22b", 22e9, True, 0.01),
    ("llama-4-scout", 17e9, True, 0.02),
])
def test_active_parameters_match_the_published_count(name, active, with_embedding, rel):
    m = load_model(name)
    got = m.params_active + (m.embedding_params if with_embedding else 0)
    assert got == pytest.approx(active, rel=rel)


def test_deepseek_v3_mla_kv_is_70272_bytes_per_token():
    """Issue 15: layers × (kv_lora_rank + qk_rope_head_dim) × bytes = 61 × 576 × 2."""
    m = load_model("deepseek-v3")
    assert m.is_mla and m.kv_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70_272
    assert m.kv_bytes_per_token(1) == 35_136
    assert m.paged_kv_bytes_per_token(2) == 70_272


def test_deepseek_v3_layers():
    """first_k_dense_replace 3: 3 dense layers of 18,432, 58 MoE layers (256 + 1 shared)."""
    m = load_model("deepseek-v3")
    assert (m.dense_layers, m.moe_layers) == (3, 58)
    assert m.expert_params == 3 * 7168 * 2048
    assert m.router_params == 7168 * 256 + 256
    assert m.num_nextn_predict_layers == 1


def test_gpt_oss_sliding_window_layers_do_not_grow_the_paged_cache():
    """gpt-oss-120b: 36 layers × 2 × 8 KV heads × 64 × 2 bytes = 73,728 bytes per token;
    18 of them slide over 128 tokens, so vLLM's hybrid manager keeps 36,864 per token
    growing with the sequence."""
    m = load_model("gpt-oss-120b")
    assert m.kv_bytes_per_token(2) == 36 * 2 * 8 * 64 * 2 == 73_728
    assert (m.sliding_window, m.sliding_window_layers) == (128, 18)
    assert m.paged_kv_bytes_per_token(2) == 18 * 2 * 8 * 64 * 2 == 36_864
    assert m.expert_weight_format == "mxfp4"


def test_llama4_chunked_layers_are_allocated_like_full_attention():
    """vLLM turns its hybrid manager off for chunked local attention by default."""
    m = load_model("llama-4-scout")
    assert (m.attention_chunk_size, m.chunked_attention_layers) == (8192, 36)
    assert m.paged_kv_bytes_per_token(2) == m.kv_bytes_per_token(2) == 48 * 2 * 8 * 128 * 2


def test_dense_shapes_are_unchanged():
    m = load_model("llama-3.1-8b")
    assert not (m.is_moe or m.is_mla) and m.window_layers == 0
    assert m.params_total == 8_030_261_248
    assert m.paged_kv_bytes_per_token(2) == m.kv_bytes_per_token(2) == 131_072


# -- HF config.json readers --------------------------------------------------------------

# Key subsets of the public config.json files (same values as the presets' sources).
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "topk_method": "noaux_tc", "num_nextn_predict_layers": 1, "vocab_size": 129280,
    "max_position_embeddings": 163840, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 32,
    "num_experts_per_tok": 4, "experts_per_token": 4, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "attention_bias": True,
    "vocab_size": 201088, "max_position_embeddings": 131072, "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "mxfp4",
                            "modules_to_not_convert": ["model.layers.*.self_attn",
                                                       "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"]},
}
QWEN3_30B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
    "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
LLAMA4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "num_local_experts": 16,
        "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "attention_chunk_size": 8192, "vocab_size": 202048,
        "max_position_embeddings": 10485760, "torch_dtype": "bfloat16",
        "no_rope_layers": [1, 1, 1, 0] * 12},
}


@pytest.mark.parametrize("config, preset", [
    (DEEPSEEK_V3, "deepseek-v3"), (GPT_OSS_20B, "gpt-oss-20b"), (QWEN3_30B, "qwen3-30b-a3b"),
    (MIXTRAL, "mixtral-8x7b"), (LLAMA4_SCOUT, "llama-4-scout"),
])
def test_hf_config_reads_to_the_preset(tmp_path, config, preset):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    got, want = load_model(str(path)), load_model(preset)
    assert got.params_total == want.params_total
    assert got.params_active == want.params_active
    assert got.kv_bytes_per_token(2) == want.kv_bytes_per_token(2)
    assert got.paged_kv_bytes_per_token(2) == want.paged_kv_bytes_per_token(2)
    assert (got.moe_layers, got.window_layers) == (want.moe_layers, want.window_layers)


def test_qwen2_moe_shared_expert_and_sparse_step(tmp_path):
    """Qwen1.5-MoE-A2.7B's keys: a gated shared expert of 5,632; decoder_sparse_step 2
    with mlp_only_layers [0] leaves MoE on layers 1, 3, 5, ... (12 of 24)."""
    config = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
              "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
              "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
              "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 2,
              "mlp_only_layers": [0], "vocab_size": 151936, "max_position_embeddings": 8192}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    m = load_model(str(path))
    assert (m.moe_layers, m.dense_layers) == (12, 12)
    assert m.shared_expert_params == 3 * 2048 * 5632 + 2048
    assert m.attention_bias


def test_bad_expert_count_names_the_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MIXTRAL, "num_experts_per_tok": "two"}))
    with pytest.raises(ScenarioError) as err:
        load_model(str(path))
    assert err.value.path == "num_experts_per_tok" and err.value.file == str(path)


def test_top_k_above_the_experts_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MIXTRAL, "num_experts_per_tok": 9}))
    with pytest.raises(ScenarioError, match="num_experts_per_tok"):
        load_model(str(path))
