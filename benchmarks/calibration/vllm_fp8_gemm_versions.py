"""Why aiconfigurator's vLLM 0.14.0 FP8 GEMM tables are ~1.5-2x slower than its 0.19.0 ones:
the check behind benchmarks/calibration/vllm_fp8_gemm_versions.md (no capsim constant is
fitted or moved by it).

Reads, for one GPU, the ``gemm_perf.parquet`` tables of vLLM 0.14.0 and 0.19.0 in
ai-dynamo/aiconfigurator (``aic-core/src/aiconfigurator_core/systems/data/<gpu>/gemm/vllm/
<version>/``; latency in ms of one ``RowParallelLinear.forward``, rows keyed by gemm_dtype,
m, n, k) and prints

- the median latency ratio 0.14.0 / 0.19.0 over the rows both hold, per gemm_dtype: bfloat16
  (the same torch linear in both: a check that GPU and method agree), fp8, fp8_block;
- for fp8 rows with M >= ``--min-m``: the least-squares fit of the extra time
  (t_0.14 - t_0.19, s) to a * M * K + c (the activation's element count: what an elementwise
  quantization pass scales with) against one to a * 2 M N K + c (what a slower GEMM kernel
  would scale with), each with its R^2; a in bytes per activation element at the GPU's HBM
  bandwidth (capsim's hardware profile);
- at Llama-3.1-70B's TP 1 linear shapes (capsim's model profile; where the grid lacks an N or
  K, its nearest in log: gate_up's N 57,344 and down's K 28,672 are not on it) and
  M 2,048 / 4,096: TFLOP/s of each table and of the 0.14.0 row with the fitted a M K + c taken
  out.

Usage (pandas reads parquet through pyarrow: install it in your own venv, it is not a capsim
dependency)::

    python benchmarks/calibration/vllm_fp8_gemm_versions.py MIRROR_GIT_DIR [--gpu h100_sxm]
        [--commit 095f58a5]

``MIRROR_GIT_DIR``: a git directory of ai-dynamo/aiconfigurator (the ``fetch`` mirror's
``repo``). h100_sxm and h200_sxm hold both versions at 095f58a5.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

import numpy as np
import pandas as pd

from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

TABLE = "aic-core/src/aiconfigurator_core/systems/data/{gpu}/gemm/vllm/{version}/gemm_perf.parquet"
OLD, NEW = "0.14.0", "0.19.0"
#: aiconfigurator system name -> capsim hardware profile (for the HBM bandwidth only).
PROFILE = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm"}


def load(mirror: str, commit: str, gpu: str, version: str) -> pd.DataFrame:
    """One table: (gemm_dtype, m, n, k) -> mean latency in ms."""
    raw = subprocess.run(["git", "-C", mirror, "show",
                          f"{commit}:{TABLE.format(gpu=gpu, version=version)}"],
                         check=True, capture_output=True).stdout
    df = pd.read_parquet(io.BytesIO(raw))
    return df.groupby(["gemm_dtype", "m", "n", "k"]).latency.mean()


def fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least squares y = a x + c: (a, c, R^2)."""
    design = np.c_[x, np.ones(len(x))]
    (a, c), *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ np.array([a, c])
    return float(a), float(c), float(1 - (resid ** 2).sum() / ((y - y.mean()) ** 2).sum())


def llama70b_tp1_shapes() -> list[tuple[str, int, int]]:
    """(name, N, K) of Llama-3.1-70B's four linears at TP 1, from capsim's model profile."""
    m = load_model("llama-3.1-70b")
    qkv = (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim
    return [("qkv", qkv, m.hidden_size), ("o", m.hidden_size, m.num_attention_heads * m.head_dim),
            ("gate_up", 2 * m.intermediate_size, m.hidden_size),
            ("down", m.hidden_size, m.intermediate_size)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mirror")
    ap.add_argument("--gpu", default="h100_sxm", choices=sorted(PROFILE))
    ap.add_argument("--commit", default="095f58a5")
    ap.add_argument("--min-m", type=int, default=256)
    a = ap.parse_args(argv)
    old, new = (load(a.mirror, a.commit, a.gpu, v) for v in (OLD, NEW))
    both = pd.concat([old.rename("old"), new.rename("new")], axis=1).dropna().reset_index()
    print(f"{a.gpu}: median latency {OLD} / {NEW} over the rows both tables hold")
    for dtype, g in both.groupby("gemm_dtype"):
        print(f"  {dtype:10s} {len(g):6d} rows  {(g.old / g.new).median():.2f}")
    fp8 = both[(both.gemm_dtype == "fp8") & (both.m >= a.min_m)]
    extra_s = (fp8.old - fp8.new).to_numpy() * 1e-3
    mk = (fp8.m * fp8.k).to_numpy(dtype=float)
    flop = (2.0 * fp8.m * fp8.n * fp8.k).to_numpy(dtype=float)
    a_mk, c_mk, r2_mk = fit(mk, extra_s)
    _, _, r2_flop = fit(flop, extra_s)
    hbm = load_hardware(PROFILE[a.gpu]).hbm_bandwidth_bytes_per_s
    print(f"fp8, M >= {a.min_m} ({len(fp8)} rows): extra time = a M K + c: a {a_mk * 1e12:.2f} ps "
          f"per element ({a_mk * hbm:.0f} bytes at {hbm / 1e12:.2f} TB/s), c {c_mk * 1e6:+.1f} us, "
          f"R^2 {r2_mk:.3f}; = a 2MNK + c: R^2 {r2_flop:.3f}")
    print("Llama-3.1-70B TP 1 linears, TFLOP/s: 0.14.0 | 0.19.0 | 0.14.0 less a M K + c")
    table = both[both.gemm_dtype == "fp8"].set_index(["m", "n", "k"])
    grid_n, grid_k = (np.unique(table.index.get_level_values(x)) for x in ("n", "k"))
    for m in (2048, 4096):
        for name, want_n, want_k in llama70b_tp1_shapes():
            n, k = (int(g[np.argmin(abs(np.log(g / w)))]) for g, w in ((grid_n, want_n),
                                                                       (grid_k, want_k)))
            row = table.loc[(m, n, k)]
            f = 2.0 * m * n * k
            gemm_only_s = row.old * 1e-3 - (a_mk * m * k + c_mk)
            print(f"  M {m:5d} {name:8s} N {n:6d} K {k:6d}: {f / (row.old * 1e-3) / 1e12:6.0f} | "
                  f"{f / (row.new * 1e-3) / 1e12:6.0f} | {f / gemm_only_s / 1e12:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
