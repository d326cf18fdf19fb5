"""Fit a profile's per-operator-class efficiencies to measured times by least squares.

Each operator class is fitted on its own rows (its parameters touch no other
class) with :func:`scipy.optimize.least_squares` on the log of predicted ÷
measured time, so a 10 µs kernel and a 30 ms one weigh alike (relative
error) — the figure a capacity planner cares about. Parameters and bounds:

========================  =====================================================
class                     parameters (bounds)
========================  =====================================================
``gemm``                  ``launch_s`` [0, 100 µs]; e at knots 1, 2, 4, … tokens
                          up to the largest measured count ([0.01, 1])
``attention_prefill``     ``launch_s``; compute e at knots over the
                          keys per query (powers of two spanning the data)
``attention_decode``      ``launch_s``, ``memory`` (decode attention is memory-bound:
                          GQA reads 2 KV bytes per 8–16 FLOPs)
``elementwise``           ``launch_s`` (per layer), ``memory``
``all_reduce``            link latency per ring hop [0, 100 µs], ``interconnect``
========================  =====================================================

Factors the data cannot pin down are not fitted and keep the base profile's
value: decode attention's compute factor (it never reaches the compute
roof) and prefill attention's memory factor (confounded with the low end of
its compute curve; it uses the base profile's HBM factor). Fitted values
are rounded (3 decimals, 0.01 µs) before the "after" error is computed, so
the printed error is the shipped profile's.

Public API:
    fit_class, fit_profile, gemm_knots
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.optimize import least_squares

from capsim.calibrate.model import predict_class
from capsim.calibrate.observations import Observations
from capsim.profiles.hardware import Curve, GemmCurve, HardwareProfile, KernelEfficiency

US = 1e-6
MAX_LAUNCH_US = 100.0


def gemm_knots(counts: np.ndarray, low: bool = False) -> list[int]:
    """Powers of two from 1 (``low``: from the last one <= the smallest count)
    up to the first one >= the largest count measured; at least two knots."""
    top = max(1, int(np.ceil(np.log2(max(1.0, float(np.max(counts)))))))
    bottom = int(np.floor(np.log2(max(1.0, float(np.min(counts)))))) if low else 0
    return [2**k for k in range(min(bottom, top - 1), top + 1)]


def _with_efficiency(hw: HardwareProfile, **update) -> HardwareProfile:
    """Copy of ``hw`` with efficiency fields replaced (no validation: hot loop)."""
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=update)})


def _solve(residual: Callable[[np.ndarray], np.ndarray], x0: list[float],
           lower: list[float], upper: list[float]) -> np.ndarray:
    x0 = np.clip(np.asarray(x0, float), lower, upper)
    return least_squares(residual, x0, bounds=(lower, upper), x_scale="jac",
                         method="trf").x


def _log_residual(rows: Observations, op_class: str,
                  profile_of: Callable[[np.ndarray], HardwareProfile]) -> Callable:
    log_measured = np.log(rows.time_s.to_numpy())

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(predict_class(op_class, rows, profile_of(x))) - log_measured

    return residual


def _fit_gemm(rows: Observations, base: HardwareProfile) -> HardwareProfile:
    knots = gemm_knots(rows.tokens.to_numpy())
    old = base.efficiency.gemm

    def profile_of(x: np.ndarray) -> HardwareProfile:
        curve = GemmCurve.model_construct(tokens=knots, efficiency=list(x[1:]),
                                          launch_s=x[0] * US)
        return _with_efficiency(base, gemm=curve)

    start = [old.launch_s / US if old else 0.0] + [0.7] * len(knots)
    x = _solve(_log_residual(rows, "gemm", profile_of), start,
               [0.0] + [0.01] * len(knots), [MAX_LAUNCH_US] + [1.0] * len(knots))
    curve = GemmCurve(tokens=knots, efficiency=[round(float(e), 3) for e in x[1:]],
                      launch_s=round(float(x[0]) * US, 8))
    return _with_efficiency(base, gemm=curve)


def _fit_kernel(op_class: str, free: tuple[str, ...], curve_on: str | None = None) -> Callable:
    """Fitter for a KernelEfficiency class; ``free`` names the fitted factors,
    ``curve_on`` the observation column a fitted ``compute_curve`` runs over."""

    def fit(rows: Observations, base: HardwareProfile) -> HardwareProfile:
        start = base.efficiency.kernel(op_class)
        knots = gemm_knots(rows[curve_on].to_numpy(), low=True) if curve_on else []

        def kernel_of(x: np.ndarray) -> KernelEfficiency:
            values = dict(zip(free, x[1:1 + len(free)]), launch_s=x[0] * US)
            if knots:
                values["compute_curve"] = Curve.model_construct(
                    tokens=knots, efficiency=list(x[1 + len(free):]))
            return start.model_copy(update=values)

        def profile_of(x: np.ndarray) -> HardwareProfile:
            return _with_efficiency(base, **{op_class: kernel_of(x)})

        x = _solve(_log_residual(rows, op_class, profile_of),
                   [start.launch_s / US] + [getattr(start, f) for f in free] + [0.3] * len(knots),
                   [0.0] + [0.01] * (len(free) + len(knots)),
                   [MAX_LAUNCH_US] + [1.0] * (len(free) + len(knots)))
        x = np.concatenate([[round(float(x[0]) * US, 8) / US], np.round(x[1:], 3)])
        fitted = KernelEfficiency.model_validate(kernel_of(x).model_dump())
        return _with_efficiency(base, **{op_class: fitted})

    return fit


def _fit_all_reduce(rows: Observations, base: HardwareProfile) -> HardwareProfile:
    field = "nvlink_latency_s" if base.has_nvlink else "pcie_latency_s"

    def profile_of(x: np.ndarray) -> HardwareProfile:
        return _with_efficiency(base, interconnect=x[1]).model_copy(update={field: x[0] * US})

    x = _solve(_log_residual(rows, "all_reduce", profile_of),
               [base.tp_link_latency_s / US, base.efficiency.interconnect],
               [0.01, 0.01], [MAX_LAUNCH_US, 1.0])
    fitted = _with_efficiency(base, interconnect=round(float(x[1]), 3))
    return fitted.model_copy(update={field: round(float(x[0]) * US, 8)})


FITTERS: dict[str, Callable[[Observations, HardwareProfile], HardwareProfile]] = {
    "gemm": _fit_gemm,
    "attention_prefill": _fit_kernel("attention_prefill", (), "keys_per_query"),
    "attention_decode": _fit_kernel("attention_decode", ("memory",)),
    "elementwise": _fit_kernel("elementwise", ("memory",)),
    "all_reduce": _fit_all_reduce,
}


def fit_class(op_class: str, rows: Observations, base: HardwareProfile) -> HardwareProfile:
    """``base`` with the parameters of ``op_class`` fitted to ``rows`` (that class only)."""
    return FITTERS[op_class](rows, base)


def fit_profile(obs: Observations, base: HardwareProfile) -> HardwareProfile:
    """``base`` with every operator class present in ``obs`` fitted; others unchanged.

    The result is re-validated (every efficiency in (0, 1], knots increasing).
    """
    hw = base
    for op_class in FITTERS:
        rows = obs[obs.op_class == op_class]
        if len(rows):
            hw = fit_class(op_class, rows, hw)
    return type(base).model_validate(hw.model_dump())
