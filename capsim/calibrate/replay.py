"""A measured run as a :class:`~capsim.workload.RequestTrace`: the same requests, arriving
when the client sent them.

Every request with a known prompt length, at least one output token and a send time is
replayed with its measured prompt and output lengths. Successful ones are class
``measured`` (compared and fitted); failed or incomplete ones that still produced
tokens are class ``unmeasured``: they load the simulated server as they loaded the real
one but are not compared.

Arrivals, in order of preference (:attr:`Replay.arrivals`):

1. ``send times`` — the client saved when each request was sent (vLLM ``start_times``,
   GuideLLM ``request_start``, AIPerf ``request_start_ns``, genai-perf ``timestamp``):
   arrival = send − first send. Exact.
2. ``all at once`` — no send times, request rate ``inf`` and no concurrency cap: every
   request at t = 0, as the client sent them. Exact.
3. ``closed loop`` — no send times, rate ``inf`` with ``max_concurrency`` C: the client
   sent the first C at once and each next one (in file order: its semaphore is first in,
   first out) when one of the C in flight finished. The send times follow from the
   measured E2E latencies and are reconstructed that way; not exact (client overhead
   between a finish and the next send is not in the file), but faithful to the bursts
   a constant rate would smooth out.
4. ``re-drawn`` — no send times and a finite rate: the client drew random gaps (Poisson,
   or gamma with vLLM's ``--burstiness``) and saved none of them; they cannot be
   replayed. Gaps are drawn again, seeded, from the same distribution, the requests
   kept in the measured order (capped at ``max_concurrency`` as in 3). Only the
   distributions are comparable, not request by request: ``capsim compare`` accepts
   it and says so; ``capsim calibrate`` (a per-request fit) refuses it.

The simulator replays arrivals open loop: a closed-loop client would have sent later
had the server been slower, so a replayed closed-loop run is exact only as long as the
simulated server keeps the measured pace.

Public API:
    Replay, replay, CLASS_NAMES
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from capsim.calibrate.measured import MeasuredRun
from capsim.common.errors import ScenarioError
from capsim.workload import RequestTrace

#: Trace classes: 0 = successful requests (compared), 1 = replayed load only.
CLASS_NAMES = ("measured", "unmeasured")

SEND_TIMES, ALL_AT_ONCE, CLOSED_LOOP, REDRAWN = ("send times", "all at once", "closed loop",
                                                 "re-drawn")


@dataclass(frozen=True)
class Replay:
    """The replayed requests of a :class:`MeasuredRun`.

    Attributes:
        trace: the requests in arrival order; class 0 ``measured``, 1 ``unmeasured``.
        rows: int64 ``(M,)``, the MeasuredRun row of each trace row.
        arrivals: how arrivals were set: ``send times`` | ``all at once`` | ``closed loop``
            | ``re-drawn`` (see the module docstring).
        exact: True for send times and all-at-once replays.
        note: one sentence saying how the arrivals were set and what that means.
        dropped: measured requests not replayed (no prompt length, no token, no send time).
    """

    trace: RequestTrace
    rows: np.ndarray
    arrivals: str
    exact: bool
    note: str
    dropped: int

    @property
    def measured(self) -> np.ndarray:
        """Bool ``(M,)``: trace rows of successful requests."""
        return self.trace.class_id == 0


def _capped(intended_s: np.ndarray, duration_s: np.ndarray, cap: int) -> np.ndarray:
    """Send times of a client with at most ``cap`` requests in flight: each request goes at
    its intended time or, if ``cap`` are in flight, when the first of them finishes."""
    busy: list[float] = []
    out = np.empty(len(intended_s))
    for i, (t, d) in enumerate(zip(intended_s, duration_s)):
        if len(busy) >= cap:
            t = max(t, heapq.heappop(busy))
        out[i] = t
        heapq.heappush(busy, t + d)
    return out


def _redrawn(n: int, rate: float, burstiness: float | None, seed: int) -> np.ndarray:
    """Cumulative gamma gaps at ``rate`` (shape ``burstiness``; 1 = Poisson), first at 0."""
    shape = burstiness if burstiness and burstiness > 0 and math.isfinite(burstiness) else 1.0
    gaps = np.random.default_rng(seed).gamma(shape, 1.0 / (rate * shape), max(n - 1, 0))
    return np.concatenate([[0.0], np.cumsum(gaps)])


def _arrivals(run: MeasuredRun, seed: int) -> tuple[np.ndarray, str, str]:
    n = len(run)
    rate, cap = run.request_rate_per_s, run.max_concurrency
    if run.send_s is not None:
        how = "are the send times the client saved"
        if cap:
            how += ("; the client ran closed loop (a concurrency cap): the simulator replays "
                    "these arrivals open loop")
        return run.send_s, SEND_TIMES, how + "."
    duration = np.nan_to_num(run.e2e_s, nan=0.0)
    if rate is None:
        raise ScenarioError(f"{run.label} result: no send times and no request rate: the "
                            "arrivals cannot be derived", file=run.path)
    if math.isinf(rate) and not cap:
        return np.zeros(n), ALL_AT_ONCE, ("are all at t = 0: request rate inf without a "
                                          "concurrency cap, and no send times saved.")
    if math.isinf(rate):
        return _capped(np.zeros(n), duration, cap), CLOSED_LOOP, (
            f"were not saved by the client, so they cannot be replayed exactly: reconstructed "
            f"from the measured order and latencies of a closed loop of {cap} requests in "
            f"flight (each sent when one finished); the simulator replays them open loop.")
    intended = _redrawn(n, rate, run.burstiness, seed)
    kind = "Poisson" if not run.burstiness or run.burstiness == 1 else \
        f"gamma (burstiness {run.burstiness:g})"
    times = _capped(intended, duration, cap) if cap else intended
    return times, REDRAWN, (
        f"were not saved by the client and drawn at random ({kind}, {rate:g} req/s), so they "
        f"cannot be replayed: drawn again from the same distribution (seed {seed}) in the measured "
        f"order{f', at most {cap} in flight' if cap else ''}; compare distributions, not "
        "single requests.")


def replay(run: MeasuredRun, *, seed: int = 0, allow_redrawn: bool = True) -> Replay:
    """The measured requests as a trace (see the module docstring for the arrival rules).

    Args:
        seed: seeds the re-drawn gaps of a finite-rate run without send times.
        allow_redrawn: False refuses such a run (a per-request fit needs the real arrivals).

    Raises:
        ScenarioError: no successful request to replay, no way to derive arrivals, or
            re-drawn arrivals when not allowed.
    """
    send, kind, how = _arrivals(run, seed)
    if kind == REDRAWN and not allow_redrawn:
        raise ScenarioError(
            f"{run.label} result: request rate {run.request_rate_per_s:g} without send times: "
            "the arrival times were random and not saved, so the requests cannot be replayed "
            "one by one; use a client version that saves send times (vLLM start_times, "
            "GuideLLM, AIPerf), request rate inf, or capsim compare (distributions only)",
            file=run.path)
    ok = (run.prompt_tokens > 0) & (run.output_tokens > 0) & np.isfinite(send)
    rows = np.flatnonzero(ok)
    rows = rows[np.argsort(send[rows], kind="stable")]
    measured = run.success[rows]
    if not measured.any():
        raise ScenarioError(f"{run.label} result: no successful request to replay",
                            file=run.path)
    arrival = send[rows] - send[rows].min()
    trace = RequestTrace(arrival, run.prompt_tokens[rows], run.output_tokens[rows],
                         np.where(measured, 0, 1).astype(np.int32),
                         np.full(len(rows), -1, np.int32), CLASS_NAMES)
    return Replay(trace, rows, kind, kind in (SEND_TIMES, ALL_AT_ONCE),
                  f"Arrivals {how}", int(len(run) - len(rows)))
