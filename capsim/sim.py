"""Wire one RunConfig and a RequestTrace into a SimPy environment and run it.

Returns a :class:`~capsim.results.RunResult`. Every run checks its invariants
(DESIGN.md "Conventions"): each request finished or was rejected with a
reason, each finished request produced exactly its output tokens, every
replica drained and every KV block is back on its free list.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import simpy

from capsim.config import RunConfig
from capsim.engine.disagg import DisaggCluster
from capsim.engine.disagg import reject_reason as disagg_reject_reason
from capsim.engine.recorder import ItlRecorder
from capsim.engine.replica import Replica
from capsim.engine.request import FINISHED, REJECTED, Request
from capsim.engine.router import make_router
from capsim.engine.scheduler import blocks_for
from capsim.kv.prefix import PREFIX, USER
from capsim.results import RequestRecords, RunResult
from capsim.roofline import StepPricer
from capsim.workload import RequestTrace

Progress = Callable[[int, int], None]


class InvariantError(RuntimeError):
    """A run broke a conservation invariant: a simulator bug, not bad input."""


def simulate(run: RunConfig, trace: RequestTrace, progress: Progress | None = None,
             macro_steps: bool = True) -> RunResult:
    """Simulate one variant over the trace.

    Args:
        run: the resolved variant.
        trace: the requests (shared by every variant of a scenario).
        progress: called as ``progress(done, total)`` while requests complete.
        macro_steps: advance decode-only stretches in one event (same results; False
            runs every engine step as its own event, the reference path).

    Raises:
        InvariantError: if a conservation invariant fails at the end.
    """
    wall0 = time.perf_counter()
    env = simpy.Environment()
    itl = ItlRecorder()
    reqs = _requests(trace)
    total = len(reqs)
    done = [0]
    tick = max(1, total // 200)

    children = _children(trace)

    def on_finish(req: Request) -> None:
        done[0] += 1
        if progress is not None and done[0] % tick == 0:
            progress(done[0], total)
        for child in children.get(req.rid, ()):
            env.process(_next_turn(env, reqs[child], req, trace, route, run, on_finish))

    cluster = None                       # prefill/decode pools + KV link (engine/disagg.py)
    if run.disagg is not None:
        cluster = DisaggCluster(env, run, itl, len(trace.class_names), on_finish)
        replicas, route = cluster.replicas, cluster.route
    else:
        pricer = StepPricer(run.model, run.hardware, run.engine.tensor_parallel_size,
                            weight_dtype=run.engine.dtype,
                            kv_cache_dtype_bytes=run.engine.kv_dtype_bytes)
        replicas = [Replica(env, i, run, pricer, itl, len(trace.class_names), on_finish,
                            macro_steps=macro_steps)
                    for i in range(run.cluster.num_replicas)]
        route = make_router(run.cluster.router, replicas)
    roots = [reqs[i] for i in np.flatnonzero(trace.parent < 0).tolist()]
    env.process(_arrivals(env, roots, route, run, on_finish))
    env.run()
    _check_invariants(reqs, replicas, itl)
    problems = cluster.invariant_problems(reqs) if cluster is not None else []
    if problems:
        raise InvariantError(problems[0])
    if progress is not None:
        progress(total, total)
    result = _result(run, trace, reqs, replicas, itl, env.now, time.perf_counter() - wall0)
    return result if cluster is None else cluster.finish(result)


def _requests(trace: RequestTrace) -> list[Request]:
    """Request objects with their token identity (segments) for prefix caching."""
    reqs: list[Request] = []
    rows = zip(trace.arrival_s.tolist(), trace.prompt_tokens.tolist(),
               trace.output_tokens.tolist(), trace.class_id.tolist(), trace.prefix_id.tolist(),
               trace.prefix_tokens.tolist(), trace.parent.tolist(), trace.n.tolist())
    for i, (a, p, o, c, pid, ptok, parent, n) in enumerate(rows):
        if parent >= 0:
            up = reqs[parent]
            segments = up.segments + ((USER, i, p - up.prompt_tokens - up.output_tokens),)
            up.shareable = True
        elif pid >= 0:
            segments = ((PREFIX, pid, ptok), (USER, i, p - ptok))
        else:
            segments = None
        reqs.append(Request(i, c, a, p, o, segments, n))
    return reqs


def _children(trace: RequestTrace) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for child in np.flatnonzero(trace.parent >= 0).tolist():
        out.setdefault(int(trace.parent[child]), []).append(child)
    return out


def _next_turn(env: simpy.Environment, req: Request, parent: Request, trace: RequestTrace,
               route, run: RunConfig, on_finish):
    """A conversation's next turn arrives ``think_s`` after the previous reply completes."""
    if parent.state == REJECTED:
        _reject(req, "the previous turn of its conversation was rejected", env.now, on_finish)
        return
    yield env.timeout(float(trace.think_s[req.rid]))
    req.arrival_s = env.now
    _admit(req, route, run, on_finish)


def reject_reason(req: Request, run: RunConfig) -> str:
    """Why a request can never be served by this engine ("" if it can)."""
    if run.disagg is not None:
        return disagg_reject_reason(req, run)
    max_len = run.engine.max_model_len
    if req.prompt_tokens + req.output_tokens > max_len:
        return (f"prompt + output = {req.prompt_tokens + req.output_tokens} tokens "
                f"exceeds max_model_len {max_len}")
    bs = run.engine.block_size
    if run.engine.kv_allocator != "paged":
        if req.n > 1:
            return "parallel sampling (n > 1) needs the paged KV allocator"
        want = max_len if run.engine.kv_allocator == "contiguous_max_model_len" else \
            req.prompt_tokens + req.output_tokens
        if want > run.kv.num_gpu_blocks * bs:
            return f"reserves {want} KV tokens; the whole cache has {run.kv.num_gpu_blocks * bs}"
    shared = req.prompt_tokens // bs              # full prompt blocks all samples share
    need = shared + req.n * (blocks_for(req.total_tokens, bs) - shared)
    if need > run.kv.num_gpu_blocks:
        return f"needs {need} KV blocks; the whole cache has {run.kv.num_gpu_blocks}"
    return ""


def _arrivals(env: simpy.Environment, reqs: list[Request], route, run: RunConfig, on_finish):
    for req in reqs:
        delay = req.arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        _admit(req, route, run, on_finish)


def _admit(req: Request, route, run: RunConfig, on_finish) -> None:
    reason = reject_reason(req, run)
    if reason:
        _reject(req, reason, req.arrival_s, on_finish)
    else:
        route().submit(req)


def _reject(req: Request, reason: str, now: float, on_finish) -> None:
    if req.arrival_s != req.arrival_s:          # a later turn that never arrived
        req.arrival_s = now
    req.state = REJECTED
    req.reject_reason = reason
    on_finish(req)


def _check_invariants(reqs: list[Request], replicas: list[Replica], itl: ItlRecorder) -> None:
    gaps_expected = 0
    for req in reqs:
        if req.state == FINISHED:
            if req.num_generated != req.output_tokens:
                raise InvariantError(f"request {req.rid} emitted {req.num_generated} of "
                                     f"{req.output_tokens} tokens")
            gaps_expected += req.n * (req.output_tokens - 1)
        elif req.state != REJECTED:
            raise InvariantError(f"request {req.rid} ended {req.state}, neither finished "
                                 "nor rejected")
    for rep in replicas:
        if rep.scheduler.has_work():
            raise InvariantError(f"replica {rep.index} still has queued or running requests")
        rep.alloc.check_all_free()
    if sum(itl.count) != gaps_expected:
        raise InvariantError(f"recorded {sum(itl.count)} inter-token gaps; finished requests "
                             f"imply {gaps_expected}")


def _result(run: RunConfig, trace: RequestTrace, reqs: list[Request], replicas: list[Replica],
            itl: ItlRecorder, end_s: float, wall_s: float) -> RunResult:
    hw = run.hardware
    records = RequestRecords(
        request_id=[r.rid for r in reqs], class_id=[r.class_id for r in reqs],
        replica=[r.replica for r in reqs], arrival_s=[r.arrival_s for r in reqs],
        prompt_tokens=[r.prompt_tokens for r in reqs], output_tokens=[r.output_tokens for r in reqs],
        status=[FINISHED if r.state == FINISHED else REJECTED for r in reqs],
        reject_reason=[r.reject_reason for r in reqs],
        first_scheduled_s=[r.first_scheduled_s for r in reqs],
        first_token_s=[r.first_token_s for r in reqs], finish_s=[r.finish_s for r in reqs],
        num_preemptions=[r.num_preemptions for r in reqs], n=[r.n for r in reqs],
        max_itl_s=[r.max_itl_s for r in reqs])
    return RunResult(
        variant=run.variant, seed=run.seed, scheduler=_scheduler_label(run),
        num_replicas=run.cluster.num_replicas, num_gpus=run.num_gpus, hardware=hw.name,
        model=run.model.name, price_per_hour_usd=hw.price_per_gpu_hour_usd * run.num_gpus,
        peak_flops_per_gpu=hw.peak_flops(run.engine.dtype),
        hbm_bandwidth_per_gpu_bytes_per_s=hw.hbm_bandwidth_bytes_per_s,
        class_names=list(trace.class_names), sim_end_s=end_s, wall_s=wall_s,
        requests=records, itl=itl.result(), replicas=[r.stats() for r in replicas],
        timelines=[r.timeline.result() for r in replicas],
        log=run.kv.log_lines(run.engine.max_model_len))


def _scheduler_label(run: RunConfig) -> str:
    eng = run.engine
    if eng.scheduler == "static":
        return "static"
    if eng.chunked:
        return f"continuous+chunked({eng.max_num_batched_tokens})"
    return "continuous"
