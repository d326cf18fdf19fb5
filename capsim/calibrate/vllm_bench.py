"""Fit the step overhead and an overall GPU-time scale to a ``vllm bench serve`` result.

``vllm bench serve --save-result --save-detailed`` writes a JSON with one
entry per request in ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls``
(list of gaps in s, per request), ``errors`` and, in recent vLLM versions,
``start_times`` (send times, s). We replay the same requests through
:func:`capsim.sim.simulate.simulate` with the engine of a scenario file and fit two
numbers by least squares on log(simulated ÷ measured) TTFT and TPOT per
request:

- ``step_overhead_s``: the fixed CPU / launch / sampling time of every step;
- ``scale``: a factor on all GPU time — every efficiency of the profile is
  divided by it (capped at 1.0) and every launch time multiplied by it.

Arrivals: ``start_times`` relative to the first; without them, a run at
``request_rate: inf`` sends everything at t = 0. A finite rate without
``start_times`` cannot be replayed (the arrival times were random and are
not saved) and is refused. Failed requests (non-empty error, no first token)
are dropped. TPOT = Σ itls ÷ (output tokens − 1), as vLLM computes it.

Public API:
    BenchRequests, read_bench_json, scaled_profile, simulate_bench, fit_bench
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from capsim.scenario.resolve import RunConfig
from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import Curve, HardwareProfile
from capsim.sim.simulate import simulate
from capsim.workload import RequestTrace

REQUIRED = ("input_lens", "output_lens", "ttfts", "itls")


@dataclass(frozen=True)
class BenchRequests:
    """The successful requests of one bench run, in arrival order (arrays of shape (N,))."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray          # NaN for one-token replies

    def trace(self) -> RequestTrace:
        """The requests as a RequestTrace (one class, ``bench``)."""
        n = len(self.arrival_s)
        return RequestTrace(self.arrival_s, self.prompt_tokens, self.output_tokens,
                            np.zeros(n, np.int32), np.full(n, -1, np.int32), ("bench",))


def _load(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"cannot read file: {exc.strerror or exc}", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"malformed JSON: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a JSON object (vllm bench serve --save-result)",
                            file=str(path))
    missing = [k for k in REQUIRED if not isinstance(data.get(k), list)]
    if missing:
        raise ScenarioError(f"no per-request {', '.join(missing)}; rerun vllm bench serve "
                            "with --save-result --save-detailed", file=str(path))
    return data


def _arrivals(data: dict, n: int, path: Path) -> np.ndarray:
    starts = data.get("start_times")
    if isinstance(starts, list) and len(starts) == n:
        t = np.asarray(starts, dtype=float)
        return t - np.nanmin(t)
    rate = data.get("request_rate")
    if rate is None or (isinstance(rate, str) and rate.lower() == "inf") or (
            isinstance(rate, (int, float)) and math.isinf(rate)):
        return np.zeros(n)
    raise ScenarioError(f"request_rate {rate} without start_times: the arrival times cannot "
                        "be replayed; use a vLLM version that saves start_times, or "
                        "--request-rate inf", file=str(path))


def read_bench_json(path: Path) -> BenchRequests:
    """The successful requests of a ``vllm bench serve --save-detailed`` result.

    Raises:
        ScenarioError: unreadable / malformed file, missing per-request
            fields, lists of different lengths, a finite request rate without
            ``start_times``, or no successful request.
    """
    data = _load(path)
    n = len(data["input_lens"])
    if any(len(data[k]) != n for k in REQUIRED):
        raise ScenarioError("input_lens, output_lens, ttfts and itls have different lengths",
                            file=str(path))
    errors = data.get("errors") or [""] * n
    arrival = _arrivals(data, n, Path(path))
    ok = [i for i in range(n) if not (errors[i] if i < len(errors) else "")
          and data["ttfts"][i] and data["output_lens"][i] and data["input_lens"][i]]
    if not ok:
        raise ScenarioError("no successful request in the result", file=str(path))
    ok.sort(key=lambda i: arrival[i])
    out = np.array([data["output_lens"][i] for i in ok], dtype=np.int64)
    itl_sum = np.array([sum(data["itls"][i] or []) for i in ok], dtype=float)
    tpot = np.where(out > 1, itl_sum / np.maximum(out - 1, 1), np.nan)
    return BenchRequests(arrival[ok], np.array([data["input_lens"][i] for i in ok], np.int64),
                         out, np.array([data["ttfts"][i] for i in ok], float), tpot)


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


def simulate_bench(run: RunConfig, requests: BenchRequests,
                   hw: HardwareProfile) -> tuple[np.ndarray, np.ndarray]:
    """Simulated (TTFT s, TPOT s) per request with profile ``hw``; NaN where rejected."""
    result = simulate(run.with_hardware(hw), requests.trace())
    rec = result.requests
    arrival = np.asarray(rec.arrival_s, float)
    first = np.asarray(rec.first_token_s, float)          # NaN where rejected
    finish = np.asarray(rec.finish_s, float)
    out = np.asarray(rec.output_tokens, float)
    tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    return first - arrival, tpot


@dataclass(frozen=True)
class BenchFit:
    """Result of :func:`fit_bench`: the fitted profile and its two fitted numbers."""

    profile: HardwareProfile
    scale: float
    step_overhead_s: float


#: Coarse start grid of (scale, overhead ms): the objective is piecewise smooth (the
#: schedule changes with timing), so a local least-squares fit starts from the best cell.
GRID_SCALES = (0.5, 0.7, 1.0, 1.4, 2.0, 2.8)
GRID_OVERHEADS_MS = (0.0, 0.3, 1.0, 3.0)


def fit_bench(run: RunConfig, requests: BenchRequests, base: HardwareProfile) -> BenchFit:
    """Fit ``step_overhead_s`` and the GPU-time scale of ``base`` to the measured requests.

    Starts from the best point of a coarse grid (plus ``base`` itself), then
    refines by least squares; bounds: overhead 0–50 ms, scale 0.2–5.
    Cost: about (24 + 3 × iterations) simulations of the requests.
    """
    def residual(x: np.ndarray) -> np.ndarray:
        ttft, tpot = simulate_bench(run, requests, scaled_profile(base, x[0], x[1] * 1e-3))
        res = np.concatenate([np.log(ttft / requests.ttft_s), np.log(tpot / requests.tpot_s)])
        return np.nan_to_num(res, nan=0.0)   # one-token replies have no TPOT

    starts = [(1.0, base.step_overhead_s * 1e3)] + [
        (s, o) for s in GRID_SCALES for o in GRID_OVERHEADS_MS]
    x0 = min(starts, key=lambda x: float(np.sum(residual(np.asarray(x)) ** 2)))
    x = least_squares(residual, x0, bounds=([0.2, 0.0], [5.0, 50.0]), diff_step=0.01,
                      x_scale=[1.0, 1.0]).x
    scale, overhead_s = round(float(x[0]), 4), round(float(x[1]) * 1e-3, 7)
    fitted = type(base).model_validate(scaled_profile(base, scale, overhead_s).model_dump())
    return BenchFit(fitted, scale, overhead_s)
