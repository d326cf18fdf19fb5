"""A pool of co-located replicas that grows and shrinks with the load (``cluster.autoscaling``)
and whose replicas fail and are repaired (``cluster.failures``).

:class:`Fleet` is the run's :class:`~capsim.engine.cluster.Cluster` where a fixed pool
would be (its ``admit`` / ``submit`` picks a serving replica) and runs the autoscaler as one SimPy
process: every ``interval_s`` it reads the signal off the serving replicas
(:func:`desired_replicas`, Kubernetes HPA's rule, see :mod:`capsim.scenario.fleet`)
and

- scales up at once: each new replica is paid for from the decision and serves after
  the provisioning delay (:mod:`capsim.profiles.startup`), never before;
- scales down to the highest recommendation of the last ``scale_down_cooldown_s``
  (HPA's stabilization window), only while nothing is provisioning: the newest serving
  replica leaves the router (Kubernetes' ReplicaSet removes the most recently created
  pod first) and drains — it finishes everything queued and running on it, then stops.

A failure (at a given time, or after an exponential time of mean ``mtbf_s`` drawn from
the run's seed) takes the replica out at once: steps that ended count, the step in
progress is lost (:meth:`Replica.fail`), and what it held is sent again through the
router (``retry``: the prefill is redone; a re-prefill storm on the survivors) or
counted as failed; a replacement serves after the repair time.

The autoscaler counts a failed replica whose replacement is due as one it has, as
Kubernetes HPA does: it compares its recommendation with the scale target's replica
count, which keeps the failed pod, and sizes from the ready pods' metrics only (none
ready: no recommendation) — ``pkg/controller/podautoscaler/replica_calculator.go``,
kubernetes/kubernetes at 0006726. So a failure is not undone by a scale-up 62 s later:
the capacity is lost until the repair, unless the survivors' own load asks for more
replicas, and ``max_replicas`` bounds the replicas serving, starting and awaiting their
replacement. A scale-down cancels due replacements before it drains a serving replica
(the ReplicaSet deletes not-ready pods first).

Routing among serving replicas keeps the cluster's policy: ``round_robin`` in index
order (as :func:`~capsim.engine.router.make_router` over a fixed list), or
``least_outstanding_tokens``; while no replica serves, the fleet holds the requests —
until one serves, or for at most ``queue_timeout_s`` (``cluster.router_queue_timeout_s``),
after which the request fails as timed out (ended once, with its reason), as a gateway
in front of the engines answers a request it could not place in time: ingress-nginx's
``proxy-read-timeout`` (60 s by default, kubernetes/ingress-nginx
docs/user-guide/nginx-configuration/configmap.md), Envoy's route ``timeout`` (15 s by
default, envoyproxy.io docs "How do I configure timeouts?"). vLLM has no queue timeout of
its own (vllm-project/vllm issue #16391; PR #29416, not merged); SGLang added
``SGLANG_QUEUED_TIMEOUT_MS`` for its scheduler's queue (sgl-project/sglang PR #17143).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable

import numpy as np

from capsim.engine.cache_router import make_kv_router
from capsim.engine.clock import Environment
from capsim.engine.cluster import colocated_reject_reason, enter, hand_to, pool_fields
from capsim.engine.replica import Replica
from capsim.engine.request import Request
from capsim.results.model import ROUTER_TIMEOUT_REASON, FleetResult, RunResult
from capsim.scenario.fleet import AutoscalingConfig, FailuresConfig
from capsim.scenario.routing import KV_ROUTERS, RouterOptions
from capsim.scenario.run_config import Pool, RunConfig


def signal_value(signal: str, serving: list[Replica]) -> float:
    """Σ over ``serving`` of the signal: waiting requests (``queue``), running sequences
    (``running``) or the fraction of KV blocks in use (``kv_use``)."""
    if signal == "queue":
        return float(sum(r.num_waiting for r in serving))
    if signal == "running":
        return float(sum(r.kv_load()[1] for r in serving))
    if signal == "kv_use":
        return sum(r.kv_load()[0] / r.alloc.num_blocks for r in serving)
    raise ValueError(f"unknown signal {signal!r}")


_DETAIL = ", every "     # where policy_label's head (signal, bounds) ends and its timing begins


def policy_label(cfg: AutoscalingConfig, delay_s: float) -> str:
    """One line for the report: ``running 48/replica, 1–8 replicas, every 15 s, ...``."""
    how = "by schedule" if cfg.signal == "schedule" else f"{cfg.signal} {cfg.target:g}/replica"
    return (f"{how}, {cfg.min_replicas}–{cfg.max_replicas} replicas{_DETAIL}"
            f"{cfg.interval_s:g} s, scale-down window {cfg.scale_down_cooldown_s:g} s, "
            f"start-up {delay_s:.0f} s")


def policy_head(label: str) -> str:
    """A :func:`policy_label`'s signal and bounds (``running 48/replica, 1–8 replicas``),
    for a one-line terminal column; any other label as it is."""
    return label.split(_DETAIL)[0]


def desired_replicas(cfg: AutoscalingConfig, now_s: float, serving: list[Replica],
                     current: int | None = None) -> int | None:
    """The HPA recommendation, clamped to [min_replicas, max_replicas]; with ``signal:
    schedule``, the count for ``now_s``.

    ``current`` is the scale target's replica count (serving + provisioning + failed ones
    awaiting their replacement; default: ``len(serving)``). The rule is
    ``calcPlainMetricReplicas`` in kubernetes ``pkg/controller/podautoscaler/
    replica_calculator.go`` (at 0006726): the usage ratio is Σ signal over the serving
    (ready) replicas ÷ (their count × ``target``); within ``tolerance`` of 1 it returns
    ``current``, not the serving count; otherwise ``ceil(Σ signal / target)``, except on a
    scale-up while replicas are not ready (Pending pods: provisioning, or a failed one's
    replacement), which count as using 0 and leave ``current`` when the ratio over all
    ``current`` is within ``tolerance`` or below 1 (no change against the direction).

    None (no recommendation) while no replica serves: the signals are pod metrics, and HPA
    sizes from the ready pods' only ("did not receive metrics for any ready pods"):
    requests waiting in front of a down fleet are in no pod."""
    if cfg.signal == "schedule":
        s = cfg.schedule
        want = s.replicas[int(now_s // s.step_s) % len(s.replicas)]
        return min(cfg.max_replicas, max(cfg.min_replicas, want))
    n = len(serving)
    if not n:
        return None
    total = signal_value(cfg.signal, serving)
    current = n if current is None else current
    want = math.ceil(total / cfg.target - 1e-9)
    ratio = total / (n * cfg.target)
    if current > n and ratio > 1.0:           # not-ready replicas count as using 0
        ratio = total / (current * cfg.target)
        if ratio < 1.0:
            want = current
    if abs(ratio - 1.0) <= cfg.tolerance:
        want = current
    return min(cfg.max_replicas, max(cfg.min_replicas, want))


class Fleet:
    """Replicas made by ``make_replica(index, on_finish)`` behind one router, scaled by
    ``cfg`` (None: a fixed count) and failing as ``failures`` says (None: never).

    A run's whole cluster when its one co-located pool autoscales or fails
    (:class:`~capsim.engine.cluster.Cluster`: it admits requests and assembles its part
    of the result), or one pool of a :class:`~capsim.engine.pooled.PooledCluster`.

    Args:
        env: the simulation.
        cfg: the autoscaling section, or None.
        failures: the failures section, or None.
        initial: replicas serving at t = 0.
        router: ``round_robin``, ``least_outstanding_tokens`` or a cache-aware router
            (``prefix_aware``, ``kv_scorer``, ``session_affinity``: one pool's fleet only).
        delay_s: provisioning delay of a new replica, s.
        seed: the run's seed (failure draws: ``SeedSequence(seed, spawn_key=(6,))``).
        make_replica: builds replica ``index`` reporting finishes to the callback given.
        on_finish: the run's finish callback.
        on_lost: ``on_lost(req, reason)``: a request failed with its replica (``fail``),
            timed out at the router, or (:meth:`admit`) could never be served.
        on_lost_gaps: ``on_lost_gaps(k)``: k inter-token gaps were streamed by attempts a
            failure cut short.
        done: whether every request has ended (the autoscaler then stops, nothing is
            repaired).
        stream: the failure draws' spawn key (a pooled fleet gives each pool its own).
        queue_timeout_s: the longest a request is held while no replica serves, s; then
            ``on_lost(req, "timed out ...")`` (None: held until a replica serves).
        pool: the pool the replicas belong to (what :meth:`admit` checks against and
            :meth:`assemble` reports; None inside a pooled fleet, which does both itself).
        router_options: ``cluster.router_options`` (the cache-aware routers' knobs).
    """

    owns_end_s = True               # the result ends with the fleet's last request

    def __init__(self, env: Environment, cfg: AutoscalingConfig | None,
                 failures: FailuresConfig | None, initial: int, router: str, delay_s: float,
                 seed: int, make_replica: Callable[[int, Callable], Replica],
                 on_finish: Callable[[Request], None], on_lost: Callable[[Request, str], None],
                 on_lost_gaps: Callable[[int], None], done: Callable[[], bool],
                 stream: tuple[int, ...] = (6,), queue_timeout_s: float | None = None,
                 pool: Pool | None = None, router_options: RouterOptions | None = None):
        self.env, self.cfg, self.failures_cfg, self.delay_s = env, cfg, failures, delay_s
        self.pool, self.initial = pool, initial
        self.make_replica, self.on_finish, self.done = make_replica, on_finish, done
        self.on_lost, self.on_lost_gaps = on_lost, on_lost_gaps
        self.least = router == "least_outstanding_tokens"
        # A cache-aware router (engine/cache_router.py) picks among the serving replicas.
        self._kv_router = (make_kv_router(router, router_options, pool.engine.block_size)
                           if router in KV_ROUTERS else None)
        self.replicas: list[Replica] = []
        self.serving: list[Replica] = []
        self.draining: set[int] = set()
        self.pending: deque[Request] = deque()     # routed while no replica serves
        self.queue_timeout_s = queue_timeout_s
        self._holds = 0                            # requests ever held (names each hold)
        self._held: dict[int, int] = {}            # rid → its current hold, while held
        self.num_timed_out = 0
        self.starting: list[float] = []            # request times of replicas provisioning
        self.requested: list[float] = []
        self.ready: list[float] = []
        self.stopped: list[float] = []
        self.times, self.n_serving, self.n_prov, self.n_drain, self.n_down = [], [], [], [], []
        self.down = 0
        self.awaiting = 0     # failed replicas whose replacement is due at their repair
        self.cancelled = 0    # of those, replacements a scale-down called off
        # The scale-down window's recommendations that can still be its highest: (time,
        # count), counts decreasing from the front (a sliding-window maximum, O(1) a tick
        # however many ticks the window holds; a plain list's max and pop(0) made each tick
        # cost the window's length: 300 s at interval_s 1 ms ran 60 s of load for minutes).
        self.recommendations: deque[tuple[float, int]] = deque()
        self.scale_ups = self.scale_downs = 0
        self.failure_log: list[tuple[int, float, float]] = []   # (replica, failed, repaired)
        self.retries: dict[int, int] = {}
        self.num_failed_requests = 0
        self.skipped_failures: list[str] = []   # cluster.failures.at entries that did not happen
        self._rr = 0
        self.last_end_s = 0.0
        self.rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=stream))
        for _ in range(initial):
            self._start(0.0)
        self._note()
        if cfg is not None:
            env.process(self._autoscale())
        for f in failures.at if failures is not None else ():
            env.process(self._failure_at(f.replica, f.at_s, f.repair_s))

    # ------------------------------------------------------------ routing
    def admit(self, req: Request) -> None:
        """A run's arrival: rejected (``on_lost``) if the pool's engine could never serve
        it, else submitted after the engine's server path."""
        reason = colocated_reject_reason(req, self.pool)
        if reason:
            self.on_lost(req, reason)
            return
        enter(self.env, req, self.pool.preset.host_overhead.request_before_s, self.submit)

    @property
    def held(self) -> int:
        """Requests held while no replica serves."""
        return len(self.pending)

    def submit(self, req: Request) -> None:
        """Hand ``req`` to a serving replica (round robin or least outstanding tokens; its
        request limits may turn it away: :func:`hand_to`); held while none serves (all
        failed), sent when one starts."""
        serving = self.serving
        if not serving:
            self.pending.append(req)
            if self.queue_timeout_s is not None:
                self._holds += 1
                self._held[req.rid] = hold = self._holds
                self.env.timeout(self.queue_timeout_s).callbacks.append(
                    lambda _, req=req, hold=hold: self._time_out(req, hold))
            return
        if self.least:
            rep = min(serving, key=lambda r: r.outstanding_tokens)
        elif self._kv_router is not None:
            rep = self._kv_router.pick(req, serving)
        else:
            rep = serving[self._rr % len(serving)]
            self._rr += 1
        hand_to(rep, req, self.on_lost)

    def _time_out(self, req: Request, hold: int) -> None:
        """``req`` has waited ``queue_timeout_s`` at the router: if this hold of it is still
        on (no replica took it meanwhile), it fails, counted once."""
        if self._held.get(req.rid) != hold:
            return
        del self._held[req.rid]
        # Holds end in the order they began (one timeout for all; every serving replica
        # takes the whole queue), so this one is at the head.
        if self.pending[0] is req:
            self.pending.popleft()
        else:
            self.pending.remove(req)
        self.num_timed_out += 1
        self.on_lost(req, f"{ROUTER_TIMEOUT_REASON} after {self.queue_timeout_s:g} s "
                          "(no replica serving; cluster.router_queue_timeout_s)")

    # ------------------------------------------------------------ lifecycle
    def _start(self, requested_s: float) -> None:
        """The next replica begins serving now; it was asked for at ``requested_s``."""
        index = len(self.replicas)
        rep = self.make_replica(index, self._finished)
        self.replicas.append(rep)
        self.requested.append(requested_s)
        self.ready.append(self.env.now)
        self.stopped.append(math.nan)
        self.serving.append(rep)
        f = self.failures_cfg
        if f is not None and f.mtbf_s is not None:
            self.env.process(self._random_failure(rep, float(self.rng.exponential(f.mtbf_s))))
        while self.pending and self.serving:
            req = self.pending.popleft()
            self._held.pop(req.rid, None)
            self.submit(req)

    def _provision(self):
        asked = self.env.now
        self.starting.append(asked)
        self._note()
        yield self.env.timeout(self.delay_s)
        self.starting.remove(asked)
        self._start(asked)
        self._note()

    @property
    def provisioning(self) -> int:
        return len(self.starting)

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
            for col in (self.times, self.n_serving, self.n_prov, self.n_drain, self.n_down):
                col.pop()
        self.times.append(now)
        self.n_serving.append(len(self.serving))
        self.n_prov.append(self.provisioning)
        self.n_drain.append(len(self.draining))
        self.n_down.append(self.down)

    # ------------------------------------------------------------ failures
    def _failure_at(self, k: int, at_s: float, repair_s: float):
        """Replica ``k`` fails at ``at_s`` (if it is up then and requests are still being
        served) and is repaired ``repair_s`` later. A failure after the last request ended
        is skipped: the run is over (it would otherwise keep the replica paid for until the
        timer's repair, however far past the run)."""
        if at_s > self.env.now:
            yield self.env.timeout(at_s - self.env.now)
        rep = self.replicas[k] if k < len(self.replicas) else None
        why = ("every request had ended by then" if self.done() else
               f"the fleet had started {len(self.replicas)} replica(s) by then" if rep is None
               else "it was down already" if rep.failed
               else "it was not serving (starting up, or stopped)"
               if not (rep in self.serving or k in self.draining) else None)
        if why is not None:
            self.skipped_failures.append(f"replica {k} at {at_s:g} s: {why}")
            return
        self._fail(rep, repair_s)

    def _random_failure(self, rep: Replica, after_s: float):
        yield self.env.timeout(after_s)
        if self.done() or rep.failed or not (rep in self.serving or rep.index in self.draining):
            return
        self._fail(rep, float(self.rng.exponential(self.failures_cfg.mttr_s)))

    def _fail(self, rep: Replica, repair_s: float) -> None:
        """``rep`` fails now: out of the router, its in-flight requests retried or failed;
        a replacement serves ``repair_s`` later (the failed one is paid for until then)."""
        now = self.env.now
        draining = rep.index in self.draining
        if draining:
            self.draining.discard(rep.index)
        else:
            self.serving.remove(rep)
        in_flight = rep.fail()
        # Streamed gaps only: tokens of an unfinished multi-step window never left.
        self.on_lost_gaps(sum(max(0, r.num_generated - 1) for r in in_flight)
                          - rep.scheduler.buffered_tokens)
        self.stopped[rep.index] = now + repair_s
        self.failure_log.append((rep.index, now, now + repair_s))
        self.down += 1
        self.awaiting += not draining
        self._note()
        for req in in_flight:
            if self.failures_cfg.in_flight == "retry":
                req.restart()
                self.retries[req.rid] = self.retries.get(req.rid, 0) + 1
                self.submit(req)
            else:
                self.num_failed_requests += 1
                self.on_lost(req, f"its replica {rep.index} failed at {now:.1f} s")
        self.env.process(self._repair(repair_s, replace=not draining))

    def _repair(self, repair_s: float, replace: bool):
        yield self.env.timeout(repair_s)
        self.down -= 1
        if replace:
            self.awaiting -= 1
            if self.cancelled:
                self.cancelled -= 1
                replace = False
        if replace and not self.done():
            self._start(self.env.now)
        self._note()

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
        # A failed replica awaiting its replacement still counts (HPA: the scale
        # target keeps the failed pod); cancelled replacements do not.
        due = self.awaiting - self.cancelled
        current = len(self.serving) + self.provisioning + due
        want = desired_replicas(cfg, now, self.serving, current)
        if want is None:          # no ready replica: HPA skips the sync, nothing recorded
            return
        recs = self.recommendations
        while recs and recs[-1][1] <= want:    # never the window's highest again
            recs.pop()
        recs.append((now, want))
        while recs[0][0] < now - cfg.scale_down_cooldown_s:
            recs.popleft()
        if want > current:
            self.scale_ups += want - current
            for _ in range(want - current):
                self.env.process(self._provision())
            return
        if self.provisioning:
            return
        keep = recs[0][1]                      # the window's highest recommendation
        cancel = min(due, max(0, current - keep))     # not-ready pods are deleted first
        self.cancelled += cancel
        self.scale_downs += cancel
        current -= cancel
        for rep in sorted(self.serving, key=lambda r: -r.index)[:max(0, current - keep)]:
            self.scale_downs += 1
            self._drain(rep)

    # ------------------------------------------------------------ result
    @property
    def label(self) -> str:
        """The report's one line for the fleet's policy (:func:`policy_label`, or
        ``fixed, N replicas`` when only failures change it)."""
        if self.cfg is not None:
            return policy_label(self.cfg, self.delay_s)
        return f"fixed, {self.initial} replica{'' if self.initial == 1 else 's'}"

    def invariant_problems(self) -> list[str]:
        return []

    def assemble(self, run: RunConfig, fields: dict) -> RunResult:
        """The run's result as a fixed pool's, with the fleet's history, the most replicas
        that ever served, and its mean price per hour over the run (GPU-hours × price /
        hours)."""
        pool = self.pool
        hw, tp = pool.hardware, pool.engine.tensor_parallel_size
        history = self.result(self.label, tp, hw.price_per_gpu_hour_usd)
        peak = max(history.serving)
        hours = self.last_end_s / 3600.0
        return RunResult(**fields, **pool_fields(run, run.serving_pool)).model_copy(update={
            "fleet": history, "num_replicas": peak, "num_gpus": peak * tp,
            "sim_end_s": self.last_end_s,       # not the last failure or repair timer
            "price_per_hour_usd": history.cost_usd / hours if hours > 0 else 0.0})

    def result(self, policy: str, gpus_per_replica: int, price_per_gpu_hour_usd: float
               ) -> FleetResult:
        """The fleet's history; replicas still up stop at the last request's end, replicas
        still starting are paid for until then, and so are failed replicas whose repair
        would end later (the run is over: nothing is paid for past it)."""
        end = self.last_end_s
        requested = self.requested + self.starting
        extra = len(self.starting)
        ready = self.ready + [math.nan] * extra
        stopped = [min(s, max(end, r)) if s == s else max(end, r)
                   for s, r in zip(self.stopped + [math.nan] * extra, requested)]
        return FleetResult(
            policy=policy, provisioning_delay_s=self.delay_s, gpus_per_replica=gpus_per_replica,
            price_per_gpu_hour_usd=price_per_gpu_hour_usd, times_s=self.times,
            serving=self.n_serving, provisioning=self.n_prov, draining=self.n_drain,
            down=self.n_down, requested_s=requested, ready_s=ready, stopped_s=stopped,
            scale_ups=self.scale_ups, scale_downs=self.scale_downs,
            failures=[list(f) for f in self.failure_log],
            retried_requests=len(self.retries), retries=sum(self.retries.values()),
            failed_requests=self.num_failed_requests, skipped_failures=self.skipped_failures,
            timed_out_requests=self.num_timed_out)
