"""A co-located variant's fleet over time: ``cluster.autoscaling`` and
``cluster.failures`` (:mod:`capsim.scenario.fleet`) checked against the replicas and the
workload, and a new replica's provisioning delay from its startup profile.

Public API:
    check_fleet(cluster, variant_keys, path, where)
    provisioning_delay_s(cluster, spec, engine, model, path, where, v) -> float
"""

from __future__ import annotations

from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.profiles.models import ModelShape
from capsim.profiles.startup import TERMS as STARTUP_TERMS
from capsim.profiles.startup import load_startup
from capsim.profiles.policies import policy_capabilities
from capsim.scenario.schema import DTYPE_BYTES, ClusterConfig, EngineConfig, Scenario, VariantSpec


def check_fleet(cluster: ClusterConfig, variant_keys: set[str], path: Path, where: str) -> None:
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


def provisioning_delay_s(cluster: ClusterConfig, spec: Scenario, engine: EngineConfig,
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
