"""Resolving a variant: presets loaded, engine defaults filled, memory sized, pools made.

A variant of a scenario becomes one frozen :class:`RunConfig`, everything
``sim.simulate`` needs besides the trace. Resolution loads the model and GPU
profile, fills the engine's model-dependent defaults, checks the rules vLLM
enforces (tensor parallelism, token budget, FP8 support) and sizes the KV cache
(:mod:`capsim.kv.capacity`). A disaggregated variant (DistServe, OSDI'24;
Splitwise, ISCA'24) resolves each pool exactly like a co-located variant whose
``hardware`` and ``engine`` are the variant's with the pool's overrides on top,
so every rule, default and memory check applies per pool.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from capsim.common.errors import ScenarioError
from capsim.common.schema import StrictModel
from capsim.cost.operators import check_tensor_parallel, pp_layer_partition, stage_shape
from capsim.cost.pipeline import PipelinePricer
from capsim.cost.pricer import StepPricer
from capsim.kv.capacity import KVCapacity, pool_from_terms
from capsim.kv.memory import MemoryTerms, memory_terms
from capsim.profiles.engines import (EnginePreset, HostOverhead, engine_preset_names,
                                     load_engine_preset)
from capsim.profiles.hardware import HardwareProfile, hardware_names, load_hardware
from capsim.profiles.links import LinkNumbers, LinkProfile, link_names, resolve_link
from capsim.profiles.models import ModelShape, load_model, model_names
from capsim.profiles.policies import knob_policies, policy_capabilities
from capsim.profiles.startup import TERMS as STARTUP_TERMS
from capsim.profiles.startup import load_startup
from capsim.profiles.quantization import load_quant_format, weight_layout
from capsim.scenario.disagg import ROLES, PoolConfig
from capsim.scenario.fleet import AutoscalingConfig, FailuresConfig
from capsim.scenario.paths import locate
from capsim.scenario.schema import DTYPE_BYTES, ClusterConfig, EngineConfig, Scenario, VariantSpec
from capsim.scenario.speculative import SERIAL_DRAFTERS, SpecDecoding, resolve_speculative
from capsim.scenario.validation import one_line_error
from capsim.scenario.workload import WorkloadConfig

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from capsim.scenario.resolve_pools import PooledFleet

GIB = 2**30

@dataclass(frozen=True)
class Pool:
    """Identical replicas, each one tensor-parallel engine with its GPU, knobs and KV cache.

    A co-located variant has one pool (``role`` ``colocated``); a disaggregated one a
    ``prefill`` and a ``decode`` pool, each resolved with every rule, default and memory
    check of a co-located variant.
    """

    role: str
    hardware: HardwareProfile
    engine: EngineConfig
    kv: KVCapacity
    num_replicas: int
    preset: EnginePreset
    spec: SpecDecoding | None = None     # engine.speculative, resolved (None: off)

    @property
    def host_overhead(self) -> HostOverhead:
        """The preset's host terms with ``engine.async_scheduling`` applied. Left unset, a
        vLLM V1 preset schedules asynchronously unless a draft-model or n-gram drafter runs
        (vllm/config/vllm.py ``VllmConfig`` at v0.19.0: ``async_scheduling`` None is set
        True unless the speculative method is not EAGLE / MTP)."""
        knob = self.engine.async_scheduling
        if knob is None and self.spec is not None and self.spec.method in SERIAL_DRAFTERS:
            knob = False
        return self.preset.host_overhead.resolved(knob)

    @property
    def engine_label(self) -> str:
        """``vllm-v1 (vLLM 0.19.0)``, with ``, async scheduling off`` (or ``on``) where this
        pool's host work does not overlap the GPU as its preset's does by default."""
        overlap = self.host_overhead.overlap
        if overlap == self.preset.host_overhead.overlap:
            return self.preset.label
        return f"{self.preset.label}, async scheduling {'on' if overlap == 'async' else 'off'}"

    @property
    def num_gpus(self) -> int:
        return self.num_replicas * self.engine.gpus_per_replica

    def draft_pricer(self) -> StepPricer | None:
        """The roofline of one draft pass (:mod:`capsim.profiles.speculative`): the
        drafter's shape on this pool's GPUs, TP and dtypes, without the engine's host
        overhead (the draft passes run inside the step); None without a GPU drafter."""
        if self.spec is None or self.spec.draft is None:
            return None
        return StepPricer(self.spec.draft, self.hardware, self.engine.tensor_parallel_size,
                          **self._pricer_kwargs(moe=self.spec.draft.is_moe))

    def _pricer_kwargs(self, moe: bool = True) -> dict:
        """The engine's dtypes, MoE placement and kernels, quantization and all-reduce for a
        :class:`StepPricer`; DP attention and expert parallelism only where ``moe``."""
        eng = self.engine
        return dict(weight_dtype=eng.dtype, kv_cache_dtype_bytes=eng.kv_dtype_bytes,
                    routing_skew=eng.moe_routing_skew,
                    dp_attention=eng.enable_dp_attention and moe,
                    expert_parallel=eng.enable_expert_parallel and moe,
                    quantization=eng.quantization, all_reduce=self.preset.tp_all_reduce,
                    engine=self.preset.engine, moe_backend=eng.moe_backend)

    def pricer(self, model: ModelShape) -> StepPricer | PipelinePricer:
        """The roofline of one of its replicas running ``model`` (hardware, TP, PP, EP,
        dtypes) with its engine's host overhead: a :class:`PipelinePricer` with
        pipeline_parallel_size > 1."""
        host = self.host_overhead.for_tensor_parallel(self.engine.tensor_parallel_size)
        steps = self.engine.num_scheduler_steps
        if steps > 1:          # scheduled once per window: its per-step work spread over it
            host = host.model_copy(update={"per_step_s": host.per_step_s / steps,
                                           "per_seq_s": host.per_seq_s / steps})
        eng = self.engine
        scale_out = resolve_link(self.hardware.scale_out_link) \
            if self.hardware.scale_out_link else None
        kwargs = self._pricer_kwargs()
        if eng.pipeline_parallel_size > 1:
            return PipelinePricer(model, self.hardware, eng.tensor_parallel_size,
                                  eng.pipeline_parallel_size, host=host, scale_out=scale_out,
                                  **kwargs)
        return StepPricer(model, self.hardware, eng.tensor_parallel_size, host=host,
                          scale_out=scale_out, **kwargs)

    @property
    def matmul_dtype(self) -> str:
        """The peak the layer matmuls run at (the quantization format's on this GPU); MFU
        is measured against it."""
        fmt = load_quant_format(self.engine.weight_format or "bf16")
        return fmt.compute_dtype(self.hardware, "fp16" if self.engine.dtype == "fp16" else "bf16",
                                 self.preset.engine)


@dataclass(frozen=True)
class KVTransfer:
    """How a disaggregated variant moves each prompt's KV cache from the prefill pool to
    the decode pool: the link, the decode-side router, layer-wise overlap."""

    link: LinkProfile
    router: str
    layerwise_overlap: bool


@dataclass(frozen=True)
class RunConfig:
    """One variant, fully resolved: everything ``sim.simulate`` needs besides the trace.

    ``pools`` is ``(colocated,)`` or ``(prefill, decode)``; arrivals reach the first
    pool's replicas through ``router`` (the scenario's ``cluster.router``); ``transfer``
    is set exactly when the variant is disaggregated.
    """

    variant: str
    description: str
    seed: int
    workload: WorkloadConfig
    model: ModelShape
    pools: tuple[Pool, ...]
    router: str
    transfer: KVTransfer | None = None
    autoscaling: AutoscalingConfig | None = None   # cluster.autoscaling (scenario/fleet.py)
    failures: FailuresConfig | None = None         # cluster.failures (scenario/fleet.py)
    provisioning_delay_s: float = 0.0              # a new replica's start-up, s
    fleet: "PooledFleet | None" = None             # cluster.pools (scenario/resolve_pools.py)
    router_queue_timeout_s: float | None = None    # cluster.router_queue_timeout_s

    @property
    def disaggregated(self) -> bool:
        return self.transfer is not None

    @property
    def static_batching(self) -> bool:
        """Some pool runs static batching: replies return whole (TPOT and ITL 0)."""
        return any(p.engine.scheduler == "static" for p in self.pools)

    @property
    def pooled(self) -> bool:
        """A heterogeneous / multi-model fleet (``cluster.pools``): ``pools`` holds one
        :class:`Pool` per fleet pool, its ``role`` the pool's name."""
        return self.fleet is not None

    def pool(self, role: str = "colocated") -> Pool:
        """The pool of ``role`` (``colocated``, ``prefill`` or ``decode``).

        Raises:
            KeyError: the variant has no such pool, or it is pooled (``cluster.pools``:
                its pools are ``fleet.pools``).
        """
        if self.fleet is not None:
            raise KeyError(f"variant {self.variant} has several pools (cluster.pools); "
                           "read run.fleet.pools")
        for p in self.pools:
            if p.role == role:
                return p
        raise KeyError(f"variant {self.variant} has no {role} pool")

    @property
    def serving_pool(self) -> Pool:
        """The pool that streams the replies: the only pool, or a split's decode pool
        (sweep and sizing tables label a variant's hardware and TP by it)."""
        return self.pools[-1]

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    @property
    def num_replicas(self) -> int:
        return sum(p.num_replicas for p in self.pools)

    @property
    def label(self) -> str:
        """``1P1D``-style name of a disaggregated split (replicas, not GPUs); "" co-located."""
        if not self.disaggregated:
            return ""
        return f"{self.pool('prefill').num_replicas}P{self.pool('decode').num_replicas}D"

    def with_hardware(self, hw: HardwareProfile) -> "RunConfig":
        """This variant with every pool on ``hw``, KV sizes kept (a calibrated copy of the
        same GPU's profile)."""
        return replace(self, pools=tuple(replace(p, hardware=hw) for p in self.pools))

    def with_replicas(self, num_replicas: int) -> "RunConfig":
        """This co-located variant on ``num_replicas`` replicas (a sizing candidate)."""
        return replace(self, pools=(replace(self.pool(), num_replicas=num_replicas),))

    def with_pool_replicas(self, counts: dict[str, int]) -> "RunConfig":
        """This pooled variant with ``counts[name]`` replicas in pool ``name`` (the others
        as they are); a pool given 0 leaves the fleet (a sizing mix)."""
        fleet = self.fleet.with_counts(counts)
        return replace(self, fleet=fleet, pools=tuple(fp.pool for fp in fleet.pools))


def resolve_variant(spec: Scenario, index: int, v: VariantSpec, path: Path) -> RunConfig:
    """Variant ``index`` of ``spec`` (``v``) as a RunConfig: model and GPU profile loaded
    (with hardware overrides), the engine preset's defaults filled in, vLLM's rules
    checked, the KV cache sized by the preset's memory rule.

    Raises:
        ScenarioError: naming the file and the YAML path of the offending field.
    """
    where = f"variants.{index}" if spec.variants else ""
    if v.disaggregation is not None:
        return _resolve_disaggregated(spec, index, v, path)
    model = _named(lambda name: _load_model(name, path), v.model or spec.model, path,
                   f"{where}.model" if v.model else "model")
    hw = _named(lambda name: _load_hardware(name, path), v.hardware or spec.hardware, path,
                f"{where}.hardware" if v.hardware else "hardware")
    hw = _overridden(hw, spec.hardware_overrides, v.hardware_overrides, path, where)
    engine, preset = _engine(spec.engine, v.engine, model, hw, path, where)
    cluster = _merged(ClusterConfig, spec.cluster, v.cluster, path, where, "cluster")
    _check_weight_format(engine, hw, v, path, where, model)
    tp_field = (f"{where}.engine.tensor_parallel_size" if "tensor_parallel_size" in v.engine
                else "engine.tensor_parallel_size")
    _named(lambda _: check_tensor_parallel(model, engine.tensor_parallel_size), "", path, tp_field)
    _check_expert_parallel(model, engine, path, where, set(v.engine))
    _check_pipeline_parallel(model, engine, path, where, set(v.engine))
    _check_scale_out(hw, spec, v, path, where)
    if not (engine.enable_dp_attention and engine.enable_expert_parallel):
        _named(lambda _: hw.check_tp_in_node(engine.tensor_parallel_size), "", path, tp_field)
    spec_dec = _speculative(spec, v, engine, cluster, model, path, where)
    kv = _capacity(model, hw, engine, preset, path,
                   lambda *fields: _memory_path(spec, v, where, fields), spec_dec)
    _check_fleet(cluster, set(v.cluster), path, where)
    scaling = _autoscaling(cluster, spec, engine, model, path, where, v)
    return RunConfig(variant=v.name, description=v.description, seed=spec.seed,
                     workload=spec.workload, model=model,
                     pools=(Pool("colocated", hw, engine, kv, cluster.num_replicas, preset,
                                 spec_dec),),
                     router=cluster.router, autoscaling=cluster.autoscaling,
                     failures=cluster.failures, provisioning_delay_s=scaling,
                     router_queue_timeout_s=cluster.router_queue_timeout_s)


def _check_fleet(cluster: ClusterConfig, variant_keys: set[str], path: Path,
                 where: str) -> None:
    """The replicas at t = 0 lie within the autoscaler's bounds; every failure names a
    replica that can exist (below ``num_replicas``, or ``max_replicas`` when autoscaled).

    Raises:
        ScenarioError: naming the variant's field when it set the cluster key, else the
            scenario's.
    """
    def at(key: str) -> str:
        return f"{where}.cluster.{key}" if where and key in variant_keys else f"cluster.{key}"
    a = cluster.autoscaling
    if a is not None and not a.min_replicas <= cluster.num_replicas <= a.max_replicas:
        key = "num_replicas" if "num_replicas" in variant_keys or "autoscaling" not in \
            variant_keys else "autoscaling"
        raise ScenarioError(f"num_replicas ({cluster.num_replicas}, the replicas at t = 0) must "
                            f"lie in [min_replicas, max_replicas] = [{a.min_replicas}, "
                            f"{a.max_replicas}]", file=str(path), path=at(key))
    most = a.max_replicas if a is not None else cluster.num_replicas
    for i, f in enumerate(cluster.failures.at if cluster.failures is not None else ()):
        if f.replica >= most:
            raise ScenarioError(f"replica {f.replica} does not exist: replicas are "
                                f"0..{most - 1}", file=str(path),
                                path=f"{at('failures')}.at.{i}.replica")


def _cluster_at(key: str, where: str, v: VariantSpec) -> tuple[str, str]:
    """Where ``cluster.<key>`` was given — the variant's (``<where>.cluster.<key>``) or the
    scenario's — and, for the scenario's, the words naming the variant it failed in."""
    if where and key in v.cluster:
        return f"{where}.cluster.{key}", ""
    return f"cluster.{key}", f" (in variant {v.name})" if where else ""


def _check_failures(spec: Scenario, engine: EngineConfig, path: Path, where: str,
                    v: VariantSpec) -> None:
    """Failures are modelled on vLLM's continuous scheduler, one sequence per request.

    Raises:
        ScenarioError: another scheduler, parallel sampling, or a closed loop.
    """
    at, which = _cluster_at("failures", where, v)
    if not policy_capabilities(engine.scheduler).failures:
        raise ScenarioError(f"replica failures are modelled for the continuous scheduler "
                            f"(vLLM), not {engine.scheduler}{which}", file=str(path), path=at)
    wl = spec.workload
    if wl.arrival is not None and wl.arrival.closed_loop:
        raise ScenarioError("replica failures need an open-loop workload (process: "
                            "concurrency is not supported with them)", file=str(path), path=at)
    for i, c in enumerate(wl.classes or ()):
        if c.n > 1:
            raise ScenarioError(f"replica failures are not modelled with parallel sampling "
                                f"(workload.classes.{i}.n = {c.n})", file=str(path), path=at)


def _autoscaling(cluster: ClusterConfig, spec: Scenario, engine: EngineConfig,
                 model: ModelShape, path: Path, where: str, v: VariantSpec) -> float:
    """The provisioning delay of an autoscaled variant's new replicas, s (0 without
    autoscaling): the startup profile's phases with the weights read at its storage
    bandwidth (:meth:`StartupProfile.delay_s`), each term overridable.

    Raises:
        ScenarioError: an unknown startup profile, or autoscaling a closed loop.
    """
    if cluster.failures is not None:
        _check_failures(spec, engine, path, where, v)
    a = cluster.autoscaling
    if a is None:
        return 0.0
    at, _ = _cluster_at("autoscaling", where, v)
    if spec.workload.arrival is not None and spec.workload.arrival.closed_loop:
        raise ScenarioError("autoscaling follows an open loop's load; process: concurrency "
                            "keeps a fixed number of requests in flight", file=str(path),
                            path=at)
    prov = a.provisioning
    if prov.delay_s is not None:
        return prov.delay_s
    try:
        profile = load_startup(prov.profile)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, file=str(path),        # it lists the valid names
                            path=f"{at}.provisioning.profile") from None
    terms = {k: v for k, v in prov.model_dump().items()
             if k in STARTUP_TERMS and v is not None}
    return profile.model_copy(update=terms).delay_s(model.weight_bytes(DTYPE_BYTES[engine.dtype]))


def _speculative(spec: Scenario, v: VariantSpec, engine: EngineConfig, cluster: ClusterConfig,
                 model: ModelShape, path: Path, where: str) -> SpecDecoding | None:
    """``engine.speculative`` resolved, or None. Modelled on vLLM V1's continuous batching
    over paged KV in a co-located replica: other policies and layouts, pipeline
    parallelism, a disaggregated pool and replica failures are refused (one line)."""
    cfg = engine.speculative
    if cfg is None:
        return None
    at = f"{where}.engine.speculative" if where and "speculative" in v.engine \
        else "engine.speculative"
    refusals = (
        (not policy_capabilities(engine.scheduler).speculative or engine.kv_allocator != "paged",
         f"is modelled on vLLM V1's continuous batching over paged KV; this engine runs "
         f"scheduler {engine.scheduler} with kv_allocator {engine.kv_allocator}"),
        (engine.num_scheduler_steps > 1, "does not combine with num_scheduler_steps > 1"),
        (engine.pipeline_parallel_size > 1, "is not modelled with pipeline_parallel_size > 1"),
        (cluster.failures is not None,
         "is not modelled with cluster.failures (a cut attempt's streamed chunks)"),
    )
    for refused, why in refusals:
        if refused:
            raise ScenarioError(f"speculative decoding {why}; remove engine.speculative "
                                "or change that", file=str(path), path=at)
    # A verifying sequence is scheduled k + 1 tokens (vLLM V1 scheduler.py): they must fit
    # one step's token budget and the context window.
    room = min(engine.max_num_batched_tokens, engine.max_model_len) - 1
    if cfg.num_speculative_tokens > room:
        raise ScenarioError(
            f"num_speculative_tokens {cfg.num_speculative_tokens} does not fit: k + 1 tokens "
            f"per sequence must fit max_num_batched_tokens ({engine.max_num_batched_tokens}) "
            f"and max_model_len ({engine.max_model_len}); valid: 1 to {room}",
            file=str(path), path=f"{at}.num_speculative_tokens")
    try:
        return resolve_speculative(
            cfg, model, spec.workload.class_names, spec.seed,
            lambda name: _named(lambda n: _load_model(n, path), name, path, f"{at}.model"),
            lambda shape: kv_bytes_per_token(shape, engine), DTYPE_BYTES[engine.dtype],
            engine.tensor_parallel_size)
    except ValueError as exc:
        field, message = exc.args
        raise ScenarioError(message, file=str(path), path=f"{at}.{field}") from None


def _check_expert_parallel(model: ModelShape, engine: EngineConfig, path: Path, where: str,
                           variant_keys: set[str]) -> None:
    """Expert parallelism, DP attention and a routing skew need routed experts; EP needs
    the replica's GPUs (tensor_parallel_size) to divide the experts (vLLM's FusedMoE gives
    each EP rank num_experts / ep_size of them)."""
    def at(key: str) -> str:
        return f"{where}.engine.{key}" if where and key in variant_keys else f"engine.{key}"

    for key in ("enable_expert_parallel", "enable_dp_attention", "moe_routing_skew"):
        if getattr(engine, key) and not model.is_moe:
            raise ScenarioError(f"{key} needs a mixture-of-experts model; {model.name} is dense",
                                file=str(path), path=at(key))
    tp = engine.tensor_parallel_size
    if engine.enable_expert_parallel and model.num_experts % tp:
        raise ScenarioError(
            f"expert parallel size {tp} (tensor_parallel_size) must divide num_experts "
            f"{model.num_experts} of {model.name}", file=str(path),
            path=at("tensor_parallel_size") if "tensor_parallel_size" in variant_keys
            else at("enable_expert_parallel"))


def _check_pipeline_parallel(model: ModelShape, engine: EngineConfig, path: Path, where: str,
                             variant_keys: set[str]) -> None:
    """vLLM's rule: every stage holds at least one layer (``get_pp_indices``)."""
    key = "pipeline_parallel_size"
    at = f"{where}.engine.{key}" if where and key in variant_keys else f"engine.{key}"
    _named(lambda _: pp_layer_partition(model.num_hidden_layers, engine.pipeline_parallel_size),
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
    _named(resolve_link, hw.scale_out_link, path, at)


def _check_weight_format(engine: EngineConfig, hw: HardwareProfile, v: VariantSpec, path: Path,
                         where: str, model: ModelShape | None = None) -> None:
    """The chip must have the tensor cores each weight format computes on (datasheet), or
    the format a weight-only fallback; a model whose checkpoint records its formats
    (``weight_formats``) takes no other ``quantization`` (vLLM refuses it:
    :func:`~capsim.profiles.quantization.weight_layout`). The error names
    ``engine.quantization`` (or ``engine.dtype`` for dtype fp8; ``model`` for the
    checkpoint's own formats), the variant's when it set it."""
    knob = "quantization" if engine.quantization is not None else "dtype"
    field = f"{where}.engine.{knob}" if where and knob in v.engine else f"engine.{knob}"
    if model is not None and model.weight_formats:
        layout = _named(lambda _: weight_layout(model, engine.weight_format), "", path,
                        field if engine.weight_format is not None else
                        (f"{where}.model" if v.model else "model"))
        at = field if engine.weight_format is not None else \
            (f"{where}.model" if v.model else "model")
        for fmt in {f.name: f for f in layout.formats.values()}.values():
            _named(lambda _: fmt.compute_dtype(hw), "", path, at)
        return
    if engine.weight_format is None:
        return
    fmt = load_quant_format(engine.weight_format)
    _named(lambda _: fmt.compute_dtype(hw), "", path, field)


def _overridden(hw: HardwareProfile, base: dict[str, Any], variant: dict[str, Any], path: Path,
                where: str) -> HardwareProfile:
    """``hw`` with the scenario's then the variant's ``hardware_overrides`` applied; the
    profile's name says it was changed (``h100-sxm[memory_total_gib=70]``), so every
    table and report shows it."""
    if not base and not variant:
        return hw
    for changes, at in ((base, "hardware_overrides"), (variant, f"{where}.hardware_overrides")):
        for key in changes:
            if key not in HardwareProfile.model_fields or key in ("name", "sources"):
                valid = ", ".join(sorted(set(HardwareProfile.model_fields) - {"name", "sources"}))
                raise ScenarioError(f"unknown hardware profile field '{key}'; valid: {valid}",
                                    file=str(path), path=f"{at}.{key}")
        if changes:      # each level on its own first, so an error names the level it is in
            _with_changes(hw, changes, path, at)
    return _with_changes(hw, {**base, **variant}, path,
                         f"{where}.hardware_overrides" if where and variant else "hardware_overrides")


def _with_changes(hw: HardwareProfile, changes: dict[str, Any], path: Path,
                  at: str) -> HardwareProfile:
    """``hw`` with ``changes``; a mapping (``peak_flops_per_s: {fp8: …}``,
    ``efficiency``) is merged into the profile's, not put in its place."""
    data = hw.model_dump()
    for key, value in changes.items():
        old = data.get(key)
        data[key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) \
            else value
    label = ",".join(f"{k}={v}" for k, v in changes.items())
    data |= {"name": f"{hw.name}[{label}]",
             "sources": {**hw.sources, **{k: "scenario hardware_overrides" for k in changes}}}
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        raise one_line_error(exc, HardwareProfile, path, at) from None


def _engine(base: EngineConfig, override: dict[str, Any], model: ModelShape, hw: HardwareProfile,
            path: Path, where: str) -> tuple[EngineConfig, EnginePreset]:
    """The variant's engine knobs over the scenario's over the preset's defaults on ``hw``,
    resolved (:meth:`EngineConfig.resolved`), and the preset."""
    user = {**base.model_dump(exclude_unset=True), **override}
    name = user.get("preset", "vllm-v1")
    at = f"{where}.engine" if where and "preset" in override else "engine"
    preset = _named(lambda n: _load_engine_preset(n, path), name, path, f"{at}.preset")
    _check_preset_knobs(preset, name, path, f"{at}.preset")
    knobs = {k: v for k, v in user.items() if k != "preset"}
    defaults = preset.defaults_for(hw.name, hw.memory_total_bytes / GIB, knobs)
    scheduler_knobs = {k: v for k, v in preset.scheduler.knobs.items()
                       if k in EngineConfig.model_fields}
    engine = _merged(EngineConfig, EngineConfig(), {**scheduler_knobs, **defaults, **user}, path,
                     where, "engine", user_keys=set(override))
    _check_engine_knobs(engine, preset, set(user), path, where, set(override))
    if engine.moe_backend == "marlin" and hw.platform != "cuda" and model.is_moe:
        # vLLM's Marlin MoE kernels are CUDA-only: MarlinExpertsBase._supports_current_device
        # is is_cuda() and capability >= 8.0 (vllm/model_executor/layers/fused_moe/
        # fused_marlin_moe.py at 00a130a0), so the MoE layer of --moe-backend marlin fails
        # to build on ROCm (oracle/mxfp4.py select_mxfp4_moe_backend raises).
        at = f"{where}.engine.moe_backend" if where and "moe_backend" in override \
            else "engine.moe_backend"
        raise ScenarioError(
            f"vLLM's Marlin MoE kernels run on NVIDIA GPUs only (CUDA, compute capability "
            f">= 8.0); hardware '{hw.name}' runs {hw.platform} (valid: auto)",
            file=str(path), path=at)
    if engine.enable_prefix_caching and _no_prefix_cache(engine):
        # a default the scenario did not give (vLLM V1's, the schema's) does not apply
        engine = engine.model_copy(update={"enable_prefix_caching": False})
    try:
        engine = engine.resolved(model, set(knobs))
    except ValueError as exc:
        # The message starts with the knob it is about; name where that knob was given.
        key = str(exc).split(" ", 1)[0]
        if where and key in override:
            at = f"{where}.engine.{key}"
        elif key in user:
            at = f"engine.{key}"
        else:
            at = f"{where}.engine" if override else "engine"
        raise ScenarioError(str(exc), file=str(path), path=at) from None
    if engine.scheduler == "tgi" and engine.max_num_batched_tokens < engine.max_model_len - 1:
        # TGI's launcher (launcher/src/main.rs at v2.1.0): max_batch_prefill_tokens must be
        # >= max_input_tokens, which defaults to max_total_tokens - 1.
        key = "max_num_batched_tokens" if "max_num_batched_tokens" in user else "max_model_len"
        at = f"{where}.engine.{key}" if where and key in override else f"engine.{key}"
        raise ScenarioError(
            f"TGI refuses to start with max_num_batched_tokens (its max_batch_prefill_tokens) "
            f"{engine.max_num_batched_tokens:,} below max_input_tokens = max_model_len - 1 = "
            f"{engine.max_model_len - 1:,}: raise max_num_batched_tokens or lower max_model_len",
            file=str(path), path=at)
    return engine, preset


#: Engine knobs that belong to one scheduling policy (the policy table's ``knobs``).
_POLICY_KNOBS = knob_policies()


def _check_engine_knobs(engine: EngineConfig, preset: EnginePreset, user: set[str], path: Path,
                        where: str, variant_keys: set[str]) -> None:
    """Engine-specific knobs only with their engine; contradictory combinations refused.

    The error names the variant's field when the variant set it; when the scenario's
    ``engine:`` set it and the variant chose the preset, it names the variant's preset
    and says which scenario-wide knob conflicts."""
    def fail(key: str, message: str) -> None:
        if where and key in variant_keys:
            at = f"{where}.engine.{key}"
        elif where and "preset" in variant_keys:
            at = f"{where}.engine.preset"
            message += f" (engine.{key} is set for the whole scenario: move it into the " \
                       "variants that need it)"
        else:
            at = f"engine.{key}"
        raise ScenarioError(message, file=str(path), path=at)

    policies = _preset_policies(preset)
    if engine.scheduler not in policies:
        fail("scheduler", f"engine preset '{preset.name}' runs scheduler "
                          f"{preset.scheduler.policy}, not {engine.scheduler} "
                          f"(valid: {', '.join(policies)})")

    fraction = preset.memory.fraction_knob
    for knob in ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction",
                 "cuda_memory_fraction"):
        if knob in user and knob != fraction:
            fail(knob, f"{knob} is not a knob of engine preset '{preset.name}', which sizes its "
                       f"KV cache with {fraction}")
    for knob, policy in _POLICY_KNOBS.items():
        if knob in user and engine.scheduler != policy:
            fail(knob, f"{knob} belongs to the {policy} scheduler; this engine runs "
                       f"scheduler: {engine.scheduler}")
    if engine.async_scheduling is not None and not preset.host_overhead.async_scheduling_knob:
        valid = [n for n in engine_preset_names()
                 if load_engine_preset(n).host_overhead.async_scheduling_knob]
        fail("async_scheduling", f"engine preset '{preset.name}' has no async_scheduling knob "
                                 f"(its host work is {preset.host_overhead.overlap} with the "
                                 f"GPU step; valid with: {', '.join(valid)})")
    if engine.async_scheduling and engine.speculative is not None \
            and engine.speculative.method in SERIAL_DRAFTERS:
        fail("async_scheduling", f"vLLM schedules asynchronously with EAGLE / MTP drafters "
                                 f"only, not {engine.speculative.method} (vllm/config/vllm.py); "
                                 "valid: false, or leave it unset")
    if engine.moe_backend != "auto" and preset.engine != "vllm":
        fail("moe_backend", f"moe_backend is vLLM's --moe-backend; engine preset "
                            f"'{preset.name}' runs {preset.engine} (valid: auto)")
    if engine.num_scheduler_steps > 1:
        if not preset.scheduler.knobs.get("multi_step_scheduling"):
            fail("num_scheduler_steps", f"engine preset '{preset.name}' has no multi-step "
                                        "scheduling (valid with: vllm-0.6, vllm-0.6.4)")
        if engine.chunked:
            fail("num_scheduler_steps", "multi-step scheduling runs without chunked prefill "
                                        "(vLLM 0.6 refuses both); set enable_chunked_prefill: "
                                        "false")
    if "long_prefill_token_threshold" in user and engine.scheduler == "continuous":
        if "long_prefill_token_threshold" not in preset.scheduler.knobs:
            valid = [n for n in engine_preset_names()
                     if "long_prefill_token_threshold" in load_engine_preset(n).scheduler.knobs]
            fail("long_prefill_token_threshold", f"engine preset '{preset.name}' has no "
                 f"long_prefill_token_threshold (vLLM V1's; valid with: {', '.join(valid)})")
        if not engine.chunked:
            fail("long_prefill_token_threshold", "it caps the prompt chunk a request gets per "
                                                 "step: set enable_chunked_prefill: true")
    if engine.scheduler in ("trtllm", "tgi") and engine.preemption_mode == "swap":
        fail("preemption_mode", f"scheduler {engine.scheduler} reserves each request's whole KV "
                                "at admission and never preempts; swap preemption contradicts "
                                "it (valid: recompute)")
    if engine.preemption_mode == "swap" and not preset.scheduler.knobs.get("swap_preemption"):
        fail("preemption_mode", f"engine preset '{preset.name}' preempts by recompute only "
                                "(swap to host memory: vLLM V0, presets vllm-0.6, vllm-0.6.4)")
    caps = policy_capabilities(engine.scheduler)
    if caps.no_chunked_prefill and engine.enable_chunked_prefill:
        fail("enable_chunked_prefill", caps.no_chunked_prefill)
    if engine.kv_allocator != "paged" and not caps.contiguous_kv:
        fail("kv_allocator", f"scheduler {engine.scheduler} runs on its engine's paged KV "
                             "cache; the contiguous layouts are vLLM-style baselines (valid: "
                             "paged)")
    reason = _no_prefix_cache(engine)
    if reason and engine.enable_prefix_caching and "enable_prefix_caching" in user:
        cause = "kv_allocator" if engine.kv_allocator != "paged" else "scheduler"
        if where and cause in variant_keys and "enable_prefix_caching" not in variant_keys:
            fail(cause, f"{reason}, and engine.enable_prefix_caching: true is set for the "
                        "whole scenario (move it into the variants that need it)")
        fail("enable_prefix_caching", f"{reason}; valid: false")


def _no_prefix_cache(engine: EngineConfig) -> str:
    """Why ``engine`` runs without a prefix cache whatever ``enable_prefix_caching`` says
    ('' when it can have one): TGI 2.1 had none (the v3 router's radix allocator and
    USE_PREFIX_CACHING came with TGI 2.3, huggingface/text-generation-inference 8deeaca and
    b70ae09); static batching and the contiguous layouts are baselines without one (the
    policy's reason: its row in :data:`capsim.profiles.policies.POLICY_TABLE`)."""
    reason = policy_capabilities(engine.scheduler).no_prefix_cache
    if reason:
        return reason
    if engine.kv_allocator != "paged":
        return (f"kv_allocator {engine.kv_allocator} has no prefix cache (it reuses paged "
                "blocks)")
    return ""


def _preset_policies(preset: EnginePreset) -> tuple[str, ...]:
    """The ``engine.scheduler`` values a preset can run: its own policy; a vLLM preset also
    static batching (the baseline it is compared with)."""
    own = preset.scheduler.policy
    return (own, "static") if own == "continuous" else (own,)


def _resolve_disaggregated(spec: Scenario, index: int, v: VariantSpec, path: Path) -> "RunConfig":
    """Resolve variant ``index`` (which has ``disaggregation``) into one RunConfig.

    Each pool is resolved by :func:`resolve_variant` with the pool's overrides merged in.

    Raises:
        ScenarioError: naming ``variants.<i>.disaggregation.<...>`` for an
            unknown link or hardware, a pool whose model does not fit, a
            static scheduler, KV cache dtypes that differ between pools, or
            ``cluster.num_replicas`` given next to the pools.
    """
    d = v.disaggregation
    where = f"variants.{index}.disaggregation"
    if "num_replicas" in v.cluster:
        raise ScenarioError("a disaggregated variant sizes its pools with "
                            "disaggregation.prefill/decode.num_replicas; remove cluster.num_replicas",
                            file=str(path), path=f"variants.{index}.cluster.num_replicas")
    for key in ("autoscaling", "failures"):
        if v.cluster.get(key) is not None or (
                getattr(spec.cluster, key) is not None and key not in v.cluster):
            raise ScenarioError(f"{key} applies to one pool of co-located replicas, not to a "
                                f"disaggregated variant's pools (set cluster: {{{key}: null}} "
                                "on this variant)", file=str(path),
                                path=f"variants.{index}.cluster.{key}")
    pools = {role: _resolve_pool(spec, index, v, role, getattr(d, role), path)
             for role in ROLES}
    prefill, decode = (pools[role][1] for role in ROLES)
    if prefill.engine.kv_dtype_bytes != decode.engine.kv_dtype_bytes:
        raise ScenarioError(
            f"prefill and decode pools store the KV cache in different dtypes "
            f"({prefill.engine.kv_cache_dtype} vs {decode.engine.kv_cache_dtype}); "
            "the transferred cache must be usable as is: set the same kv_cache_dtype on both",
            file=str(path), path=f"{where}.decode.engine.kv_cache_dtype")
    try:
        link = resolve_link(_located_link(d.link, path))
    except ScenarioError as exc:
        raise _in_named_file(exc, path, f"{where}.link") from None
    base = pools["decode"][0]
    return replace(base, variant=v.name, description=v.description, pools=(prefill, decode),
                   transfer=KVTransfer(link, d.router, d.layerwise_overlap))


def pool_engine(variant_engine: dict[str, Any], engine: dict[str, Any], tp: int | None,
                path: Path, at: str) -> dict[str, Any]:
    """A pool's engine knobs: the variant's, the pool's ``engine`` on top, and the pool's
    ``tensor_parallel_size`` (given once: here or in its engine).

    Raises:
        ScenarioError: tensor_parallel_size given both ways (names ``at``.engine...).
    """
    out = {**variant_engine, **engine}
    if tp is not None:
        if "tensor_parallel_size" in engine:
            raise ScenarioError("give tensor_parallel_size once (pool or pool engine)",
                                file=str(path), path=f"{at}.engine.tensor_parallel_size")
        out["tensor_parallel_size"] = tp
    return out


def _resolve_pool(spec: Scenario, index: int, v: VariantSpec, role: str, pool: PoolConfig,
                  path: Path) -> tuple[RunConfig, Pool]:
    """One pool of a disaggregated variant, resolved as a co-located variant with the
    pool's overrides: (that variant, its pool in ``role``)."""
    where = f"variants.{index}.disaggregation.{role}"
    engine = pool_engine(v.engine, pool.engine, pool.tensor_parallel_size, path, where)
    variant = v.model_copy(update={
        "name": f"{v.name}/{role}", "disaggregation": None,
        "hardware": pool.hardware or v.hardware, "engine": engine,
        "cluster": {**v.cluster, "num_replicas": pool.num_replicas}})
    try:
        run = resolve_variant(spec, index, variant, path)
    except ScenarioError as exc:
        raise _pool_error(exc, index, where, v, pool) from None

    def knob_at(key: str) -> str:      # where the user gave the pool's engine knob
        return engine_knob_path(key, pool.engine, where, v.engine, f"variants.{index}")

    resolved = run.pool()
    if resolved.spec is not None:
        raise ScenarioError(
            "speculative decoding is not modelled in a disaggregated pool; remove "
            "engine.speculative from this variant", file=str(path),
            path=knob_at("speculative"))
    if resolved.engine.pipeline_parallel_size > 1:
        raise ScenarioError(
            "pipeline parallelism is not modelled in a disaggregated pool (the KV handoff "
            "assumes one stage per replica); valid: pipeline_parallel_size 1",
            file=str(path), path=knob_at("pipeline_parallel_size"))
    if role not in policy_capabilities(resolved.engine.scheduler).roles:
        key = "scheduler" if "scheduler" in engine or "preset" not in engine else "preset"
        raise ScenarioError(
            f"a disaggregated pool runs vLLM's continuous batching (capsim hands a request "
            f"from prefill to decode pool in that policy only); this pool runs scheduler "
            f"{resolved.engine.scheduler} (engine preset '{resolved.preset.name}'); valid: "
            "continuous with a vLLM preset", file=str(path), path=knob_at(key))
    return run, replace(resolved, role=role)


def engine_knob_path(rest: str, pool_engine: dict[str, Any], pool_at: str,
                     variant_engine: dict[str, Any], variant_at: str | None) -> str:
    """The YAML path of a pool's engine knob ``rest`` (``key`` or ``key.sub...``) where the
    user gave it: the pool's ``engine`` (``<pool_at>.engine.rest``), else the variant's
    (``<variant_at>.engine.rest``; None: the file has no variants), else the scenario's
    (``engine.rest``). A pool is resolved as a variant with the pool's knobs merged into its
    engine; this is the one rule that points its errors back (disaggregated pools here,
    pooled fleets in :mod:`capsim.scenario.resolve_pools`)."""
    key = rest.partition(".")[0]
    if key in pool_engine:
        return f"{pool_at}.engine.{rest}"
    if key in variant_engine and variant_at:
        return f"{variant_at}.engine.{rest}"
    return f"engine.{rest}"


def _pool_error(exc: ScenarioError, index: int, where: str, v: VariantSpec,
                pool: PoolConfig) -> ScenarioError:
    """Re-point an error raised while resolving a pool at the YAML path the user wrote.

    The pool was resolved as variant ``index`` with the pool's knobs merged into its
    engine, so ``variants.<i>.engine.x`` is the pool's ``engine.x`` (or its
    ``tensor_parallel_size``) when the pool gives x, else the variant's own (a rule across
    the knobs, ``variants.<i>.engine``, names the pool's engine if it gives any);
    ``variants.<i>.hardware`` is ``....<role>.hardware`` when the pool names one.
    Errors about the model or scenario-level fields keep their path.
    """
    path = exc.path or ""
    head = f"variants.{index}."
    tail = path[len(head):] if path.startswith(head) else None
    if tail is not None and tail.startswith("engine."):
        rest = tail.removeprefix("engine.")
        if rest.partition(".")[0] == "tensor_parallel_size" and \
                pool.tensor_parallel_size is not None:
            path = f"{where}.tensor_parallel_size"
        else:
            path = engine_knob_path(rest, pool.engine, where, v.engine, head[:-1])
    elif tail == "engine":          # a rule across the merged knobs
        path = f"{where}.engine" if pool.engine else path if v.engine else "engine"
    elif tail == "hardware" and pool.hardware is not None:
        path = f"{where}.hardware"
    return ScenarioError(exc.message, file=exc.file, path=path or where)


def _named(loader, name: str, path: Path, field: str):
    """``loader(name)``; an error names the scenario ``path`` and ``field``, or, when it is
    a mistake inside the file ``name`` points at (a user's profile), that file and its own
    field, then which field of the scenario named it."""
    try:
        return loader(name)
    except ScenarioError as exc:
        raise _in_named_file(exc, path, field) from None


def _in_named_file(exc: ScenarioError, path: Path, field: str) -> ScenarioError:
    if exc.file and exc.file != str(path):
        return ScenarioError(f"{exc.message} ({field} of {path})", file=exc.file, path=exc.path)
    return exc.with_context(file=str(path), path=field)


# A scenario's names and paths (capsim.scenario.paths): a shipped name, or a file relative
# to the scenario's directory.

def _load_model(value: str, scenario: Path) -> ModelShape:
    return load_model(locate(value, scenario.parent, kind="model", shipped=model_names(),
                             what="a Hugging Face config.json, its directory or a model YAML",
                             dir_ok=True))


def _load_hardware(value: str, scenario: Path) -> HardwareProfile:
    return load_hardware(locate(value, scenario.parent, kind="hardware",
                                shipped=hardware_names(), what="a GPU profile YAML"))


def _check_preset_knobs(preset: EnginePreset, name: str, scenario: Path, field: str) -> None:
    """The knobs a preset file sets (``defaults``, each ``conditional_defaults`` entry's
    ``set``) must be valid engine knobs: an error names the preset's file and the key in
    it, then the scenario field that named the preset (not the scenario's engine knob,
    which the user never wrote)."""
    if name in engine_preset_names():
        return                      # shipped presets: tests/profiles hold them to it
    file = locate(name, scenario.parent, kind="engine preset", shipped=engine_preset_names(),
                  what="an engine preset YAML")
    sets = [("defaults", preset.defaults)] + [(f"conditional_defaults.{i}.set", c.set)
                                              for i, c in enumerate(preset.conditional_defaults)]
    for at, knobs in sets:
        try:
            EngineConfig.model_validate(knobs)
        except ValidationError as exc:
            err = one_line_error(exc, EngineConfig, Path(file), at)
            raise ScenarioError(f"{err.message} ({field} of {scenario})", file=str(file),
                                path=err.path) from None


def _load_engine_preset(value: str, scenario: Path) -> EnginePreset:
    return load_engine_preset(locate(value, scenario.parent, kind="engine preset",
                                     shipped=engine_preset_names(), what="an engine preset YAML"))


def _located_link(spec: str | LinkNumbers, scenario: Path) -> str | Path | LinkNumbers:
    """``link:`` (or ``link: {name: ...}``) with a file name made relative to the scenario."""
    name = spec if isinstance(spec, str) else spec.name
    if name is None:
        return spec
    where = locate(name, scenario.parent, kind="link", shipped=link_names(),
                   what="a link YAML", also="; or give {bandwidth_gbit_per_s: ..., latency_s: ...}")
    if isinstance(spec, str):
        return where
    return spec.model_copy(update={"name": str(where)})


def _merged(model: type[StrictModel], base: StrictModel, override: dict[str, Any], path: Path,
            where: str, section: str, user_keys: set[str] | None = None):
    """``override`` over the fields ``base`` set, validated; errors point at the variant's
    field when it gave it (``user_keys``, default: ``override``'s keys), else the scenario's."""
    data = {**base.model_dump(exclude_unset=True), **override}
    variant_keys = set(override) if user_keys is None else user_keys
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        prefix = f"{where}.{section}" if where and field in variant_keys else section
        raise one_line_error(exc, model, path, prefix) from None


#: What sizes a replica's memory, most direct first (after the error's own knob).
_MEMORY_FIELDS = ("engine.kv_cache_memory_gib", "engine.tensor_parallel_size",
                  "engine.pipeline_parallel_size",
                  "hardware_overrides.memory_total_gib", "hardware_overrides.hbm_bytes",
                  "hardware_overrides.num_sms", "hardware_overrides.max_threads_per_sm",
                  "hardware", "model", "engine.preset",
                  "engine.max_num_seqs", "engine.max_num_batched_tokens")
#: Knobs that move memory only through the activation peak: named after the rest.
_INDIRECT = {"engine.max_num_seqs", "engine.max_num_batched_tokens"}


def _memory_path(spec: Scenario, v: VariantSpec, where: str, fields: tuple[str, ...]) -> str:
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


def _capacity(model: ModelShape, hw: HardwareProfile, engine: EngineConfig, preset: EnginePreset,
              path: Path, field_of, spec: SpecDecoding | None = None) -> KVCapacity:
    """The pool of one replica: the preset's memory rule on this GPU (:mod:`capsim.kv.memory`),
    with the scenario's ``non_torch_memory_gib`` / ``cudagraph_memory_gib`` /
    ``kv_cache_memory_gib`` in place of the rule's terms where given. ``field_of(*fields)``:
    the YAML path an error names (:func:`_memory_path`).

    With pipeline parallelism each stage's GPUs hold their layers' weights and KV (the
    first stage the embedding, the last the LM head and the sampler's activations), and
    the replica's cache is the smallest stage's in tokens: vLLM takes the minimum block
    count over its workers (``get_kv_cache_configs`` in vllm/v1/core/kv_cache_utils.py).

    With speculative decoding (``spec``) the drafter's weights load with the model's
    ("Model loading took" includes them) and its KV layers share the paged pool, so a
    block holds the target's and the drafter's KV of its tokens.

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
    """:func:`_capacity` of one GPU group holding ``model``'s layers (the whole model, or
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
                             expert_parallel=engine.enable_expert_parallel)
        terms = _with_overrides(terms, engine)
        per_token = kv_bytes_per_token(model, engine)
        if spec is not None:
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
        kv = pool_from_terms(dataclasses.replace(terms, available_kv_bytes=int(kv_bytes)),
                             tensor_parallel_size=tp, kv_bytes_per_token=kv.kv_bytes_per_token,
                             block_size=engine.block_size)
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
    if engine.enable_dp_attention:     # each token's KV on the one GPU serving its request
        return per_token
    # MLA caches one latent per token that every TP rank holds whole (vLLM's
    # MLAAttentionSpec has num_kv_heads 1): like one KV head replicated.
    heads = 1 if model.is_mla else model.num_key_value_heads
    return per_token * tp // heads if tp > heads else per_token


def pool_log_lines(pool: Pool) -> list[str]:
    """A pool's start-up lines as its engine logs them (per GPU): the preset, weights,
    the memory profile, the available KV memory, the KV cache size and concurrency; with
    speculative decoding its method, k and expected tokens per step."""
    lines = [f"engine {pool.engine_label}"]
    if pool.spec is not None:
        lines.append(pool.spec.log_line())
    return [*lines, *pool.kv.memory.log_lines(), *pool.kv.log_lines(pool.engine.max_model_len)]


def engine_label(run: RunConfig) -> str:
    """The engine preset(s) of a variant, e.g. ``vllm-v1 (vLLM 0.19.0)``; a split whose
    pools run different presets names both."""
    labels = list(dict.fromkeys(p.engine_label for p in run.pools))
    if len(labels) == 1:
        return labels[0]
    names = run.fleet.names if run.fleet is not None else [p.role for p in run.pools]
    return ", ".join(f"{name} {p.engine_label}" for name, p in zip(names, run.pools))


def scheduler_label(pool: Pool) -> str:
    """``continuous+chunked(2048)``, ``static``, ``trtllm(GUARANTEED_NO_EVICT, 8192)``, …"""
    eng = pool.engine
    if eng.scheduler == "static":
        return "static"
    chunk = f"+chunked({eng.max_num_batched_tokens})" if eng.chunked else ""
    if eng.scheduler == "trtllm":
        return f"trtllm({eng.capacity_scheduler_policy}, {eng.max_num_batched_tokens}){chunk}"
    return f"{eng.scheduler}{chunk}"


def kv_log_lines(run: RunConfig) -> list[str]:
    """A variant's start-up lines (:func:`pool_log_lines`); one set per pool (prefixed)
    when disaggregated."""
    if run.fleet is not None:
        return [f"{fp.name}: {line}" for fp in run.fleet.pools for line in pool_log_lines(fp.pool)]
    if not run.disaggregated:
        return pool_log_lines(run.pool())
    return [f"{p.role}: {line}" for p in run.pools for line in pool_log_lines(p)]


def pool_lines(run: RunConfig) -> list[str]:
    """What ``capsim validate`` prints for a disaggregated variant: split, link, each pool."""
    d = run.transfer
    out = [f"{run.variant}: {run.label} on {run.num_gpus} GPUs, KV over {d.link.name} "
           f"({d.link.bandwidth_bytes_per_s / 1e9:,.0f} GB/s per GPU and direction, "
           f"{d.link.latency_s * 1e6:,.0f} µs per transfer), decode router "
           f"{d.router}" + (", layer-wise overlap" if d.layerwise_overlap else "")]
    for pool in run.pools:
        eng = pool.engine
        out.append(f"  {pool.role}: {pool.num_replicas} × {pool.hardware.name} "
                   f"TP{eng.tensor_parallel_size}, {'chunked' if eng.chunked else 'unchunked'}, "
                   f"max_num_seqs {eng.max_num_seqs}, max_num_batched_tokens "
                   f"{eng.max_num_batched_tokens}")
        out += [f"    {line}" for line in pool_log_lines(pool)]
    return out
