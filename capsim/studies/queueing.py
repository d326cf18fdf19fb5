"""Queueing theory used to check the simulator: M/D/1 waiting time and Little's law.

Nothing here runs a simulation; the functions take rates, service times or
the arrival and departure times a run recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def md1_mean_wait_s(rate_per_s: float, service_s: float) -> float:
    """Mean time in queue (before service starts) of an M/D/1 queue, seconds.

    Pollaczek–Khinchine with a deterministic service time ``D``:
    ``W_q = ρ D / (2 (1 − ρ))`` with utilisation ``ρ = λ D`` (Kleinrock,
    *Queueing Systems* vol. 1, eq. 5.76 with ``E[S²] = D²``).

    Raises:
        ValueError: ``rate_per_s`` or ``service_s`` not positive, or ``ρ >= 1``
            (the queue has no steady state).
    """
    if rate_per_s <= 0 or service_s <= 0:
        raise ValueError(f"rate and service time must be > 0 (got {rate_per_s}, {service_s})")
    rho = rate_per_s * service_s
    if rho >= 1:
        raise ValueError(f"utilisation ρ = λD = {rho:.3f} >= 1: the queue grows without bound")
    return rho * service_s / (2.0 * (1.0 - rho))


@dataclass(frozen=True)
class LittleCheck:
    """The three quantities of Little's law ``L = λ W`` measured on one run.

    Attributes:
        mean_in_system: time-average number of requests in the system over
            the window (first arrival → last departure), from an event sweep.
        arrival_rate_per_s: requests ÷ window length.
        mean_time_in_system_s: mean departure − arrival, seconds.
    """

    mean_in_system: float
    arrival_rate_per_s: float
    mean_time_in_system_s: float

    @property
    def relative_error(self) -> float:
        """``|L − λW| ÷ L`` (NaN when the window is empty)."""
        lam_w = self.arrival_rate_per_s * self.mean_time_in_system_s
        if not self.mean_in_system:
            return float("nan")
        return abs(self.mean_in_system - lam_w) / self.mean_in_system


def little_check(arrival_s: np.ndarray, departure_s: np.ndarray) -> LittleCheck:
    """Measure ``L``, ``λ`` and ``W`` for requests with these arrival and departure times.

    ``L`` integrates the number in system ``N(t)`` (+1 at each arrival, −1 at
    each departure, departures first on ties) over ``[min arrival, max
    departure]`` — computed independently of ``W``, so ``L = λ W`` checks that
    every request's times are consistent (each departs after it arrives,
    none lost). Shapes ``(N,)``, seconds; NaN entries (requests that never
    departed) are dropped.

    Raises:
        ValueError: arrays of different shapes, or a departure before its arrival.
    """
    a = np.asarray(arrival_s, dtype=np.float64)
    d = np.asarray(departure_s, dtype=np.float64)
    if a.shape != d.shape:
        raise ValueError(f"arrival and departure shapes differ: {a.shape} vs {d.shape}")
    keep = ~(np.isnan(a) | np.isnan(d))
    a, d = a[keep], d[keep]
    if len(a) == 0:
        return LittleCheck(float("nan"), float("nan"), float("nan"))
    if (d < a).any():
        raise ValueError("a request departs before it arrives")
    t0, t1 = float(a.min()), float(d.max())
    window = t1 - t0
    times = np.concatenate([d, a])
    steps = np.concatenate([-np.ones(len(d)), np.ones(len(a))])
    order = np.argsort(times, kind="stable")          # departures sort first on ties
    times, in_system = times[order], np.cumsum(steps[order])
    area = float(np.sum(in_system[:-1] * np.diff(times)))
    if window <= 0:
        return LittleCheck(float("nan"), float("nan"), float(np.mean(d - a)))
    return LittleCheck(area / window, len(a) / window, float(np.mean(d - a)))
