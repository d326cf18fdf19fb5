"""A replica's KV cache, sized by its engine preset's memory rule on its GPU.

The rule's start-up terms (:mod:`capsim.kv.memory`: weights, activation peak, CUDA
context and graphs) with the scenario's ``non_torch_memory_gib`` /
``cudagraph_memory_gib`` / ``kv_cache_memory_gib`` in their place where given, turned
into blocks (:mod:`capsim.kv.capacity`); per pipeline stage, the smallest binding; the
drafter's weights and KV added with speculative decoding. An error names the field to
change (:func:`memory_path`).

Public API:
    replica_kv_capacity(model, hw, engine, preset, path, field_of, spec) -> KVCapacity
    memory_path(spec, v, where, fields) -> str
    kv_bytes_per_token(model, engine) -> int
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.cost.operators import pp_layer_partition, stage_shape
from capsim.kv.capacity import KVCapacity, pool_from_terms
from capsim.kv.memory import MemoryTerms, memory_terms
from capsim.profiles.engines import EnginePreset
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import load_quant_format
from capsim.scenario.schema import DTYPE_BYTES, EngineConfig, Scenario, VariantSpec
from capsim.scenario.speculative import SpecDecoding

log = logging.getLogger(__name__)

GIB = 2**30


#: What sizes a replica's memory, most direct first (after the error's own knob).
_MEMORY_FIELDS = ("engine.kv_cache_memory_gib", "engine.tensor_parallel_size",
                  "engine.pipeline_parallel_size",
                  "hardware_overrides.memory_total_gib", "hardware_overrides.hbm_bytes",
                  "hardware_overrides.num_sms", "hardware_overrides.max_threads_per_sm",
                  "hardware", "model", "engine.preset",
                  "engine.max_num_seqs", "engine.max_num_batched_tokens")


#: Knobs that move memory only through the activation peak: named after the rest.
_INDIRECT = {"engine.max_num_seqs", "engine.max_num_batched_tokens"}


def memory_path(spec: Scenario, v: VariantSpec, where: str, fields: tuple[str, ...]) -> str:
    """The YAML path a memory error names: the first of ``fields`` the variant gives
    (``variants.<i>.…``), else the scenario gives, the direct ones before the indirect
    (:data:`_INDIRECT`); else ``fields[0]``, the knob to change."""
    variant = {f"engine.{k}" for k in v.engine} | {f"hardware_overrides.{k}"
                                                   for k in v.hardware_overrides}
    variant |= {k for k in ("hardware", "model") if getattr(v, k)}
    scenario = {f"engine.{k}" for k in spec.engine.model_fields_set} | {
        f"hardware_overrides.{k}" for k in spec.hardware_overrides}
    for indirect in (False, True):
        for level, given in ((where, variant if where else set()), ("", scenario)):
            for f in fields:
                if (f in _INDIRECT) == indirect and f in given:
                    return f"{level}.{f}" if level else f
    return fields[0]


def replica_kv_capacity(model: ModelShape, hw: HardwareProfile, engine: EngineConfig,
                        preset: EnginePreset, path: Path, field_of,
                        spec: SpecDecoding | None = None) -> KVCapacity:
    """The pool of one replica: the preset's memory rule on this GPU (:mod:`capsim.kv.memory`),
    with the scenario's ``non_torch_memory_gib`` / ``cudagraph_memory_gib`` /
    ``kv_cache_memory_gib`` in place of the rule's terms where given. ``field_of(*fields)``:
    the YAML path an error names (:func:`memory_path`).

    With pipeline parallelism each stage's GPUs hold their layers' weights and KV (the
    first stage the embedding, the last the LM head and the sampler's activations), and
    the replica's cache is the smallest stage's in tokens: vLLM takes the minimum block
    count over its workers (``get_kv_cache_configs`` in vllm/v1/core/kv_cache_utils.py).

    With speculative decoding (``spec``) the drafter's weights load with the model's
    ("Model loading took" includes them) and its KV layers share the paged pool, so a
    block holds the target's and the drafter's KV of its tokens; under SGLang's memory rule
    the drafter lives in the memory left beside the target's pool instead.

    Raises:
        ScenarioError: the weights or one KV block do not fit; a vLLM engine's cache
            cannot hold one ``max_model_len`` request (vLLM refuses to start).
    """
    rule, pp = preset.memory, engine.pipeline_parallel_size
    if pp == 1:
        kv = _stage_capacity(model, hw, engine, preset, path, field_of, spec=spec)
    else:
        stages, start = [], 0
        for i, layers in enumerate(pp_layer_partition(model.num_hidden_layers, pp)):
            stages.append(_stage_capacity(stage_shape(model, start, start + layers), hw, engine,
                                          preset, path, field_of, i == 0, i == pp - 1))
            start += layers
        kv = min(stages, key=lambda k: k.num_gpu_blocks)
    if rule.rule in ("vllm_v1", "vllm_v0") and kv.num_tokens < engine.max_model_len:
        fraction = f"engine.{rule.fraction_knob}"
        raise ScenarioError(_too_small_for_max_model_len(kv, engine), file=str(path),
                            path=field_of("engine.max_model_len", fraction, *_MEMORY_FIELDS))
    return kv


def _stage_capacity(model: ModelShape, hw: HardwareProfile, engine: EngineConfig,
                    preset: EnginePreset, path: Path, field_of, embedding: bool = True,
                    lm_head: bool = True, spec: SpecDecoding | None = None) -> KVCapacity:
    """:func:`replica_kv_capacity` of one GPU group holding ``model``'s layers (the whole model, or
    one pipeline stage's, with or without the embedding and the LM head)."""
    rule, tp = preset.memory, engine.tensor_parallel_size
    fraction = f"engine.{rule.fraction_knob}"
    field = field_of(fraction, *_MEMORY_FIELDS)
    try:
        terms = memory_terms(model, rule, total_bytes=hw.memory_total_bytes,
                             fraction=getattr(engine, rule.fraction_knob), tp=tp,
                             weight_bytes=DTYPE_BYTES[engine.dtype],
                             max_num_seqs=engine.max_num_seqs,
                             max_num_batched_tokens=engine.max_num_batched_tokens,
                             num_sms=hw.num_sms or 0,
                             dp_attention=engine.enable_dp_attention, embedding=embedding,
                             lm_head=lm_head,
                             quant=(load_quant_format(engine.weight_format)
                                    if engine.weight_format else None),
                             max_threads_per_sm=hw.max_threads_per_sm,
                             expert_parallel=engine.enable_expert_parallel,
                             attention_tp=engine.attention_tp_size
                             if engine.enable_dp_attention else 1,
                             redundant_experts=engine.num_redundant_experts)
        terms = _with_overrides(terms, engine)
        per_token = kv_bytes_per_token(model, engine)
        if spec is not None and rule.rule != "sglang":
            # SGLang sizes the target's pool first; the drafter's weights and its pool of
            # as many tokens come out of the memory left (model_runner_kv_cache_mixin.py
            # init_memory_pool: draft_runner_cache_size, sglang 0.5.7 wheel)
            draft_w = spec.draft_weight_bytes_per_gpu
            terms = dataclasses.replace(terms, weight_bytes=terms.weight_bytes + draft_w,
                                        available_kv_bytes=terms.available_kv_bytes - draft_w)
            per_token += spec.draft_kv_bytes_per_token
        kv = pool_from_terms(terms, tensor_parallel_size=tp, kv_bytes_per_token=per_token,
                             block_size=engine.block_size)
    except ScenarioError as exc:
        raise exc.with_context(file=str(path), path=field) from None
    if not terms.graphs_fit:
        log.warning("%s: %s: %s", path, field, _graphs_do_not_fit(terms, rule.fraction_knob))
    if engine.kv_cache_memory_gib is not None:
        kv_bytes = engine.kv_cache_memory_gib * GIB     # compared first: 1e300 has no int
        if kv_bytes > terms.available_kv_bytes:
            raise ScenarioError(
                f"kv_cache_memory_gib {engine.kv_cache_memory_gib:g} per GPU exceeds the "
                f"{terms.available_kv_bytes / GIB:.2f} GiB left after weights and activations",
                file=str(path), path=field_of("engine.kv_cache_memory_gib"))
        try:
            kv = pool_from_terms(dataclasses.replace(terms, available_kv_bytes=int(kv_bytes)),
                                 tensor_parallel_size=tp,
                                 kv_bytes_per_token=kv.kv_bytes_per_token,
                                 block_size=engine.block_size)
        except ScenarioError as exc:     # less than one block (kv_cache_memory_gib: 1e-9)
            raise exc.with_context(file=str(path),
                                   path=field_of("engine.kv_cache_memory_gib")) from None
    return kv


def _graphs_do_not_fit(terms: MemoryTerms, knob: str) -> str:
    """The warning of a graph pool that does not fit beside the budget (vLLM captures the
    graphs after the pool is sized and runs out of memory: ``MemoryTerms.graphs_fit``)."""
    need, room = terms.graphs_beside_budget_bytes, terms.graph_headroom_bytes
    most = (terms.total_bytes - terms.outside_budget_bytes - need) / terms.total_bytes
    return (f"CUDA graphs take {need / GIB:.2f} GiB per GPU beside the {knob} budget, where "
            f"only {room / GIB:.2f} GiB is free ({terms.total_bytes / GIB:.2f} GiB − budget "
            f"{terms.budget_bytes / GIB:.2f} − CUDA context and communicators "
            f"{terms.outside_budget_bytes / GIB:.2f}): the engine would run out of memory "
            f"capturing them or right after; lower {knob} to <= {most:.4f}")


def _too_small_for_max_model_len(kv: KVCapacity, engine: EngineConfig) -> str:
    """vLLM's start-up refusal (``vllm/v1/core/kv_cache_utils.py``
    ``check_enough_kv_cache_memory`` at v0.19.0; V0: ``raise_if_cache_size_invalid``)."""
    need_gib = engine.max_model_len * kv.kv_bytes_per_token / kv.tensor_parallel_size / GIB
    have_gib = kv.num_tokens * kv.kv_bytes_per_token / kv.tensor_parallel_size / GIB
    return (f"one max_model_len ({engine.max_model_len:,}) request needs {need_gib:.2f} GiB of KV "
            f"cache per GPU, more than the {have_gib:.2f} GiB available, so vLLM refuses to "
            f"start; the cache holds {kv.num_tokens:,} tokens: set max_model_len <= "
            f"{kv.num_tokens:,}, or raise the memory fraction or tensor_parallel_size")


def _with_overrides(terms: MemoryTerms, engine: EngineConfig) -> MemoryTerms:
    """``terms`` with the scenario's non-torch / CUDA-graph memory per GPU where it gives them."""
    changes = {}
    if engine.non_torch_memory_gib is not None:
        changes["non_torch_bytes"] = int(engine.non_torch_memory_gib * GIB)
    if engine.cudagraph_memory_gib is not None:
        changes["cudagraph_bytes"] = int(engine.cudagraph_memory_gib * GIB)
    if not changes:
        return terms
    new = dataclasses.replace(terms, **changes)
    freed = terms.non_torch_bytes + terms.cudagraph_bytes - new.non_torch_bytes - new.cudagraph_bytes
    return dataclasses.replace(new, available_kv_bytes=terms.available_kv_bytes + freed)


def kv_bytes_per_token(model: ModelShape, engine: EngineConfig) -> int:
    """KV bytes per token of one replica, all TP shards together.

    When tensor_parallel_size exceeds the KV heads, vLLM replicates heads so
    each GPU holds one (vllm/model_executor/models/llama.py, num_kv_heads =
    max(1, total_kv_heads // tp_size)); MLA's latent is held whole by every rank.
    Only the layers whose cache grows with the sequence count
    (:meth:`~capsim.profiles.models.ModelShape.paged_kv_bytes_per_token`).
    """
    per_token = model.paged_kv_bytes_per_token(engine.kv_dtype_bytes)
    tp = engine.tensor_parallel_size
    if engine.enable_dp_attention:     # each token's KV on the GPUs of its request's rank
        tp = engine.attention_tp_size
        if tp == 1:
            return per_token
    # MLA caches one latent per token that every TP rank holds whole (vLLM's
    # MLAAttentionSpec has num_kv_heads 1): like one KV head replicated.
    heads = 1 if model.is_mla else model.num_key_value_heads
    return per_token * tp // heads if tp > heads else per_token
