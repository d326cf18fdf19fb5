"""Scaling check: double the request count several times; wall time per request must stay flat.

Usage: python benchmarks/bench_scaling.py [--start N] [--doublings K] [--step-by-step]
       python benchmarks/bench_scaling.py --requests 1000000    (one run of that size)

The workload is scenarios/rag_mix.yaml's chat + RAG mix at its 7 req/s on
2 × H100 (variant chunked-2048), with ``workload.num_requests`` = N, 2N, 4N, ...
so the simulated time grows with N. Linear cost shows as a constant wall time
(and memory) per request; quadratic cost as a per-request figure that doubles.
"run MiB" is the peak until the run ended, before the result is built; "peak
MiB" includes building the result. Both exclude the trace (built before the
measurement starts). A benchmark, not a test.
"""

from __future__ import annotations

import argparse

from common import machine, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=2_500)
    parser.add_argument("--doublings", type=int, default=6)
    parser.add_argument("--step-by-step", action="store_true",
                        help="time the step-by-step path instead of macro-steps")
    parser.add_argument("--requests", type=int, default=None,
                        help="measure one run of this many requests (e.g. 1000000) instead of "
                             "the doublings")
    args = parser.parse_args()
    sizes = [args.requests] if args.requests else \
        [args.start * 2**i for i in range(args.doublings + 1)]
    print(machine())
    path = "step-by-step" if args.step_by_step else "macro-steps"
    print(f"rag_mix chunked-2048 on 2 x H100, {path}")
    print(f"{'requests':>10} {'sim s':>8} {'steps':>10} {'wall s':>8} {'us/request':>11} "
          f"{'us/step':>8} {'tok/wall-s':>11} {'steps/s':>8} {'events/s':>9} {'peak MiB':>9} "
          f"{'run MiB':>8} {'KiB/req (run / total)':>22} {'x floor':>8}")
    for n in sizes:
        f = measure(path, "scenarios/rag_mix.yaml", ["workload.duration_s=null", f"workload.num_requests={n}"],
                    macro=not args.step_by_step, variant=2)
        print(f"{f.requests:>10,} {f.sim_s:>8,.0f} {f.steps:>10,} {f.wall_s:>8.2f} "
              f"{f.wall_s / f.requests * 1e6:>11.1f} {f.wall_s / f.steps * 1e6:>8.2f} "
              f"{f.tokens_per_s:>11,.0f} {f.steps_per_s:>8,.0f} {f.events_per_s:>9,.0f} "
              f"{f.peak_mib:>9.0f} {f.state_mib:>8.0f} "
              f"{f'{f.state_mib * 1024 / f.requests:.2f} / {f.peak_mib * 1024 / f.requests:.2f}':>22} "
              f"{f.floor_ratio:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
