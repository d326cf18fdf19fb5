"""Wiring a pooled fleet (``cluster.pools``) into a run and adding its pools to the result.

:func:`make_pooled` builds one :class:`~capsim.engine.fleet.Fleet` per pool behind a
:class:`~capsim.engine.pooled.PooledCluster`; :func:`pooled_result` adds what each pool was
and did (:class:`~capsim.results.model.PoolResult`), the pool of each request and of each
ITL run, and labels each replica with its pool's name. With one pool the figures are a
single fleet's, number for number.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from capsim.engine.clock import Environment
from capsim.engine.fleet import Fleet, policy_label
from capsim.engine.pooled import PoolItl, PooledCluster
from capsim.engine.recorder import ItlRecorder
from capsim.engine.pipeline import replica_class
from capsim.engine.request import Request
from capsim.results.model import PoolResult, RunResult
from capsim.scenario.describe import scheduler_label
from capsim.scenario.run_config import RunConfig
from capsim.sim.request_log import RequestLog
from capsim.workload import RequestTrace


def make_pooled(env: Environment, run: RunConfig, trace: RequestTrace, itl: ItlRecorder,
                itl_classes: int, on_finish: Callable[[Request], None], log: RequestLog,
                on_lost: Callable[[Request, str], None], macro_steps: bool, bin_s: float,
                done: Callable[[], bool]) -> PooledCluster:
    """The pools of ``run.fleet`` as fleets behind one router. Pool k records its inter-token
    gaps at class ids shifted by k × ``itl_classes`` (``itl`` holds them all)."""
    inner = "least_outstanding_tokens" if run.router == "cost" else run.router

    def make_fleet(k: int, stream: tuple) -> Fleet:
        fp = run.fleet.pools[k]
        pricer = fp.pool.pricer(fp.model)
        rec = itl if k == 0 else PoolItl(itl, k * itl_classes)
        return Fleet(env, fp.autoscaling, fp.failures, fp.pool.num_replicas, inner,
                     fp.provisioning_delay_s, run.seed,
                     lambda i, fin: replica_class(fp.pool)(       # pipelined with PP > 1
                         env, i, fp.pool, pricer, rec, itl_classes, fin,
                         macro_steps=macro_steps, timeline_bin_s=bin_s),
                     on_finish, on_lost, log.add_lost_gaps, done, stream=stream,
                     queue_timeout_s=run.router_queue_timeout_s)

    return PooledCluster(env, run.fleet, len(trace.class_names), len(trace), make_fleet)


def _changes(fp) -> bool:
    return fp.autoscaling is not None or fp.failures is not None


def pooled_result(result: RunResult, run: RunConfig, cluster: PooledCluster,
                  itl_classes: int) -> RunResult:
    """``result`` with its pools: per pool a :class:`PoolResult` (an autoscaled or failing
    pool's fleet history and mean price), requests' and ITL runs' pool indices, replicas
    labelled by pool name; fleet totals (replicas, GPUs, price per hour) summed over pools."""
    pools, names = [], []
    n = len(result.requests.request_id)
    routed = np.bincount(cluster.pool_of[:n][cluster.pool_of[:n] >= 0],
                         minlength=len(cluster.fleets))
    for k, (fp, fleet) in enumerate(zip(run.fleet.pools, cluster.fleets)):
        pool, gpr = fp.pool, fp.gpus_per_replica
        price_gpu = pool.hardware.price_per_gpu_hour_usd
        history, replicas, price = None, pool.num_replicas, price_gpu * pool.num_gpus
        if _changes(fp):
            label = policy_label(fp.autoscaling, fp.provisioning_delay_s) \
                if fp.autoscaling is not None else f"fixed, {pool.num_replicas} replicas"
            history = fleet.result(label, gpr, price_gpu)
            replicas = max(history.serving)
            hours = fleet.last_end_s / 3600.0
            price = history.cost_usd / hours if hours > 0 else 0.0
        names += [fp.name] * len(fleet.replicas)
        eng = pool.engine
        pools.append(PoolResult(
            name=fp.name, model=fp.model.name, hardware=pool.hardware.name,
            tensor_parallel_size=eng.tensor_parallel_size,
            pipeline_parallel_size=eng.pipeline_parallel_size, gpus_per_replica=gpr,
            engine=pool.engine_label, preset=pool.preset.name, scheduler=scheduler_label(pool), num_replicas=replicas,
            num_gpus=replicas * gpr, price_per_gpu_hour_usd=price_gpu, price_per_hour_usd=price,
            peak_flops_per_gpu=pool.hardware.peak_flops(pool.matmul_dtype),
            hbm_bandwidth_per_gpu_bytes_per_s=pool.hardware.hbm_bandwidth_bytes_per_s,
            routed_requests=int(routed[k]), fleet=history))
    update = {"pools": pools,
              "requests": result.requests.model_copy(
                  update={"pool": cluster.pool_of[:n].astype(np.int16)}),
              "replicas": [s.model_copy(update={"pool": name})
                           for s, name in zip(result.replicas, names)],
              "timelines": [t.model_copy(update={"pool": name})
                            for t, name in zip(result.timelines, names)]}
    if len(pools) > 1:
        ids = np.asarray(result.itl.class_id)
        update["itl"] = result.itl.model_copy(update={
            "class_id": (ids % itl_classes).astype(ids.dtype),
            "pool": (ids // itl_classes).astype(np.int16)})
    if any(_changes(fp) for fp in run.fleet.pools):
        update.update(num_replicas=sum(p.num_replicas for p in pools),
                      num_gpus=sum(p.num_gpus for p in pools),
                      price_per_hour_usd=sum(p.price_per_hour_usd for p in pools),
                      sim_end_s=max(f.last_end_s for f in cluster.fleets))
    return result.model_copy(update=update)

