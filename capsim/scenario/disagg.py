"""The ``disaggregation:`` section of a variant: prefill and decode pools and the KV link.

A disaggregated variant (DistServe, OSDI'24; Splitwise, ISCA'24) runs
prompts on a *prefill* pool and replies on a *decode* pool; each prompt's KV
cache crosses ``link`` in between::

    variants:
      - name: 1P1D
        disaggregation:
          prefill: {num_replicas: 1, tensor_parallel_size: 1,
                    engine: {max_num_batched_tokens: 8192}}
          decode:  {num_replicas: 1, hardware: h200-sxm}
          link: nvlink-4               # a name (capsim/profiles/data/links) or numbers:
          # link: {bandwidth_gbit_per_s: 400, latency_s: 3.0e-5}
          router: least_kv             # decode side: least_kv | round_robin
          layerwise_overlap: false

Each pool is resolved exactly like a co-located variant whose ``hardware``
and ``engine`` are the variant's with the pool's overrides on top (so every
rule, default and memory check applies per pool), then the pools are joined
into one :class:`DisaggRun`. Arrivals reach the prefill pool through the
variant's ``cluster.router``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from pydantic import Field, ValidationError, field_validator

from capsim.common.errors import ScenarioError
from capsim.profiles.links import LinkNumbers, LinkProfile, resolve_link
from capsim.common.schema import Int, StrictModel

if TYPE_CHECKING:
    from capsim.scenario.config import RunConfig, Scenario, VariantSpec

ROLES = ("prefill", "decode")


class PoolConfig(StrictModel):
    """One pool of identical replicas (each a tensor-parallel engine)."""

    num_replicas: Int = Field(gt=0, description="replicas in the pool, >= 1")
    tensor_parallel_size: Int | None = Field(default=None, gt=0,
                                             description="GPUs per replica; default: the variant's")
    hardware: str | None = Field(default=None, description="GPU profile; default: the variant's")
    engine: dict[str, Any] = Field(default_factory=dict,
                                   description="engine overrides for this pool (vLLM names)")


class DisaggregationConfig(StrictModel):
    """Prefill pool + decode pool + the link the KV cache crosses."""

    prefill: PoolConfig
    decode: PoolConfig
    link: str | LinkNumbers = Field(description="link name, or {bandwidth_gbit_per_s, latency_s}")
    router: Literal["least_kv", "round_robin"] = "least_kv"
    layerwise_overlap: bool = False

    @field_validator("link", mode="before")
    @classmethod
    def _link(cls, value: Any) -> Any:
        if isinstance(value, dict):
            try:
                return LinkNumbers.model_validate(value)
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ValueError(f"{where + ': ' if where else ''}"
                                 f"{err['msg'].removeprefix('Value error, ')}") from None
        if not isinstance(value, str):
            raise ValueError("give a link name (e.g. infiniband-ndr) or "
                             "{bandwidth_gbit_per_s: ..., latency_s: ...}")
        return value


@dataclass(frozen=True)
class DisaggRun:
    """A resolved disaggregated variant.

    ``prefill`` and ``decode`` are full co-located RunConfigs of one pool each
    (``cluster.num_replicas`` = the pool's replicas); the variant's own
    RunConfig carries the decode pool's hardware, engine and KV as its defaults.
    """

    prefill: "RunConfig"
    decode: "RunConfig"
    link: LinkProfile
    router: str
    layerwise_overlap: bool

    @property
    def num_gpus(self) -> int:
        return self.prefill.num_gpus + self.decode.num_gpus

    @property
    def label(self) -> str:
        """``1P1D``-style name of the split (replicas, not GPUs)."""
        return f"{self.prefill.cluster.num_replicas}P{self.decode.cluster.num_replicas}D"

    def pool(self, role: str) -> "RunConfig":
        return self.prefill if role == "prefill" else self.decode


Resolver = Callable[["Scenario", int, "VariantSpec", Path], "RunConfig"]


def resolve_disaggregated(spec: "Scenario", index: int, v: "VariantSpec", path: Path,
                          resolve: Resolver) -> "RunConfig":
    """Resolve variant ``index`` (which has ``disaggregation``) into one RunConfig.

    ``resolve`` is the co-located resolver (``config._resolve_variant``); it
    is called once per pool with the pool's overrides merged in.

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
    pools = {role: _resolve_pool(spec, index, v, role, getattr(d, role), path, resolve)
             for role in ROLES}
    if pools["prefill"].engine.kv_dtype_bytes != pools["decode"].engine.kv_dtype_bytes:
        raise ScenarioError(
            f"prefill and decode pools store the KV cache in different dtypes "
            f"({pools['prefill'].engine.kv_cache_dtype} vs {pools['decode'].engine.kv_cache_dtype}); "
            "the transferred cache must be usable as is: set the same kv_cache_dtype on both",
            file=str(path), path=f"{where}.decode.engine.kv_cache_dtype")
    try:
        link = resolve_link(d.link)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, file=str(path), path=f"{where}.link") from None
    run = DisaggRun(prefill=pools["prefill"], decode=pools["decode"], link=link,
                    router=d.router, layerwise_overlap=d.layerwise_overlap)
    base = pools["decode"]
    total = pools["prefill"].cluster.num_replicas + base.cluster.num_replicas
    return replace(base, variant=v.name, description=v.description,
                   cluster=base.cluster.model_copy(update={"num_replicas": total}), disagg=run)


def _resolve_pool(spec: "Scenario", index: int, v: "VariantSpec", role: str, pool: PoolConfig,
                  path: Path, resolve: Resolver) -> "RunConfig":
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
        run = resolve(spec, index, variant, path)
    except ScenarioError as exc:
        raise _pool_error(exc, index, where, pool) from None
    if run.engine.scheduler != "continuous":
        raise ScenarioError("a disaggregated pool runs continuous batching (static batching "
                            "cannot hand a request over after its first token); valid: continuous",
                            file=str(path), path=f"{where}.engine.scheduler")
    return run


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


def kv_log_lines(run: "RunConfig") -> list[str]:
    """vLLM's KV start-up lines of a variant; one set per pool (prefixed) when disaggregated."""
    if run.disagg is None:
        return run.kv.log_lines(run.engine.max_model_len)
    return [f"{role}: {line}" for role in ROLES
            for line in run.disagg.pool(role).kv.log_lines(run.disagg.pool(role).engine.max_model_len)]


def pool_lines(run: "RunConfig") -> list[str]:
    """What ``capsim validate`` prints for a disaggregated variant: split, link, each pool."""
    d = run.disagg
    out = [f"{run.variant}: {d.label} on {d.num_gpus} GPUs, KV over {d.link.name} "
           f"({d.link.bandwidth_bytes_per_s / 1e9:,.0f} GB/s per GPU and direction, "
           f"{d.link.latency_s * 1e6:,.0f} µs per transfer), decode router "
           f"{d.router}" + (", layer-wise overlap" if d.layerwise_overlap else "")]
    for role in ROLES:
        pool = d.pool(role)
        eng = pool.engine
        out.append(f"  {role}: {pool.cluster.num_replicas} × {pool.hardware.name} "
                   f"TP{eng.tensor_parallel_size}, {'chunked' if eng.chunked else 'unchunked'}, "
                   f"max_num_seqs {eng.max_num_seqs}, max_num_batched_tokens "
                   f"{eng.max_num_batched_tokens}")
        out += [f"    {line}" for line in pool.kv.log_lines(eng.max_model_len)]
    return out
