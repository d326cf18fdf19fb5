"""What capsim charges as fixed time per kernel of a graphed decode step on MI300X / MI325X
against the H200, and how large a per-kernel graph-replay gap would have to be to close the
low-concurrency MI3xx rows (benchmarks/calibration/mi3xx_graph_kernel_gap.md says what was
searched; nothing here is fitted or priced).

For each clean low-concurrency point of :mod:`mi3xx_decode_gap` (the c1 rows, MI325X's c4)
and the same model, batch and context on the H200 under the same preset:

- ``nodes``: the kernels capsim counts in one forward (``OperatorTerms.eager_operators``, its
  layer matmuls, attention and the element-wise class once per layer, the routed experts once
  per MoE layer, plus ``eager_all_reduces`` at TP > 1): the count an eager forward's launch
  floor uses, and the only per-kernel count capsim has;
- ``fixed``: the step's fixed seconds, split by operator class (``launch_s`` of the matmul
  curve x matmuls, the element-wise class's per-layer launch, the experts' fixed time, decode
  attention's per-layer fixed time (on ROCm with SGLang 0.5.7 also the absorbed-weight
  rewrite), the LM head's, the collectives at the step's tokens, ``step_overhead_s``);
- ``need``: the per-node gap that would close the point (measured ITL - capsim step) / nodes;
- ``graphbench``: what a per-node gap of :data:`GRAPHBENCH_NODE_S` would add (nodes x gap).

Usage: python benchmarks/calibration/mi3xx_graph_kernel_gap.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mi3xx_decode_gap as gap  # noqa: E402  (a sibling script, not a package)

#: A straight chain of N dependent null kernels (1 x 1 grid) in one hipGraph, launched and
#: synchronised (``graph_bench --sweep --sync``, "7.2 (develop)" column ``straight``), wall
#: microseconds: saleelk/GraphBench results.csv at 08bc3e08 (2026-04-16; the device is not
#: named in the file, the README's sample output says "AMD Instinct MI300X"; the author
#: dropped the sync rows at 56f9c6c5 and the whole CSV at fa9082f5 the same day).
GRAPHBENCH_SYNC_STRAIGHT_US = {1024: 1605.067, 2048: 3167.541, 4096: 6327.124, 8192: 12614.591}


def graphbench_node_s() -> float:
    """Seconds per node of the chain: the slope between its 1,024- and 8,192-node rows."""
    t = GRAPHBENCH_SYNC_STRAIGHT_US
    return (t[8192] - t[1024]) / (8192 - 1024) * 1e-6


GRAPHBENCH_NODE_S = graphbench_node_s()

#: The low-concurrency points of mi3xx_decode_gap.rows() this note prices: (case prefix, point).
POINTS = (("load_sglang057", "in1000_out1000_c1"), ("load_sglang059", "in1000_out1000_c1"),
          ("load_sglang0519", "c4"))

COMPARE_GPU = "h200-sxm"


def fixed_terms(p: StepPricer, batch: int) -> dict[str, float]:
    """The fixed seconds of a decode-only step of ``batch`` sequences by operator class."""
    t = p.terms
    return {"matmul": t.gemm_launch_s, "elementwise": t.ew_launch_s,
            "experts": t.expert_launch_s, "attention": t.attn_d[3], "lm_head": t.lm_launch_s,
            "collectives": p.comm.seconds(batch, batch),
            "overhead": p.rates.step_overhead_s}


def nodes(p: StepPricer) -> int:
    """Kernels capsim counts in one forward (operators + the TP collectives)."""
    return p.terms.eager_operators + p.terms.eager_all_reduces


def _pricer_on(scenario: dict, hardware: str | None) -> StepPricer:
    s = scenario if hardware is None else {**scenario, "hardware": hardware}
    return gap._pricer(s, True)


def rows() -> list[dict]:
    """One row per (point, GPU): the point's GPU and the H200 at the same batch and context."""
    measured = {(c.split("_8x")[0], label): (c, batch, m, after)
                for c, label, batch, m, _, after in gap.rows()}
    out = []
    for prefix, label in POINTS:
        case, batch, m, after = measured[(prefix, label)]
        scenario = gap._scenario(case)
        point = next(p for p in gap._points(case) if p["label"] == label)
        ctx = int(batch * gap._context(point, scenario))
        for hw in (None, COMPARE_GPU):
            p = _pricer_on(scenario, hw)
            step_ms = p.cost(decode_seqs=batch, decode_ctx_tokens=ctx).seconds * 1e3
            fixed = fixed_terms(p, batch)
            n = nodes(p)
            row = {"case": case, "point": label, "gpu": hw or scenario["hardware"],
                   "batch": batch, "step_ms": step_ms, "nodes": n,
                   "fixed_ms": sum(fixed.values()) * 1e3,
                   "fixed": {k: v * 1e3 for k, v in fixed.items()},
                   "graphbench_ms": n * GRAPHBENCH_NODE_S * 1e3}
            if hw is None:
                assert abs(step_ms - after) < 1e-9   # the same pricer as mi3xx_decode_gap
                row.update(measured_ms=m, need_us=(m - step_ms) / n * 1e3)
            out.append(row)
    return out


def main() -> int:
    print(f"GraphBench straight chain, sync: {GRAPHBENCH_NODE_S * 1e6:.3f} us per node")
    for r in rows():
        need = f"  measured {r['measured_ms']:.2f} ms, need {r['need_us']:.1f} us/node" \
            if "measured_ms" in r else ""
        print(f"{r['case'][:40]:40} {r['point']:18} {r['gpu']:9} step {r['step_ms']:6.2f} ms "
              f"nodes {r['nodes']:4d} fixed {r['fixed_ms']:5.2f} ms "
              f"(+{r['graphbench_ms']:.2f} at GraphBench's gap){need}")
        print("    " + ", ".join(f"{k} {v:.3f}" for k, v in r["fixed"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
