"""Sampling the fleet over a long run for the day view (:class:`DaySampler`), and the
length of the day view's windows (:func:`day_window_s`).

Taken only when the load varies over time or the fleet does (schedule, bursts, a trace
schedule, autoscaling, failures): :data:`SAMPLES_PER_WINDOW` times per day-view window
(every ``SAMPLE_S`` at most) the sampler notes how many ITL runs have been recorded, how
many requests wait and run, and how many replicas serve. It only reads state (every
replica's decode run in progress is committed up to now first, as a disaggregated
cluster's placement does, so the ITL gaps recorded by then are the step-by-step path's),
so results are the same with or without it, and at any period.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from capsim.engine.clock import Environment
from capsim.engine.cluster import Cluster
from capsim.engine.recorder import ItlRecorder
from capsim.results.model import DaySamples, RunResult
from capsim.scenario.run_config import RunConfig
from capsim.workload import RequestTrace

SAMPLE_S = 15.0
"""Longest sampling period, s: the autoscaler's default interval (Kubernetes HPA's sync
period), 20 samples per 5-minute window of the day view."""

SAMPLES_PER_WINDOW = 20
"""Samples per day-view window (a shorter run's shorter windows are sampled faster)."""

WINDOW_S = 300.0
"""The day view's window from an hour's run to :data:`MAX_WINDOWS` of them: 5 minutes."""

MIN_WINDOWS = 12
"""A shorter run gets shorter windows, so that it has at least this many (a 12-s run:
twelve 1-s windows, where one 5-minute window read 0.2 req/s of a 5 req/s load)."""

MAX_WINDOWS = 600
"""A longer run gets longer windows, so that it has at most about this many (two days of
5-minute windows)."""

#: Round window lengths, s.
_ROUND_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0,
            1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0)


def day_window_s(length_s: float) -> float:
    """The day view's window for a run of ``length_s`` seconds (first arrival at 0 to its
    end): :data:`WINDOW_S`, shorter for a run under ``MIN_WINDOWS × WINDOW_S`` (the
    longest round length giving at least :data:`MIN_WINDOWS` windows; never longer than
    the run), longer past ``MAX_WINDOWS × WINDOW_S`` (the shortest round length giving at
    most :data:`MAX_WINDOWS`; whole days beyond the table)."""
    if not length_s > 0:
        return _ROUND_S[0]
    if length_s > MAX_WINDOWS * WINDOW_S:
        wanted = length_s / MAX_WINDOWS
        return next((w for w in _ROUND_S if w >= wanted),
                    math.ceil(wanted / _ROUND_S[-1]) * _ROUND_S[-1])
    fits = [w for w in _ROUND_S if w <= min(WINDOW_S, length_s / MIN_WINDOWS)]
    return fits[-1] if fits else min(_ROUND_S[0], length_s)


def sample_period_s(length_s: float) -> float:
    """The sampling period for a run known to last ``length_s`` so far: :data:`SAMPLE_S`, or
    shorter so that each day-view window holds :data:`SAMPLES_PER_WINDOW` samples."""
    return min(SAMPLE_S, day_window_s(length_s) / SAMPLES_PER_WINDOW)


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
        arrivals = np.asarray(trace.arrival_s, dtype=np.float64)
        return DaySampler(env, itl, cluster, done,
                          float(np.nanmax(arrivals, initial=0.0)) if len(arrivals) else 0.0)
    return None


class DaySampler:
    """Samples ``cluster.serving`` (the replicas serving now) and ``cluster.held``
    (requests held by the router) until ``done()``, at multiples of
    :func:`sample_period_s` of the run's length so far (its last arrival, or now once
    past it: a run held far beyond its arrivals is sampled no faster than its windows
    need).

    Args:
        env: the simulation.
        itl: the run's ITL recorder.
        cluster: the run's cluster (``replicas``: every replica that may be running,
            draining ones too).
        done: every request has ended.
        arrivals_end_s: the trace's last arrival, s.
    """

    def __init__(self, env: Environment, itl: ItlRecorder, cluster: Cluster,
                 done: Callable[[], bool], arrivals_end_s: float = 0.0):
        self.env, self.itl, self.cluster, self.done = env, itl, cluster, done
        self.arrivals_end_s = arrivals_end_s
        self.period_s = sample_period_s(arrivals_end_s)
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
        due = 0.0
        while not self.done():
            # The next multiple of the period: samples fall on the windows' edges.
            period = sample_period_s(max(self.arrivals_end_s, due))
            due = (math.floor(due / period + 1e-9) + 1) * period
            yield self.env.timeout(due - self.env.now)
            self._sample()

    def result(self) -> DaySamples:
        return DaySamples(sample_s=self.period_s, times_s=self.times, itl_runs=self.itl_runs,
                          queue=self.queue, running=self.running, serving=self.n_serving)

    def add_to(self, result: RunResult) -> RunResult:
        """``result`` with the samples; unless the cluster owns the end time (a fleet's
        last request), the run ends with its last request, not a sample."""
        update = {"day": self.result()}
        if not self.cluster.owns_end_s:
            update["sim_end_s"] = float(np.nanmax(result.requests.finish_s, initial=0.0))
        return result.model_copy(update=update)
