"""Each linear-layer group's weight format for one engine's model: the checkpoint's own
formats where its ``config.json`` records them, else the engine's ``quantization``.

It reads both the formats (:mod:`capsim.profiles.quantization`) and the shapes
(:mod:`capsim.profiles.models`, which validate the format names they record), so it
lives beside them and neither imports the other back.

Public API:
    WeightLayout, weight_layout(model, quantization) -> WeightLayout
    check_format_groups(model, fmt)
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.common.errors import ScenarioError
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import (TENSOR_GROUPS, QuantFormat, load_quant_format,
                                         quant_format_names)


@dataclass(frozen=True)
class WeightLayout:
    """The format of each linear-layer group (:data:`TENSOR_GROUPS`) of one engine's model.

    ``grouped``: the model's checkpoint stores the groups apart (priced group by group);
    False: one format for every linear (each attribute is the same format).
    """

    attention: QuantFormat
    mlp: QuantFormat
    experts: QuantFormat
    grouped: bool = False

    @property
    def formats(self) -> dict[str, QuantFormat]:
        return {"attention": self.attention, "mlp": self.mlp, "experts": self.experts}


def weight_layout(model: ModelShape, quantization: str | None) -> WeightLayout:
    """Each group's format: the checkpoint's (``model.weight_formats``: groups it does not
    name stay 16-bit) when the model records one, else ``quantization`` (or bf16) for
    every linear.

    As vLLM (``ModelConfig._verify_quantization``, vllm/config/model.py at v0.19.0): a
    checkpoint's ``quant_method`` applies without ``--quantization``; a different
    ``--quantization`` is refused ("Quantization method specified in the model config
    (X) does not match the quantization method specified in the `quantization`
    argument (Y)").

    A format an engine applies to some groups only (``QuantFormat.groups``: MXFP4, the
    routed experts) leaves the others 16-bit.

    Raises:
        ScenarioError: ``quantization`` is not the checkpoint's quantized format, an
            unknown format name, or a format for groups the model does not have (MXFP4 on
            a dense model).
    """
    ckpt = model.weight_formats
    if not ckpt:
        fmt = load_quant_format(quantization or "bf16")
        if fmt.groups == TENSOR_GROUPS:
            return WeightLayout(fmt, fmt, fmt)
        check_format_groups(model, fmt)
        bf16 = load_quant_format("bf16")
        return WeightLayout(*(fmt if g in fmt.groups else bf16 for g in TENSOR_GROUPS),
                            grouped=True)
    methods = sorted({f for f in ckpt.values() if load_quant_format(f).quantized})
    if quantization is not None and quantization not in methods:
        groups = ", ".join(f"{g} {f}" for g, f in ckpt.items())
        raise ScenarioError(
            f"quantization {quantization} does not match the checkpoint of {model.name} "
            f"({groups}; the rest 16-bit): vLLM refuses a --quantization other than the "
            f"config's quant_method; valid: {', '.join(methods) or 'none'}, or leave it unset")
    return WeightLayout(*(load_quant_format(ckpt.get(g, "bf16")) for g in TENSOR_GROUPS),
                        grouped=True)


def check_format_groups(model: ModelShape, fmt: QuantFormat) -> None:
    """The model has a tensor group ``fmt`` quantizes: MXFP4 (experts only) on a dense
    model would quantize nothing.

    Raises:
        ScenarioError: naming the format, the groups it quantizes and the formats that
            would quantize this model.
    """
    has = {"attention", "mlp", "experts"} if model.is_moe else {"attention", "mlp"}
    if has & set(fmt.groups):
        return
    valid = [name for name in quant_format_names()[1:]
             if has & set(load_quant_format(name).groups)]
    raise ScenarioError(
        f"quantization {fmt.name} stores only a mixture-of-experts model's "
        f"{' and '.join(fmt.groups)} in {fmt.name} (vLLM's {fmt.vllm_method or fmt.name} "
        f"method leaves linear layers 16-bit); {model.name} is dense, so nothing would be "
        f"quantized; valid for it: {', '.join(valid)}")
