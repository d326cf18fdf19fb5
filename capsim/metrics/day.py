"""The day view: a run cut into windows (5 minutes for a run of an hour to two days).

Windows cover the whole run, from t = 0 to its end (the later of the last arrival and the
last request's end), each ``window_s`` long but the last, which ends with the run (half a
window to one and a half: a shorter tail joins the window before it); their
length follows the run's (:func:`capsim.sim.day.day_window_s`: at least 12 windows, so a
12-s run gets 1-s windows, at most ~600, round lengths, never longer than the run).
Per window ``[start, start + window_s)``: the offered rate (requests arriving, all of them,
per second of the window's covered length), the replicas serving and the requests waiting
(means of the :class:`~capsim.results.model.DaySamples` taken in it), p99 ITL (the gaps
recorded in it; held replies', which no client sees, left out:
:func:`capsim.metrics.summary.held_runs`) and p99 TTFT (of the requests arriving in it that
the engine took: one lost with its replica, ``failures.in_flight: fail``, or timed out at
the router while none served, ``cluster.router_queue_timeout_s``, counts as never getting a
first token, an infinite TTFT). A window with demand (arrivals, or requests waiting or
running) in which no token was sent (no first token, no inter-token gap: every replica
down) has an infinite p99 ITL: a stream waits the whole window, and that is no better than
a slow one. A window *violates* when its p99 ITL or p99 TTFT exceeds the scenario's
``slo.targets`` bound of that name; violation minutes are the violating windows' covered
length. Cost of the day: GPU-hours × price (an autoscaled or failing fleet's from its
replica lifetimes, a fixed fleet's ``num_gpus × run length``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from capsim.metrics.summary import held_runs, weighted_percentile
from capsim.results.model import (FINISHED, QUEUE_FULL, REJECTED, ROUTER_TIMEOUT_REASON,
                                  RunResult)
from capsim.scenario.slo import SloConfig
from capsim.sim.day import day_window_s

WINDOW_TARGETS = ("itl_p99_ms", "ttft_p99_ms")
"""The run-level targets a window is checked against (the others need the whole run)."""


def run_length_s(result: RunResult) -> float:
    """The run's length for the day view, s: t = 0 to the later of its last arrival and
    its end (``sim_end_s``: its last request's end)."""
    arrival = np.asarray(result.requests.arrival_s, dtype=np.float64)
    return max(float(np.nanmax(arrival, initial=0.0)), float(result.sim_end_s))


def window_label(window_s: float) -> str:
    """A window length for people: "5-minute", "1-second", "30-second", "2-hour"."""
    for unit, size in (("day", 86400.0), ("hour", 3600.0), ("minute", 60.0)):
        if window_s >= size and window_s % size == 0:
            return f"{window_s / size:g}-{unit}"
    return f"{window_s:g}-second"


def day_windows(result: RunResult, slo: SloConfig) -> pd.DataFrame:
    """One row per window from t = 0 to the run's end (columns: ``window_start_s``,
    ``window_s`` (its covered length), ``offered_rate_per_s``, ``replicas_serving``,
    ``queue_mean``, ``running_mean``, ``itl_p99_ms``, ``ttft_p99_ms``, ``violation``, ``rejected``: requests arriving in the window that
    were rejected, for any reason). Requires ``result.day``.

    Raises:
        ValueError: the result has no day samples.
    """
    day = result.day
    if day is None:
        raise ValueError(f"variant {result.variant} has no day samples")
    rec = result.requests
    arrival = np.asarray(rec.arrival_s, dtype=np.float64)
    length = run_length_s(result)
    window_s = day_window_s(length)
    length = length if length > 0 else window_s
    n = max(1, math.ceil(length / window_s - 1e-9))
    if n > 1 and length - (n - 1) * window_s < window_s / 2:
        n -= 1                              # a short tail joins the window before it
    edges = np.arange(n + 1) * window_s
    edges[-1] = length                      # the last window ends with the run
    covered = np.diff(edges)
    offered = np.histogram(arrival[np.isfinite(arrival)], bins=edges)[0] / covered
    times = np.asarray(day.times_s)
    # A sample due at a window's start (may land a rounding error before it) is its first.
    k = np.minimum(((times + _slack(times)) // window_s).astype(int), n - 1)
    serving = _window_mean(k, np.asarray(day.serving, dtype=np.float64), n)
    queue = _window_mean(k, np.asarray(day.queue, dtype=np.float64), n)
    running = _window_mean(k, np.asarray(day.running, dtype=np.float64), n)
    first_token = np.asarray(rec.first_token_s, dtype=np.float64)
    sent_first = np.histogram(first_token[np.isfinite(first_token)], bins=edges)[0] > 0
    demand = (offered > 0) | (np.nan_to_num(queue) > 0) | (np.nan_to_num(running) > 0)
    itl = _itl_p99_ms(result, times, edges, demand & ~sent_first)
    ttft_p99 = _ttft_p99_ms(result, arrival, first_token, window_s, n)
    rejected = np.asarray(rec.status) == REJECTED
    frame = pd.DataFrame({"window_start_s": edges[:-1], "window_s": covered,
                          "offered_rate_per_s": offered, "replicas_serving": serving,
                          "queue_mean": queue, "running_mean": running,
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
    # ITL runs recorded by each edge: the last sample at or before it (one due at it may
    # land a rounding error after it).
    marks = np.asarray(result.day.itl_runs)
    at = np.searchsorted(times - _slack(times), edges, side="right") - 1
    cut = np.where(at >= 0, marks[np.maximum(at, 0)], 0)
    cut[-1] = len(result.itl.gap_s)
    gaps = np.asarray(result.itl.gap_s)
    counts = np.where(held_runs(result), 0, np.asarray(result.itl.count))   # not seen
    return [weighted_percentile(gaps[a:b], counts[a:b], 99.0) * 1e3 if b > a
            else math.inf if dark[w] else math.nan
            for w, (a, b) in enumerate(zip(cut[:-1], cut[1:]))]


def _slack(times_s: np.ndarray) -> np.ndarray:
    """The rounding error a sample time may carry, s: a sample due at a window's edge (a
    multiple of the sampling period, reached by summing floats) counts as taken at it."""
    return np.abs(times_s) * 1e-12 + 1e-9


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


def violation_minutes(frame: pd.DataFrame) -> float:
    """Minutes in windows that broke a target (their covered length)."""
    return float(frame["window_s"][frame["violation"].to_numpy(dtype=bool)].sum()) / 60.0


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
