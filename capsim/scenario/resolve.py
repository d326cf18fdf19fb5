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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from capsim.common.errors import ScenarioError
from capsim.common.schema import StrictModel
from capsim.cost.operators import check_tensor_parallel
from capsim.cost.pricer import StepPricer
from capsim.kv.capacity import KVCapacity, activation_reserve_bytes, kv_capacity
from capsim.profiles.hardware import HardwareProfile, load_hardware
from capsim.profiles.links import LinkProfile, resolve_link
from capsim.profiles.models import ModelShape, load_model
from capsim.scenario.disagg import ROLES, PoolConfig
from capsim.scenario.schema import DTYPE_BYTES, ClusterConfig, EngineConfig, Scenario, VariantSpec
from capsim.scenario.validation import one_line_error
from capsim.scenario.workload import WorkloadConfig

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

    @property
    def num_gpus(self) -> int:
        return self.num_replicas * self.engine.tensor_parallel_size

    def pricer(self, model: ModelShape) -> StepPricer:
        """The roofline of one of its replicas running ``model`` (hardware, TP, dtypes)."""
        return StepPricer(model, self.hardware, self.engine.tensor_parallel_size,
                          weight_dtype=self.engine.dtype,
                          kv_cache_dtype_bytes=self.engine.kv_dtype_bytes)


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

    @property
    def disaggregated(self) -> bool:
        return self.transfer is not None

    def pool(self, role: str = "colocated") -> Pool:
        """The pool of ``role`` (``colocated``, ``prefill`` or ``decode``).

        Raises:
            KeyError: the variant has no such pool.
        """
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


def resolve_variant(spec: Scenario, index: int, v: VariantSpec, path: Path) -> RunConfig:
    where = f"variants.{index}" if spec.variants else ""
    if v.disaggregation is not None:
        return _resolve_disaggregated(spec, index, v, path)
    model = _named(load_model, v.model or spec.model, path, f"{where}.model" if v.model else "model")
    hw = _named(load_hardware, v.hardware or spec.hardware, path,
                f"{where}.hardware" if v.hardware else "hardware")
    engine = _merged(EngineConfig, spec.engine, v.engine, path, where, "engine")
    cluster = _merged(ClusterConfig, spec.cluster, v.cluster, path, where, "cluster")
    try:
        engine = engine.resolved(model)
    except ValueError as exc:
        raise ScenarioError(str(exc), file=str(path),
                            path=f"{where}.engine" if v.engine else "engine") from None
    if engine.dtype == "fp8":   # the chip must have FP8 tensor cores (datasheet)
        _named(hw.peak_flops, "fp8", path, f"{where}.engine.dtype" if where else "engine.dtype")
    _named(lambda _: check_tensor_parallel(model, engine.tensor_parallel_size), "", path,
           f"{where}.engine.tensor_parallel_size" if "tensor_parallel_size" in v.engine
           else "engine.tensor_parallel_size")
    memory_knobs = {"gpu_memory_utilization", "tensor_parallel_size", "kv_cache_memory_gib"}
    kv = _capacity(model, hw, engine, path,
                   where if (memory_knobs & set(v.engine) or v.hardware or v.model) else "")
    return RunConfig(variant=v.name, description=v.description, seed=spec.seed,
                     workload=spec.workload, model=model,
                     pools=(Pool("colocated", hw, engine, kv, cluster.num_replicas),),
                     router=cluster.router)


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
        link = resolve_link(d.link)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, file=str(path), path=f"{where}.link") from None
    base = pools["decode"][0]
    return replace(base, variant=v.name, description=v.description, pools=(prefill, decode),
                   transfer=KVTransfer(link, d.router, d.layerwise_overlap))


def _resolve_pool(spec: Scenario, index: int, v: VariantSpec, role: str, pool: PoolConfig,
                  path: Path) -> tuple[RunConfig, Pool]:
    """One pool of a disaggregated variant, resolved as a co-located variant with the
    pool's overrides: (that variant, its pool in ``role``)."""
    where = f"variants.{index}.disaggregation.{role}"
    engine = {**v.engine, **pool.engine}
    if pool.tensor_parallel_size is not None:
        if "tensor_parallel_size" in pool.engine:
            raise ScenarioError("give tensor_parallel_size once (pool or pool engine)",
                                file=str(path), path=f"{where}.engine.tensor_parallel_size")
        engine["tensor_parallel_size"] = pool.tensor_parallel_size
    variant = v.model_copy(update={
        "name": f"{v.name}/{role}", "disaggregation": None,
        "hardware": pool.hardware or v.hardware, "engine": engine,
        "cluster": {**v.cluster, "num_replicas": pool.num_replicas}})
    try:
        run = resolve_variant(spec, index, variant, path)
    except ScenarioError as exc:
        raise _pool_error(exc, index, where, pool) from None
    resolved = run.pool()
    if resolved.engine.scheduler != "continuous":
        raise ScenarioError("a disaggregated pool runs continuous batching (static batching "
                            "cannot hand a request over after its first token); valid: continuous",
                            file=str(path), path=f"{where}.engine.scheduler")
    return run, replace(resolved, role=role)


def _pool_error(exc: ScenarioError, index: int, where: str, pool: PoolConfig) -> ScenarioError:
    """Re-point an error raised while resolving a pool at the pool's YAML path.

    ``variants.<i>.engine.x`` → ``variants.<i>.disaggregation.<role>.engine.x``;
    ``variants.<i>.hardware`` → ``....<role>.hardware`` when the pool names one.
    Errors about the model or scenario-level fields keep their path.
    """
    path = exc.path or ""
    head = f"variants.{index}."
    tail = path[len(head):] if path.startswith(head) else path
    if tail.startswith("engine") or (tail == "hardware" and pool.hardware is not None):
        path = f"{where}.{tail}"
    return ScenarioError(exc.message, file=exc.file, path=path or where)


def _named(loader, name: str, path: Path, field: str):
    try:
        return loader(name)
    except ScenarioError as exc:
        raise exc.with_context(file=str(path), path=field) from None


def _merged(model: type[StrictModel], base: StrictModel, override: dict[str, Any], path: Path,
            where: str, section: str):
    data = {**base.model_dump(exclude_unset=True), **override}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        prefix = f"{where}.{section}" if where and field in override else section
        raise one_line_error(exc, model, path, prefix) from None


def _capacity(model: ModelShape, hw: HardwareProfile, engine: EngineConfig, path: Path,
              where: str) -> KVCapacity:
    try:
        kv = kv_capacity(
            hbm_bytes=hw.hbm_bytes,
            tensor_parallel_size=engine.tensor_parallel_size,
            gpu_memory_utilization=engine.gpu_memory_utilization,
            weight_bytes=model.weight_bytes(DTYPE_BYTES[engine.dtype]),
            kv_bytes_per_token=kv_bytes_per_token(model, engine),
            block_size=engine.block_size,
            activation_reserve_bytes=activation_reserve_bytes(
                model.hidden_size, model.intermediate_size, model.vocab_size,
                engine.max_num_batched_tokens, engine.tensor_parallel_size),
            non_torch_bytes=int(engine.non_torch_memory_gib * GIB) * engine.tensor_parallel_size,
            cudagraph_bytes=int(engine.cudagraph_memory_gib * GIB) * engine.tensor_parallel_size,
        )
    except ScenarioError as exc:
        field = f"{where}.engine.gpu_memory_utilization" if where else "engine.gpu_memory_utilization"
        raise exc.with_context(file=str(path), path=field) from None
    if engine.kv_cache_memory_gib is None:
        return kv
    kv_bytes = int(engine.kv_cache_memory_gib * GIB) * engine.tensor_parallel_size
    if kv_bytes > kv.kv_cache_bytes:
        raise ScenarioError(
            f"kv_cache_memory_gib {engine.kv_cache_memory_gib:g} per GPU exceeds the "
            f"{kv.kv_cache_bytes / GIB / engine.tensor_parallel_size:.2f} GiB left after weights "
            "and activations", file=str(path),
            path=f"{where}.engine.kv_cache_memory_gib" if where else "engine.kv_cache_memory_gib")
    return dataclasses.replace(kv, kv_cache_bytes=kv_bytes,
                               num_gpu_blocks=kv_bytes // (engine.block_size * kv.kv_bytes_per_token))


def kv_bytes_per_token(model: ModelShape, engine: EngineConfig) -> int:
    """KV bytes per token of one replica, all TP shards together.

    When tensor_parallel_size exceeds the KV heads, vLLM replicates heads so
    each GPU holds one (vllm/model_executor/models/llama.py, num_kv_heads =
    max(1, total_kv_heads // tp_size)).
    """
    per_token = model.kv_bytes_per_token(engine.kv_dtype_bytes)
    tp, heads = engine.tensor_parallel_size, model.num_key_value_heads
    return per_token * tp // heads if tp > heads else per_token


def kv_log_lines(run: RunConfig) -> list[str]:
    """vLLM's KV start-up lines of a variant; one set per pool (prefixed) when disaggregated."""
    if not run.disaggregated:
        pool = run.pool()
        return pool.kv.log_lines(pool.engine.max_model_len)
    return [f"{p.role}: {line}" for p in run.pools
            for line in p.kv.log_lines(p.engine.max_model_len)]


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
        out += [f"    {line}" for line in pool.kv.log_lines(eng.max_model_len)]
    return out
