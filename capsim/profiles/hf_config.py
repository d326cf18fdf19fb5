"""Hugging Face ``config.json`` → the fields of a :class:`~capsim.profiles.models.ModelShape`.

One reader per family of ``model_type``, each following the family's modeling code in
``transformers`` (and vLLM's ``vllm/model_executor/models/<family>.py``, which reads the
same keys):

- dense: ``llama``, ``mistral``, ``qwen2``, ``qwen3``;
- ``mixtral``: ``num_local_experts`` experts of ``intermediate_size`` on every layer;
- ``qwen2_moe`` / ``qwen3_moe``: ``num_experts`` of ``moe_intermediate_size``, a shared
  expert of ``shared_expert_intermediate_size`` with a sigmoid gate (Qwen2-MoE), MoE
  on layers ``(i + 1) % decoder_sparse_step == 0`` not in ``mlp_only_layers``;
- ``deepseek_v2`` / ``deepseek_v3``: MLA (``q_lora_rank``, ``kv_lora_rank``,
  ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``), ``n_routed_experts`` +
  ``n_shared_experts`` × ``moe_intermediate_size``, dense below
  ``first_k_dense_replace`` and off the ``moe_layer_freq`` grid, MTP layers
  (``num_nextn_predict_layers``) recorded;
- ``gpt_oss``: ``num_local_experts`` with biases, a router bias, attention sinks,
  ``layer_types`` alternating ``sliding_attention`` (``sliding_window``) and
  ``full_attention``, MXFP4 experts (below);
- ``llama4`` / ``llama4_text``: ``num_local_experts`` + one shared expert of
  ``intermediate_size``, dense layers of ``intermediate_size_mlp`` off the
  ``interleave_moe_layer_step`` grid, chunked local attention
  (``attention_chunk_size``) on the RoPE layers (``no_rope_layers[i] == 1``; the NoPE
  layers attend globally).

Any other ``model_type`` (``mamba``, ``gemma``, ``phi3``, …), or none, is refused naming
it and these: its layers are not the gated-MLP transformer capsim prices (a state-space
model has no attention and no KV cache), and pricing it as a Llama would be wrong without
a word. An MoE family's expert count must be at least 1 (``num_local_experts: 0`` would
price a Mixtral as dense).

Any family: a ``quantization_config`` whose ``quant_method`` capsim has a format for
(:data:`QUANT_METHODS`) becomes ``weight_formats``, the format of each tensor group
(attention, dense MLP / shared experts, routed experts) the checkpoint stores quantized:
every group but those its ``modules_to_not_convert`` (``ignore``, ``ignored_layers``,
``exclude_modules``) names — gpt-oss: ``model.layers.*.self_attn`` stays bf16, the experts
are MXFP4. Another ``quant_method`` (compressed-tensors, bitsandbytes, …) is not read:
``engine.quantization`` says what the weights are, and loading says so with a warning on
the ``capsim`` logger naming the file and the field.

Public API:
    shape_fields(config, file=None) -> dict
    MOE_MODEL_TYPES, DENSE_MODEL_TYPES, MODEL_TYPES, QUANT_METHODS
    unknown_model_type(model_type) -> str | None
"""

from __future__ import annotations

import logging

from fnmatch import fnmatchcase
from typing import Any

from capsim.common.errors import ScenarioError
from capsim.profiles.quantization import load_quant_format

log = logging.getLogger(__name__)

#: Dense families read as they always were (Llama-like shapes).
DENSE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")

#: Families with experts or MLA that capsim reads (this module's readers).
MOE_MODEL_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3",
                   "gpt_oss", "llama4", "llama4_text")

#: Every ``model_type`` capsim prices.
MODEL_TYPES = DENSE_MODEL_TYPES + MOE_MODEL_TYPES

#: Keys whose presence with a value > 1 marks a mixture-of-experts config.
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")

#: ``model_type`` values whose attention projections carry a q/k/v bias although their
#: config.json has no ``attention_bias`` key (Qwen2 and Qwen2-MoE modeling code).
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})

_DTYPES = ("bfloat16", "float16", "float32")

#: ``quantization_config.quant_method`` → capsim's format (profiles/data/quantization):
#: vLLM's method of the same name loads it (fp8 with ``weight_block_size`` → fp8_block).
QUANT_METHODS = {"mxfp4": "mxfp4", "fp8": "fp8", "awq": "awq", "gptq": "gptq"}

#: Keys of a quantization_config listing modules left unquantized (transformers' HF
#: quantizers; vLLM's fp8 ``ignored_layers``, compressed-tensors ``ignore``, ModelOpt
#: ``exclude_modules``).
_NOT_CONVERTED_KEYS = ("modules_to_not_convert", "ignore", "ignored_layers", "exclude_modules")

#: A module of each tensor group, named as in the HF checkpoints (Llama / Mixtral /
#: Qwen-MoE / DeepSeek / gpt-oss modeling code): a not-converted pattern that matches it
#: (or a prefix of it) keeps the group 16-bit.
_GROUP_MODULES = {
    "attention": ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"),
    "mlp": ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.shared_experts.gate_proj",
            "model.layers.0.mlp.shared_expert.gate_proj"),
    "experts": ("model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.mlp.experts.gate_up_proj",
                "model.layers.0.block_sparse_moe.experts.0.w1"),
}

_BASE_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "vocab_size", "max_position_embeddings", "head_dim")


def _default_tie(model_type: str | None) -> bool:
    # transformers' PretrainedConfig defaults tie_word_embeddings to True; the Llama,
    # Mistral, Qwen2/3 (and their MoE), DeepSeek, gpt-oss and Llama 4 configs set False.
    return model_type not in {"llama", "mistral", "qwen2", "qwen3", *MOE_MODEL_TYPES}


def _int(config: dict[str, Any], key: str, file: str | None, default: int | None = None) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ScenarioError(f"expected an integer, got {value!r}", file=file, path=key)
    return value


def _is_moe(config: dict[str, Any]) -> bool:
    return any(isinstance(config.get(k), int) and config[k] > 1 for k in _MOE_KEYS)


def shape_fields(config: dict[str, Any], file: str | None = None) -> dict[str, Any]:
    """The ModelShape fields of a HF ``config.json`` dict (without ``name`` / ``source``).

    A multimodal config with the language model under ``text_config`` is unwrapped.
    Unknown keys are ignored.

    Raises:
        ScenarioError: experts or MLA keys in a ``model_type`` capsim has no reader for
            (names it and lists the supported ones), or a malformed field (names it).
    """
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]
    model_type = config.get("model_type")
    problem = unknown_model_type(model_type)
    if problem is not None:
        raise ScenarioError(problem, file=file, path="model_type")
    special = _is_moe(config) or config.get("kv_lora_rank")
    if special and model_type not in MOE_MODEL_TYPES:
        raise ScenarioError(
            f"mixture-of-experts / MLA config.json of model_type {model_type!r} is not "
            f"supported; supported model types: {', '.join(MOE_MODEL_TYPES)} (and the dense "
            f"{', '.join(DENSE_MODEL_TYPES)})", file=file, path="model_type")
    window = config.get("sliding_window")
    if isinstance(window, (int, float)) and not isinstance(window, bool) and window < 0:
        # read by the families with sliding layers, ignored by the rest: refused alike
        raise ScenarioError(f"must be a positive number of tokens or null (got {window:g})",
                            file=file, path="sliding_window")
    data: dict[str, Any] = {k: config[k] for k in _BASE_FIELDS if config.get(k) is not None}
    # transformers' rule: absent (None) means one KV head per query head; 0 is refused
    # by the shape (num_key_value_heads > 0), not read as absent
    kv_heads = config.get("num_key_value_heads")
    data["num_key_value_heads"] = config.get("num_attention_heads") if kv_heads is None \
        else kv_heads
    data["tie_word_embeddings"] = config.get("tie_word_embeddings", _default_tie(model_type))
    data["attention_bias"] = bool(config.get("attention_bias",
                                             model_type in _QKV_BIAS_MODEL_TYPES))
    dtype = config.get("torch_dtype") or config.get("dtype")
    if dtype in _DTYPES:
        data["torch_dtype"] = dtype
    if model_type in MOE_MODEL_TYPES:
        data["model_type"] = model_type
        _READERS[model_type](config, data, file)
    formats = checkpoint_formats(config.get("quantization_config"), moe=_is_moe(config))
    _warn_unread_method(config.get("quantization_config"), file)
    groups = _method_groups(config)
    if groups and not _is_moe(config) and not {"attention", "mlp"} & set(groups):
        raise ScenarioError(_dense_quant_text(config), file=file,
                            path="quantization_config.quant_method")
    moe_layers = data.get("num_moe_layers", data.get("num_hidden_layers", 0))
    if "num_experts" in data and moe_layers == data.get("num_hidden_layers") \
            and not data.get("shared_expert_intermediate_size"):
        formats.pop("mlp", None)                     # every layer MoE, no shared expert
    if formats:
        data["weight_formats"] = formats
    return data


def _warn_unread_method(quant: Any, file: str | None) -> None:
    """A ``quant_method`` capsim has no format for is priced as ``engine.quantization``
    says (16-bit when unset): say so rather than price a 4-bit checkpoint as bf16 in
    silence."""
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if method is not None and str(method).lower() not in QUANT_METHODS:
        log.warning("%s: quantization_config.quant_method %r is not read (capsim reads %s): "
                    "the weights are priced as engine.quantization says, 16-bit when unset",
                    file or "config.json", method, ", ".join(QUANT_METHODS))


def unknown_model_type(model_type: Any) -> str | None:
    """Why ``model_type`` is not one capsim prices (None when it is)."""
    if model_type in MODEL_TYPES:
        return None
    what = "no model_type (transformers' AutoConfig needs one)" if model_type is None \
        else f"model_type {model_type!r}"
    return (f"{what} is not a model capsim prices: it models decoder-only transformers "
            f"with attention and gated MLPs of model_type {', '.join(DENSE_MODEL_TYPES)} "
            f"(dense) and {', '.join(MOE_MODEL_TYPES)} (experts or MLA)")


def _method_groups(config: dict[str, Any]) -> tuple[str, ...]:
    """The tensor groups the config's ``quant_method`` stores quantized (() without one
    capsim has a format for)."""
    quant = config.get("quantization_config")
    fmt = QUANT_METHODS.get(str(quant.get("quant_method", "")).lower()) \
        if isinstance(quant, dict) else None
    return load_quant_format(fmt).groups if fmt is not None else ()


def _dense_quant_text(config: dict[str, Any]) -> str:
    method = config["quantization_config"].get("quant_method")
    return (f"quant_method {method} stores only a mixture-of-experts model's "
            f"{' and '.join(_method_groups(config))} quantized (vLLM's {method} method leaves "
            f"linear layers 16-bit), and this {config.get('model_type')} config has none: "
            "capsim cannot price its weights; give a checkpoint in a format vLLM runs on "
            f"dense layers ({', '.join(m for m in QUANT_METHODS if m != method)})")


def checkpoint_formats(quant: Any, moe: bool = True) -> dict[str, str]:
    """``weight_formats`` of a ``quantization_config`` (module docstring); {} when there is
    none or its ``quant_method`` is not in :data:`QUANT_METHODS`. A pattern keeps a group
    16-bit when it matches the group's module in layer 0 (:data:`_GROUP_MODULES`) as
    transformers' ``modules_to_not_convert`` match: a substring of the module's name, or
    with ``*`` wildcards the module or a prefix of it. A pattern naming only some layers
    applies to all of them here."""
    if not isinstance(quant, dict):
        return {}
    fmt = QUANT_METHODS.get(str(quant.get("quant_method", "")).lower())
    if fmt is None:
        return {}
    if fmt == "fp8" and quant.get("weight_block_size"):
        fmt = "fp8_block"
    skip = [str(p) for key in _NOT_CONVERTED_KEYS for p in (quant.get(key) or ())]

    def kept(module: str) -> bool:
        return any(fnmatchcase(module, p) or fnmatchcase(module, p + ".*")
                   or ("*" not in p and p in module)
                   for p in skip)

    groups = ("attention", "mlp", "experts") if moe else ("attention", "mlp")
    stored = load_quant_format(fmt).groups          # MXFP4: the experts only
    return {g: fmt for g in groups
            if g in stored and not any(kept(m) for m in _GROUP_MODULES[g])}


def _experts(config: dict[str, Any], key: str, file: str | None) -> int:
    """The routed experts of an MoE family: at least 1 (0 would price it as dense)."""
    n = _int(config, key, file)
    if n < 1:
        raise ScenarioError(f"must be >= 1 for model_type {config.get('model_type')}, a "
                            f"mixture-of-experts family (got {n}; 0 experts would price it as "
                            "a dense model)", file=file, path=key)
    return n


def _mixtral(config: dict[str, Any], data: dict[str, Any], file: str | None) -> None:
    data["num_experts"] = _experts(config, "num_local_experts", file)
    data["num_experts_per_tok"] = _int(config, "num_experts_per_tok", file)
    data["moe_intermediate_size"] = _int(config, "intermediate_size", file)


def _qwen_moe(config: dict[str, Any], data: dict[str, Any], file: str | None) -> None:
    layers = _int(config, "num_hidden_layers", file)
    data["num_experts"] = _experts(config, "num_experts", file)
    data["num_experts_per_tok"] = _int(config, "num_experts_per_tok", file)
    data["moe_intermediate_size"] = _int(config, "moe_intermediate_size", file)
    shared = config.get("shared_expert_intermediate_size") or 0
    data["shared_expert_intermediate_size"] = shared
    data["shared_expert_gate"] = bool(shared)            # Qwen2MoeSparseMoeBlock.shared_expert_gate
    step = _int(config, "decoder_sparse_step", file, 1)
    skip = set(config.get("mlp_only_layers") or ())
    data["num_moe_layers"] = sum(1 for i in range(layers)
                                 if i not in skip and step > 0 and (i + 1) % step == 0)


def _deepseek(config: dict[str, Any], data: dict[str, Any], file: str | None) -> None:
    layers = _int(config, "num_hidden_layers", file)
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        data[key] = _int(config, key, file)
    if data["kv_lora_rank"] < 1:
        raise ScenarioError(f"must be >= 1 for model_type {config.get('model_type')}, whose "
                            "attention is multi-head latent attention (the latent KV width; got "
                            f"{data['kv_lora_rank']}, which would price it as multi-head "
                            "attention)", file=file, path="kv_lora_rank")
    if config.get("q_lora_rank") is not None:
        data["q_lora_rank"] = _int(config, "q_lora_rank", file)
    experts = config.get("n_routed_experts") or 0
    if experts:
        data["num_experts"] = experts
        data["num_experts_per_tok"] = _int(config, "num_experts_per_tok", file)
        moe_i = _int(config, "moe_intermediate_size", file)
        data["moe_intermediate_size"] = moe_i
        data["shared_expert_intermediate_size"] = (config.get("n_shared_experts") or 0) * moe_i
        first = _int(config, "first_k_dense_replace", file, 0)
        freq = _int(config, "moe_layer_freq", file, 1)
        data["num_moe_layers"] = sum(1 for i in range(layers) if i >= first and i % freq == 0)
        # DeepSeek-V3's noaux_tc router keeps an e_score_correction_bias of E values.
        data["router_bias"] = config.get("topk_method") == "noaux_tc"
    data["num_nextn_predict_layers"] = config.get("num_nextn_predict_layers") or 0
    data["num_key_value_heads"] = data.get("num_attention_heads", 1)


def _gpt_oss(config: dict[str, Any], data: dict[str, Any], file: str | None) -> None:
    data["num_experts"] = _experts(config, "num_local_experts", file)
    data["num_experts_per_tok"] = config.get("num_experts_per_tok") or _int(
        config, "experts_per_token", file)
    data["moe_intermediate_size"] = _int(config, "intermediate_size", file)
    data["expert_bias"] = data["router_bias"] = data["attention_sinks"] = True
    types = config.get("layer_types") or []
    sliding = sum(1 for t in types if t == "sliding_attention")
    if sliding:
        data["sliding_window"] = _int(config, "sliding_window", file)
        data["sliding_window_layers"] = sliding


def _llama4(config: dict[str, Any], data: dict[str, Any], file: str | None) -> None:
    layers = _int(config, "num_hidden_layers", file)
    data["num_experts"] = _experts(config, "num_local_experts", file)
    data["num_experts_per_tok"] = _int(config, "num_experts_per_tok", file)
    expert = _int(config, "intermediate_size", file)
    data["moe_intermediate_size"] = data["shared_expert_intermediate_size"] = expert
    data["intermediate_size"] = _int(config, "intermediate_size_mlp", file, expert)
    moe_layers = config.get("moe_layers")
    if moe_layers is None:
        step = _int(config, "interleave_moe_layer_step", file, 1)
        moe_layers = [i for i in range(layers) if (i + 1) % step == 0]
    data["num_moe_layers"] = len(moe_layers)
    chunk = config.get("attention_chunk_size")
    if chunk:
        # no_rope_layers[i] == 1: layer i uses RoPE and chunked local attention (vLLM
        # llama4.py); transformers' default: every no_rope_layer_interval-th layer is NoPE.
        no_rope = config.get("no_rope_layers") or [
            int((i + 1) % _int(config, "no_rope_layer_interval", file, 4) != 0)
            for i in range(layers)]
        data["attention_chunk_size"] = _int(config, "attention_chunk_size", file)
        data["chunked_attention_layers"] = sum(1 for v in no_rope if v)


_READERS = {"mixtral": _mixtral, "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe,
            "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "gpt_oss": _gpt_oss,
            "llama4": _llama4, "llama4_text": _llama4}
