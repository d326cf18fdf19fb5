"""Time a 32-point sweep serially and in parallel, and check both give the same numbers.

Usage: python benchmarks/bench_sweep.py [--workers N] [--dask] [--duration-s S]

The sweep: scenarios/rag_mix_chunk_sweep.yaml's workload (chat + RAG on
Llama-3.1-8B, 2 × H100) with one chunked variant, 8 request rates × 4 chunk
budgets = 32 runs (none identical). Prints wall seconds serially, on the
process pool (and on a Dask LocalCluster with --dask), the speed-up and the
parallel efficiency (speed-up ÷ workers). A benchmark, not a test: it
asserts only that every backend returns the serial numbers.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from capsim.studies import sweep
from capsim.studies.parallel import ExecutorSpec, open_runner

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios/rag_mix_chunk_sweep.yaml"
RATES = [2, 3.5, 5, 7, 8.5, 10, 12, 14]
BUDGETS = [256, 512, 1024, 2048]


def plan(duration_s: float) -> sweep.SweepPlan:
    """The 32-point sweep: only the chunked variant (variants.1 dropped via its own grid)."""
    full = sweep.plan(SCENARIO, [f"workload.duration_s={duration_s}",
                                 f"sweep={{workload.arrival.rate_per_s: {RATES}, "
                                 f"variants.0.engine.max_num_batched_tokens: {BUDGETS}}}"])
    points = tuple((p, _first_variant(loaded)) for p, loaded in full.points)
    return sweep.SweepPlan(full.base, full.grid, points)


def _first_variant(loaded):
    from dataclasses import replace

    return replace(loaded, runs=loaded.runs[:1])


def timed(spec: ExecutorSpec, p: sweep.SweepPlan) -> tuple[float, float, pd.DataFrame]:
    """(startup s, run s, numbers) of one backend; startup includes starting the workers."""
    t0 = time.perf_counter()
    with open_runner(spec) as runner:
        runner.map(abs, list(range(spec.num_workers)))          # workers up and importing done
        t1 = time.perf_counter()
        result = sweep.run(p, [p.base.spec.seed], runner)
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, result.runs.drop(columns=["wall_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dask", action="store_true", help="also time a Dask LocalCluster")
    parser.add_argument("--duration-s", type=float, default=60.0,
                        help="simulated seconds of traffic per run")
    args = parser.parse_args()
    p = plan(args.duration_s)
    runs = p.num_runs_per_seed
    load_1m = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"sweep: {len(p.points)} points × {len(p.base.runs[:1])} variant = {runs} runs, "
          f"{args.duration_s:g} s of traffic each; {os.cpu_count()} CPUs, load average "
          f"{load_1m:.1f} before starting (other work on the machine slows the parallel runs)")
    backends = [ExecutorSpec("serial"), ExecutorSpec("process", workers=args.workers)]
    if args.dask:
        backends.append(ExecutorSpec("dask", workers=args.workers))
    serial_s, reference = None, None
    for spec in backends:
        start_s, run_s, numbers = timed(spec, p)
        same = "" if reference is None else (
            "  (same numbers as serial)" if numbers.equals(reference) else "  (DIFFERENT!)")
        if reference is None:
            serial_s, reference = run_s, numbers
        workers = 1 if spec.backend == "serial" else spec.num_workers
        speedup = serial_s / run_s
        print(f"{spec.describe():<30} start {start_s:4.1f} s + run {run_s:5.1f} s = "
              f"{start_s + run_s:5.1f} s   run speed-up {speedup:4.2f}× "
              f"(efficiency {speedup / workers:4.0%}){same}")


if __name__ == "__main__":
    main()
