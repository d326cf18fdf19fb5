"""trace_<variant>.json: a run's ``--trace-events`` window as a Chrome / Perfetto trace.

The Trace Event Format (the document catapult's docs/trace-event-format.md points to:
docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), in its JSON object
form ``{"traceEvents": [...]}``, which ui.perfetto.dev and chrome://tracing open. Times are
simulated microseconds from t = 0 (``ts``, ``dur``). One process (``pid``) per replica,
named "replica K · <pool>", one thread (``tid``) per batch slot (0, or each of a
pipeline-parallel replica's batches in flight); pid 1, "requests", holds the rejections.
Events:

- ``X`` (complete): each engine step, named by its kind — ``prefill`` (prompt tokens
  only), ``decode`` (decode tokens only), ``mixed`` (both) or ``step`` (neither: a swap) —
  with ``args``: prefill_tokens, decode_tokens, running and waiting after it,
  kv_used_blocks, kv_used_pct, preemptions;
- ``C`` (counter): per replica ``KV cache`` (``used_pct``, blocks held for the step, at
  its start) and ``batch`` (``running`` and ``waiting`` after the step, at its end);
- ``i`` (instant): ``preemption`` (at the step whose scheduling preempted, ``count``),
  ``rejected`` (on pid 1, at the request's end or else its arrival, with its reason) and,
  in a disaggregated run, ``kv transfer out`` on the prefill replica (token 1 handed off)
  and ``kv transfer in`` on the decode replica (the last byte landed), with bytes and the
  wait for room;
- ``M`` (metadata): process and thread names and the processes' order.

Every event has ``name``, ``ph``, ``ts``, ``pid`` and ``tid``; the JSON is strict (no
NaN).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from capsim.report.style import unique_slugs
from capsim.results.model import REJECTED, RunResult, StepTrace

#: The process of events that belong to no replica (rejections).
REQUESTS_PID = 1

log = logging.getLogger(__name__)


def write_all(d: Path, results: list[RunResult]) -> list[str]:
    """``trace_<variant>.json`` in ``d`` for each result with a step trace; their names."""
    slugs = unique_slugs(r.variant for r in results)
    names = []
    for r in results:
        if r.step_trace is None:
            continue
        name = f"trace_{slugs[r.variant]}.json"
        (d / name).write_text(json.dumps(document(r), separators=(",", ":"), allow_nan=False),
                              encoding="utf-8")
        names.append(name)
        trace = r.step_trace
        if trace.steps.start_s.size == 0:   # a window past the run wrote names only, silently
            log.warning(f"{name}: no engine step in --trace-events {trace.start_s:g}:"
                        f"{trace.end_s:g}; the run's steps end by {r.sim_end_s:.4g} s "
                        "(simulated), so the trace holds no step")
    return names


def document(result: RunResult) -> dict[str, Any]:
    """The trace object of one variant (``result.step_trace`` must be set)."""
    trace = result.step_trace
    pids = _pids(trace)
    events = _metadata(trace, pids)
    events += _steps(trace, pids)
    events += _rejections(result, trace)
    events += _transfers(result, trace, pids)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"variant": result.variant, "seed": result.seed,
                          "window_s": [trace.start_s, trace.end_s],
                          "time": "simulated microseconds from t = 0"}}


def _us(t_s: float) -> float:
    return round(t_s * 1e6, 3)


def _pids(trace: StepTrace) -> list[int]:
    """Each traced replica's pid (after :data:`REQUESTS_PID`)."""
    return [REQUESTS_PID + 1 + i for i in range(len(trace.replicas))]


def _metadata(trace: StepTrace, pids: list[int]) -> list[dict]:
    def meta(name: str, pid: int, tid: int, args: dict) -> dict:
        return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}

    out = [meta("process_name", REQUESTS_PID, 0, {"name": "requests"}),
           meta("process_sort_index", REQUESTS_PID, 0, {"sort_index": 0})]
    lanes = trace.steps.lane
    rids = trace.steps.replica
    for i, (rep, pid) in enumerate(zip(trace.replicas, pids)):
        where = " · ".join(x for x in (rep.pool_name, rep.pool) if x)
        out.append(meta("process_name", pid, 0, {"name": f"replica {rep.replica} · {where}"}))
        out.append(meta("process_sort_index", pid, 0, {"sort_index": pid}))
        used = sorted(set(lanes[rids == i].tolist())) or [0]
        out += [meta("thread_name", pid, lane, {"name": f"batch slot {lane}"}) for lane in used]
    return out


def _steps(trace: StepTrace, pids: list[int]) -> list[dict]:
    s = trace.steps
    blocks = [r.num_gpu_blocks for r in trace.replicas]
    out = []
    for row in zip(s.replica.tolist(), s.lane.tolist(), s.start_s.tolist(), s.end_s.tolist(),
                   s.prefill_tokens.tolist(), s.decode_tokens.tolist(), s.running.tolist(),
                   s.queue.tolist(), s.kv_used_blocks.tolist(), s.preemptions.tolist()):
        rid, lane, start, end, prefill, decode, running, queue, kv, preempted = row
        pid, ts = pids[rid], _us(start)
        pct = round(100.0 * kv / blocks[rid], 3) if blocks[rid] else 0.0
        kind = ("mixed" if decode else "prefill") if prefill else ("decode" if decode else "step")
        out.append({"name": kind, "cat": "step", "ph": "X", "ts": ts,
                    "dur": max(0.0, round(_us(end) - ts, 3)), "pid": pid, "tid": lane,
                    "args": {"prefill_tokens": prefill, "decode_tokens": decode,
                             "running": running, "waiting": queue, "kv_used_blocks": kv,
                             "kv_used_pct": pct, "preemptions": preempted}})
        out.append({"name": "KV cache", "ph": "C", "ts": ts, "pid": pid, "tid": 0,
                    "args": {"used_pct": pct}})
        out.append({"name": "batch", "ph": "C", "ts": _us(end), "pid": pid, "tid": 0,
                    "args": {"running": running, "waiting": queue}})
        if preempted:
            out.append({"name": "preemption", "cat": "scheduler", "ph": "i", "s": "t",
                        "ts": ts, "pid": pid, "tid": lane, "args": {"count": preempted}})
    return out


def _inside(trace: StepTrace, t_s: float) -> bool:
    return trace.start_s <= t_s <= trace.end_s


def _rejections(result: RunResult, trace: StepTrace) -> list[dict]:
    r = result.requests
    status = np.asarray(r.status)
    out = []
    for i in np.flatnonzero(status == REJECTED).tolist():
        end = float(r.finish_s[i])
        t = end if math.isfinite(end) else float(r.arrival_s[i])
        if not _inside(trace, t):
            continue
        out.append({"name": "rejected", "cat": "request", "ph": "i", "s": "p", "ts": _us(t),
                    "pid": REQUESTS_PID, "tid": 0,
                    "args": {"request_id": int(r.request_id[i]), "replica": int(r.replica[i]),
                             "reason": str(r.reject_reason[i])}})
    return out


def _transfers(result: RunResult, trace: StepTrace, pids: list[int]) -> list[dict]:
    """A disaggregated run's KV transfers: handed off (prefill side), landed (decode side)."""
    if result.disagg is None:
        return []
    pid_of = {rep.replica: pid for rep, pid in zip(trace.replicas, pids)}
    t = result.disagg.transfers
    out = []
    for row in zip(t.request_id, t.prefill_replica, t.decode_replica, t.tokens, t.bytes,
                   t.handoff_s, t.reserved_s, t.arrived_s):
        rid, src, dst, tokens, nbytes, handoff, reserved, arrived = row
        args = {"request_id": rid, "prefill_replica": src, "decode_replica": dst,
                "tokens": tokens, "bytes": nbytes,
                "wait_for_room_ms": _ms(reserved - handoff), "transfer_ms": _ms(arrived - reserved)}
        if src in pid_of and _inside(trace, handoff):
            out.append({"name": "kv transfer out", "cat": "kv", "ph": "i", "s": "p",
                        "ts": _us(handoff), "pid": pid_of[src], "tid": 0, "args": args})
        if dst in pid_of and _inside(trace, arrived):
            out.append({"name": "kv transfer in", "cat": "kv", "ph": "i", "s": "p",
                        "ts": _us(arrived), "pid": pid_of[dst], "tid": 0, "args": args})
    return out


def _ms(seconds: float) -> float | None:
    return round(seconds * 1e3, 6) if math.isfinite(seconds) else None
