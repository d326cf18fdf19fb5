"""SGLang 0.5.12's Triton fused-MoE call on the H200 for DeepSeek-V3 fp8 (TP 8 / 4), as data:
the ``efficiency.grouped_gemm_fp8_engine["sglang-0.5.14"]`` curve of h200-sxm.yaml.

Why a curve of its own: h200-sxm's ``grouped_gemm_fp8`` was fitted to aiconfigurator's SGLang
0.5.10 table (``.../h200_sxm/moe/sglang/0.5.10/moe_perf.parquet``); aiconfigurator reads its
0.5.14 table for 0.5.12 (``moe/sglang/0.5.12/reuse.yaml``), and the same collector times the
same call 0.65x (1 token) ... 0.85-0.94x (32-16,384 tokens) as long there, on every shape that
routes alike in both tables. The 0.5.14 DeepSeek-V3 rows of >= 2 tokens cannot be used as
they are (its collector runs DeepSeek's grouped top-k on tied "balanced" logits there and hits
far fewer experts: h200-sxm.yaml, efficiency.grouped_gemm_fp8.launch_s), so the DeepSeek-V3
rows of this build are 0.5.10's rows times the median 0.5.14 / 0.5.10 ratio at the same
token count over the plain top-8 shapes (Qwen3-235B-A22B at moe_tp_size 4, Qwen3-30B-A3B at
1 and 2: the rows tests/profiles/test_moe_aiconfigurator.py already uses for the fixed time),
fitted as the 0.5.10 curve was (each knot: sum of rooflines / sum of (t - launch_s) over the
rows nearest it in log rows-per-expert), with the fixed time 0.5.14's (14.6 us).

Usage:
    python benchmarks/calibration/sglang0512_h200_fused_moe.py MIRROR_GIT_DIR [--commit C]

``MIRROR_GIT_DIR``: a git directory of ai-dynamo/aiconfigurator (the ``fetch`` mirror's
``repo``); pandas reads parquet through pyarrow (install it in your own venv; not a capsim
dependency). Prints the ratios, the knots and the fitted rows' errors.
"""

from __future__ import annotations

import argparse
import io
import math
import subprocess
import sys

import numpy as np
import pandas as pd

from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

TABLE = "aic-core/src/aiconfigurator_core/systems/data/h200_sxm/moe/sglang/{}/moe_perf.parquet"
#: (hidden, expert intermediate, experts, top-k, moe_tp_size): the shapes that route alike in
#: both tables (plain top-8), Qwen3-235B-A22B at 4 and Qwen3-30B-A3B at 1 / 2.
PLAIN = ((4096, 1536, 128, 8, 4), (2048, 768, 128, 8, 1), (2048, 768, 128, 8, 2))
DSV3 = (7168, 2048, 256, 8)
LAUNCH_0514_S = 14.6e-6        # h200-sxm grouped_gemm_fp8.launch_s (0.5.14's fixed time)


def load(mirror: str, commit: str, version: str) -> pd.DataFrame:
    """One version's table: fp8_block, balanced, moe_ep_size 1."""
    raw = subprocess.run(["git", "-C", mirror, "show", f"{commit}:{TABLE.format(version)}"],
                         check=True, capture_output=True).stdout
    df = pd.read_parquet(io.BytesIO(raw))
    return df[(df.moe_dtype == "fp8_block") & (df.moe_ep_size == 1)
              & (df.distribution == "balanced")]


def _shape(df: pd.DataFrame, s: tuple[int, ...]) -> pd.Series:
    """num_tokens -> latency (ms) of one shape."""
    d = df[(df.hidden_size == s[0]) & (df.inter_size == s[1]) & (df.num_experts == s[2])
           & (df.topk == s[3]) & (df.moe_tp_size == s[4])]
    return d.set_index("num_tokens").latency.sort_index()


def ratios(old: pd.DataFrame, new: pd.DataFrame) -> dict[int, float]:
    """num_tokens -> median over PLAIN of 0.5.14 / 0.5.10."""
    per: dict[int, list[float]] = {}
    for s in PLAIN:
        a, b = _shape(old, s), _shape(new, s)
        for n in a.index.intersection(b.index):
            per.setdefault(int(n), []).append(float(b[n] / a[n]))
    return {n: float(np.median(v)) for n, v in sorted(per.items())}


def fit(rows: dict[int, dict[int, float]], knots: list[int]) -> list[float]:
    """Each knot's efficiency from ``rows`` (tp -> num_tokens -> s), launch 0.5.14's."""
    hw = load_hardware("h200-sxm")
    sums = {k: [0.0, 0.0] for k in knots}
    for tp, table in rows.items():
        x = StepPricer(load_model("deepseek-v3"), hw, tp, quantization="fp8_block").terms.experts
        for n, t in table.items():
            f, b, _, _ = x.terms(n)
            roof = max(f / hw.peak_flops_per_s["fp8"], b / hw.hbm_bandwidth_bytes_per_s)
            m = max(int(n * x.work.top_k / x.hit(n)), 1)
            k = knots[int(np.argmin([abs(math.log(k) - math.log(m)) for k in knots]))]
            sums[k][0] += roof / x.work.layers
            sums[k][1] += t - LAUNCH_0514_S
    return [round(a / b, 3) for a, b in (sums[k] for k in knots)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mirror")
    ap.add_argument("--commit", default="095f58a51")
    args = ap.parse_args(argv)
    old, new = load(args.mirror, args.commit, "0.5.10"), load(args.mirror, args.commit, "0.5.14")
    r = ratios(old, new)
    print("0.5.14 / 0.5.10, median over the plain shapes:",
          ", ".join(f"{n}: {v:.3f}" for n, v in r.items()))
    rows = {tp: {int(n): float(t) * 1e-3 * r[int(n)]
                 for n, t in _shape(old, (*DSV3, tp)).items() if int(n) in r}
            for tp in (8, 4)}
    knots = load_hardware("h200-sxm").efficiency.grouped_gemm_fp8.tokens
    print("knots (rows per expert):", knots)
    print("efficiency:", fit(rows, knots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
