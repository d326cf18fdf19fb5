"""Commented profiles to fill in: ``capsim hardware --template`` and ``capsim models --template``.

A template is a complete profile that loads as written: the numbers of a shipped
profile (``base``), each field commented with its unit, the convention capsim reads it
by and where to find it. The user replaces the datasheet numbers; the efficiencies stay
the base GPU's (measured there, marked as carried over in ``derivation:``) until
``capsim calibrate`` fits the new GPU's own. The ``sources:`` block is left commented
out: a profile without sources loads with a warning listing the unsourced numbers.

Public API:
    hardware_template(name, base) -> str
    model_template(name, base) -> str
    check_template_name(name, shipped, kind) -> None
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from typing import Any, Iterable

import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.models import ModelShape

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_template_name(name: str, shipped: Iterable[str], kind: str) -> None:
    """Refuse a template name that is not a plain file-name stem or is a shipped name.

    Raises:
        ScenarioError: naming what is valid.
    """
    if not _NAME.match(name):
        raise ScenarioError(f"--template {name!r}: a name is 1-64 letters, digits, '.', '_' or "
                            "'-', starting with a letter or digit (it names the profile in "
                            "every table)")
    if name in set(shipped):
        raise ScenarioError(f"--template {name!r} is the name of a shipped {kind}; choose "
                            "another (a scenario's shipped name always means the shipped one)")


def _num(value: Any) -> str:
    """A number as a person writes it: ints as they are, floats in engineering notation
    (``989.4e12``, ``4.28e-6``), exact (the shortest repr, shifted in decimal)."""
    if value is None:
        return "null"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value).lower()
    exact = Decimal(repr(float(value)))
    if exact == 0 or Decimal("0.01") <= abs(exact) < Decimal(1000):
        return repr(float(value))
    exponent = (exact.adjusted() // 3) * 3
    mantissa = exact.scaleb(-exponent).normalize()
    text = f"{mantissa:f}"
    return f"{text}e{exponent}"


def _block(data: dict[str, Any], indent: int) -> str:
    """``data`` as YAML (lists of numbers inline), indented by ``indent`` spaces."""
    text = yaml.safe_dump(data, default_flow_style=None, sort_keys=False, width=100)
    return "".join(" " * indent + line + "\n" for line in text.splitlines())


def _fields(rows: list[tuple[str, str, str]]) -> str:
    """``key: value  # comment`` lines, the comments aligned."""
    width = max(len(f"{k}: {v}") for k, v, _ in rows) + 2
    return "".join((f"{k}: {v}".ljust(width) + f"# {c}").rstrip(" #") + "\n"
                   for k, v, c in rows)


def hardware_template(name: str, base: HardwareProfile) -> str:
    """A commented GPU profile named ``name`` with ``base``'s numbers, loadable as written.

    Returns:
        YAML text; :func:`capsim.profiles.hardware.load_hardware` on it gives ``base``'s
        numbers under the new name (with a warning that ``sources`` is empty).
    """
    flops = "".join(f"  {k}: {_num(v)}\n" for k, v in base.peak_flops_per_s.items())
    return f"""\
# GPU profile {name}: a template from `capsim hardware --template {name} --from {base.name}`.
# Replace each number by your GPU's (datasheet, or measured), then name this file in a
# scenario: `hardware: {name}.yaml` (a path relative to the scenario file); `capsim validate
# SCENARIO` checks it. Numbers may be written 989.4e12, 3.35E12, 192e9 or 4.28e-6.
# capsim's conventions, as in every shipped profile: dense Tensor-Core peaks (a datasheet's
# "with sparsity" figure is twice the dense one), bandwidths per GPU and per direction (half
# a bidirectional figure), memory in bytes with the datasheet's "GB" read as GiB.
{_hardware_head(name, base)}{flops}{_hardware_body(base)}{_custom_all_reduce(base)}\
# Achieved / peak per operator class: {base.name}'s{' fitted' if base.calibration else ''} factors.
# They carry over to a GPU of the same family; fit this GPU's own with `capsim calibrate
# --hardware {name}.yaml --csv TIMINGS.csv --model M` (docs/calibration.md).
efficiency:
{_block(base.efficiency.model_dump(exclude_none=True), 2)}{_hardware_tail(base)}\
# sources:   # where each number comes from: optional in your own profile (capsim warns
#            # about the numbers without one): a datasheet URL, a measurement, 'estimate: why'
#   peak_flops_per_s: https://...
#   hbm_bandwidth_bytes_per_s: https://...
{_derivation(base)}"""


def _hardware_head(name: str, base: HardwareProfile) -> str:
    """The template's names, platform and the ``peak_flops_per_s:`` key."""
    return _fields([
        ("name", name, "names the profile in every table"),
        ("display_name", name, "free text"),
        ("platform", base.platform, "cuda (NVIDIA) or rocm (AMD): CUDA-only kernels are "
                                    "refused on rocm"),
        ("compute_capability", f'"{base.compute_capability}"' if base.compute_capability
         else "null", "optional, NVIDIA only: '9.0' Hopper, '10.0' B200; kernels an engine "
                      "runs on one architecture only are refused on another"),
        ("peak_flops_per_s", "", "dense FLOP/s per dtype: bf16, fp16, fp8 (if it has FP8), int8, "
                                 "fp4 (Blackwell)"),
    ])


def _hardware_body(base: HardwareProfile) -> str:
    """The template's memory, SMs and links."""
    return _fields([
        ("hbm_bytes", str(base.hbm_bytes),
         f'{base.hbm_bytes / 2**30:g} GiB: a datasheet "80 GB" is 80 x 2**30 = 85899345920'),
        ("memory_total_gib", _num(base.memory_total_gib),
         "optional: what the engines see (torch total_memory); KV sizing uses it"),
        ("num_sms", _num(base.num_sms), "optional: streaming multiprocessors"),
        ("max_threads_per_sm", _num(base.max_threads_per_sm),
         "optional: resident threads per SM (CUDA compute capability table)"),
        ("hbm_bandwidth_bytes_per_s", _num(base.hbm_bandwidth_bytes_per_s),
         "peak memory bandwidth"),
        ("scale_up_link", yaml.safe_dump(base.scale_up_link, default_style="'").strip()
         .removesuffix("...").strip() if base.scale_up_link else "''",
         "free text: NVLink generation, Infinity Fabric, or PCIe only"),
        ("nvlink_bandwidth_bytes_per_s", _num(base.nvlink_bandwidth_bytes_per_s),
         "per direction (900 GB/s both ways: 450e9); null: PCIe-only card"),
        ("nvlink_latency_s", _num(base.nvlink_latency_s),
         "per hop; null exactly when the bandwidth is"),
        ("pcie_bandwidth_bytes_per_s", _num(base.pcie_bandwidth_bytes_per_s),
         "per direction (Gen5 x16: 64e9; Gen4 x16: 32e9)"),
        ("pcie_latency_s", _num(base.pcie_latency_s), "per hop"),
        ("gpus_per_node", _num(base.gpus_per_node),
         "optional: GPUs in one NVLink domain (HGX / DGX: 8); null with scale_out_link"),
        ("scale_out_link", base.scale_out_link or "null",
         "optional: link between nodes, one port per GPU (capsim/profiles/data/links)"),
    ])


def _hardware_tail(base: HardwareProfile) -> str:
    """The template's step overhead and price."""
    return _fields([
        ("step_overhead_s", _num(base.step_overhead_s),
         "fixed time per engine step (an estimate until calibrated)"),
        ("price_per_gpu_hour_usd", _num(base.price_per_gpu_hour_usd),
         "what one GPU-hour costs you: $/h and $/M tokens in every table"),
    ])


def _custom_all_reduce(base: HardwareProfile) -> str:
    """The commented ``custom_all_reduce:`` block of a base that has one, else ""."""
    if base.custom_all_reduce is None:
        return ""
    return ("# optional: what an engine's own all-reduce kernels cost on the NVLink "
            f"({base.name}'s; null: engines\n# run NCCL's ring here too). One-shot: "
            "latency + (TP-1) x bytes / (NVLink BW x efficiency);\n# two-shot: latency "
            "+ 2(TP-1)/TP x bytes / (NVLink BW x efficiency)\ncustom_all_reduce:\n"
            + "".join(f"  {k}: {_num(v)}\n"
                      for k, v in base.custom_all_reduce.model_dump().items()))


def _derivation(base: HardwareProfile) -> str:
    """The ``derivation:`` block marking ``base``'s efficiencies as carried over ("" when
    it has none)."""
    classes = [c for c in ("gemm", "gemm_fp8", "attention_prefill", "attention_decode",
                           "elementwise", "fused_moe", "attention_decode_fp8",
                           "attention_decode_fp8_head_dim",
                           "fused_moe_mxfp4", "grouped_gemm_fp8", "attention_decode_mla",
                           "gemm_fp8_block", "attention_prefill_mla", "fused_moe_runners",
                           "gemm_fp8_engine", "grouped_gemm_fp8_engine")
               if getattr(base.efficiency, c) is not None]
    if not classes:
        return ""
    return ("# The efficiency entries are another GPU's measurements, not this one's:\n"
            "derivation:\n"
            "  status: derived, uncalibrated\n"
            f"  from_profile: {base.name}\n"
            f"  classes: [{', '.join(classes)}]\n"
            f"  method: '{base.name} entries copied unchanged by capsim hardware --template; "
            "the roofline applies this GPU''s own peaks and bandwidths'\n"
            f"  date: '{datetime.date.today().isoformat()}'\n")


def model_template(name: str, base: ModelShape) -> str:
    """A commented model file named ``name`` with ``base``'s shape, loadable as written.

    A model needs only the Hugging Face ``config.json`` fields that decide its cost; a
    scenario may instead name the ``config.json`` itself (or its directory).

    Raises:
        ScenarioError: ``base`` is not a dense model (experts, MLA or windowed attention
            have many more fields: name such a model's ``config.json`` instead).
    """
    if (base.is_moe or base.is_mla or base.sliding_window_layers
            or base.chunked_attention_layers):
        raise ScenarioError(f"--from {base.name}: the model template is for dense models; for a "
                            "mixture-of-experts, MLA or windowed-attention model name its "
                            "Hugging Face config.json in the scenario (model: path/config.json)")
    shape = _fields([
        ("name", name, "names the model in every table"),
        ("source", "''", "where the shape comes from, e.g. the config.json's URL"),
        ("hidden_size", str(base.hidden_size), ""),
        ("intermediate_size", str(base.intermediate_size), "the MLP's width"),
        ("num_hidden_layers", str(base.num_hidden_layers), ""),
        ("num_attention_heads", str(base.num_attention_heads), ""),
        ("num_key_value_heads", str(base.num_key_value_heads),
         "= num_attention_heads without grouped-query attention"),
        ("head_dim", str(base.head_dim), "default: hidden_size / num_attention_heads"),
        ("vocab_size", str(base.vocab_size), ""),
        ("max_position_embeddings", str(base.max_position_embeddings),
         "the default max_model_len"),
        ("tie_word_embeddings", str(base.tie_word_embeddings).lower(), ""),
        ("attention_bias", str(base.attention_bias).lower(),
         "q/k/v projections have a bias (Qwen2: true)"),
        ("torch_dtype", base.torch_dtype, "the checkpoint's: bfloat16 | float16 | float32"),
    ])
    return f"""\
# Model {name}: a template from `capsim models --template {name} --from {base.name}`.
# Dense decoder-only transformers with grouped-query attention and a gated MLP (Llama,
# Mistral, Qwen2 families). Copy each value from the model's Hugging Face config.json
# (same key names), or skip this file and name the config.json itself in the scenario:
# `model: models/my-model/config.json` (or its directory), relative to the scenario file.
{shape}"""
