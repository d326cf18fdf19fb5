"""The day view: a run cut into fixed windows (5 minutes by default).

Per window ``[k·window_s, (k+1)·window_s)``: the offered rate (requests arriving, all of
them, per second), the replicas serving and the requests waiting (means of the
:class:`~capsim.results.model.DaySamples` taken in it), p99 ITL (the gaps recorded in
it) and p99 TTFT (of the requests arriving in it that the engine took: one lost with its
replica, ``failures.in_flight: fail``, or timed out at the router while none served,
``cluster.router_queue_timeout_s``, counts as never getting a first token, an infinite
TTFT). A window with demand (arrivals, or requests waiting or running) in which no token
was sent (no first token, no inter-token gap: every replica down) has an infinite p99 ITL:
a stream waits the whole window, and that is no better than a slow one. A window *violates*
when its p99 ITL or p99 TTFT exceeds the scenario's ``slo.targets`` bound of that name;
violation minutes are the violating windows' length. Cost of the day: GPU-hours × price
(an autoscaled or failing fleet's from its replica lifetimes, a fixed fleet's
``num_gpus × run length``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from capsim.metrics.summary import weighted_percentile
from capsim.results.model import (FINISHED, QUEUE_FULL, REJECTED, ROUTER_TIMEOUT_REASON,
                                  RunResult)
from capsim.scenario.slo import SloConfig

WINDOW_S = 300.0
"""The day view's window: 5 minutes."""

WINDOW_TARGETS = ("itl_p99_ms", "ttft_p99_ms")
"""The run-level targets a window is checked against (the others need the whole run)."""


def day_windows(result: RunResult, slo: SloConfig, window_s: float = WINDOW_S) -> pd.DataFrame:
    """One row per window from t = 0 to the last arrival (columns: ``window_start_s``,
    ``offered_rate_per_s``, ``replicas_serving``, ``queue_mean``, ``running_mean``,
    ``itl_p99_ms``,
    ``ttft_p99_ms``, ``violation``, ``rejected``: requests arriving in the window that were
    rejected, for any reason). Requires ``result.day``.

    Raises:
        ValueError: the result has no day samples.
    """
    day = result.day
    if day is None:
        raise ValueError(f"variant {result.variant} has no day samples")
    rec = result.requests
    arrival = np.asarray(rec.arrival_s, dtype=np.float64)
    # Windows cover the arrivals; the last one also takes what is served after them.
    end = float(np.nanmax(arrival, initial=0.0))
    n = max(1, math.ceil(end / window_s - 1e-9))
    edges = np.arange(n + 1) * window_s
    offered = np.histogram(np.minimum(arrival[np.isfinite(arrival)], edges[-1]), bins=edges)[0] \
        / window_s
    times = np.asarray(day.times_s)
    k = np.minimum((times // window_s).astype(int), n - 1)
    serving = _window_mean(k, np.asarray(day.serving, dtype=np.float64), n)
    queue = _window_mean(k, np.asarray(day.queue, dtype=np.float64), n)
    running = _window_mean(k, np.asarray(day.running, dtype=np.float64), n)
    first_token = np.asarray(rec.first_token_s, dtype=np.float64)
    sent_first = np.histogram(first_token[np.isfinite(first_token)], bins=edges)[0] > 0
    demand = (offered > 0) | (np.nan_to_num(queue) > 0) | (np.nan_to_num(running) > 0)
    itl = _itl_p99_ms(result, times, edges, demand & ~sent_first)
    ttft_p99 = _ttft_p99_ms(result, arrival, first_token, window_s, n)
    rejected = np.asarray(rec.status) == REJECTED
    frame = pd.DataFrame({"window_start_s": edges[:-1], "offered_rate_per_s": offered,
                          "replicas_serving": serving, "queue_mean": queue,
                          "running_mean": running,
                          "itl_p99_ms": itl, "ttft_p99_ms": ttft_p99})
    frame["violation"] = _violations(frame, slo)
    frame["rejected"] = np.bincount(np.minimum((arrival[rejected] // window_s).astype(int),
                                               n - 1), minlength=n)[:n]
    return frame


def _itl_p99_ms(result: RunResult, times: np.ndarray, edges: np.ndarray,
                dark: np.ndarray) -> list[float]:
    """p99 ITL (ms) of the token gaps recorded in each window between ``edges`` (s), read off
    the day samples at ``times`` (s); a window without a gap is inf when ``dark`` (demand,
    no first token sent: every replica down), else NaN."""
    # ITL runs recorded by each edge (the last sample at or before it).
    marks = np.asarray(result.day.itl_runs)
    at = np.searchsorted(times, edges, side="right") - 1
    cut = np.where(at >= 0, marks[np.maximum(at, 0)], 0)
    cut[-1] = len(result.itl.gap_s)
    gaps, counts = np.asarray(result.itl.gap_s), np.asarray(result.itl.count)
    return [weighted_percentile(gaps[a:b], counts[a:b], 99.0) * 1e3 if b > a
            else math.inf if dark[w] else math.nan
            for w, (a, b) in enumerate(zip(cut[:-1], cut[1:]))]


def _ttft_p99_ms(result: RunResult, arrival: np.ndarray, first_token: np.ndarray,
                 window_s: float, n: int) -> list[float]:
    """p99 TTFT (ms) of the requests arriving in each of the ``n`` windows (the last takes
    every later arrival): the finished ones, and those lost after routing as infinite."""
    rec = result.requests
    status = np.asarray(rec.status)
    done = status == FINISHED
    # Rejected after routing: lost with a failed replica, or timed out at the router while
    # none served (admission rejects before routing; a request shed by a replica's limit got
    # an immediate error, not a slow first token: it is in the window's rejected count).
    rejected = status == REJECTED
    reasons = np.asarray(rec.reject_reason).astype(str)
    timed_out = rejected & np.char.startswith(reasons, ROUTER_TIMEOUT_REASON)
    shed = rejected & np.char.startswith(reasons, QUEUE_FULL + ":")
    lost = rejected & ~shed & ((np.asarray(rec.replica) >= 0) | timed_out)
    ttft = (first_token - arrival)[done] * 1e3
    kw = np.minimum((arrival[done] // window_s).astype(int), n - 1)
    kl = np.bincount(np.minimum((arrival[lost] // window_s).astype(int), n - 1), minlength=n)
    return [_p99_with_lost(ttft[kw == w], int(kl[w])) for w in range(n)]


def _p99_with_lost(values: np.ndarray, lost: int) -> float:
    """p99 of ``values`` and ``lost`` more that are infinite (numpy's linear rule: the
    order statistics around rank 0.99 (n - 1), interpolated); NaN when there are none."""
    n = len(values) + lost
    if n == 0:
        return math.nan
    if lost == 0:
        return float(np.percentile(values, 99))
    rank = 0.99 * (n - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    if hi >= len(values):          # an infinite one weighs in (or is the rank itself)
        return math.inf if lo >= len(values) or rank > lo else float(np.sort(values)[lo])
    return float(np.percentile(np.concatenate([values, np.full(lost, values.max())]), 99))


def _window_mean(k: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    total = np.bincount(k, weights=values, minlength=n)[:n]
    count = np.bincount(k, minlength=n)[:n]
    return np.divide(total, count, out=np.full(n, np.nan), where=count > 0)


def _violations(frame: pd.DataFrame, slo: SloConfig) -> np.ndarray:
    bad = np.zeros(len(frame), dtype=bool)
    for name in WINDOW_TARGETS:
        if name in slo.targets:
            bad |= (frame[name] > slo.targets[name]).to_numpy()
    return bad


def violation_minutes(frame: pd.DataFrame, window_s: float = WINDOW_S) -> float:
    """Minutes in windows that broke a target."""
    return float(frame["violation"].sum()) * window_s / 60.0


def day_cost(result: RunResult) -> dict[str, float]:
    """GPU-hours, cost (USD) and USD per million output tokens of the whole run."""
    rec = result.requests
    done = np.asarray(rec.status) == FINISHED
    tokens = float((np.asarray(rec.output_tokens)[done] * np.asarray(rec.n)[done]).sum())
    if result.fleet is not None:
        gpu_hours, cost = result.fleet.gpu_hours, result.fleet.cost_usd
    elif result.pools:                  # a pooled fleet: each pool's own history or count
        hours = result.sim_end_s / 3600.0
        gpu_hours = sum(p.fleet.gpu_hours if p.fleet else p.num_gpus * hours
                        for p in result.pools)
        cost = sum(p.fleet.cost_usd if p.fleet else p.price_per_hour_usd * hours
                   for p in result.pools)
    else:
        gpu_hours = result.num_gpus * result.sim_end_s / 3600.0
        cost = result.price_per_hour_usd * result.sim_end_s / 3600.0
    return {"gpu_hours": gpu_hours, "cost_usd": cost,
            "cost_per_million_output_tokens_usd": cost / tokens * 1e6 if tokens else math.nan}
