"""A pool of co-located replicas that grows and shrinks with the load (``cluster.autoscaling``).

:class:`Fleet` stands where the router stands in a fixed cluster (``route()`` returns
it; its ``submit`` picks a serving replica) and runs the autoscaler as one SimPy
process: every ``interval_s`` it reads the signal off the serving replicas
(:func:`desired_replicas`, Kubernetes HPA's rule, see :mod:`capsim.scenario.fleet`)
and

- scales up at once: each new replica is paid for from the decision and serves after
  the provisioning delay (:mod:`capsim.profiles.startup`), never before;
- scales down to the highest recommendation of the last ``scale_down_cooldown_s``
  (HPA's stabilization window), only while nothing is provisioning: the newest serving
  replica leaves the router (Kubernetes' ReplicaSet removes the most recently created
  pod first) and drains — it finishes everything queued and running on it, then stops.

Routing among serving replicas keeps the cluster's policy: ``round_robin`` in index
order (as :func:`~capsim.engine.router.make_router` over a fixed list), or
``least_outstanding_tokens``.
"""

from __future__ import annotations

import math
from typing import Callable

from capsim.engine.clock import Environment
from capsim.engine.replica import Replica
from capsim.engine.request import Request
from capsim.results.model import FleetResult
from capsim.scenario.fleet import AutoscalingConfig


def signal_value(signal: str, serving: list[Replica]) -> float:
    """Σ over ``serving`` of the signal: waiting requests (``queue``), running sequences
    (``running``) or the fraction of KV blocks in use (``kv_use``)."""
    if signal == "queue":
        return float(sum(len(r.scheduler.waiting) for r in serving))
    if signal == "running":
        return float(sum(r.kv_load()[1] for r in serving))
    if signal == "kv_use":
        return sum(r.kv_load()[0] / r.alloc.num_blocks for r in serving)
    raise ValueError(f"unknown signal {signal!r}")


def policy_label(cfg: AutoscalingConfig, delay_s: float) -> str:
    """One line for the report: ``running 48/replica, 1–8 replicas, every 15 s, ...``."""
    how = "by schedule" if cfg.signal == "schedule" else f"{cfg.signal} {cfg.target:g}/replica"
    return (f"{how}, {cfg.min_replicas}–{cfg.max_replicas} replicas, every "
            f"{cfg.interval_s:g} s, scale-down window {cfg.scale_down_cooldown_s:g} s, "
            f"start-up {delay_s:.0f} s")


def desired_replicas(cfg: AutoscalingConfig, now_s: float, serving: list[Replica]) -> int:
    """The HPA recommendation, clamped to [min_replicas, max_replicas]:
    ``ceil(Σ signal / target)``, or the current count when the mean per replica is within
    ``tolerance`` of ``target``; with ``signal: schedule``, the count for ``now_s``."""
    if cfg.signal == "schedule":
        s = cfg.schedule
        want = s.replicas[int(now_s // s.step_s) % len(s.replicas)]
    else:
        total = signal_value(cfg.signal, serving)
        n = len(serving)
        if n and abs(total / (n * cfg.target) - 1.0) <= cfg.tolerance:
            want = n
        else:
            want = math.ceil(total / cfg.target - 1e-9)
    return min(cfg.max_replicas, max(cfg.min_replicas, want))


class Fleet:
    """Replicas made by ``make_replica(index, on_finish)`` behind one router, scaled by
    ``cfg``.

    Args:
        env: the simulation.
        cfg: the autoscaling section.
        initial: replicas serving at t = 0.
        router: ``round_robin`` or ``least_outstanding_tokens``.
        delay_s: provisioning delay of a new replica, s.
        make_replica: builds replica ``index`` reporting finishes to the callback given.
        on_finish: the run's finish callback.
        done: whether every request has ended (the autoscaler then stops).
    """

    def __init__(self, env: Environment, cfg: AutoscalingConfig, initial: int, router: str,
                 delay_s: float, make_replica: Callable[[int, Callable], Replica],
                 on_finish: Callable[[Request], None], done: Callable[[], bool]):
        self.env, self.cfg, self.delay_s = env, cfg, delay_s
        self.make_replica, self.on_finish, self.done = make_replica, on_finish, done
        self.least = router == "least_outstanding_tokens"
        self.replicas: list[Replica] = []
        self.serving: list[Replica] = []
        self.draining: set[int] = set()
        self.provisioning = 0
        self.requested: list[float] = []
        self.ready: list[float] = []
        self.stopped: list[float] = []
        self.times, self.n_serving, self.n_prov, self.n_drain = [], [], [], []
        self.recommendations: list[tuple[float, int]] = []
        self.scale_ups = self.scale_downs = 0
        self._rr = 0
        self.last_end_s = 0.0
        for _ in range(initial):
            self.requested.append(0.0)
            self._start()
        self._note()
        env.process(self._autoscale())

    # ------------------------------------------------------------ routing
    def submit(self, req: Request) -> None:
        """Hand ``req`` to a serving replica (round robin or least outstanding tokens)."""
        serving = self.serving
        if self.least:
            rep = min(serving, key=lambda r: r.outstanding_tokens)
        else:
            rep = serving[self._rr % len(serving)]
            self._rr += 1
        rep.submit(req)

    def route(self) -> "Fleet":
        return self

    # ------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        """The next replica begins serving now (its request time is already noted)."""
        index = len(self.replicas)
        rep = self.make_replica(index, self._finished)
        self.replicas.append(rep)
        self.ready.append(self.env.now)
        self.stopped.append(math.nan)
        self.serving.append(rep)

    def _provision(self):
        self.provisioning += 1
        self.requested.append(self.env.now)
        self._note()
        yield self.env.timeout(self.delay_s)
        self.provisioning -= 1
        self._start()
        self._note()

    def _drain(self, rep: Replica) -> None:
        """Take ``rep`` out of the router; it stops once it has no work."""
        self.serving.remove(rep)
        if rep.scheduler.has_work():
            self.draining.add(rep.index)
        else:
            self.stopped[rep.index] = self.env.now
        self._note()

    def _finished(self, req: Request) -> None:
        self.on_finish(req)
        self.last_end_s = self.env.now
        i = req.replica
        if i in self.draining and not self.replicas[i].scheduler.has_work():
            self.draining.discard(i)
            self.stopped[i] = self.env.now
            self._note()

    def _note(self) -> None:
        now = self.env.now
        if self.times and self.times[-1] == now:
            self.times.pop(), self.n_serving.pop(), self.n_prov.pop(), self.n_drain.pop()
        self.times.append(now)
        self.n_serving.append(len(self.serving))
        self.n_prov.append(self.provisioning)
        self.n_drain.append(len(self.draining))

    # ------------------------------------------------------------ the autoscaler
    def _autoscale(self):
        cfg = self.cfg
        while not self.done():
            yield self.env.timeout(cfg.interval_s)
            if self.done():
                return
            self._tick()

    def _tick(self) -> None:
        now, cfg = self.env.now, self.cfg
        want = desired_replicas(cfg, now, self.serving)
        recs = self.recommendations
        recs.append((now, want))
        while recs and recs[0][0] < now - cfg.scale_down_cooldown_s:
            recs.pop(0)
        current = len(self.serving) + self.provisioning
        if want > current:
            self.scale_ups += want - current
            for _ in range(want - current):
                self.env.process(self._provision())
            return
        if self.provisioning:
            return
        keep = max(n for _, n in recs)
        for rep in sorted(self.serving, key=lambda r: -r.index)[:max(0, len(self.serving) - keep)]:
            self.scale_downs += 1
            self._drain(rep)

    # ------------------------------------------------------------ result
    def result(self, policy: str, gpus_per_replica: int, price_per_gpu_hour_usd: float
               ) -> FleetResult:
        """The fleet's history; replicas still up stop at the last request's end."""
        end = self.last_end_s
        requested = self.requested           # also replicas still starting at the end
        ready = self.ready + [math.nan] * (len(requested) - len(self.ready))
        stopped = self.stopped + [math.nan] * (len(requested) - len(self.stopped))
        stopped = [s if s == s else max(end, r) for s, r in zip(stopped, requested)]
        return FleetResult(
            policy=policy, provisioning_delay_s=self.delay_s, gpus_per_replica=gpus_per_replica,
            price_per_gpu_hour_usd=price_per_gpu_hour_usd, times_s=self.times,
            serving=self.n_serving, provisioning=self.n_prov, draining=self.n_drain,
            requested_s=requested, ready_s=ready, stopped_s=stopped,
            scale_ups=self.scale_ups, scale_downs=self.scale_downs)
