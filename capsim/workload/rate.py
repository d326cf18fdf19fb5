"""Time-varying arrival rates: piecewise-constant factors and the time warp that applies them.

A schedule or a burst process (:mod:`capsim.scenario.load_shape`) is a rate factor
``f(t)`` that is constant over pieces. Arrivals of rate ``rate_per_s · f(t)`` are made
by *time rescaling*: draw the arrival process at its base rate in "operational time"
``u``, then map each ``u`` to the clock time ``t = F⁻¹(u)`` where ``F(t) = ∫₀ᵗ f``.
For a Poisson process this is exact (Çinlar, *Introduction to Stochastic Processes*,
1975, §4.7: a non-homogeneous Poisson process is a unit-rate one seen through its
cumulative intensity); for gamma gaps it gives the non-stationary renewal process
with the same CV in operational time, and ``constant`` gives evenly spread arrivals
whose spacing follows the rate. ``F`` is piecewise linear, so the inverse is exact
(no numerical integration) and vectorised.

Random streams (each apart from :mod:`capsim.workload.synthetic`'s streams 0–3):
the workload's bursts draw from ``SeedSequence(seed, spawn_key=(4,))``, class ``i``'s
bursts from ``SeedSequence(seed, spawn_key=(5, i))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capsim.scenario.load_shape import DiurnalSchedule, PiecewiseSchedule


@dataclass(frozen=True)
class Pieces:
    """A piecewise-constant rate factor.

    Attributes:
        edges_s: float64 ``(k + 1,)``, increasing, ``edges_s[0] = 0``: piece ``j`` is
            ``[edges_s[j], edges_s[j + 1])``; the last factor holds beyond the last edge.
        factors: float64 ``(k,)``, >= 0.
    """

    edges_s: np.ndarray
    factors: np.ndarray

    @property
    def end_s(self) -> float:
        return float(self.edges_s[-1])

    def at(self, t_s: np.ndarray) -> np.ndarray:
        """The factor at each time of ``t_s`` (any shape)."""
        j = np.searchsorted(self.edges_s, t_s, side="right") - 1
        return self.factors[np.clip(j, 0, len(self.factors) - 1)]

    def piece(self, t_s: np.ndarray) -> np.ndarray:
        """The piece index of each time of ``t_s``."""
        return np.clip(np.searchsorted(self.edges_s, t_s, side="right") - 1, 0,
                       len(self.factors) - 1)

    def cumulative(self) -> np.ndarray:
        """``F`` at each edge, ``(k + 1,)``: the operational time elapsed by then."""
        return np.concatenate(([0.0], np.cumsum(np.diff(self.edges_s) * self.factors)))

    def integral(self, t_s: float) -> float:
        """``F(t_s) = ∫₀^t_s f``, for ``t_s`` within the edges."""
        cum = self.cumulative()
        j = int(self.piece(np.asarray(t_s)))
        return float(cum[j] + (t_s - self.edges_s[j]) * self.factors[j])

    def invert(self, u: np.ndarray) -> np.ndarray:
        """``F⁻¹(u)``: the clock time at which operational time ``u`` (non-decreasing,
        ``0 <= u <= F(end_s)``) is reached; pieces with factor 0 are skipped (no arrival
        falls in them)."""
        cum = self.cumulative()
        j = np.clip(np.searchsorted(cum, u, side="right") - 1, 0, len(self.factors) - 1)
        f = self.factors[j]
        # j is the last edge with F <= u: its factor is > 0 unless u is exactly at the end.
        step = np.divide(u - cum[j], f, out=np.zeros_like(u, dtype=np.float64), where=f > 0)
        return self.edges_s[j] + step


def constant() -> Pieces:
    """Factor 1 everywhere."""
    return Pieces(np.array([0.0, np.inf]), np.array([1.0]))


def schedule_pieces(schedule, horizon_s: float) -> Pieces:
    """The pieces of a ``piecewise`` or ``diurnal`` schedule up to ``horizon_s`` (the
    last piece may reach beyond it)."""
    if isinstance(schedule, PiecewiseSchedule) and schedule.durations_s is not None:
        lengths = np.asarray(schedule.durations_s, dtype=np.float64)
        repeats = max(1, int(np.ceil(horizon_s / lengths.sum())))
        edges = np.concatenate(([0.0], np.cumsum(np.tile(lengths, repeats))))
        return Pieces(edges, np.tile(np.asarray(schedule.factors, dtype=np.float64), repeats))
    if isinstance(schedule, PiecewiseSchedule):
        k = max(1, int(np.ceil(horizon_s / schedule.step_s)))
        factors = np.resize(np.asarray(schedule.factors, dtype=np.float64), k)
        return Pieces(np.arange(k + 1, dtype=np.float64) * schedule.step_s, factors)
    if isinstance(schedule, DiurnalSchedule):
        k = max(1, int(np.ceil(horizon_s / schedule.resolution_s)))
        edges = np.arange(k + 1, dtype=np.float64) * schedule.resolution_s
        return Pieces(edges, schedule.factor_at((edges[:-1] + edges[1:]) / 2.0))
    raise TypeError(f"unknown schedule {type(schedule).__name__}")


def burst_pieces(bursts, rng: np.random.Generator, horizon_s: float) -> Pieces:
    """A path of the burst chain from state 0 up to ``horizon_s``: exponential holding
    times of each state's mean, the next state drawn from the transition row. The path
    to a longer horizon starts with the path to a shorter one (one draw after another)."""
    factors, means, matrix = bursts.chain()
    matrix = np.asarray(matrix, dtype=np.float64)
    edges, values, state, t = [0.0], [], 0, 0.0
    while t < horizon_s:
        t += rng.exponential(means[state])
        edges.append(t)
        values.append(factors[state])
        state = int(rng.choice(len(factors), p=matrix[state]))
    return Pieces(np.asarray(edges), np.asarray(values, dtype=np.float64))


def product(parts: list[Pieces]) -> Pieces:
    """The product of factors, on the union of their edges."""
    if len(parts) == 1:
        return parts[0]
    end = min(p.end_s for p in parts)
    edges = np.unique(np.concatenate([p.edges_s[p.edges_s <= end] for p in parts]))
    mid = (edges[:-1] + edges[1:]) / 2.0
    out = np.ones(len(mid))
    for p in parts:
        out = out * p.at(mid)
    return Pieces(edges, out)


def on_edges(p: Pieces, edges: np.ndarray) -> np.ndarray:
    """``p``'s factor over each piece of ``edges`` (a refinement of ``p``'s)."""
    return p.at((edges[:-1] + edges[1:]) / 2.0)


@dataclass(frozen=True)
class ClassRates:
    """The workload's rate factor and each class's share of it, on common pieces.

    Attributes:
        total: the factor of the whole arrival rate, ``Σ_i w_i f_i(t) / Σ_i w_i``.
        class_factors: ``(k, C)``: ``f_i`` on each piece of ``total`` (the workload's
            schedule and bursts times class ``i``'s own); a request arriving in piece
            ``j`` is of class ``i`` with probability ``w_i f_i / Σ w f``.
    """

    total: Pieces
    class_factors: np.ndarray


def class_rates(workload, seed: int, horizon_s: float) -> ClassRates:
    """The rate factors of a time-varying synthetic ``workload`` up to ``horizon_s``."""
    shared = []
    if workload.schedule is not None:
        shared.append(schedule_pieces(workload.schedule, horizon_s))
    if workload.bursts is not None:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(4,)))
        shared.append(burst_pieces(workload.bursts, rng, horizon_s))
    per_class = []
    for i, cls in enumerate(workload.classes):
        own = list(shared)
        if cls.schedule is not None:
            own.append(schedule_pieces(cls.schedule, horizon_s))
        if cls.bursts is not None:
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(5, i)))
            own.append(burst_pieces(cls.bursts, rng, horizon_s))
        per_class.append(product(own) if own else None)
    every = [p for p in per_class if p is not None] or [constant()]
    end = min(min(p.end_s for p in every), np.inf)
    edges = np.unique(np.concatenate([p.edges_s[p.edges_s <= end] for p in every]))
    if not np.isfinite(edges[-1]):
        edges = edges[:-1] if len(edges) > 2 else np.array([0.0, horizon_s])
    cols = [on_edges(p, edges) if p is not None else np.ones(len(edges) - 1) for p in per_class]
    class_factors = np.stack(cols, axis=1)
    weights = np.array([c.weight for c in workload.classes], dtype=np.float64)
    total = class_factors @ weights / weights.sum()
    return ClassRates(Pieces(edges, total), class_factors)


def warp(u: np.ndarray, total: Pieces) -> np.ndarray:
    """Clock times of operational times ``u`` (non-decreasing): ``F⁻¹(u)``."""
    return total.invert(np.asarray(u, dtype=np.float64))
