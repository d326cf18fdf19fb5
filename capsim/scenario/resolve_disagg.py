"""Resolving a disaggregated variant (``disaggregation:``, :mod:`capsim.scenario.disagg`):
a prefill and a decode pool (DistServe, OSDI'24; Splitwise, ISCA'24) and the KV link.

Each pool is resolved by :func:`~capsim.scenario.resolve_colocated.resolve_colocated` as a
co-located variant whose ``hardware`` and ``engine`` are the variant's with the pool's
overrides on top, so every rule, default and memory check applies per pool; an error is
re-pointed at the pool's YAML path.

Public API:
    resolve_disaggregated(spec, index, v, path) -> RunConfig
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.profiles.links import resolve_link
from capsim.profiles.policies import policy_capabilities
from capsim.scenario.disagg import ROLES, PoolConfig
from capsim.scenario.pool_knobs import engine_knob_path, pool_engine
from capsim.scenario.profile_loading import in_named_file, located_link
from capsim.scenario.resolve_colocated import resolve_colocated
from capsim.scenario.run_config import KVTransfer, Pool, RunConfig
from capsim.scenario.schema import Scenario, VariantSpec


def resolve_disaggregated(spec: Scenario, index: int, v: VariantSpec, path: Path) -> RunConfig:
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
        link = resolve_link(located_link(d.link, path))
    except ScenarioError as exc:
        raise in_named_file(exc, path, f"{where}.link") from None
    base = pools["decode"][0]
    return replace(base, variant=v.name, description=v.description, pools=(prefill, decode),
                   transfer=KVTransfer(link, d.router, d.layerwise_overlap))


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
        run = resolve_colocated(spec, index, variant, path)
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
    for key in ("max_waiting_requests", "max_inflight_requests"):
        if getattr(resolved.engine, key) is not None:
            raise ScenarioError(
                f"a replica's request limit ({key}) is not modelled in a disaggregated pool; "
                "limit the requests at the router instead (cluster.router_max_queued_requests, "
                "cluster.router_rate_limit)", file=str(path), path=knob_at(key))
    if resolved.engine.pipeline_parallel_size > 1:
        raise ScenarioError(
            "pipeline parallelism is not modelled in a disaggregated pool (the KV handoff "
            "assumes one stage per replica); valid: pipeline_parallel_size 1",
            file=str(path), path=knob_at("pipeline_parallel_size"))
    if role not in policy_capabilities(resolved.engine.scheduler).roles:
        key = "scheduler" if "scheduler" in engine or "preset" not in engine else "preset"
        raise ScenarioError(
            f"a disaggregated pool runs vLLM's continuous batching or SGLang's scheduler "
            f"(capsim hands a request from prefill to decode pool in those policies only); "
            f"this pool runs scheduler {resolved.engine.scheduler} (engine preset "
            f"'{resolved.preset.name}'); valid: continuous with a vLLM preset, sglang with "
            "an SGLang preset", file=str(path), path=knob_at(key))
    if role == "decode" and resolved.engine.scheduler == "sglang":
        # SGLang's decode server runs without the radix cache (server_args.py
        # _handle_pd_disaggregation: disable_radix_cache True, sglang 0.5.7 wheel)
        engine = resolved.engine.model_copy(update={"enable_prefix_caching": False})
        return run, replace(resolved, role=role, engine=engine)
    return run, replace(resolved, role=role)


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
