"""Predict measured operator times from a hardware profile, per operator class.

These are the formulas :class:`capsim.cost.pricer.StepPricer` applies, vectorised
over an :mod:`observations <capsim.calibrate.observations>` table (one row =
one layer's operator, or one collective), so a profile's error on measured
data is the error the simulator makes on those operators:

- ``gemm``: ``kernels × launch_s + max(flops / peak, bytes / bw) / e(tokens)``
  with the profile's GEMM curve, else ``max(flops / (peak × compute),
  bytes / (bw × memory))``;
- ``attention_prefill`` / ``attention_decode``: ``kernels × launch_s +
  max(flops / (peak × compute), bytes / (bw × memory))`` with the class's
  factors (the scalars when the profile has none); a prefill
  ``compute_curve`` replaces ``compute`` by e(keys per query);
- ``elementwise``: ``kernels × launch_s + bytes / (bw × memory)``;
- ``all_reduce``: the ring α-β model :func:`capsim.cost.operators.ring_all_reduce_s`
  over the NVLink (else PCIe) bandwidth × ``interconnect``, latency per hop.

Peaks: bf16 (else fp16) — Vidur and vLLM run 16-bit weights.

Public API:
    predict(observations, hw) -> np.ndarray
"""

from __future__ import annotations

import numpy as np

from capsim.calibrate.observations import Observations
from capsim.profiles.hardware import HardwareProfile
from capsim.cost.operators import curve_efficiency, ring_all_reduce_s


def peak_16bit(hw: HardwareProfile) -> float:
    """Dense bf16 peak FLOP/s (fp16 when the profile has no bf16 entry)."""
    return hw.peak_flops("bf16" if "bf16" in hw.peak_flops_per_s else "fp16")


def predict(obs: Observations, hw: HardwareProfile) -> np.ndarray:
    """Predicted seconds for every row of ``obs`` with profile ``hw``; shape (len(obs),)."""
    out = np.full(len(obs), np.nan)
    for op_class, rows in obs.groupby("op_class", sort=False):
        out[obs.index.get_indexer(rows.index)] = predict_class(op_class, rows, hw)
    return out


def predict_class(op_class: str, rows: Observations, hw: HardwareProfile) -> np.ndarray:
    """Predicted seconds of ``rows`` (all of class ``op_class``); shape (len(rows),).

    Raises:
        ValueError: an unknown operator class (a bug: readers only emit known ones).
    """
    flops, nbytes = rows.flops.to_numpy(), rows.bytes.to_numpy()
    kernels = rows.kernels.to_numpy()
    peak, bw, eff = peak_16bit(hw), hw.hbm_bandwidth_bytes_per_s, hw.efficiency
    if op_class == "gemm":
        curve = eff.gemm
        if curve is None:
            return np.maximum(flops / (peak * eff.compute), nbytes / (bw * eff.memory))
        roof = np.maximum(flops / peak, nbytes / bw)
        return kernels * curve.launch_s + roof / curve_efficiency(curve, rows.tokens.to_numpy())
    if op_class in ("attention_prefill", "attention_decode"):
        k = eff.kernel(op_class)
        compute = k.compute
        if k.compute_curve is not None:
            compute = curve_efficiency(k.compute_curve, rows.keys_per_query.to_numpy())
        return kernels * k.launch_s + np.maximum(flops / (peak * compute),
                                                 nbytes / (bw * k.memory))
    if op_class == "elementwise":
        k = eff.kernel("elementwise")
        return kernels * k.launch_s + nbytes / (bw * k.memory)
    if op_class == "all_reduce":
        return ring_all_reduce_s(nbytes, rows.workers.to_numpy(),
                                 hw.tp_link_bandwidth_bytes_per_s * eff.interconnect,
                                 hw.tp_link_latency_s)
    raise ValueError(f"unknown operator class {op_class!r}")
