"""Transformer shapes: parameter counts, weight and KV bytes, FLOPs per token.

A :class:`ModelShape` holds the Hugging Face ``config.json`` fields that
decide cost (same names as HF) of a decoder-only model with a gated (SwiGLU)
MLP: dense with grouped-query attention (Llama, Mistral, Qwen2), and the
mixture-of-experts and attention variants of 2025 models (:mod:`capsim.profiles.hf_config`
reads their configs): routed and shared experts, dense-first layers, multi-head
latent attention (DeepSeek MLA), sliding-window and chunked attention layers,
attention sinks. Every MoE / MLA / window field defaults to "absent", so a dense
shape computes exactly what it did before them. Presets live in
``capsim/profiles/data/models/<name>.yaml``; any HF ``config.json`` of a known
``model_type`` loads too.

Public API:
    ModelShape
    load_model(name_or_path) -> ModelShape
    model_names() -> list[str]
    model_from_hf_config(config, name=..., source=..., file=...) -> ModelShape
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from capsim.common.errors import ScenarioError, read_text
from capsim.profiles.hf_config import shape_fields, unknown_model_type
from capsim.profiles.files import (packaged_file, packaged_names, read_yaml_mapping,
                                   scenario_error_from_validation)
from capsim.profiles.quantization import TENSOR_GROUPS, load_quant_format, quant_format_names
from capsim.common.schema import MAX_TOKENS, Bool, Int, StrictModel

_FOLDER = "models"

#: Bytes per element of each HF ``torch_dtype`` value.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}



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
    # a context window: at most MAX_TOKENS, the bound of every token count capsim reads
    max_position_embeddings: Int = Field(gt=0, le=MAX_TOKENS)
    tie_word_embeddings: Bool = False
    attention_bias: Bool = False
    torch_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    notes: str = ""
    model_type: str = ""
    # -- mixture of experts (num_experts 0: dense) --------------------------------
    num_experts: Int = Field(0, ge=0)
    num_experts_per_tok: Int = Field(0, ge=0)
    moe_intermediate_size: Int = Field(0, ge=0)
    shared_expert_intermediate_size: Int = Field(0, ge=0)
    num_moe_layers: Int | None = Field(None, ge=0)
    expert_bias: Bool = False
    router_bias: Bool = False
    shared_expert_gate: Bool = False
    # -- the checkpoint's weight formats by tensor group (quantization.TENSOR_GROUPS;
    #    config.json quantization_config; a group left out stays 16-bit) --------------
    weight_formats: dict[str, str] = Field(default_factory=dict)
    num_nextn_predict_layers: Int = Field(0, ge=0)
    # -- multi-head latent attention (kv_lora_rank 0: not MLA) ----------------------
    q_lora_rank: Int | None = Field(None, gt=0)
    kv_lora_rank: Int = Field(0, ge=0)
    qk_nope_head_dim: Int = Field(0, ge=0)
    qk_rope_head_dim: Int = Field(0, ge=0)
    v_head_dim: Int = Field(0, ge=0)
    # -- windowed attention layers ---------------------------------------------------
    sliding_window: Int | None = Field(None, gt=0)
    sliding_window_layers: Int = Field(0, ge=0)
    attention_chunk_size: Int | None = Field(None, gt=0)
    chunked_attention_layers: Int = Field(0, ge=0)
    attention_sinks: Bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_head_dim(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("head_dim") is None:
            hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
            if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
                # transformers derives head_dim = hidden_size // num_attention_heads
                # (LlamaAttention); a remainder means a typo, or a config that must
                # give head_dim itself (Gemma: 3072 hidden, 16 heads of 256).
                if hidden % heads:
                    raise ValueError(
                        f"hidden_size {hidden} is not a multiple of num_attention_heads "
                        f"{heads}, and no head_dim is given; correct one of them, or give "
                        "head_dim")
                data = {**data, "head_dim": hidden // heads}
        return data

    @model_validator(mode="after")
    def _check_gqa(self) -> "ModelShape":
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        layers = self.num_hidden_layers
        if self.num_experts:
            if not 0 < self.num_experts_per_tok <= self.num_experts:
                raise ValueError(f"num_experts_per_tok ({self.num_experts_per_tok}) must be in "
                                 f"1..num_experts ({self.num_experts})")
            if self.moe_intermediate_size <= 0:
                raise ValueError("moe_intermediate_size must be > 0 with num_experts > 0")
        if self.num_moe_layers is not None and self.num_moe_layers > layers:
            raise ValueError(f"num_moe_layers ({self.num_moe_layers}) exceeds "
                             f"num_hidden_layers ({layers})")
        if self.kv_lora_rank and not (self.qk_rope_head_dim and self.qk_nope_head_dim
                                      and self.v_head_dim):
            raise ValueError("an MLA shape (kv_lora_rank > 0) needs qk_nope_head_dim, "
                             "qk_rope_head_dim and v_head_dim > 0")
        for count, size, what in ((self.sliding_window_layers, self.sliding_window,
                                   "sliding_window"),
                                  (self.chunked_attention_layers, self.attention_chunk_size,
                                   "attention_chunk_size")):
            if count and size is None:
                raise ValueError(f"{what} must be given when its layer count is > 0")
        if self.sliding_window_layers + self.chunked_attention_layers > layers:
            raise ValueError("sliding_window_layers + chunked_attention_layers exceed "
                             f"num_hidden_layers ({layers})")
        names = quant_format_names()
        for group, fmt in self.weight_formats.items():
            if group not in TENSOR_GROUPS:
                raise ValueError(f"weight_formats: unknown tensor group {group!r}; valid: "
                                 f"{', '.join(TENSOR_GROUPS)}")
            if fmt not in names:
                raise ValueError(f"weight_formats.{group}: unknown format {fmt!r}; valid: "
                                 f"{', '.join(names)}")
            if group == "experts" and not self.is_moe:
                raise ValueError("weight_formats.experts: a dense model (num_experts 0) has "
                                 "no routed experts")
            if group not in load_quant_format(fmt).groups:
                raise ValueError(f"weight_formats.{group}: {fmt} stores only "
                                 f"{', '.join(load_quant_format(fmt).groups)} (vLLM's {fmt} "
                                 f"method leaves the other layers 16-bit)")
        return self._check_kind()

    def _check_kind(self) -> "ModelShape":
        """A ``model_type`` capsim prices, and an even rotary dimension."""
        problem = unknown_model_type(self.model_type) if self.model_type else None
        if problem is not None:
            raise ValueError(problem)
        # RoPE rotates the two halves of each head: transformers' rotate_half splits at
        # head_dim // 2 and LlamaRotaryEmbedding makes ceil(head_dim / 2) frequencies, so an
        # odd width cannot be rotated (huggingface/transformers at 002272831fba,
        # src/transformers/models/llama/modeling_llama.py); MLA rotates qk_rope_head_dim.
        rope, what = ((self.qk_rope_head_dim, "qk_rope_head_dim") if self.is_mla
                      else (self.head_dim, "head_dim"))
        if rope % 2:
            derived = (f" (hidden_size {self.hidden_size} / num_attention_heads "
                       f"{self.num_attention_heads})" if what == "head_dim"
                       and rope * self.num_attention_heads == self.hidden_size else "")
            raise ValueError(f"{what} {rope}{derived} is odd: rotary position embeddings "
                             "rotate each head's two halves, so it must be even; correct "
                             "hidden_size or num_attention_heads, or give head_dim")
        return self

    @property
    def expert_weight_format(self) -> str | None:
        """The routed experts' checkpoint format (gpt-oss: ``mxfp4``), or None."""
        return self.weight_formats.get("experts")

    # -- kinds -------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts shape (routed experts on some layers)."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek-V2/V3: one latent per token)."""
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is the routed-expert block (the others run the dense MLP)."""
        if not self.num_experts:
            return 0
        return self.num_hidden_layers if self.num_moe_layers is None else self.num_moe_layers

    @property
    def dense_layers(self) -> int:
        """Layers with the dense gated MLP of width ``intermediate_size``."""
        return self.num_hidden_layers - self.moe_layers

    @property
    def window_layers(self) -> int:
        """Layers whose attention sees a bounded span (sliding window or local chunk)."""
        return self.sliding_window_layers + self.chunked_attention_layers

    @property
    def full_attention_layers(self) -> int:
        """Layers attending over the whole context."""
        return self.num_hidden_layers - self.window_layers

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
        """All parameters of one dense decoder layer (GQA attention + gated MLP + norms)."""
        return self.qkv_params + self.o_params + self.mlp_params + self.norm_params

    @property
    def mla_params(self) -> int:
        """MLA projections of one layer (DeepSeek-V2/V3 modeling code): q_a (h × q_lora)
        + its norm + q_b (q_lora × heads × (nope + rope)), or a plain q_proj without
        ``q_lora_rank``; kv_a_proj_with_mqa (h × (kv_lora + rope)) + its norm; kv_b_proj
        (kv_lora × heads × (nope + v)); o_proj (heads × v × h)."""
        h, heads = self.hidden_size, self.num_attention_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
             if self.q_lora_rank else h * heads * qk)
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_a + kv_b + heads * self.v_head_dim * h

    @property
    def attention_params(self) -> int:
        """Attention parameters of one layer: q/k/v/o (or the MLA projections) + sinks
        (gpt-oss: one learned logit per head)."""
        base = self.mla_params if self.is_mla else self.qkv_params + self.o_params
        return base + (self.num_attention_heads if self.attention_sinks else 0)

    @property
    def expert_params(self) -> int:
        """One routed expert of one layer: gate, up, down of ``moe_intermediate_size``
        (+ their biases: 2 × moe_i + h, gpt-oss)."""
        h, f = self.hidden_size, self.moe_intermediate_size
        return 3 * h * f + ((2 * f + h) if self.expert_bias else 0)

    @property
    def shared_expert_params(self) -> int:
        """The always-on shared expert(s) of one MoE layer: 3 × h × width (+ h for
        Qwen2-MoE's sigmoid gate)."""
        h = self.hidden_size
        return (3 * h * self.shared_expert_intermediate_size
                + (h if self.shared_expert_gate else 0))

    @property
    def router_params(self) -> int:
        """Router of one MoE layer: h × E (+ E: gpt-oss's bias, DeepSeek-V3's
        e_score_correction_bias)."""
        return self.hidden_size * self.num_experts + (self.num_experts if self.router_bias else 0)

    @property
    def moe_block_params(self) -> int:
        """One MoE layer's MLP block: every routed expert + shared expert + router."""
        return self.num_experts * self.expert_params + self.shared_expert_params \
            + self.router_params

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
        Llama-3.1-70B 70.6e9 (HF model cards); DeepSeek-V3 671e9 (its MTP module,
        ``num_nextn_predict_layers``, is not counted: vLLM loads it only to speculate).
        """
        lm_head = 0 if self.tie_word_embeddings else self.lm_head_params
        if not (self.is_moe or self.is_mla or self.attention_sinks):
            return (self.embedding_params + lm_head
                    + self.num_hidden_layers * self.layer_params + self.hidden_size)
        layers = self.num_hidden_layers * (self.attention_params + self.norm_params) \
            + self.dense_layers * self.mlp_params + self.moe_layers * self.moe_block_params
        return self.embedding_params + lm_head + layers + self.hidden_size

    @property
    def params_active(self) -> int:
        """Parameters one token uses: ``params_total`` without the experts it is not routed
        to and without the embedding table (a row lookup), as DeepSeek-V3 ("36.6B
        activated, including 0.9B for the output head") and OpenAI's gpt-oss model card
        (5.13B for gpt-oss-120b) count. Dense models: ``params_total`` − embedding."""
        idle = self.moe_layers * (self.num_experts - self.num_experts_per_tok) \
            * self.expert_params
        emb = 0 if self.tie_word_embeddings else self.embedding_params
        return self.params_total - emb - idle

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token: layer projections + LM head.

        Excludes the embedding table (a lookup) and norm weights (elementwise);
        this is Kaplan et al.'s non-embedding N plus the de-embedding matmul. A MoE
        layer counts its shared expert, router and the ``num_experts_per_tok``
        experts a token is routed to.
        """
        if not (self.is_moe or self.is_mla):
            per_layer = self.qkv_params + self.o_params + self.mlp_params
            return self.num_hidden_layers * per_layer + self.lm_head_params
        attn = self.mla_params if self.is_mla else self.qkv_params + self.o_params
        moe = self.num_experts_per_tok * self.expert_params + self.shared_expert_params \
            + self.router_params
        return (self.num_hidden_layers * attn + self.dense_layers * self.mlp_params
                + self.moe_layers * moe + self.lm_head_params)

    # -- bytes and FLOPs ---------------------------------------------------

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of all stored weights at ``dtype_bytes`` per parameter."""
        return self.params_total * dtype_bytes

    def kv_layer_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token occupies in ONE attention layer.

        GQA: ``2 (K and V) × kv_heads × head_dim × bytes``. MLA: one latent of
        ``kv_lora_rank + qk_rope_head_dim`` elements (vLLM's ``MLAAttentionSpec`` stores a
        single latent, vllm/v1/kv_cache_interface.py).
        """
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        return 2 * self.kv_size * kv_dtype_bytes

    def kv_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token occupies across all layers (windowed layers included:
        what a sequence shorter than every window holds).

        ``2 (K and V) × layers × kv_heads × head_dim × bytes`` — the derivation
        in the PagedAttention literature (Kwon et al. 2023, §2) and seed 001.
        Llama-2-7B fp16: 524,288 (512 KiB); Llama-3-70B: 327,680 (320 KiB). MLA:
        ``layers × (kv_lora_rank + qk_rope_head_dim) × bytes``; DeepSeek-V3 bf16:
        61 × 576 × 2 = 70,272.
        """
        if self.is_mla:
            return self.num_hidden_layers * self.kv_layer_bytes_per_token(kv_dtype_bytes)
        return 2 * self.num_hidden_layers * self.kv_size * kv_dtype_bytes

    def paged_kv_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        """KV bytes per token that grow with the sequence in vLLM V1's paged cache.

        vLLM's hybrid KV cache manager (docs.vllm.ai design/hybrid_kv_cache_manager;
        ``SlidingWindowManager.remove_skipped_blocks`` in
        vllm/v1/core/single_type_kv_cache_manager.py) frees a sliding-window layer's
        blocks once they leave the window, so only the other layers grow: gpt-oss
        keeps 18 of its 36 layers per token. Chunked local attention (Llama 4) is
        allocated like full attention: vLLM turns the hybrid manager off for it by
        default (vllm/config/vllm.py, "latency regression when using chunked local
        attention with the hybrid KV cache manager"). Dense models: equal to
        :meth:`kv_bytes_per_token`. The window layers' own blocks (at most
        ⌈(window − 1) / block_size⌉ + 1 per sequence and group) are not charged.
        """
        layers = self.num_hidden_layers - self.sliding_window_layers
        if layers == self.num_hidden_layers:
            return self.kv_bytes_per_token(kv_dtype_bytes)
        return layers * self.kv_layer_bytes_per_token(kv_dtype_bytes)

    def flops_per_token(self, context: int = 0) -> float:
        """Forward FLOPs for one token that attends over ``context`` tokens.

        ``2 × matmul_params + 4 × layers × heads × head_dim × context``:
        one multiply-add (2 FLOPs) per weight (Kaplan et al. 2020, "Scaling
        Laws", §2.1), plus QKᵀ and AV, 2 FLOPs each per (query, key, channel)
        (Chowdhery et al. 2022, PaLM, Appendix B, forward third of
        6N + 12·L·H·Q·T). Norms, RoPE and softmax are ignored.
        """
        if self.is_mla:     # prefill form: q·k over nope + rope, then · v
            per_pair = 2 * self.num_attention_heads * (
                self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
            return 2.0 * self.matmul_params + self.num_hidden_layers * per_pair * context
        attention = 4 * self.num_hidden_layers * self.q_size * context
        return 2.0 * self.matmul_params + attention


# -- loading -------------------------------------------------------------------


def model_names() -> list[str]:
    """Names of the packaged presets, sorted (``llama-3.1-8b``, ...)."""
    return packaged_names(_FOLDER)


def _validate(data: dict[str, Any], file: str | None) -> ModelShape:
    try:
        return ModelShape.model_validate(data)
    except ValidationError as exc:
        raise scenario_error_from_validation(exc, file, ModelShape) from None


def model_from_hf_config(
    config: dict[str, Any], *, name: str, source: str = "", file: str | None = None
) -> ModelShape:
    """Build a ModelShape from a Hugging Face ``config.json`` dict
    (:func:`capsim.profiles.hf_config.shape_fields` reads each ``model_type``).

    Unknown keys are ignored (config.json has dozens). A multimodal config
    with the language model under ``text_config`` is unwrapped.

    Raises:
        ScenarioError: experts or MLA in a ``model_type`` without a reader (lists the
            supported ones), or a missing / invalid field (names ``file`` and the field).
    """
    data = shape_fields(config, file)
    data["name"] = name
    data["source"] = source
    return _validate(data, file)


def _read_json(path: Path) -> dict[str, Any]:
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"malformed JSON: {exc}", file=str(path)) from None
    except RecursionError:       # json's decoder recurses once per nesting level
        raise ScenarioError("malformed JSON: nested too deep to read", file=str(path)) from None
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


def load_model(name_or_path: str | Path) -> ModelShape:
    """Load a model shape: a preset name, a HF ``config.json``, or a directory holding one.

    Args:
        name_or_path: preset (``llama-3.1-8b``), a path to ``config.json`` (or
            any ``.json`` in HF format), a directory with ``config.json``, or a
            preset-format ``.yaml`` file; a :class:`~pathlib.Path` is always a file or
            directory, never a preset name. A relative path is relative to the working
            directory (a scenario's are made relative to the scenario file by
            :mod:`capsim.scenario.paths`).

    Raises:
        ScenarioError: unknown name (lists the presets), unreadable or
            malformed file, or an invalid field (names the file and field).
    """
    text = str(name_or_path)
    names = model_names()
    if text in names and not isinstance(name_or_path, Path):
        with packaged_file(_FOLDER, text, "model") as path:
            return _validate(read_yaml_mapping(path), str(path))
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
