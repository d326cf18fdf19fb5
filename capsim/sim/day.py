"""Sampling the fleet over a long run for the day view (:class:`DaySampler`).

Taken only when the load varies over time or the fleet does (schedule, bursts, a trace
schedule, autoscaling, failures): every ``SAMPLE_S`` the sampler notes how many ITL
runs have been recorded, how many requests wait and run, and how many replicas serve.
It only reads state (every replica's decode run in progress is committed up to now
first, as a disaggregated cluster's placement does, so the ITL gaps recorded by then are
the step-by-step path's), so results are the same with or without it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from capsim.engine.clock import Environment
from capsim.engine.cluster import Cluster
from capsim.engine.recorder import ItlRecorder
from capsim.results.model import DaySamples, RunResult
from capsim.scenario.run_config import RunConfig
from capsim.workload import RequestTrace

SAMPLE_S = 15.0
"""Sampling period, s: the autoscaler's default interval (Kubernetes HPA's sync period),
20 samples per 5-minute window of the day view."""


def wants_day_view(run: RunConfig) -> bool:
    """A run whose load or fleet changes over time."""
    wl = run.workload
    shaped = wl.time_varying if wl.trace is None else wl.trace.schedule is not None
    pools = run.fleet.pools if run.fleet is not None else ()
    return shaped or run.autoscaling is not None or run.failures is not None or any(
        p.autoscaling is not None or p.failures is not None for p in pools)


def day_sampler(env: Environment, run: RunConfig, trace: RequestTrace, itl: ItlRecorder,
                cluster: Cluster, done: Callable[[], bool]) -> DaySampler | None:
    """A :class:`DaySampler` for an open-loop run without warm-up whose load or fleet
    changes over time (:func:`wants_day_view`), co-located; else None."""
    if trace.closed_loop is None and not run.disaggregated and not trace.warmup_requests \
            and wants_day_view(run):
        return DaySampler(env, itl, cluster, done)
    return None


class DaySampler:
    """Samples ``cluster.serving`` (the replicas serving now) and ``cluster.held``
    (requests held by the router) every :data:`SAMPLE_S` until ``done()``.

    Args:
        env: the simulation.
        itl: the run's ITL recorder.
        cluster: the run's cluster (``replicas``: every replica that may be running,
            draining ones too).
        done: every request has ended.
    """

    def __init__(self, env: Environment, itl: ItlRecorder, cluster: Cluster,
                 done: Callable[[], bool]):
        self.env, self.itl, self.cluster, self.done = env, itl, cluster, done
        self.times, self.itl_runs, self.queue, self.n_serving = [], [], [], []
        self.running: list[int] = []
        self._sample()
        env.process(self._loop())

    def _sample(self) -> None:
        cluster = self.cluster
        for rep in cluster.replicas:         # draining ones record gaps too
            rep.runner.sync()
        reps = cluster.serving
        self.times.append(self.env.now)
        self.itl_runs.append(len(self.itl.gap_s))
        self.queue.append(sum(r.num_waiting for r in reps) + cluster.held)
        self.running.append(sum(r.kv_load()[1] for r in reps))
        self.n_serving.append(len(reps))

    def _loop(self):
        while not self.done():
            yield self.env.timeout(SAMPLE_S)
            self._sample()

    def result(self) -> DaySamples:
        return DaySamples(sample_s=SAMPLE_S, times_s=self.times, itl_runs=self.itl_runs,
                          queue=self.queue, running=self.running, serving=self.n_serving)

    def add_to(self, result: RunResult) -> RunResult:
        """``result`` with the samples; unless the cluster owns the end time (a fleet's
        last request), the run ends with its last request, not a sample."""
        update = {"day": self.result()}
        if not self.cluster.owns_end_s:
            update["sim_end_s"] = float(np.nanmax(result.requests.finish_s, initial=0.0))
        return result.model_copy(update=update)
