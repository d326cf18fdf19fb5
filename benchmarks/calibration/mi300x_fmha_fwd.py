"""MI300X prefill attention from aiter's published forward-attention table: the
``efficiency.attention_prefill`` compute curve and fixed time of mi300x.yaml (and mi325x.yaml,
the same die), refitted from the H100-derived factors to a measurement on this GPU (issue 30,
item 3).

Source: ROCm/aiter (MIT licence, Copyright (c) Advanced Micro Devices, Inc.),
``op_tests/cpp/mha/README.md`` at e4048607 (the table was added by aiter PR 1270, a83421bee6,
2025-10-31, unchanged since): "the asm kernel performance of the attention forwards", bf16,
BSHD, batch mode, head_dim 128, GQA (q / kv heads 32 / 8, 64 / 8, 64 / 4), batch 1 / 4 / 8,
seqlen_q = seqlen_kv 1,024-16,384, causal and not; column "FWD(TFLOPS) MI300X" (aiter's
fmha v3 hand-written assembly kernel, ``op_tests/cpp/mha/benchmark_mha_fwd.cpp``). The MI300X
column is copied below (:data:`ROWS`, 94 rows); the other columns (MI355X, backward) are not.

aiter's ``flash_attn_varlen_func`` (what SGLang's aiter attention backend and vLLM's
ROCM_AITER_FA backend call for prefill) runs this kernel on gfx942 for bf16 head_dim 128
without a sliding window (``aiter/ops/mha.py`` at e4048607, ``_flash_attn_varlen_forward`` ->
``can_impl_fmha_v3_fwd``); the batch-mode table is the kernel the varlen entry dispatches to.

The TFLOPS convention. ``benchmark_mha_fwd.cpp`` counts ``nhead x (2 sq sk hdim_q + 2 sq sk
hdim_v)`` flops per batch whatever the mask; the README's causal figures are that count
halved (they carry three decimals ending in 5 or 0, half of the benchmark's two-decimal print,
and at 8,192 tokens the causal rate, 522.68, sits next to the non-causal 558.17, where the
full count over a kernel that skips the masked half would read ~2x). So a row's time is
``4 x 128 x heads x batch x pairs / TFLOPS`` with pairs = sq x sk (not causal) or sq^2 / 2
(causal): the work capsim prices (:func:`capsim.cost.operators.attention_work`: 4 x head_dim
flops per query-key pair, causal pairs s (s + 1) / 2).

Model (capsim's, :mod:`capsim.cost.operator_terms`; prefill attention is compute-bound at
every row here)::

    t = launch_s + 4 x 128 x heads x batch x pairs / (bf16 peak x e(keys per query))

keys per query = pairs / (batch x sq): sq (not causal), (sq + 1) / 2 (causal). Knots: the
distinct keys per query of the table (512 ... 16,384); e(knot) = sum of flops / (peak x sum of
(t - launch_s)) over the knot's rows (every batch and head shape, causal and not, together);
``launch_s`` (0.5 us steps, 0-30 us) minimises the mean |log error| of single rows (the B200's
method, b200.yaml). Below 512 keys the table has no row: the curve keeps the H100-derived
knots there (32-256 keys), and says so.

Usage: python benchmarks/calibration/mi300x_fmha_fwd.py
"""

from __future__ import annotations

import numpy as np

from capsim.cost.operators import curve_efficiency
from capsim.profiles.hardware import Curve, load_hardware

#: aiter (ROCm/aiter e4048607) op_tests/cpp/mha/README.md, MIT licence: the MI300X forward
#: column. (batch, q heads, kv heads, seqlen (q = kv), causal, TFLOPS); head_dim 128, bf16.
ROWS: tuple[tuple[int, int, int, int, int, float], ...] = (
    (1, 32, 8, 1024, 0, 338.07), (1, 32, 8, 2048, 0, 513.45), (1, 32, 8, 4096, 0, 527.73),
    (1, 32, 8, 8192, 0, 558.17), (1, 32, 8, 10240, 0, 549.73),
    (4, 32, 8, 1024, 0, 458.41), (4, 32, 8, 2048, 0, 504.8), (4, 32, 8, 4096, 0, 577.16),
    (4, 32, 8, 8192, 0, 574.62), (4, 32, 8, 10240, 0, 584.66),
    (8, 32, 8, 1024, 0, 459.43), (8, 32, 8, 2048, 0, 543.77), (8, 32, 8, 4096, 0, 567.82),
    (8, 32, 8, 8192, 0, 585.29), (8, 32, 8, 10240, 0, 577.5),
    (1, 64, 8, 1024, 0, 418.36), (1, 64, 8, 2048, 0, 485.45), (1, 64, 8, 4096, 0, 546.34),
    (1, 64, 8, 8192, 0, 591.37), (1, 64, 8, 10240, 0, 572.09),
    (4, 64, 8, 1024, 0, 440.07), (4, 64, 8, 2048, 0, 554.8), (4, 64, 8, 4096, 0, 573.6),
    (4, 64, 8, 8192, 0, 592.16), (4, 64, 8, 10240, 0, 578.93),
    (8, 64, 8, 1024, 0, 466.21), (8, 64, 8, 2048, 0, 556.35), (8, 64, 8, 4096, 0, 578.99),
    (8, 64, 8, 8192, 0, 577.45), (8, 64, 8, 10240, 0, 571.39),
    (1, 64, 4, 1024, 0, 383.85), (1, 64, 4, 2048, 0, 506.89), (1, 64, 4, 4096, 0, 549.2),
    (1, 64, 4, 8192, 0, 591.77), (1, 64, 4, 10240, 0, 571.59),
    (4, 64, 4, 1024, 0, 460.34), (4, 64, 4, 2048, 0, 556.35), (4, 64, 4, 4096, 0, 575.69),
    (4, 64, 4, 8192, 0, 590.93), (4, 64, 4, 10240, 0, 582.64),
    (8, 64, 4, 1024, 0, 497.15), (8, 64, 4, 2048, 0, 556.22), (8, 64, 4, 4096, 0, 581.34),
    (8, 64, 4, 8192, 0, 583.23), (8, 64, 4, 10240, 0, 566.17),
    (1, 64, 8, 16384, 0, 547.78), (1, 64, 4, 16384, 0, 549.09),
    (1, 32, 8, 1024, 1, 130.62), (1, 32, 8, 2048, 1, 255.105), (1, 32, 8, 4096, 1, 467.805),
    (1, 32, 8, 8192, 1, 522.68), (1, 32, 8, 10240, 1, 440.12),
    (4, 32, 8, 1024, 1, 334.005), (4, 32, 8, 2048, 1, 419.435), (4, 32, 8, 4096, 1, 486.73),
    (4, 32, 8, 8192, 1, 547.09), (4, 32, 8, 10240, 1, 527.705),
    (8, 32, 8, 1024, 1, 311.385), (8, 32, 8, 2048, 1, 412.99), (8, 32, 8, 4096, 1, 513.1),
    (8, 32, 8, 8192, 1, 537.36), (8, 32, 8, 10240, 1, 556.045),
    (1, 64, 8, 1024, 1, 228.54), (1, 64, 8, 2048, 1, 392.425), (1, 64, 8, 4096, 1, 474.385),
    (1, 64, 8, 8192, 1, 518.29), (1, 64, 8, 10240, 1, 510.895),
    (4, 64, 8, 1024, 1, 326.51), (4, 64, 8, 2048, 1, 425.735), (4, 64, 8, 4096, 1, 513.79),
    (4, 64, 8, 8192, 1, 540.515), (4, 64, 8, 10240, 1, 557.475),
    (8, 64, 8, 1024, 1, 321.865), (8, 64, 8, 2048, 1, 452.03), (8, 64, 8, 4096, 1, 509.255),
    (8, 64, 8, 8192, 1, 550.67), (8, 64, 8, 10240, 1, 547.05),
    (1, 64, 4, 1024, 1, 229.09), (1, 64, 4, 2048, 1, 407.525), (1, 64, 4, 4096, 1, 476.26),
    (1, 64, 4, 8192, 1, 519.32), (1, 64, 4, 10240, 1, 515.275),
    (4, 64, 4, 1024, 1, 314.82), (4, 64, 4, 2048, 1, 426.77), (4, 64, 4, 4096, 1, 524.585),
    (4, 64, 4, 8192, 1, 540.935), (4, 64, 4, 10240, 1, 560.63),
    (8, 64, 4, 1024, 1, 348.76), (8, 64, 4, 2048, 1, 461.89), (8, 64, 4, 4096, 1, 513.795),
    (8, 64, 4, 8192, 1, 552.78), (8, 64, 4, 10240, 1, 548.65),
    (1, 64, 8, 16384, 1, 541.55), (1, 64, 4, 16384, 1, 544.1),
)

HEAD_DIM = 128
#: Keys per query below the table's first row keep the H100-derived knots (h100-sxm.yaml).
DERIVED_BELOW = 512
LAUNCH_GRID_S = np.arange(0.0, 30.5e-6, 0.5e-6)


def table() -> dict[str, np.ndarray]:
    """The rows as arrays: ``time_s`` (the README's convention), ``flops`` (capsim's: causal
    pairs s (s + 1) / 2), ``keys`` (keys per query, an integer knot) and ``causal``."""
    r = np.array(ROWS, dtype=float)
    batch, heads, s, causal, tflops = r[:, 0], r[:, 1], r[:, 3], r[:, 4], r[:, 5]
    readme_pairs = np.where(causal == 1, s * s / 2, s * s)
    time_s = 4 * HEAD_DIM * heads * batch * readme_pairs / (tflops * 1e12)
    pairs = np.where(causal == 1, s * (s + 1) / 2, s * s)
    keys = np.where(causal == 1, s // 2, s).astype(int)    # (s + 1) / 2 rounded down
    return {"batch": batch, "heads": heads, "seqlen": s, "causal": causal, "tflops": tflops,
            "time_s": time_s, "flops": 4 * HEAD_DIM * heads * batch * pairs, "keys": keys}


def knots(t: dict[str, np.ndarray], launch_s: float, peak: float) -> tuple[list[int], list[float]]:
    """e at each distinct keys per query: sum of flops / (peak x sum of (t - launch_s))."""
    ks = sorted(set(t["keys"].tolist()))
    eff = []
    for k in ks:
        m = t["keys"] == k
        eff.append(float(t["flops"][m].sum() / (peak * (t["time_s"][m] - launch_s).sum())))
    return ks, eff


def predict(t: dict[str, np.ndarray], curve: Curve, launch_s: float, peak: float) -> np.ndarray:
    """capsim's time per row (s) with ``curve`` and ``launch_s``."""
    return launch_s + t["flops"] / (peak * curve_efficiency(curve, t["keys"]))


def fit(peak: float) -> tuple[float, Curve, np.ndarray]:
    """(launch_s, the measured part of the curve, signed relative error per row)."""
    t = table()
    best = None
    for launch in LAUNCH_GRID_S:
        ks, eff = knots(t, float(launch), peak)
        curve = Curve(tokens=ks, efficiency=eff)
        err = predict(t, curve, float(launch), peak) / t["time_s"] - 1
        score = float(np.mean(np.abs(np.log1p(err))))
        if best is None or score < best[0]:
            best = (score, float(launch), curve, err)
    _, launch, curve, err = best
    return launch, curve, err


def profile_curve(measured: Curve, derived: Curve) -> Curve:
    """The curve mi300x.yaml holds: the H100-derived knots below 512 keys, the measured
    knots (rounded to 3 decimals) from 512 on."""
    low = [(k, e) for k, e in zip(derived.tokens, derived.efficiency) if k < DERIVED_BELOW]
    high = [(k, round(e, 3)) for k, e in zip(measured.tokens, measured.efficiency)]
    return Curve(tokens=[k for k, _ in low + high], efficiency=[e for _, e in low + high])


def main() -> None:
    hw = load_hardware("mi300x")
    peak = hw.peak_flops("bf16")
    launch, measured, err = fit(peak)
    h100 = load_hardware("h100-sxm").efficiency.attention_prefill
    print(f"MI300X bf16 peak {peak / 1e12:,.1f} TFLOP/s; {len(ROWS)} rows of aiter's fmha fwd "
          f"(asm v3) table")
    print(f"launch_s {launch * 1e6:.1f} us (minimises the mean |log error| of single rows)")
    print("keys/query  e (MI300X, measured)  e (H100-derived, before)")
    for k, e in zip(measured.tokens, measured.efficiency):
        print(f"{k:>10,}  {e:>20.3f}  {float(curve_efficiency(h100.compute_curve, k)):>24.3f}")
    a = np.abs(err) * 100
    print(f"rows: median |error| {np.median(a):.1f} %, p90 {np.percentile(a, 90):.1f} %, "
          f"{err.min() * 100:+.1f} ... {err.max() * 100:+.1f} %")
    t = table()
    for name, m in (("causal", t["causal"] == 1), ("not causal", t["causal"] == 0),
                    ("batch 1", t["batch"] == 1), ("batch 8", t["batch"] == 8)):
        print(f"  {name:>10}: median signed error {np.median(err[m]) * 100:+.1f} %")
    curve = profile_curve(measured, h100.compute_curve)
    print(f"profile compute_curve: tokens {curve.tokens}")
    print(f"                       efficiency {curve.efficiency}")
    print(f"current mi300x.yaml:   {hw.efficiency.attention_prefill.compute_curve.efficiency}, "
          f"launch_s {hw.efficiency.attention_prefill.launch_s * 1e6:.2f} us")


if __name__ == "__main__":
    main()
