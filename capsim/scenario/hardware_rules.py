"""What a model and an engine ask of the GPUs: tensor parallelism that divides the
heads and stays in one node or takes whole nodes, expert parallelism that divides the experts, a layer per
pipeline stage, a packaged scale-out link, the tensor cores each weight format computes
on. Each rule as vLLM enforces it at start-up; an error names the field that set it.

Public API:
    check_hardware_fit(model, hw, engine, spec, v, path, where)
"""

from __future__ import annotations

from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.cost.operators import check_tensor_parallel, pp_layer_partition
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.links import resolve_link
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import load_quant_format
from capsim.profiles.weight_layout import check_format_groups, weight_layout
from capsim.scenario.profile_loading import named
from capsim.scenario.schema import EngineConfig, Scenario, VariantSpec


def check_hardware_fit(model: ModelShape, hw: HardwareProfile, engine: EngineConfig,
                       spec: Scenario, v: VariantSpec, path: Path, where: str) -> None:
    """Every rule of this module, in the order an error is looked for: the weight
    formats' tensor cores, TP dividing the heads, EP, PP, the scale-out link, then TP
    within one node or over whole nodes.

    Raises:
        ScenarioError: naming the variant's field when the variant set it, else the
            scenario's.
    """
    _check_weight_format(engine, hw, v, path, where, model)
    tp_field = (f"{where}.engine.tensor_parallel_size" if "tensor_parallel_size" in v.engine
                else "engine.tensor_parallel_size")
    if not (engine.enable_dp_attention and model.is_moe):   # else per rank: _check_dp_ranks
        named(lambda _: check_tensor_parallel(model, engine.tensor_parallel_size), "", path,
              tp_field)
    _check_expert_parallel(model, engine, path, where, set(v.engine))
    _check_dp_ranks(model, hw, engine, path, where, set(v.engine))
    _check_pipeline_parallel(model, engine, path, where, set(v.engine))
    _check_scale_out(hw, spec, v, path, where)
    named(lambda _: hw.check_tp_nodes(engine.tensor_parallel_size), "", path, tp_field)


def _check_expert_parallel(model: ModelShape, engine: EngineConfig, path: Path, where: str,
                           variant_keys: set[str]) -> None:
    """Expert parallelism, DP attention and a routing skew need routed experts; EP needs
    the replica's GPUs (tensor_parallel_size) to divide the experts and EPLB's redundant
    copies (vLLM's FusedMoE gives each EP rank (num_experts + num_redundant_experts) /
    ep_size of them; ``rebalance_experts`` asserts it, vllm/distributed/eplb/
    rebalance_algo.py at 07fb932a); redundant experts need EP."""
    def at(key: str) -> str:
        return f"{where}.engine.{key}" if where and key in variant_keys else f"engine.{key}"

    for key in ("enable_expert_parallel", "enable_dp_attention", "moe_routing_skew"):
        if getattr(engine, key) and not model.is_moe:
            raise ScenarioError(f"{key} needs a mixture-of-experts model; {model.name} is dense",
                                file=str(path), path=at(key))
    tp, extra = engine.tensor_parallel_size, engine.num_redundant_experts
    if extra and not engine.enable_expert_parallel:
        raise ScenarioError(
            f"num_redundant_experts {extra} (EPLB) copies experts across expert-parallel "
            "ranks and needs enable_expert_parallel: true", file=str(path),
            path=at("num_redundant_experts"))
    if extra > model.num_experts * (tp - 1):
        # (E + N) / EP experts per rank beyond E: a rank would hold two copies of one expert
        raise ScenarioError(
            f"num_redundant_experts {extra} gives each of the {tp} expert-parallel ranks "
            f"{(model.num_experts + extra) / tp:,.4g} experts, more than {model.name}'s "
            f"{model.num_experts} (a rank holds at most one copy of each); valid: "
            f"num_redundant_experts <= {model.num_experts * (tp - 1):,}", file=str(path),
            path=at("num_redundant_experts"))
    if engine.enable_expert_parallel and (model.num_experts + extra) % tp:
        copies = f" + num_redundant_experts {extra}" if extra else ""
        hint = "" if extra else (f"; EPLB's num_redundant_experts can make up the difference "
                                 f"(vLLM --eplb-config, SGLang --ep-num-redundant-experts)")
        raise ScenarioError(
            f"expert parallel size {tp} (tensor_parallel_size) must divide num_experts "
            f"{model.num_experts}{copies} of {model.name}{hint}", file=str(path),
            path=at("num_redundant_experts") if extra and "num_redundant_experts" in
            variant_keys else at("tensor_parallel_size") if "tensor_parallel_size" in
            variant_keys else at("num_redundant_experts") if extra
            else at("enable_expert_parallel"))


def _check_dp_ranks(model: ModelShape, hw: HardwareProfile, engine: EngineConfig, path: Path,
                    where: str, variant_keys: set[str]) -> None:
    """``data_parallel_size`` (SGLang's ``--dp-size``) splits the replica's GPUs into
    data-parallel attention ranks of TP / DP GPUs each: it needs DP attention, must divide
    tensor_parallel_size (SGLang's ``derive_attn_tp_size`` refuses otherwise,
    python/sglang/srt/layers/dp_attention.py ``compute_dp_attention_world_info`` at
    00161092), and each rank's attention TP must divide the heads (vLLM's and SGLang's
    sharding rule) and stay within one node (its all-reduce is priced on NVLink)."""
    dp, tp = engine.data_parallel_size, engine.tensor_parallel_size
    if dp is None:
        return
    key = "data_parallel_size"
    at = f"{where}.engine.{key}" if where and key in variant_keys else f"engine.{key}"
    if not engine.enable_dp_attention:
        if dp > 1:
            raise ScenarioError(
                f"data_parallel_size {dp} counts data-parallel attention ranks (SGLang "
                "--dp-size) and needs enable_dp_attention: true; independent engine copies "
                "are cluster.num_replicas", file=str(path), path=at)
        return
    if tp % dp:
        raise ScenarioError(
            f"data_parallel_size {dp} must divide tensor_parallel_size {tp}: each "
            f"data-parallel attention rank takes tensor_parallel_size / data_parallel_size "
            f"GPUs", file=str(path), path=at)
    t = tp // dp
    heads = model.num_attention_heads
    if heads % t:
        raise ScenarioError(
            f"a data-parallel attention rank of {t} GPUs (tensor_parallel_size {tp} / "
            f"data_parallel_size {dp}) must divide num_attention_heads {heads} of "
            f"{model.name}", file=str(path), path=at)
    kv = model.num_key_value_heads
    if kv % t and t % kv:
        raise ScenarioError(
            f"a data-parallel attention rank of {t} GPUs must divide, or be a multiple of, "
            f"num_key_value_heads {kv} of {model.name}", file=str(path), path=at)
    g = hw.gpus_per_node
    if g is not None and t > g:
        raise ScenarioError(
            f"a data-parallel attention rank of {t} GPUs (tensor_parallel_size {tp} / "
            f"data_parallel_size {dp}) spans nodes of {g} {hw.name} GPUs; valid: "
            f"data_parallel_size >= {-(-tp // g)}", file=str(path), path=at)


def _check_pipeline_parallel(model: ModelShape, engine: EngineConfig, path: Path, where: str,
                             variant_keys: set[str]) -> None:
    """vLLM's rule: every stage holds at least one layer (``get_pp_indices``)."""
    key = "pipeline_parallel_size"
    at = f"{where}.engine.{key}" if where and key in variant_keys else f"engine.{key}"
    named(lambda _: pp_layer_partition(model.num_hidden_layers, engine.pipeline_parallel_size),
          "", path, at)


def _check_scale_out(hw: HardwareProfile, spec: Scenario, v: VariantSpec, path: Path,
                     where: str) -> None:
    """The hardware's scale-out link must name a packaged link."""
    if hw.scale_out_link is None:
        return
    key = "scale_out_link"
    at = f"{where}.hardware_overrides.{key}" if key in v.hardware_overrides else \
        f"hardware_overrides.{key}" if key in spec.hardware_overrides else \
        (f"{where}.hardware" if v.hardware else "hardware")
    named(resolve_link, hw.scale_out_link, path, at)


def _check_weight_format(engine: EngineConfig, hw: HardwareProfile, v: VariantSpec, path: Path,
                         where: str, model: ModelShape | None = None) -> None:
    """The chip must have the tensor cores each weight format computes on (datasheet), or
    the format a weight-only fallback; a model whose checkpoint records its formats
    (``weight_formats``) takes no other ``quantization`` (vLLM refuses it:
    :func:`~capsim.profiles.weight_layout.weight_layout`). The error names
    ``engine.quantization`` (or ``engine.dtype`` for dtype fp8; ``model`` for the
    checkpoint's own formats), the variant's when it set it."""
    knob = "quantization" if engine.quantization is not None else "dtype"
    field = f"{where}.engine.{knob}" if where and knob in v.engine else f"engine.{knob}"
    if model is not None and model.weight_formats:
        layout = named(lambda _: weight_layout(model, engine.weight_format), "", path,
                       field if engine.weight_format is not None else
                       (f"{where}.model" if v.model else "model"))
        at = field if engine.weight_format is not None else \
            (f"{where}.model" if v.model else "model")
        for fmt in {f.name: f for f in layout.formats.values()}.values():
            named(lambda _: fmt.compute_dtype(hw), "", path, at)
        return
    if engine.weight_format is None:
        return
    fmt = load_quant_format(engine.weight_format)
    if model is not None:            # a format of some groups only (MXFP4: the experts)
        named(lambda _: check_format_groups(model, fmt), "", path, field)
    named(lambda _: fmt.compute_dtype(hw), "", path, field)
