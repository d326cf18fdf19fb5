"""Run every speed benchmark and print its figures (takes a few minutes).

Usage: python benchmarks/run_all.py [--no-step-by-step] [--doublings K]

1. bench_replay.py: the Azure 2023 conv trace on 4 × H100;
2. bench_replay.py --rate-scale 8 --replicas 16: the same requests at 8× the rate;
3. bench_saturated.py: one saturated replica for 10 minutes of arrivals;
4. bench_floor.py: a bare SimPy loop (the floor the others are divided by);
then bench_replay.py --disagg 1:3 (the trace on a disaggregated 1 prefill + 3
decode split) and bench_scaling.py (doubling the request count). Each measurement runs in a
fresh process; macro-steps and the step-by-step path side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-step-by-step", action="store_true",
                        help="time only the macro-step path")
    parser.add_argument("--doublings", type=int, default=5)
    args = parser.parse_args()
    step = ["--no-step-by-step"] if args.no_step_by_step else []
    runs = [
        ["bench_replay.py", *step],
        ["bench_replay.py", "--rate-scale", "8", "--replicas", "16", *step],
        ["bench_saturated.py", *step],
        ["bench_floor.py"],
        ["bench_replay.py", "--disagg", "1:3", *step],
        ["bench_scaling.py", "--doublings", str(args.doublings)],
    ]
    for argv in runs:
        print(f"\n$ python benchmarks/{' '.join(argv)}", flush=True)
        subprocess.run([sys.executable, HERE / argv[0], *argv[1:]], check=True, cwd=HERE)


if __name__ == "__main__":
    main()
