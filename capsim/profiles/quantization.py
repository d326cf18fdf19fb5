"""Weight quantization formats: bytes of a quantized weight, and the peak its matmul runs at.

Data, not code: ``capsim/profiles/data/quantization/formats.yaml`` holds each format
(bf16, fp8 per-tensor / per-channel / 128×128 blocks, int8 W8A8, AWQ and GPTQ int4
W4A16, NVFP4, MXFP4) with its storage layout and sources (vLLM's quantization methods).

What a format changes, per GPU:

- the **bytes of each linear layer's weight** (:meth:`QuantFormat.tensor_bytes`):
  ``K·N·bits/8`` plus its scales (one per tensor, per output channel, per group of
  ``group_size`` inputs, or per block) and zero points;
- the **peak the matmul runs at** (:meth:`QuantFormat.compute_dtype`): fp8 / int8 / fp4
  tensor cores for W8A8 and W4A4 formats, the model's 16-bit rate for weight-only ones
  (AWQ, GPTQ: Marlin dequantizes inside the GEMM), and the GEMM efficiency curve used.

The embedding table, LM head, norms, biases and a MoE router stay in the model's 16-bit
dtype in every format (the checkpoints' ignore lists; :data:`KEPT_16BIT`).

A checkpoint may store its tensor groups (:data:`TENSOR_GROUPS`: attention, dense MLP and
shared experts, routed experts) in different formats — gpt-oss keeps attention in bf16
and its experts in MXFP4 (``quantization_config.modules_to_not_convert``). The model
records them (``ModelShape.weight_formats``, read from its ``config.json``), and
:func:`capsim.profiles.weight_layout.weight_layout` gives the format of each group for an
engine's ``quantization``.

Public API:
    QuantFormat                 one format (pydantic)
    load_quant_format(name) -> QuantFormat
    quant_format_names() -> list[str]
    KEPT_16BIT                  the tensors no format quantizes
    TENSOR_GROUPS               the linear-layer groups a checkpoint may store apart
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from capsim.common.errors import ScenarioError
from capsim.common.schema import Bool, StrictModel
from capsim.profiles.files import read_yaml_mapping, scenario_error_from_validation
from capsim.profiles.hardware import HardwareProfile

#: Tensors every format keeps in the model's 16-bit dtype (vLLM: unquantized layers;
#: compressed-tensors ``ignore: [lm_head]``, ModelOpt ``exclude_modules: [lm_head]``).
KEPT_16BIT = ("embedding", "lm_head", "norms", "biases", "router")

#: Linear-layer groups a checkpoint may quantize apart: the attention projections (q/k/v/o,
#: MLA's), the dense MLP of dense layers with the shared experts, the routed experts.
TENSOR_GROUPS = ("attention", "mlp", "experts")

_FILE = ("data", "quantization", "formats.yaml")


class QuantFormat(StrictModel):
    """How one quantized linear weight is stored and multiplied (see the module docstring).

    Attributes:
        name: the format's key (``awq``, ``nvfp4``, …).
        description: one line.
        vllm_method: vLLM's quantization method that loads it (``--quantization``).
        weight_bits: bits per weight element (16, 8 or 4).
        scale: ``none``, ``tensor``, ``channel`` (per output channel), ``group`` (per
            ``group_size`` consecutive inputs of one output) or ``block`` (per ``block``).
        group_size: inputs per scale (``group``).
        block: (K, N) elements per scale (``block``).
        scale_bytes: bytes per scale (4 fp32, 2 fp16, 1 fp8 / E8M0).
        zero_bits: bits per zero point (one per scale; 0: symmetric).
        tensor_scale_bytes: bytes per tensor besides the above (NVFP4's global scales).
        compute: the dtype whose peak the matmul runs at (``bf16``: weight-only).
        curve: the profile's GEMM curve the matmul uses (``gemm``, ``gemm_fp8`` or
            ``gemm_fp8_block``, each where the profile has it).
        weight_only_fallback: without the ``compute`` peak, dequantize to 16 bits (True)
            or refuse (False).
        engine_compute: per engine family, the dtype the engine's kernels multiply in
            where it is not ``compute`` (vLLM runs MXFP4 with 16-bit activations even where
            the GPU has FP4 tensor cores); ``bf16`` means the model's 16-bit dtype.
        groups: the tensor groups (:data:`TENSOR_GROUPS`) an engine stores in this format;
            the others stay 16-bit (MXFP4: the routed experts only).
        sources: where each of these comes from.
    """

    name: str
    description: str
    vllm_method: str = ""
    weight_bits: int = Field(gt=0, le=16)
    scale: Literal["none", "tensor", "channel", "group", "block"]
    group_size: int | None = Field(None, gt=0)
    block: tuple[int, int] | None = None
    scale_bytes: int = Field(0, ge=0)
    zero_bits: int = Field(0, ge=0)
    tensor_scale_bytes: int = Field(0, ge=0)
    compute: Literal["bf16", "fp8", "int8", "fp4"]
    curve: Literal["gemm", "gemm_fp8", "gemm_fp8_block"] = "gemm"
    weight_only_fallback: Bool = False
    engine_compute: dict[str, Literal["bf16", "fp8", "int8", "fp4"]] = Field(default_factory=dict)
    groups: tuple[Literal["attention", "mlp", "experts"], ...] = Field(TENSOR_GROUPS,
                                                                       min_length=1)
    sources: dict[str, str]

    @model_validator(mode="after")
    def _check_scale(self) -> "QuantFormat":
        if self.scale == "group" and self.group_size is None:
            raise ValueError("scale: group needs group_size")
        if self.scale == "block" and self.block is None:
            raise ValueError("scale: block needs block: [K, N]")
        if self.scale != "none" and self.scale_bytes == 0:
            raise ValueError(f"scale: {self.scale} needs scale_bytes > 0")
        return self

    @property
    def quantized(self) -> bool:
        """False for the 16-bit format."""
        return self.weight_bits < 16

    def scale_count(self, k: float, n: float) -> float:
        """Scales of one ``k`` × ``n`` weight (inputs × outputs, per GPU)."""
        if self.scale == "none":
            return 0.0
        if self.scale == "tensor":
            return 1.0
        if self.scale == "channel":
            return n
        if self.scale == "group":
            return math.ceil(k / self.group_size) * n
        bk, bn = self.block
        return math.ceil(k / bk) * math.ceil(n / bn)

    def tensor_bytes(self, k: float, n: float, model_dtype_bytes: int = 2) -> float:
        """Bytes on the GPU of one ``k`` × ``n`` linear weight (inputs × outputs).

        ``K·N·bits/8 + scales × scale_bytes + scales × zero_bits/8 + tensor_scale_bytes``;
        the 16-bit format stores ``K·N·model_dtype_bytes``. Example (AWQ, group 128,
        fp16 scales, 4-bit zeros): 4096 × 4096 → 8,388,608 + 262,144 + 65,536 bytes.
        """
        if not self.quantized:
            return k * n * model_dtype_bytes
        scales = self.scale_count(k, n)
        return (k * n * self.weight_bits / 8 + scales * self.scale_bytes
                + scales * self.zero_bits / 8 + self.tensor_scale_bytes)

    def bytes_per_weight(self, k: float, model_dtype_bytes: int = 2) -> float:
        """Mean bytes per weight element of a weight with ``k`` inputs, its scales and
        zero points spread over it: exact for group and block formats when their sizes
        divide the weight, ``scale_bytes / k`` per element for per-channel scales, and
        per-tensor scales neglected. For shapes priced per parameter (MoE / MLA).
        """
        if not self.quantized:
            return float(model_dtype_bytes)
        per = self.weight_bits / 8
        if self.scale == "channel":
            per += self.scale_bytes / k
        elif self.scale == "group":
            per += (self.scale_bytes + self.zero_bits / 8) / self.group_size
        elif self.scale == "block":
            per += self.scale_bytes / (self.block[0] * self.block[1])
        return per

    def compute_dtype(self, hw: HardwareProfile, model_dtype: str = "bf16",
                      engine: str | None = None) -> str:
        """The peak this format's matmuls run at on ``hw``: ``engine``'s own dtype where
        :attr:`engine_compute` has one, else ``compute`` when the GPU has it, else the
        16-bit ``model_dtype`` for weight-only formats and fallbacks.

        Raises:
            ScenarioError: the GPU has no ``compute`` peak and the format has no
                weight-only fallback (names the GPU's peaks).
        """
        compute = self.engine_compute.get(engine, self.compute) if engine else self.compute
        if compute == "bf16":
            return model_dtype
        if compute != self.compute and compute in hw.peak_flops_per_s:
            return compute
        if self.compute in hw.peak_flops_per_s:
            return self.compute
        if self.weight_only_fallback:
            return model_dtype
        valid = ", ".join(sorted(hw.peak_flops_per_s))
        raise ScenarioError(f"quantization {self.name} needs {self.compute} tensor cores; "
                            f"hardware '{hw.name}' has {valid}")


@lru_cache(maxsize=1)
def _formats() -> dict[str, QuantFormat]:
    entry = resources.files("capsim.profiles").joinpath(*_FILE)
    with resources.as_file(entry) as path:
        data = read_yaml_mapping(Path(path))
        out = {}
        for name, body in data.items():
            try:
                out[name] = QuantFormat.model_validate({"name": name, **body})
            except ValidationError as exc:
                raise scenario_error_from_validation(exc, str(path), QuantFormat) from None
    return out


def quant_format_names() -> list[str]:
    """Every format's name, in file order (``bf16`` first)."""
    return list(_formats())


def load_quant_format(name: str) -> QuantFormat:
    """The format called ``name``.

    Raises:
        ScenarioError: unknown name (lists the valid ones).
    """
    formats = _formats()
    if name not in formats:
        raise ScenarioError(f"unknown quantization {name!r}; valid: {', '.join(formats)}")
    return formats[name]
