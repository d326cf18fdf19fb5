"""Replay the Azure 2023 conversation trace and print how fast capsim simulates it.

Usage: python benchmarks/bench_replay.py [--trace PATH] [--replicas N] [--rate-scale X]
                                         [--disagg P:D] [--no-step-by-step]

Benchmark 1 (defaults): the whole trace (19,366 requests, 58 minutes) on
4 × H100 replicas of Llama-3.1-8B, continuous batching with chunked prefill
(scenarios/azure_conv_replay.yaml). Benchmark 2: ``--rate-scale 8 --replicas 16``
(the same requests at 8× the rate on 16 replicas). ``--disagg 1:3``: the same
GPUs split into 1 prefill and 3 decode replicas (8192-token prefill chunks, KV over
NVLink 4), the macro-steps of a disaggregated variant's decode pool.

Prints, for the macro-step path and the step-by-step reference side by side:
wall seconds, peak memory growth, simulated output tokens, engine steps and
SimPy events per wall-second, and the ratio to a bare SimPy loop with the same
number of events. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import TRACE, compare, machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--disagg", metavar="P:D",
                        help="prefill:decode replicas of a disaggregated variant instead")
    parser.add_argument("--no-step-by-step", action="store_true",
                        help="time only the macro-step path")
    args = parser.parse_args()
    if not args.trace.is_file():
        print(f"error: --trace: {args.trace} not found; point it at AzureLLMInferenceTrace_conv.csv "
              "(github.com/Azure/AzurePublicDataset, AzureLLMInferenceDataset2023)", file=sys.stderr)
        sys.exit(2)
    sets = [f"workload.trace.path={args.trace}", f"cluster.num_replicas={args.replicas}",
            f"workload.trace.rate_scale={args.rate_scale}"]
    where, chunks = f"{args.replicas} x H100", "chunked prefill 2048"
    if args.disagg is not None:
        try:
            p, d = (int(x) for x in args.disagg.split(":"))
            if p < 1 or d < 1:
                raise ValueError
        except ValueError:
            print(f"error: --disagg: expected P:D, prefill and decode replicas >= 1 (e.g. 1:3), "
                  f"got {args.disagg!r}", file=sys.stderr)
            sys.exit(2)
        sets.append(f"variants=[{{name: {p}P{d}D, disaggregation: {{prefill: {{num_replicas: {p}, "
                    f"engine: {{max_num_batched_tokens: 8192}}}}, decode: {{num_replicas: {d}}}, "
                    "link: nvlink-4}}]")
        where = f"{p} prefill + {d} decode x H100 (NVLink 4)"
        chunks = "prefill chunks of 8192 tokens"
    print(machine())
    compare(f"Azure 2023 conv trace at {args.rate_scale:g}x its rate on {where} "
            f"(Llama-3.1-8B, {chunks})", "scenarios/azure_conv_replay.yaml", sets,
            step_by_step=not args.no_step_by_step)


if __name__ == "__main__":
    main()
