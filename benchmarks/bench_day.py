"""Simulate a whole day (scenarios/day_in_the_life.yaml) and print how long each variant takes.

Usage: python benchmarks/bench_day.py [--variant NAME ...] [--profile FILE]

For each variant (default: all four), in this process: CPU seconds to simulate the
24 hours (time-varying arrivals, autoscaler ticks, failures and retries, the day
view's samples), CPU seconds to summarise the run (the summary rows and the day
view's 5-minute windows, as ``capsim run`` computes them), and requests simulated
per CPU-second. The trace is built once, before the clock starts, as ``capsim run``
shares it between variants. ``--profile FILE``: write a cProfile of the
simulations to FILE (``python -m pstats FILE``). A benchmark, not a test: it asserts
nothing; the CPU figures include whatever else the process does meanwhile (none).
For a whole-process figure: ``/usr/bin/time -v python benchmarks/bench_day.py
--variant autoscaled``.
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios/day_in_the_life.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", metavar="NAME",
                        help="a variant of the scenario (repeatable; default: all)")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="write a cProfile of the simulations to FILE")
    args = parser.parse_args()

    from capsim import workload
    from capsim.metrics.day import day_windows
    from capsim.metrics.summary import summarize
    from capsim.scenario.load import load
    from capsim.sim.simulate import simulate

    loaded = load(SCENARIO, [])
    names = [rc.variant for rc in loaded.runs]
    for name in args.variant or ():
        if name not in names:
            print(f"error: --variant: {name!r} is not a variant of {SCENARIO.name} "
                  f"(one of {', '.join(names)})", file=sys.stderr)
            sys.exit(2)
    runs = [rc for rc in loaded.runs if not args.variant or rc.variant in args.variant]
    t0 = time.process_time()
    trace = workload.build(runs[0].workload, runs[0].seed, loaded.base_dir)
    print(f"{SCENARIO.name}: {len(trace):,} requests over 24 h, trace built in "
          f"{time.process_time() - t0:.1f} s CPU")
    print(f"{'variant':26}{'simulate CPU s':>16}{'summarise CPU s':>17}{'requests / CPU-s':>18}")
    profiler = cProfile.Profile() if args.profile else None
    for rc in runs:
        t0 = time.process_time()
        if profiler is not None:
            profiler.enable()
        result = simulate(rc, trace)
        if profiler is not None:
            profiler.disable()
        t1 = time.process_time()
        summarize(result, loaded.spec.slo, loaded.class_slos)
        if result.day is not None:
            day_windows(result, loaded.spec.slo)
        t2 = time.process_time()
        print(f"{rc.variant:26}{t1 - t0:16.1f}{t2 - t1:17.1f}{len(trace) / (t1 - t0):18,.0f}",
              flush=True)
    if profiler is not None:
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
