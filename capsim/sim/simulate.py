"""Wire one RunConfig and a RequestTrace into a SimPy environment and run it.

Returns a :class:`~capsim.results.model.RunResult`. Every run checks its invariants
(DESIGN.md "Conventions"): each request finished or was rejected with a
reason, each finished request produced exactly its output tokens, every
replica drained and every KV block is back on its free list.
"""

from __future__ import annotations

import math
import re
import time
from typing import Callable, Iterable

import numpy as np
import simpy

from capsim.engine.clock import Environment

from capsim.scenario.resolve import (RunConfig, engine_label, kv_log_lines, pool_log_lines,
                                     scheduler_label)
from capsim.engine.disagg import DisaggCluster
from capsim.engine.disagg import reject_reason as disagg_reject_reason
from capsim.engine.fleet import Fleet, policy_label
from capsim.engine.recorder import ItlRecorder, TimelineRecorder
from capsim.engine.pipeline import replica_class
from capsim.engine.replica import Replica
from capsim.engine.request import REJECTED, Request
from capsim.engine.router import make_router
from capsim.engine.pooled import PooledCluster, colocated_reject_reason
from capsim.sim.closed_loop import ClosedLoopSender, EveryFinishObserved
from capsim.sim.day import DaySampler, wants_day_view
from capsim.sim.pooled import make_pooled, pooled_result
from capsim.sim.request_log import RequestLog
from capsim.sim.request_source import RequestSource
from capsim.results.model import ItlRuns, RunResult, TransferRecords
from capsim.workload import RequestTrace

Progress = Callable[[int, int], None]


class InvariantError(RuntimeError):
    """A run broke a conservation invariant: a simulator bug, not bad input."""


def simulate(run: RunConfig, trace: RequestTrace, progress: Progress | None = None,
             macro_steps: bool = True) -> RunResult:
    """Simulate one variant over the trace.

    Requests exist as objects only while in flight: first turns are built when
    they arrive, later turns when the turn before them ends
    (:class:`~capsim.sim.request_source.RequestSource`); each request's outcome goes
    into numpy columns when it ends (:class:`~capsim.sim.request_log.RequestLog`).
    An open-loop trace's first turns arrive at their ``arrival_s``; a closed loop's rows
    are sent as earlier requests end (:class:`~capsim.sim.closed_loop.ClosedLoopSender`),
    and the result holds the rows it sent.

    Warm-up (``trace.warmup_requests`` = K): the first K requests sent are simulated like
    the others, but their inter-token gaps are recorded under class ids shifted by the
    number of classes and left out of the result's ITL runs (and a disaggregated run's
    transfers), and their status is ``warmup``, so no metric counts them.

    Args:
        run: the resolved variant.
        trace: the requests (shared by every variant of a scenario).
        progress: called as ``progress(done, total)`` while requests complete.
        macro_steps: advance decode-only stretches in one event (same results; False
            runs every engine step as its own event, the reference path).

    Raises:
        InvariantError: if a conservation invariant fails at the end.
        ScenarioError: a closed loop bounded by time whose requests are all rejected.
    """
    wall0 = time.perf_counter()
    env = Environment()
    num_classes = len(trace.class_names)
    itl_classes = 2 * num_classes if trace.warmup_requests else num_classes
    itl = ItlRecorder(itl_classes * (len(run.fleet.pools) if run.fleet is not None else 1))
    source = RequestSource(trace)
    log = RequestLog(len(trace))
    loop = trace.closed_loop
    total = len(trace)
    tick = max(1, total // 200)

    def on_finish(req: Request) -> None:
        log.record(req)
        if progress is not None and log.written % tick == 0:
            progress(_done(log.written, total, loop, env.now), total)
        if sender is not None:
            sender.ended(req)
        rejected = req.state == REJECTED
        for child in source.next_turns(req):
            env.process(_next_turn(env, child, rejected, trace, admit))

    cluster = None                       # prefill/decode pools + KV link (engine/disagg.py)
    fleet = None                         # an autoscaled pool (engine/fleet.py)
    pooled = None                        # several pools behind one router (engine/pooled.py)
    if run.fleet is not None:
        pooled = make_pooled(env, run, trace, itl, itl_classes, on_finish, log,
                             lambda req, why: _reject(req, why, env.now, on_finish),
                             macro_steps, TimelineRecorder.start_width_s(_last_arrival_s(trace)),
                             lambda: log.written >= total)
        replicas, route = pooled.replicas, pooled
    elif run.disaggregated:
        cluster = DisaggCluster(env, run, itl, itl_classes, on_finish,
                                macro_steps=macro_steps)
        replicas, route = cluster.replicas, cluster.route
    else:
        pool = run.pool()
        pricer = pool.pricer(run.model)
        bin_s = TimelineRecorder.start_width_s(_last_arrival_s(trace))
        make = replica_class(pool)           # PipelinedReplica when PP > 1
        if run.autoscaling is None and run.failures is None:
            replicas = [make(env, i, pool, pricer, itl, itl_classes, on_finish,
                             macro_steps=macro_steps, timeline_bin_s=bin_s)
                        for i in range(pool.num_replicas)]
            route = make_router(run.router, replicas)
        else:
            fleet = Fleet(env, run.autoscaling, run.failures, pool.num_replicas, run.router,
                          run.provisioning_delay_s, run.seed,
                          lambda i, fin: make(env, i, pool, pricer, itl, itl_classes, fin,
                                              macro_steps=macro_steps, timeline_bin_s=bin_s),
                          on_finish, lambda req, why: _reject(req, why, env.now, on_finish),
                          log.add_lost_gaps, lambda: log.written >= total,
                          queue_timeout_s=run.router_queue_timeout_s)
            replicas, route = fleet.replicas, fleet.route
    admit = _Admission(env, route, run, on_finish, log, trace.warmup_requests, num_classes)
    sampler = None                       # the day view's samples (sim/day.py)
    if loop is None and not run.disaggregated and not trace.warmup_requests \
            and wants_day_view(run):
        serving, held, every = \
            ((lambda: fleet.serving), (lambda: len(fleet.pending)), lambda: fleet.replicas) \
            if fleet else ((lambda: pooled.serving), (lambda: pooled.held),
                           lambda: pooled.replicas) if pooled else \
            ((lambda: replicas), (lambda: 0), lambda: replicas)
        sampler = DaySampler(env, itl, serving, held, lambda: log.written >= total, every)
    sender = None
    if loop is None:
        env.process(_arrivals(env, source, admit))
    else:
        sender = ClosedLoopSender(env, source, log, admit)
        for rep in replicas:
            rep.hooks = EveryFinishObserved(rep.hooks)
        env.process(sender.start())
    env.run()
    if pooled is not None:               # pools' fleets may have grown
        replicas = pooled.replicas
    if sender is not None:               # the rows it sent (all, unless stopped by time)
        log.truncate(sender.sent)
        trace = source.trace.head(sender.sent)
    _check_invariants(log, replicas, itl)
    problems = cluster.invariant_problems() if cluster is not None else []
    if problems:
        raise InvariantError(problems[0])
    if progress is not None:
        progress(total, total)
    result = _result(run, trace, log, replicas, itl, env.now, time.perf_counter() - wall0)
    result = result if cluster is None else cluster.finish(result)
    if pooled is not None:
        result = pooled_result(result, run, pooled, itl_classes)
    if fleet is not None:
        result = _with_fleet(result, run, fleet)
    if sampler is not None:
        update = {"day": sampler.result()}
        if fleet is None:                # the run ended with its last request, not a sample
            update["sim_end_s"] = float(np.nanmax(result.requests.finish_s, initial=0.0))
        result = result.model_copy(update=update)
    return _without_warmup(result, num_classes) if trace.warmup_requests else result


def _with_fleet(result: RunResult, run: RunConfig, fleet: Fleet) -> RunResult:
    """An autoscaled run's result: its fleet history, the most replicas that ever served,
    and the fleet's mean price per hour over the run (GPU-hours × price / hours)."""
    pool = run.pool()
    hw, tp = pool.hardware, pool.engine.tensor_parallel_size
    policy = policy_label(run.autoscaling, run.provisioning_delay_s) \
        if run.autoscaling is not None else f"fixed, {run.pool().num_replicas} replicas"
    history = fleet.result(policy, tp, hw.price_per_gpu_hour_usd)
    peak = max(history.serving)
    hours = fleet.last_end_s / 3600.0
    return result.model_copy(update={
        "fleet": history, "num_replicas": peak, "num_gpus": peak * tp,
        "sim_end_s": fleet.last_end_s,       # not the last failure or repair timer
        "price_per_hour_usd": history.cost_usd / hours if hours > 0 else 0.0})


def _last_arrival_s(trace: RequestTrace) -> float:
    """Where the timeline's bins should reach: the last known arrival, or a closed loop's
    stop time (0 when unknown: the bins start narrow and coarsen)."""
    if trace.closed_loop is not None:
        stop = trace.closed_loop.stop_s
        return stop if stop != math.inf else 0.0
    return float(np.nanmax(trace.arrival_s)) if len(trace) else 0.0


def _done(written: int, total: int, loop, now: float) -> int:
    """Progress: requests ended, or for a closed loop bounded by time, its time elapsed
    (as a share of ``total``)."""
    if loop is None or loop.stop_s == math.inf:
        return written
    return min(total, int(total * now / loop.stop_s))


def _without_warmup(result: RunResult, num_classes: int) -> RunResult:
    """The result without the warm-up requests' ITL runs (class ids ≥ ``num_classes``) and
    KV transfers; their request records say ``warmup``."""
    itl = result.itl
    keep = np.asarray(itl.class_id) < num_classes
    update = {"itl": ItlRuns(gap_s=np.asarray(itl.gap_s)[keep], count=np.asarray(itl.count)[keep],
                             class_id=np.asarray(itl.class_id)[keep],
                             pool=np.asarray(itl.pool)[keep] if len(itl.pool) else itl.pool)}
    if result.disagg is not None:
        t = result.disagg.transfers
        ok = [c < num_classes for c in t.class_id]
        transfers = t.model_copy(update={k: [v for v, o in zip(getattr(t, k), ok) if o]
                                         for k in TransferRecords.model_fields})
        update["disagg"] = result.disagg.model_copy(update={"transfers": transfers})
    return result.model_copy(update=update)


def _next_turn(env: simpy.Environment, req: Request, parent_rejected: bool, trace: RequestTrace,
               admit: "_Admission"):
    """A conversation's next turn arrives ``think_s`` after the previous reply completes
    (rejected at once if the previous turn was rejected)."""
    if parent_rejected:
        _reject(req, "the previous turn of its conversation was rejected", env.now,
                admit.on_finish)
        return
    yield env.timeout(float(trace.think_s[req.rid]))
    req.arrival_s = env.now
    admit(req)


def rejections(run: RunConfig, trace: RequestTrace) -> list[tuple[int, str]]:
    """What :func:`reject_reason` would refuse in ``trace``, before running it
    (:func:`group_reasons`); [] when every request can be served."""
    rows = zip(trace.prompt_tokens.tolist(), trace.output_tokens.tolist(), trace.n.tolist())
    return group_reasons(reject_reason(Request(rid, 0, 0.0, prompt, output, None, n), run)
                         for rid, (prompt, output, n) in enumerate(rows))


def group_reasons(reasons: Iterable[str]) -> list[tuple[int, str]]:
    """(count, one example) per kind of rejection reason (the reason with its numbers
    blanked), most frequent first; empty reasons are skipped."""
    kinds: dict[str, list] = {}
    for reason in reasons:
        if reason:
            kind = kinds.setdefault(re.sub(r"\d+", "#", reason), [0, reason])
            kind[0] += 1
    return sorted(((count, example) for count, example in kinds.values()), reverse=True)


def reject_reason(req: Request, run: RunConfig) -> str:
    """Why a request can never be served by this engine ("" if it can)."""
    if run.disaggregated:
        return disagg_reject_reason(req, run)
    if run.fleet is not None:                 # any pool serving its class's model
        f = run.fleet
        want = f.class_models[req.class_id % len(f.class_models)]
        reasons = [colocated_reject_reason(req, p.pool) for p in f.pools if p.model.name == want]
        return "" if "" in reasons else reasons[0]
    return colocated_reject_reason(req, run.pool())


def _arrivals(env: simpy.Environment, source: RequestSource, admit: "_Admission"):
    """First turns, in trace order, each built and admitted at its arrival time."""
    roots = source.roots
    for k in range(len(roots)):
        req = source.root(roots.item(k))
        delay = req.arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        admit(req)


class _Admission:
    """Sends an arriving request to the cluster (``route``), or rejects it at once when
    the engine could never serve it (:func:`reject_reason`, :func:`_admit`). The first ``warmup``
    requests through here are marked as warm-up: logged as such, their class id shifted
    by ``num_classes`` (their ITL runs are recorded apart)."""

    __slots__ = ("env", "route", "run", "on_finish", "log", "warmup_left", "num_classes")

    def __init__(self, env: simpy.Environment, route, run: RunConfig, on_finish,
                 log: RequestLog, warmup: int, num_classes: int):
        self.env, self.route, self.run, self.on_finish, self.log = env, route, run, on_finish, log
        self.warmup_left, self.num_classes = warmup, num_classes

    def __call__(self, req: Request) -> None:
        if self.warmup_left:
            self.warmup_left -= 1
            req.class_id += self.num_classes
            self.log.mark_warmup(req.rid)
        _admit(self.env, req, self.route, self.run, self.on_finish)


def _admit(env: simpy.Environment, req: Request, route, run: RunConfig, on_finish) -> None:
    """Reject a request no replica can serve; else route it to a replica once the engine's
    server path (``request_before_s``: HTTP, tokenization, wake-up) has passed (a pooled
    fleet: :meth:`PooledCluster.admit` picks the pool first)."""
    if isinstance(route, PooledCluster):
        route.admit(req, lambda why: _reject(req, why, req.arrival_s, on_finish))
        return
    reason = reject_reason(req, run)
    if reason:
        _reject(req, reason, req.arrival_s, on_finish)
        return
    before_s = run.pools[0].preset.host_overhead.request_before_s    # the pool it enters
    if before_s > 0:
        env.timeout(before_s).callbacks.append(lambda _: route().submit(req))
    else:
        route().submit(req)


def _reject(req: Request, reason: str, now: float, on_finish) -> None:
    if req.arrival_s != req.arrival_s:          # a later turn that never arrived
        req.arrival_s = now
    req.state = REJECTED
    req.reject_reason = reason
    on_finish(req)


def _check_invariants(log: RequestLog, replicas: list[Replica], itl: ItlRecorder) -> None:
    """Every request ended once, finished ones with all their tokens (checked as they
    ended); replicas drained, every KV block free; ITL gaps (plus the tokens that shared
    a streamed chunk, under speculative decoding) = what finished requests imply."""
    problems = log.problems()
    if problems:
        raise InvariantError(problems[0])
    for rep in replicas:
        if rep.failed:                  # its state died with it (engine/fleet.py)
            continue
        if rep.scheduler.has_work():
            raise InvariantError(f"replica {rep.index} still has queued or running requests")
        rep.alloc.check_all_free()
    # Speculative decoding streams several tokens in one chunk: one gap per chunk.
    gaps = itl.total_gaps() + sum(getattr(rep.scheduler, "merged_tokens", 0)
                                  for rep in replicas)
    if gaps != log.gaps_expected:
        raise InvariantError(f"recorded {gaps} inter-token gaps; finished requests "
                             f"imply {log.gaps_expected}")


def _result(run: RunConfig, trace: RequestTrace, log: RequestLog, replicas: list[Replica],
            itl: ItlRecorder, end_s: float, wall_s: float) -> RunResult:
    """The run's result; a disaggregated split's pool-level fields (scheduler, hardware,
    price, peaks, log) are then replaced by :meth:`DisaggCluster.finish`."""
    if run.fleet is not None:
        return _pooled_base(run, trace, log, replicas, itl, end_s, wall_s)
    pool = run.serving_pool
    hw = pool.hardware
    return RunResult(
        variant=run.variant, seed=run.seed, scheduler=scheduler_label(pool),
        num_replicas=run.num_replicas, num_gpus=run.num_gpus, hardware=hw.name,
        model=run.model.name, price_per_hour_usd=hw.price_per_gpu_hour_usd * run.num_gpus,
        peak_flops_per_gpu=hw.peak_flops(pool.matmul_dtype),
        hbm_bandwidth_per_gpu_bytes_per_s=hw.hbm_bandwidth_bytes_per_s,
        class_names=list(trace.class_names), sim_end_s=end_s, wall_s=wall_s,
        requests=log.records(trace), itl=itl.result(), replicas=[r.stats() for r in replicas],
        timelines=[r.account.timeline.result() for r in replicas],
        log=pool_log_lines(pool), engine=engine_label(run),
        preset="disaggregated" if run.disaggregated else pool.preset.name)


def _pooled_base(run: RunConfig, trace: RequestTrace, log: RequestLog, replicas: list[Replica],
                 itl: ItlRecorder, end_s: float, wall_s: float) -> RunResult:
    """A pooled run's result before :func:`~capsim.sim.pooled.pooled_result` adds the pools:
    labels of every pool joined (one pool: exactly a single fleet's), peaks per GPU as the
    GPU-weighted mean of the pools' (so MFU / MBU divide by the fleet's summed peak)."""
    pools = [fp.pool for fp in run.fleet.pools]
    gpus = [p.num_gpus for p in pools]
    total = max(sum(gpus), 1)

    def per_gpu(value) -> float:
        if len(pools) == 1:             # exactly the one pool's figure
            return value(pools[0])
        return sum(value(p) * g for p, g in zip(pools, gpus)) / total

    def joined(values) -> str:
        return "+".join(dict.fromkeys(values))

    return RunResult(
        variant=run.variant, seed=run.seed, scheduler=joined(scheduler_label(p) for p in pools),
        num_replicas=run.num_replicas, num_gpus=run.num_gpus,
        hardware=joined(p.hardware.name for p in pools),
        model=joined(fp.model.name for fp in run.fleet.pools),
        price_per_hour_usd=sum(p.hardware.price_per_gpu_hour_usd * p.num_gpus for p in pools),
        peak_flops_per_gpu=per_gpu(lambda p: p.hardware.peak_flops(p.matmul_dtype)),
        hbm_bandwidth_per_gpu_bytes_per_s=per_gpu(lambda p: p.hardware.hbm_bandwidth_bytes_per_s),
        class_names=list(trace.class_names), sim_end_s=end_s, wall_s=wall_s,
        requests=log.records(trace), itl=itl.result(), replicas=[r.stats() for r in replicas],
        timelines=[r.account.timeline.result() for r in replicas], log=kv_log_lines(run),
        engine=engine_label(run), preset=joined(p.preset.name for p in pools))
