"""Building a run's cluster (:class:`~capsim.engine.cluster.Cluster`) from its RunConfig.

One builder per topology: a fixed pool (:class:`~capsim.engine.cluster.FixedPool`),
an autoscaled or failing fleet (:class:`~capsim.engine.fleet.Fleet`), a disaggregated
pair (:class:`~capsim.engine.disagg.DisaggCluster`) and a pooled fleet
(:class:`~capsim.engine.pooled.PooledCluster`, one :class:`Fleet` per pool). What the
replicas report to is one :class:`Wiring`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from capsim.engine.clock import Environment
from capsim.engine.cluster import Cluster, FixedPool, Reject
from capsim.engine.disagg import DisaggCluster
from capsim.engine.fleet import Fleet
from capsim.engine.pipeline import replica_class
from capsim.engine.pooled import PoolItl, PooledCluster
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.scenario.run_config import RunConfig


@dataclass(frozen=True)
class Wiring:
    """What every topology's replicas and fleets report to.

    Attributes:
        env: the simulation.
        itl: the run's ITL recorder.
        itl_classes: ITL classes per pool (2 × the trace's classes with warm-up requests,
            whose gaps are recorded apart).
        on_finish: called once per ended request.
        reject: ends a request now (rejected at admission, or lost: its replica failed or
            it timed out at the router).
        on_lost_gaps: ``on_lost_gaps(k)``: k inter-token gaps were streamed by attempts a
            failure cut short.
        done: whether every request has ended.
        num_classes: the trace's request classes.
        num_requests: rows of the trace.
        macro_steps: advance decode-only stretches in one event (same results).
        bin_s: the timelines' first bin width, s.
    """

    env: Environment
    itl: ItlRecorder
    itl_classes: int
    on_finish: Callable[[Request], None]
    reject: Reject
    on_lost_gaps: Callable[[int], None]
    done: Callable[[], bool]
    num_classes: int
    num_requests: int
    macro_steps: bool
    bin_s: float


def build_cluster(run: RunConfig, w: Wiring) -> Cluster:
    """The cluster ``run`` describes: pooled (``cluster.pools``), disaggregated, an
    autoscaled or failing fleet, or a fixed pool."""
    if run.fleet is not None:
        return _pooled(run, w)
    if run.disaggregated:
        return DisaggCluster(w.env, run, w.itl, w.itl_classes, w.on_finish,
                             macro_steps=w.macro_steps, reject=w.reject)
    pool = run.pool()
    pricer = pool.pricer(run.model)
    make = replica_class(pool)           # PipelinedReplica when PP > 1

    def replica(i: int, on_finish: Callable[[Request], None]):
        return make(w.env, i, pool, pricer, w.itl, w.itl_classes, on_finish,
                    macro_steps=w.macro_steps, timeline_bin_s=w.bin_s)

    if run.autoscaling is None and run.failures is None:
        return FixedPool(w.env, pool, run.router,
                         [replica(i, w.on_finish) for i in range(pool.num_replicas)], w.reject,
                         run.router_options)
    return Fleet(w.env, run.autoscaling, run.failures, pool.num_replicas, run.router,
                 run.provisioning_delay_s, run.seed, replica, w.on_finish, w.reject,
                 w.on_lost_gaps, w.done, queue_timeout_s=run.router_queue_timeout_s, pool=pool,
                 router_options=run.router_options)


def _pooled(run: RunConfig, w: Wiring) -> PooledCluster:
    """The pools of ``run.fleet`` as fleets behind one router. Pool k records its
    inter-token gaps at class ids shifted by k × ``itl_classes`` (``itl`` holds them all)."""
    inner = "least_outstanding_tokens" if run.router == "cost" else run.router

    def make_fleet(k: int, stream: tuple) -> Fleet:
        fp = run.fleet.pools[k]
        pricer = fp.pool.pricer(fp.model)
        rec = w.itl if k == 0 else PoolItl(w.itl, k * w.itl_classes)
        return Fleet(w.env, fp.autoscaling, fp.failures, fp.pool.num_replicas, inner,
                     fp.provisioning_delay_s, run.seed,
                     lambda i, fin: replica_class(fp.pool)(       # pipelined with PP > 1
                         w.env, i, fp.pool, pricer, rec, w.itl_classes, fin,
                         macro_steps=w.macro_steps, timeline_bin_s=w.bin_s),
                     w.on_finish, w.reject, w.on_lost_gaps, w.done, stream=stream,
                     queue_timeout_s=run.router_queue_timeout_s, pool=fp.pool)

    return PooledCluster(w.env, run.fleet, w.num_classes, w.num_requests, make_fleet,
                         w.reject, w.itl_classes)
