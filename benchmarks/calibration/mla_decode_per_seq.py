"""MLA decode attention's per-sequence time: ``efficiency.attention_decode_mla`` refitted with a
``seq_s`` term to aiconfigurator's measured generation-MLA tables (issue 30).

aiconfigurator (ai-dynamo/aiconfigurator, Apache-2.0) times SGLang's MLA decode layer (the
RadixAttention forward with absorbed q, the new token's latent KV written) in a CUDA graph
(``collector/sglang/collect_mla.py``) and stores it as
``aic-core/src/aiconfigurator_core/systems/data/<gpu>/mla/sglang/<version>/generation_mla_perf.parquet``
(``batch_size`` sequences, ``step`` + 1 keys each, ``num_heads`` per GPU, ``latency`` ms per
layer). Rows used: ``num_heads`` 16 at ``tp_size`` 8 (DeepSeek-V3 / R1 at TP 8), bf16 KV.

The table shows a time per sequence the bandwidth-only entry has no term for: at one key
(``step`` 1) the H200's layer costs 11.6 us at 1 sequence and 64.2 us at 1,024, 51 ns a
sequence, with almost no KV to read. Model (capsim's, :mod:`capsim.cost.operator_terms`)::

    t = launch_s + max(flops / (bf16 peak x compute), bytes / (HBM x memory) + seq_s x batch)

with capsim's own flops and bytes per layer (:func:`capsim.cost.operators.attention_work`:
2 x 16 x (2 x 512 + 64) flops per query-key pair, 1,152 bytes of latent per key read, the new
token's latent write and q / output per sequence). ``compute`` is held at the profile's value
(no 16-head row is compute-bound); ``launch_s``, ``memory`` and ``seq_s`` minimise the mean
|log error| over the rows (Nelder-Mead from the profile's entry). Printed: the fit, its
residuals (median / p90 / range of the signed error) on the fitted rows, on the rows of
< 128 keys and on the held-out 32-head (TP 4) rows, and before / after at 400 keys.

Tables are read straight from the mirror's git objects (``git show COMMIT:path``); pandas reads
parquet through pyarrow (install it in your own venv; it is not a capsim dependency).

Usage:
    python benchmarks/calibration/mla_decode_per_seq.py MIRROR_GIT_DIR [--commit 095f58a51]
        [--gpu h200_sxm=h200-sxm] [--version 0.5.10] [--min-context 2]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from capsim.cost.operators import attention_work
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

DATA = "aic-core/src/aiconfigurator_core/systems/data"
#: aiconfigurator's GPU directory -> capsim profile.
GPUS = {"h200_sxm": "h200-sxm", "b200_sxm": "b200", "h100_sxm": "h100-sxm"}


def load_table(repo: str, commit: str, gpu: str, version: str) -> pd.DataFrame:
    """The generation-MLA table of ``gpu`` (bf16 KV rows), latency in us."""
    path = f"{DATA}/{gpu}/mla/sglang/{version}/generation_mla_perf.parquet"
    raw = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True,
                         capture_output=True).stdout
    t = pd.read_parquet(io.BytesIO(raw))
    t = t[t.kv_cache_dtype == "bfloat16"].copy()
    t["context"] = t.step + 1
    t["us"] = t.latency * 1e3
    return t


def layer_work(profile: str, tp: int) -> tuple[float, float, float]:
    """(flops per pair, KV bytes per key, bytes per new token) of one DeepSeek-V3 layer."""
    model = load_model("deepseek-v3")
    a = attention_work(model, tp, 2)
    n = a.layers
    return a.decode_flops_per_pair / n, a.kv_bytes_per_token / n, a.new_bytes_per_token / n


def predict_us(rows: pd.DataFrame, hw, tp: int, launch_us: float, memory: float,
               seq_ns: float, compute: float) -> np.ndarray:
    """The model's us per layer for each row."""
    f_pair, kv_b, new_b = layer_work(hw.name, tp)
    b, c = rows.batch_size.to_numpy(float), rows.context.to_numpy(float)
    peak = hw.peak_flops("bf16")
    comp = f_pair * b * c / (peak * compute)
    mem = b * (c * kv_b + new_b) / (hw.hbm_bandwidth_bytes_per_s * memory) + seq_ns * 1e-9 * b
    return launch_us + np.maximum(comp, mem) * 1e6


def fit(rows: pd.DataFrame, hw, start: tuple[float, float, float]) -> tuple[float, float, float]:
    """(launch_us, memory, seq_ns) minimising the mean |log error| over ``rows``."""
    compute = hw.efficiency.attention_decode_mla.compute
    y = np.log(rows.us.to_numpy())

    def loss(x: np.ndarray) -> float:
        launch, memory, seq = x
        if launch < 0 or not 0 < memory <= 1 or seq < 0:
            return 1e9
        return float(np.mean(np.abs(np.log(predict_us(rows, hw, 8, launch, memory, seq,
                                                       compute)) - y)))

    res = minimize(loss, np.array(start), method="Nelder-Mead",
                   options={"xatol": 1e-4, "fatol": 1e-7, "maxiter": 4000})
    return tuple(float(v) for v in res.x)


def residuals(rows: pd.DataFrame, hw, tp: int, x: tuple[float, float, float]) -> str:
    """median |error|, p90 |error| and the signed range, percent."""
    compute = hw.efficiency.attention_decode_mla.compute
    e = predict_us(rows, hw, tp, *x, compute) / rows.us.to_numpy() - 1
    a = np.abs(e)
    return (f"{len(e)} rows: median |error| {np.median(a):.1%}, p90 {np.quantile(a, 0.9):.1%}, "
            f"{e.min():+.0%} ... {e.max():+.0%}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("repo")
    p.add_argument("--commit", default="095f58a51")
    p.add_argument("--gpu", action="append", help="aic_dir=capsim_profile (repeatable)")
    p.add_argument("--version", default="0.5.10")
    p.add_argument("--min-context", type=int, default=2,
                   help="fit the rows of at least this many keys (the entry before: 128)")
    args = p.parse_args(argv)
    gpus = dict(g.split("=") for g in args.gpu) if args.gpu else GPUS
    for gpu, profile in gpus.items():
        hw = load_hardware(profile)
        old = hw.efficiency.attention_decode_mla
        t = load_table(args.repo, args.commit, gpu, args.version)
        t16 = t[(t.num_heads == 16) & (t.tp_size == 8)]
        t32 = t[(t.num_heads == 32) & (t.tp_size == 4)]
        rows = t16[t16.context >= args.min_context]
        before = (old.launch_s * 1e6, old.memory, getattr(old, "seq_s", 0.0) * 1e9)
        # Refit from the bandwidth-only fit with a per-sequence term of zero.
        x = fit(rows, hw, (before[0], before[1], 10.0))
        print(f"{gpu} ({profile}) SGLang {args.version}, {t16.kernel_source.iloc[0]}: "
              f"launch_s {x[0]:.2f} us, memory {x[1]:.3f}, seq_s {x[2]:.1f} ns "
              f"(before: {before[0]:.2f} us, {before[1]:.3f}, {before[2]:.1f} ns)")
        for name, r in (("fitted, 16 heads", rows), ("16 heads, context >= 128",
                                                     t16[t16.context >= 128]),
                        ("16 heads, context < 128", t16[t16.context < 128])):
            if len(r):
                print(f"  {name}: after {residuals(r, hw, 8, x)}; "
                      f"before {residuals(r, hw, 8, before)}")
        if len(t32):
            print(f"  held out, 32 heads (TP 4): after {residuals(t32, hw, 4, x)}; "
                  f"before {residuals(t32, hw, 4, before)}")
        for b in (64, 256, 512, 1024):
            r = t16[t16.batch_size == b]
            lo, hi = r[r.context == 256].us.iloc[0], r[r.context == 512].us.iloc[0]
            table = lo + (hi - lo) * (400 - 256) / 256        # linear in keys between rows
            one = pd.DataFrame({"batch_size": [b], "context": [400]})
            new = predict_us(one, hw, 8, *x, old.compute)[0]
            was = predict_us(one, hw, 8, *before, old.compute)[0]
            print(f"  batch {b:>5} x 400 keys: table {table:6.1f} us (256 / 512 keys: {lo:.1f} / "
                  f"{hi:.1f}), before {was:6.1f} ({was / table:.2f}), after {new:6.1f} "
                  f"({new / table:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
