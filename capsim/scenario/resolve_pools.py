"""Resolving a pooled variant (``cluster.pools``, :mod:`capsim.scenario.pools`): one
:class:`~capsim.scenario.run_config.FleetPool` per pool, the route rules and the model
each class asks for.

Each pool is resolved by :func:`~capsim.scenario.resolve_colocated.resolve_colocated` as a
co-located variant whose hardware, model, engine knobs and cluster are the variant's with
the pool's on top, so every rule, default and memory check applies per pool; an error is
re-pointed at the pool's YAML path (``cluster.pools.1.engine.max_num_seqs``).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.profiles.models import ModelShape
from capsim.scenario.pool_knobs import engine_knob_path, pool_engine
from capsim.scenario.pools import FleetPoolConfig
from capsim.scenario.profile_loading import load_model_at, named
from capsim.scenario.resolve_colocated import resolve_colocated
from capsim.scenario.run_config import FleetPool, PooledFleet, Route, RunConfig
from capsim.scenario.schema import ClusterConfig, Scenario, VariantSpec
from capsim.scenario.validation import merged


def pooled_cluster(spec: Scenario, v: VariantSpec) -> bool:
    """Whether variant ``v`` of ``spec`` runs a pooled fleet (its ``cluster.pools``, or the
    scenario's unless the variant sets ``pools: null``)."""
    if "pools" in v.cluster:
        return v.cluster["pools"] is not None
    return spec.cluster.pools is not None


def resolve_pooled(spec: Scenario, index: int, v: VariantSpec, path: Path) -> RunConfig:
    """Variant ``index`` (``v``) with ``cluster.pools`` as one :class:`RunConfig` whose
    ``fleet`` holds the pools.

    Raises:
        ScenarioError: naming the YAML path: two pools with one name, a pool that does not
            resolve (its model does not fit its GPUs, an unknown GPU, ...), a class asking
            for a model no pool serves, a route to a pool that does not exist or to a pool
            not serving the class's model, an unknown class in a route, or pools next to
            ``disaggregation``.
    """
    where = f"variants.{index}" if spec.variants else ""
    if v.disaggregation is not None:
        raise ScenarioError("a variant is either a pooled fleet (cluster.pools) or a "
                            "prefill/decode split (disaggregation), not both; remove one",
                            file=str(path), path=f"{where}.disaggregation")
    cluster = merged(ClusterConfig, spec.cluster, v.cluster, path, where, "cluster")

    def at(key: str) -> str:
        return f"{where}.cluster.{key}" if where and key in v.cluster else f"cluster.{key}"

    seen: dict[str, int] = {}
    for i, pc in enumerate(cluster.pools):
        if pc.name in seen:
            raise ScenarioError(f"pool name '{pc.name}' is already used by pool {seen[pc.name]}; "
                                "pool names must be unique", file=str(path),
                                path=f"{at('pools')}.{i}.name")
        seen[pc.name] = i
    # Pools route by least outstanding work unless told otherwise (a single fleet's default,
    # round_robin, stays as it was).
    policy = cluster.router if "router" in cluster.model_fields_set else \
        "least_outstanding_tokens"
    inner = "least_outstanding_tokens" if policy == "cost" else policy
    pools = tuple(_resolve_pool(spec, index, v, pc, inner, path, f"{at('pools')}.{i}")
                  for i, pc in enumerate(cluster.pools))
    default_model = named(lambda n: load_model_at(n, path), v.model or spec.model, path,
                          f"{where}.model" if v.model else "model")
    class_models = _class_models(spec, pools, default_model, path)
    routes = _routes(spec, cluster, pools, class_models, path, at("route"))
    fleet = PooledFleet(pools=pools, policy=policy, routes=routes,
                        class_models=class_models, class_ttft_s=_class_ttft_s(spec))
    return RunConfig(variant=v.name, description=v.description, seed=spec.seed,
                     workload=spec.workload, model=pools[0].model,
                     pools=tuple(p.pool for p in pools), router=policy, fleet=fleet,
                     router_queue_timeout_s=cluster.router_queue_timeout_s,
                     router_max_queued_requests=cluster.router_max_queued_requests,
                     router_rate_limit=cluster.router_rate_limit, saturation=cluster.saturation)


def _resolve_pool(spec: Scenario, index: int, v: VariantSpec, pc: FleetPoolConfig, router: str,
                  path: Path, at: str) -> FleetPool:
    """Pool ``pc`` resolved as a co-located variant (the variant's fields, the pool's on top)."""
    engine = pool_engine(v.engine, pc.engine, pc.tensor_parallel_size, path, at)
    cluster = {"num_replicas": pc.num_replicas, "router": router}
    for key in ("autoscaling", "failures"):
        value = getattr(pc, key)
        if value is not None:
            cluster[key] = value.model_dump(exclude_unset=True)
    synth = v.model_copy(update={
        "name": f"{v.name}/{pc.name}", "hardware": pc.hardware or v.hardware,
        "model": pc.model or v.model, "engine": engine, "cluster": cluster,
        "hardware_overrides": {**v.hardware_overrides, **pc.hardware_overrides}, "set": {}})
    alone = spec.model_copy(update={"cluster": ClusterConfig(), "variants": [synth]})

    def repoint(exc: ScenarioError) -> ScenarioError:
        return _pool_error(exc, index, v, pc, at, bool(spec.variants))
    try:
        with _warnings_repointed(repoint):
            run = resolve_colocated(alone, index, synth, path)
    except ScenarioError as exc:
        raise repoint(exc) from None
    return FleetPool(name=pc.name, pool=run.pool(), model=run.model,
                     autoscaling=run.autoscaling, failures=run.failures,
                     provisioning_delay_s=run.provisioning_delay_s)


#: Loggers whose warnings read ``"%s: %s: …" % (file, YAML path, …)`` while a pool resolves.
_WARNING_LOGGERS = ("capsim.scenario.engine_rules", "capsim.scenario.kv_sizing",
                    "capsim.scenario.spec_rules")


@contextmanager
def _warnings_repointed(repoint):
    """Warnings of the synthesized variant name the pool's YAML path, as its errors do."""
    def rewrite(record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 2 and isinstance(args[1], str):
            moved = repoint(ScenarioError("", path=args[1])).path
            record.args = (args[0], moved, *args[2:])
        return True
    loggers = [logging.getLogger(name) for name in _WARNING_LOGGERS]
    for logger in loggers:
        logger.addFilter(rewrite)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(rewrite)


def _pool_error(exc: ScenarioError, index: int, v: VariantSpec, pc: FleetPoolConfig, at: str,
                has_variants: bool) -> ScenarioError:
    """Re-point an error of the synthesized variant ``variants.<index>.X`` at the field that
    gave X: the pool's (``<at>.X``), else the variant's, else the scenario's."""
    path = exc.path or ""
    head = f"variants.{index}."
    if not path.startswith(head):
        return exc
    tail = path[len(head):]
    first, _, rest = tail.partition(".")
    variant = f"{head}{tail}" if has_variants else tail
    if first == "cluster":
        new = f"{at}.{rest}" if rest else at
    elif first == "engine":
        if rest.partition(".")[0] == "tensor_parallel_size" and \
                pc.tensor_parallel_size is not None:
            new = f"{at}.tensor_parallel_size"
        else:
            new = engine_knob_path(rest, pc.engine, at, v.engine,
                                   head[:-1] if has_variants else None)
    elif first in ("hardware", "model"):
        new = f"{at}.{first}" if getattr(pc, first) else variant
    elif first == "hardware_overrides":
        key = rest.partition(".")[0]
        new = f"{at}.{tail}" if key in pc.hardware_overrides else variant
    else:
        new = variant
    return ScenarioError(exc.message, file=exc.file, path=new)


def _class_models(spec: Scenario, pools: tuple[FleetPool, ...], default: ModelShape,
                  path: Path) -> tuple[str, ...]:
    """The model name each class asks for; a trace's one class asks for the default.

    Raises:
        ScenarioError: a class (or the default) asking for a model no pool serves.
    """
    served = sorted({p.model.name for p in pools})
    classes = spec.workload.classes or []
    out = []
    for i, c in enumerate(classes or [None]):
        field = f"workload.classes.{i}.model" if c is not None else "model"
        if c is not None and c.model is not None:
            name = named(lambda n: load_model_at(n, path), c.model, path, field).name
            asked = f"model {name}"
        else:
            name = default.name
            asked = f"model {name} (the variant's; a class names its own with model:)"
        if name not in served:
            raise ScenarioError(f"asks for {asked}, which no pool serves; pools serve: "
                                f"{', '.join(served)}", file=str(path), path=field)
        out.append(name)
    return tuple(out)


def check_class_models(spec: Scenario, run: RunConfig, path: Path) -> None:
    """A single fleet (or a prefill/decode split) serves its variant's model only: a class
    asking for another is refused.

    Raises:
        ScenarioError: naming ``workload.classes.<i>.model``.
    """
    for i, c in enumerate(spec.workload.classes or []):
        if c.model is None:
            continue
        field = f"workload.classes.{i}.model"
        name = named(lambda n: load_model_at(n, path), c.model, path, field).name
        if name != run.model.name:
            raise ScenarioError(f"asks for model {name}, which no pool serves; pools serve: "
                                f"{run.model.name} (several models need cluster.pools)",
                                file=str(path), path=field)


def _routes(spec: Scenario, cluster: ClusterConfig, pools: tuple[FleetPool, ...],
            class_models: tuple[str, ...], path: Path, at: str) -> tuple[Route, ...]:
    """The route rules with pool and class names resolved to indices.

    Raises:
        ScenarioError: a pool or class that does not exist, or a pool not serving the
            model the class asks for.
    """
    names = [p.name for p in pools]
    classes = [c.name for c in spec.workload.classes or []] or \
        [spec.workload.trace.class_name if spec.workload.trace else "default"]
    out = []
    for j, rule in enumerate(cluster.route):
        if rule.pool not in names:
            raise ScenarioError(f"no pool named '{rule.pool}'; valid: {', '.join(names)}",
                                file=str(path), path=f"{at}.{j}.pool")
        k = names.index(rule.pool)
        # a prompt must leave room for one output token in the pool's context window
        window = pools[k].pool.engine.max_model_len
        most = window - 1 if window is not None else None
        if None not in (most, rule.min_prompt_tokens) and rule.min_prompt_tokens > most:
            raise ScenarioError(
                f"min_prompt_tokens {rule.min_prompt_tokens:,} can route no request: pool "
                f"'{rule.pool}' takes prompts of at most {most:,} tokens (max_model_len "
                f"{most + 1:,}, one output token); valid: 1 to {most:,}",
                file=str(path), path=f"{at}.{j}.min_prompt_tokens")
        cid = None
        if rule.cls is not None:
            if rule.cls not in classes:
                raise ScenarioError(f"no workload class named '{rule.cls}'; valid: "
                                    f"{', '.join(classes)}", file=str(path),
                                    path=f"{at}.{j}.class")
            cid = classes.index(rule.cls)
            if pools[k].model.name != class_models[cid]:
                raise ScenarioError(f"pool '{rule.pool}' serves {pools[k].model.name}; class "
                                    f"'{rule.cls}' asks for {class_models[cid]}", file=str(path),
                                    path=f"{at}.{j}.pool")
        out.append(Route(cid, rule.min_prompt_tokens, k, rule.cls))
    return tuple(out)


def _class_ttft_s(spec: Scenario) -> tuple[float | None, ...]:
    """Each class's TTFT limit (its ``slo.ttft_ms``, else the scenario's), s."""
    base = spec.slo.ttft_ms
    classes = spec.workload.classes or [None]
    out = []
    for c in classes:
        ms = (c.slo or {}).get("ttft_ms", base) if c is not None else base
        out.append(ms / 1e3 if ms is not None else None)
    return tuple(out)
