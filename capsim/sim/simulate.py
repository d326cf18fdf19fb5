"""Wire one RunConfig and a RequestTrace into a SimPy environment and run it.

Returns a :class:`~capsim.results.model.RunResult`. Every run checks its invariants
(DESIGN.md "Conventions"): each request finished or was rejected with a
reason, each finished request produced exactly its output tokens, every
replica drained and every KV block is back on its free list.

The run is three parts: the requests' side (:class:`~capsim.sim.traffic.Traffic`), the
topology (a :class:`~capsim.engine.cluster.Cluster`, built by
:func:`~capsim.sim.topology.build_cluster`, which also assembles its part of the result)
and, for runs whose load or fleet changes over time, the day view's sampler
(:mod:`capsim.sim.day`).
"""

from __future__ import annotations

import math
import re
import time
from typing import Iterable

import numpy as np

from capsim.engine.clock import Environment

from capsim.scenario.run_config import RunConfig
from capsim.engine.cluster import Cluster, colocated_reject_reason
from capsim.engine.disagg import reject_reason as disagg_reject_reason
from capsim.engine.recorder import ItlRecorder, TimelineRecorder
from capsim.engine.router import make_gate
from capsim.engine.request import Request
from capsim.engine.step_trace import StepTracer
from capsim.sim.day import day_sampler
from capsim.sim.request_log import RequestLog
from capsim.sim.topology import Wiring, build_cluster
from capsim.sim.traffic import Progress, Traffic
from capsim.results.model import ItlRuns, RunResult, TransferRecords
from capsim.workload import RequestTrace


class InvariantError(RuntimeError):
    """A run broke a conservation invariant: a simulator bug, not bad input."""


def simulate(run: RunConfig, trace: RequestTrace, progress: Progress | None = None,
             macro_steps: bool = True,
             trace_window: tuple[float, float] | None = None) -> RunResult:
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
        trace_window: ``(start_s, end_s)``, ``--trace-events``: the result's
            ``step_trace`` holds every replica's engine steps overlapping that window of
            simulated seconds (:mod:`capsim.engine.step_trace`; same results).

    Raises:
        InvariantError: if a conservation invariant fails at the end.
        ScenarioError: a closed loop bounded by time whose requests are all rejected.
    """
    wall0 = time.perf_counter()
    env = Environment()
    if trace_window is not None:
        env.step_trace = StepTracer(*trace_window)
    num_classes = len(trace.class_names)
    itl_classes = 2 * num_classes if trace.warmup_requests else num_classes
    itl = ItlRecorder(itl_classes * (len(run.fleet.pools) if run.fleet is not None else 1))
    classes = run.workload.classes or ()
    traffic = Traffic(env, trace, progress, tuple(c.priority for c in classes)
                      if any(c.priority for c in classes) else (),
                      tuple(c.ignore_eos for c in classes)
                      if any(c.ignore_eos for c in classes) else ())
    cluster = build_cluster(run, Wiring(
        env=env, itl=itl, itl_classes=itl_classes, on_finish=traffic.on_finish,
        reject=traffic.reject, on_lost_gaps=traffic.log.add_lost_gaps, done=traffic.done,
        num_classes=num_classes, num_requests=len(trace), macro_steps=macro_steps,
        bin_s=TimelineRecorder.start_width_s(_last_arrival_s(trace))))
    sampler = day_sampler(env, run, trace, itl, cluster, traffic.done)
    traffic.start(cluster, make_gate(run))
    env.run()
    trace = traffic.sent_trace()
    _check_invariants(traffic.log, cluster, itl)
    if progress is not None:
        progress(traffic.total, traffic.total)
    result = cluster.assemble(run, _shared_fields(run, trace, traffic.log, cluster, itl,
                                                  env.now, time.perf_counter() - wall0))
    if sampler is not None:
        result = sampler.add_to(result)
    if env.step_trace is not None:
        names = {id(p.pool): p.name for p in run.fleet.pools} if run.fleet is not None else {}
        result = result.model_copy(update={"step_trace": env.step_trace.result(names)})
    return _without_warmup(result, num_classes) if trace.warmup_requests else result


def _last_arrival_s(trace: RequestTrace) -> float:
    """Where the timeline's bins should reach: the last known arrival, or a closed loop's
    stop time (0 when unknown: the bins start narrow and coarsen)."""
    if trace.closed_loop is not None:
        stop = trace.closed_loop.stop_s
        return stop if stop != math.inf else 0.0
    return float(np.nanmax(trace.arrival_s)) if len(trace) else 0.0


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


def _check_invariants(log: RequestLog, cluster: Cluster, itl: ItlRecorder) -> None:
    """Every request ended once, finished ones with all their tokens and their longest
    gap between TPOT and E2EL − TTFT (checked as they ended); replicas drained, every KV
    block free; ITL gaps (plus the tokens that shared a streamed chunk, under speculative
    decoding or multi-step scheduling) = what finished requests imply; and the cluster's
    own conservation (a disaggregated split's transfers)."""
    problems = log.problems()
    if problems:
        raise InvariantError(problems[0])
    replicas = cluster.replicas
    for rep in replicas:
        if rep.failed:                  # its state died with it (engine/fleet.py)
            continue
        if rep.scheduler.has_work():
            raise InvariantError(f"replica {rep.index} still has queued or running requests")
        rep.alloc.check_all_free()
    # Speculative decoding and multi-step windows stream several tokens in one chunk: one
    # gap per chunk.
    gaps = itl.total_gaps() + sum(rep.scheduler.merged_tokens
                                  for rep in replicas)
    if gaps != log.gaps_expected:
        raise InvariantError(f"recorded {gaps} inter-token gaps; finished requests "
                             f"imply {log.gaps_expected}")
    problems = cluster.invariant_problems()
    if problems:
        raise InvariantError(problems[0])


def _shared_fields(run: RunConfig, trace: RequestTrace, log: RequestLog, cluster: Cluster,
                   itl: ItlRecorder, end_s: float, wall_s: float) -> dict:
    """The result's fields every topology shares (:meth:`Cluster.assemble
    <capsim.engine.cluster.Cluster.assemble>` adds its own)."""
    replicas = cluster.replicas
    return dict(
        variant=run.variant, seed=run.seed, num_replicas=run.num_replicas,
        num_gpus=run.num_gpus, class_names=list(trace.class_names), sim_end_s=end_s,
        wall_s=wall_s, requests=log.records(trace), itl=itl.result(),
        replicas=[r.stats() for r in replicas],
        timelines=[r.account.timeline.result() for r in replicas])
