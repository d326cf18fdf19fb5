"""Transformer shapes: parameter counts, weight and KV bytes, FLOPs per token.

A :class:`ModelShape` holds the Hugging Face ``config.json`` fields that
decide cost (same names as HF), for dense decoder-only models with
grouped-query attention and a gated (SwiGLU) MLP: the Llama, Mistral and
Qwen2 families. Presets live in ``capsim/profiles/data/models/<name>.yaml``; any HF
``config.json`` of the same family loads too.

Public API:
    ModelShape
    load_model(name_or_path) -> ModelShape
    model_names() -> list[str]
    model_from_hf_config(config, name=..., source=..., file=...) -> ModelShape
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import read_yaml_mapping, scenario_error_from_validation
from capsim.common.schema import Int, StrictModel

_PACKAGE_DIR = ("data", "models")

#: Bytes per element of each HF ``torch_dtype`` value.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

#: HF ``model_type`` values whose attention projections carry a q/k/v bias
#: although their config.json has no ``attention_bias`` key (Qwen2 modeling code).
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2"})

#: Keys whose presence with a value > 1 marks a mixture-of-experts config.
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


class ModelShape(StrictModel):
    """Shape of a dense decoder-only transformer (HF ``config.json`` names).

    ``head_dim`` defaults to ``hidden_size // num_attention_heads`` when the
    config does not give it. ``attention_bias`` means the q/k/v projections
    have a bias (Qwen2); the output projection and the MLP never do here.
    All counts are in parameters (elements), not bytes.
    """

    name: str = Field(min_length=1)
    source: str = ""
    hidden_size: Int = Field(gt=0)
    intermediate_size: Int = Field(gt=0)
    num_hidden_layers: Int = Field(gt=0)
    num_attention_heads: Int = Field(gt=0)
    num_key_value_heads: Int = Field(gt=0)
    head_dim: Int = Field(gt=0)
    vocab_size: Int = Field(gt=0)
    max_position_embeddings: Int = Field(gt=0)
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    torch_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    notes: str = ""

    @model_validator(mode="before")
    @classmethod
    def _default_head_dim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("head_dim") is None:
            hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
            if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
                data = {**data, "head_dim": hidden // heads}
        return data

    @model_validator(mode="after")
    def _check_gqa(self) -> "ModelShape":
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        return self

    # -- widths -------------------------------------------------------------

    @property
    def q_size(self) -> int:
        """Width of the query projection output: heads × head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the key (or value) projection output: kv_heads × head_dim."""
        return self.num_key_value_heads * self.head_dim

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of the checkpoint's ``torch_dtype``."""
        return DTYPE_BYTES[self.torch_dtype]

    # -- parameter counts (per layer unless said otherwise) -------------------

    @property
    def qkv_params(self) -> int:
        """Fused q/k/v projection of one layer: h × (q + 2·kv) (+ q + 2·kv bias)."""
        out = self.q_size + 2 * self.kv_size
        return self.hidden_size * out + (out if self.attention_bias else 0)

    @property
    def o_params(self) -> int:
        """Attention output projection of one layer: q_size × h (no bias)."""
        return self.q_size * self.hidden_size

    @property
    def mlp_params(self) -> int:
        """Gated MLP of one layer (gate, up, down): 3 × h × ffn (no bias)."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def norm_params(self) -> int:
        """RMSNorm weights of one layer (input + post-attention): 2 × h."""
        return 2 * self.hidden_size

    @property
    def layer_params(self) -> int:
        """All parameters of one decoder layer."""
        return self.qkv_params + self.o_params + self.mlp_params + self.norm_params

    @property
    def embedding_params(self) -> int:
        """Input token-embedding table: vocab × h."""
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Output projection to the vocabulary: vocab × h.

        It runs (and costs FLOPs) even when ``tie_word_embeddings`` shares its
        storage with the embedding table; ``params_total`` counts it once then.
        """
        return self.vocab_size * self.hidden_size

    @property
    def params_total(self) -> int:
        """Every stored parameter: embedding + LM head (once if tied) + layers + final norm.

        Matches the published sizes: Llama-3.1-8B 8.03e9, Llama-2-7B 6.74e9,
        Llama-3.1-70B 70.6e9 (HF model cards).
        """
        lm_head = 0 if self.tie_word_embeddings else self.lm_head_params
        return (
            self.embedding_params
            + lm_head
            + self.num_hidden_layers * self.layer_params
            + self.hidden_size
        )

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token: layer projections + LM head.

        Excludes the embedding table (a lookup) and norm weights (elementwise);
        this is Kaplan et al.'s non-embedding N plus the de-embedding matmul.
        """
        per_layer = self.qkv_params + self.o_params + self.mlp_params
        return self.num_hidden_layers * per_layer + self.lm_head_params

    # -- bytes and FLOPs ---------------------------------------------------

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of all stored weights at ``dtype_bytes`` per parameter."""
        return self.params_total * dtype_bytes

    def kv_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token occupies across all layers.

        ``2 (K and V) × layers × kv_heads × head_dim × bytes`` — the derivation
        in the PagedAttention literature (Kwon et al. 2023, §2) and seed 001.
        Llama-2-7B fp16: 524,288 (512 KiB); Llama-3-70B: 327,680 (320 KiB).
        """
        return 2 * self.num_hidden_layers * self.kv_size * kv_dtype_bytes

    def flops_per_token(self, context: int = 0) -> float:
        """Forward FLOPs for one token that attends over ``context`` tokens.

        ``2 × matmul_params + 4 × layers × heads × head_dim × context``:
        one multiply-add (2 FLOPs) per weight (Kaplan et al. 2020, "Scaling
        Laws", §2.1), plus QKᵀ and AV, 2 FLOPs each per (query, key, channel)
        (Chowdhery et al. 2022, PaLM, Appendix B, forward third of
        6N + 12·L·H·Q·T). Norms, RoPE and softmax are ignored.
        """
        attention = 4 * self.num_hidden_layers * self.q_size * context
        return 2.0 * self.matmul_params + attention


# -- loading -------------------------------------------------------------------


def _packaged_dir() -> Any:
    return resources.files("capsim.profiles").joinpath(*_PACKAGE_DIR)


def model_names() -> list[str]:
    """Names of the packaged presets, sorted (``llama-3.1-8b``, ...)."""
    return sorted(
        entry.name[: -len(".yaml")]
        for entry in _packaged_dir().iterdir()
        if entry.name.endswith(".yaml")
    )


def _validate(data: dict[str, Any], file: str | None) -> ModelShape:
    try:
        return ModelShape.model_validate(data)
    except ValidationError as exc:
        raise scenario_error_from_validation(exc, file) from None


def _default_tie(model_type: str | None) -> bool:
    # transformers' PretrainedConfig defaults tie_word_embeddings to True;
    # LlamaConfig, MistralConfig and Qwen2Config override it to False.
    return model_type not in {"llama", "mistral", "qwen2"}


def model_from_hf_config(
    config: dict[str, Any], *, name: str, source: str = "", file: str | None = None
) -> ModelShape:
    """Build a ModelShape from a Hugging Face ``config.json`` dict.

    Unknown keys are ignored (config.json has dozens). A multimodal config
    with the language model under ``text_config`` is unwrapped.

    Raises:
        ScenarioError: mixture-of-experts config (not supported), or a
            missing / invalid field (names ``file`` and the field).
    """
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]
    for key in _MOE_KEYS:
        if isinstance(config.get(key), int) and config[key] > 1:
            raise ScenarioError(
                f"mixture-of-experts models are not supported ({key}={config[key]})",
                file=file,
                path=key,
            )
    model_type = config.get("model_type")
    fields = (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "vocab_size", "max_position_embeddings", "head_dim",
    )
    data: dict[str, Any] = {k: config[k] for k in fields if config.get(k) is not None}
    data["name"] = name
    data["source"] = source
    data["num_key_value_heads"] = config.get("num_key_value_heads") or config.get(
        "num_attention_heads"
    )
    data["tie_word_embeddings"] = config.get("tie_word_embeddings", _default_tie(model_type))
    data["attention_bias"] = bool(
        config.get("attention_bias", model_type in _QKV_BIAS_MODEL_TYPES)
    )
    dtype = config.get("torch_dtype") or config.get("dtype")
    if dtype in DTYPE_BYTES:
        data["torch_dtype"] = dtype
    return _validate(data, file)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"cannot read file: {exc.strerror or exc}", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"malformed JSON: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a JSON object at the top level", file=str(path))
    return data


def _hf_name(config: dict[str, Any], path: Path) -> str:
    name_or_path = config.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/"):
        return name_or_path.rstrip("/").rsplit("/", 1)[-1]
    return path.parent.resolve().name or path.stem


def _load_path(path: Path) -> ModelShape:
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ScenarioError("directory has no config.json", file=str(path.parent))
    if path.suffix in (".yaml", ".yml"):
        return _validate(read_yaml_mapping(path), str(path))
    config = _read_json(path)
    return model_from_hf_config(
        config, name=_hf_name(config, path), source=str(path), file=str(path)
    )


def load_model(name_or_path: str) -> ModelShape:
    """Load a model shape: a preset name, a HF ``config.json``, or a directory holding one.

    Args:
        name_or_path: preset (``llama-3.1-8b``), a path to ``config.json`` (or
            any ``.json`` in HF format), a directory with ``config.json``, or a
            preset-format ``.yaml`` file.

    Raises:
        ScenarioError: unknown name (lists the presets), unreadable or
            malformed file, or an invalid field (names the file and field).
    """
    text = str(name_or_path)
    names = model_names()
    if text in names:
        entry = _packaged_dir().joinpath(f"{text}.yaml")
        with resources.as_file(entry) as path:
            return _validate(read_yaml_mapping(Path(path)), str(path))
    path = Path(text)
    if path.suffix in (".json", ".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ScenarioError("file not found", file=text)
        return _load_path(path)
    raise ScenarioError(
        f"unknown model {text!r}; valid presets: {', '.join(names)} "
        "(or a path to a Hugging Face config.json)"
    )


def list_models() -> list[ModelShape]:
    """Every packaged preset, sorted by name."""
    return [load_model(name) for name in model_names()]
