"""Resolving a co-located variant: one pool of identical replicas.

The steps, each its own module: the profiles the variant names
(:mod:`~capsim.scenario.profile_loading`), the engine and its rules
(:mod:`~capsim.scenario.engine_rules`), what the model asks of the GPUs
(:mod:`~capsim.scenario.hardware_rules`), speculative decoding
(:mod:`~capsim.scenario.spec_rules`), the KV cache (:mod:`~capsim.scenario.kv_sizing`)
and the fleet over time (:mod:`~capsim.scenario.resolve_fleet`). A disaggregated
variant's pools and a pooled fleet's pools are each resolved here too.

Public API:
    resolve_colocated(spec, index, v, path) -> RunConfig
    check_priced(pool, model, path, at)
"""

from __future__ import annotations

from pathlib import Path

from capsim.common.errors import ScenarioError
from capsim.profiles.models import ModelShape
from capsim.scenario.engine_rules import resolve_engine
from capsim.scenario.hardware_rules import check_hardware_fit
from capsim.scenario.kv_sizing import memory_path, replica_kv_capacity
from capsim.scenario.profile_loading import (load_hardware_at, load_model_at, named,
                                             with_hardware_overrides)
from capsim.scenario.resolve_fleet import check_fleet, provisioning_delay_s
from capsim.scenario.router_rules import check_router
from capsim.scenario.run_config import Pool, RunConfig
from capsim.scenario.schema import ClusterConfig, Scenario, VariantSpec
from capsim.scenario.spec_rules import speculative_decoding
from capsim.scenario.validation import merged


def resolve_colocated(spec: Scenario, index: int, v: VariantSpec, path: Path) -> RunConfig:
    """Variant ``index`` of ``spec`` (``v``, without ``disaggregation``) as a RunConfig
    with one ``colocated`` pool: model and GPU profile loaded (with hardware overrides),
    the engine preset's defaults filled in, vLLM's rules checked, the KV cache sized by
    the preset's memory rule.

    Raises:
        ScenarioError: naming the file and the YAML path of the offending field.
    """
    where = f"variants.{index}" if spec.variants else ""
    model = named(lambda name: load_model_at(name, path), v.model or spec.model, path,
                  f"{where}.model" if v.model else "model")
    hw = named(lambda name: load_hardware_at(name, path), v.hardware or spec.hardware, path,
               f"{where}.hardware" if v.hardware else "hardware")
    hw = with_hardware_overrides(hw, spec.hardware_overrides, v.hardware_overrides, path, where)
    engine, preset = resolve_engine(spec.engine, v.engine, model, hw, path, where,
                                    spec.workload)
    cluster = merged(ClusterConfig, spec.cluster, v.cluster, path, where, "cluster")
    check_hardware_fit(model, hw, engine, spec, v, path, where)
    spec_dec = speculative_decoding(spec, v, engine, cluster, model, path, where)
    kv = replica_kv_capacity(model, hw, engine, preset, path,
                             lambda *fields: memory_path(spec, v, where, fields), spec_dec)
    check_fleet(cluster, set(v.cluster), path, where)
    check_router(cluster, spec.workload, set(v.cluster), path, where, engine)
    scaling = provisioning_delay_s(cluster, spec, engine, model, path, where, v)
    pool = Pool("colocated", hw, engine, kv, cluster.num_replicas, preset, spec_dec)
    check_priced(pool, model, path, f"{where}.engine" if where and v.engine else "engine")
    return RunConfig(variant=v.name, description=v.description, seed=spec.seed,
                     workload=spec.workload, model=model, pools=(pool,),
                     router=cluster.router, router_options=cluster.router_options,
                     saturation=cluster.saturation,
                     autoscaling=cluster.autoscaling,
                     failures=cluster.failures, provisioning_delay_s=scaling,
                     router_queue_timeout_s=cluster.router_queue_timeout_s,
                     router_max_queued_requests=cluster.router_max_queued_requests,
                     router_rate_limit=cluster.router_rate_limit)




def check_priced(pool: Pool, model: ModelShape, path: Path, at: str) -> None:
    """Build the pool's step pricers (the target's and a drafter's) as the run will: what
    the cost model refuses is refused here, so ``capsim validate`` refuses what ``capsim
    run`` would (an MTP drafter's all-to-all across nodes passed validate and failed the
    run).

    Raises:
        ScenarioError: the pricer's own, naming ``at`` unless it names a field already.
    """
    try:
        pool.pricer(model)
        pool.draft_pricer()
    except ScenarioError as exc:
        if exc.file is not None:
            raise
        raise ScenarioError(exc.message, file=str(path), path=exc.path or at) from None
