"""Fit the step overhead and an overall GPU-time scale to a measured serving run.

The measured requests (any format of :mod:`capsim.calibrate.readers`) are replayed
(:func:`capsim.calibrate.replay.replay`: same prompt and output lengths, the measured
arrivals) through :func:`capsim.sim.simulate.simulate` with the engine of a scenario
variant, and two numbers are fitted by least squares on log(simulated ÷ measured) TTFT
and TPOT of every successful request:

- ``step_overhead_s``: the fixed CPU / launch / sampling time of every step;
- ``scale``: a factor on all GPU time — every efficiency of the profile is
  divided by it (capped at 1.0) and every launch time multiplied by it.

TPOT = (E2E − TTFT) ÷ (output tokens − 1), as vLLM computes it, on both sides. The fit
compares request by request, so it needs the real arrivals: a finite-rate run without
send times is refused (:func:`capsim.calibrate.replay.replay` with ``allow_redrawn=False``).

Public API:
    scaled_profile, simulate_replay, request_latencies, ReplayFit, fit_replay
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from capsim.calibrate.measured import MeasuredRun
from capsim.calibrate.replay import Replay
from capsim.profiles.hardware import Curve, HardwareProfile
from capsim.results.model import RunResult
from capsim.scenario.run_config import RunConfig
from capsim.sim.simulate import simulate


def _scaled_curve(curve: Curve | None, scale: float):
    if curve is None:
        return None
    return curve.model_copy(update={"efficiency": [min(1.0, e / scale) for e in curve.efficiency]})


def scaled_profile(hw: HardwareProfile, scale: float, overhead_s: float) -> HardwareProfile:
    """``hw`` with GPU time × ``scale`` (efficiencies ÷ scale, capped at 1; launch times ×
    scale) and ``step_overhead_s = overhead_s``. No validation (used in the fit loop)."""
    eff = hw.efficiency
    update = {k: min(1.0, getattr(eff, k) / scale) for k in ("compute", "memory", "interconnect")}
    if eff.gemm is not None:
        update["gemm"] = _scaled_curve(eff.gemm, scale).model_copy(
            update={"launch_s": eff.gemm.launch_s * scale})
    for name in ("attention_prefill", "attention_decode", "elementwise"):
        k = getattr(eff, name)
        if k is not None:
            update[name] = k.model_copy(update={
                "compute": min(1.0, k.compute / scale), "memory": min(1.0, k.memory / scale),
                "launch_s": k.launch_s * scale,
                "compute_curve": _scaled_curve(k.compute_curve, scale)})
    return hw.model_copy(update={"efficiency": eff.model_copy(update=update),
                                 "step_overhead_s": overhead_s})


def simulate_replay(run: RunConfig, replay: Replay, hw: HardwareProfile | None = None) -> RunResult:
    """Simulate the replayed requests with the variant ``run`` (its hardware replaced by ``hw``)."""
    return simulate(run if hw is None else run.with_hardware(hw), replay.trace)


def request_latencies(result: RunResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulated (TTFT s, TPOT s, E2E s) per trace row, shape ``(M,)``; NaN where the
    request was rejected, TPOT NaN below two output tokens."""
    rec = result.requests
    arrival = np.asarray(rec.arrival_s, float)
    first = np.asarray(rec.first_token_s, float)          # NaN where rejected
    finish = np.asarray(rec.finish_s, float)
    out = np.asarray(rec.output_tokens, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    return first - arrival, tpot, finish - arrival


@dataclass(frozen=True)
class ReplayFit:
    """Result of :func:`fit_replay`: the fitted profile and its two fitted numbers."""

    profile: HardwareProfile
    scale: float
    step_overhead_s: float


#: Coarse start grid of (scale, overhead ms): the objective is piecewise smooth (the
#: schedule changes with timing), so a local least-squares fit starts from the best cell.
GRID_SCALES = (0.5, 0.7, 1.0, 1.4, 2.0, 2.8)
GRID_OVERHEADS_MS = (0.0, 0.3, 1.0, 3.0)


def fit_replay(run: RunConfig, replay: Replay, measured: MeasuredRun,
               base: HardwareProfile) -> ReplayFit:
    """Fit ``step_overhead_s`` and the GPU-time scale of ``base`` to the measured requests
    (``replay`` of ``measured``), on TTFT and TPOT of its ``measured`` rows.

    Starts from the best point of a coarse grid (plus ``base`` itself), then
    refines by least squares; bounds: overhead 0–50 ms, scale 0.2–5.
    Cost: about (24 + 3 × iterations) simulations of the requests.
    """
    rows = replay.rows[replay.measured]
    want_ttft, want_tpot = measured.ttft_s[rows], measured.tpot_s[rows]

    def residual(x: np.ndarray) -> np.ndarray:
        result = simulate_replay(run, replay, scaled_profile(base, x[0], x[1] * 1e-3))
        ttft, tpot, _ = request_latencies(result)
        with np.errstate(invalid="ignore", divide="ignore"):
            res = np.concatenate([np.log(ttft[replay.measured] / want_ttft),
                                  np.log(tpot[replay.measured] / want_tpot)])
        return np.nan_to_num(res, nan=0.0, posinf=0.0, neginf=0.0)   # no TPOT below 2 tokens

    starts = [(1.0, base.step_overhead_s * 1e3)] + [
        (s, o) for s in GRID_SCALES for o in GRID_OVERHEADS_MS]
    x0 = min(starts, key=lambda x: float(np.sum(residual(np.asarray(x)) ** 2)))
    x = least_squares(residual, x0, bounds=([0.2, 0.0], [5.0, 50.0]), diff_step=0.01,
                      x_scale=[1.0, 1.0]).x
    scale, overhead_s = round(float(x[0]), 4), round(float(x[1]) * 1e-3, 7)
    fitted = type(base).model_validate(scaled_profile(base, scale, overhead_s).model_dump())
    return ReplayFit(fitted, scale, overhead_s)
