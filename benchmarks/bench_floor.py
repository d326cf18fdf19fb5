"""Benchmark 4: the floor, a bare SimPy loop (``yield env.timeout(dt)``) of N events.

Usage: python benchmarks/bench_floor.py [--events N]

No simulator built on SimPy processes events faster than this loop; the other
benchmarks divide their wall time by this loop's time for their own event
count ("ratio to the floor"). Default N: 1,932,075, the step-by-step path's
event count on benchmark 1 (one event per engine step plus arrivals).
"""

from __future__ import annotations

import argparse

from common import floor_seconds, machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_932_075)
    args = parser.parse_args()
    print(machine())
    wall = floor_seconds(args.events)
    print(f"bare SimPy loop, {args.events:,} events")
    print(f"wall seconds                        {wall:10.3f}")
    print(f"events / wall-s                     {args.events / wall:10,.0f}")
    print(f"microseconds / event                {wall / args.events * 1e6:10.3f}")


if __name__ == "__main__":
    main()
