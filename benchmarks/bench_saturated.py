"""Benchmark 3: one saturated replica (batch of up to 256, a queue rarely empty) for 10 minutes.

Usage: python benchmarks/bench_saturated.py [--rate R] [--no-step-by-step]

benchmarks/saturated.yaml: chat requests (prompt and reply ~512 tokens,
lognormal) arrive at 17.5 req/s for 600 s on one H100 running Llama-3.1-8B
with chunked prefill, a little more than the replica serves, so the batch stays
near full (median 236 running; the queue was empty in 3 % of the 0.4 s bins).
Prints the same figures as bench_replay.py, macro-steps and step-by-step side
by side, plus the mean running batch. A benchmark, not a test.
"""

from __future__ import annotations

import argparse

from common import compare, machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=17.5, help="arrivals per second")
    parser.add_argument("--no-step-by-step", action="store_true")
    args = parser.parse_args()
    print(machine())
    figs = compare(f"Saturated single H100 replica, 600 s of arrivals at {args.rate:g} req/s "
                   "(Llama-3.1-8B, max_num_seqs 256, chunked prefill 2048)",
                   "benchmarks/saturated.yaml", [f"workload.arrival.rate_per_s={args.rate}"],
                   step_by_step=not args.no_step_by_step)
    f = figs[0]
    print(f"mean decode batch (output tokens / engine steps): {f.out_tokens / f.steps:.0f}")


if __name__ == "__main__":
    main()
