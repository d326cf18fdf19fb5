"""Replay the Azure 2023 conversation trace and print how fast capsim simulates it.

Usage: python benchmarks/bench_replay.py [--trace PATH] [--replicas N]

Prints wall seconds, simulated output tokens per wall-second and engine
steps per wall-second (one variant: 4 × H100, Llama-3.1-8B, chunked prefill).
A benchmark, not a test: it asserts nothing and takes ~20 s.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from capsim import workload
from capsim.config import load

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared/reference/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--replicas", type=int, default=4)
    args = parser.parse_args()
    from capsim.sim import simulate

    loaded = load(ROOT / "scenarios/azure_conv_replay.yaml",
                  [f"workload.trace.path={args.trace}", f"cluster.num_replicas={args.replicas}"])
    t0 = time.perf_counter()
    trace = workload.build(loaded.spec.workload, loaded.spec.seed, loaded.base_dir)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = simulate(loaded.runs[0], trace)
    wall = time.perf_counter() - t0
    steps = sum(r.steps for r in result.replicas)
    out_tokens = sum(o for o, s in zip(result.requests.output_tokens, result.requests.status)
                     if s == "finished")
    print(f"trace: {len(trace):,} requests, {trace.total_output_tokens:,} output tokens, "
          f"{trace.duration_s:,.0f} s of traffic (loaded in {t_load:.2f} s)")
    print(f"simulated: {result.sim_end_s:,.0f} s on {args.replicas} replicas, {steps:,} engine steps")
    print(f"wall seconds                       : {wall:8.2f}")
    print(f"simulated output tokens / wall-s   : {out_tokens / wall:12,.0f}")
    print(f"engine steps / wall-s              : {steps / wall:12,.0f}")
    print(f"simulated seconds / wall-s         : {result.sim_end_s / wall:12,.1f}")


if __name__ == "__main__":
    main()
