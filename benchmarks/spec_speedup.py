"""Published speculative-decoding speed-ups against capsim's.

A speed-up is the same engine on the same hardware with speculation over without it:
output tokens/s with ÷ without, or TPOT without ÷ with. Each measurement below is a scenario
in benchmarks/spec_speedup/ with a variant ``none`` and a variant ``eagle3`` written as a
user would (the shipped acceptance row for the drafter and dataset; the header of each file
says how it was expressed and what was assumed).

The measurements were chosen before capsim was run on them, and none is used for any fit
(none is a case of benchmarks/fidelity/fit_test_split.yaml):

- vLLM pull request 16937, comment of 2025-04-24: EAGLE-3 on Llama-3.1-8B-Instruct, H100,
  batch size 1, MT-Bench, K = 2: 220.21 / 133 output tokens/s.
- vLLM issue 20780 (2025-07-10): the same setup at K = 3, TPOT 7.07 ms without, 4.09 ms with.

Usage:
    python benchmarks/spec_speedup.py [--only PATTERN]

Prints one line per measurement: published speed-up, capsim's, and the relative error.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from dataclasses import dataclass
from pathlib import Path

from capsim.metrics.summary import summarize
from capsim.results.model import SummaryRow
from capsim.scenario.load import load
from capsim.scenario.run_config import RunConfig
from capsim.sim.simulate import simulate
from capsim.workload import TraceCache

HERE = Path(__file__).resolve().parent / "spec_speedup"


@dataclass(frozen=True)
class Measurement:
    """One published speed-up: its scenario, the metric and the two published values."""

    scenario: str
    metric: str          # "throughput" (tokens/s, with ÷ without) or "tpot" (without ÷ with)
    without: float
    with_spec: float
    source: str

    def published(self) -> float:
        if self.metric == "throughput":
            return self.with_spec / self.without
        return self.without / self.with_spec


MEASUREMENTS = (
    Measurement("eagle3_llama31_8b_h100_bs1_k2.yaml", "throughput", 133.0, 220.21,
                "vllm-project/vllm pull 16937, comment 2025-04-24 (H100, BS 1, MT-Bench, K 2)"),
    Measurement("eagle3_llama31_8b_h100_bs1_k3_tpot.yaml", "tpot", 7.07, 4.09,
                "vllm-project/vllm issue 20780 (BS 1, MT-Bench, K 3; H100 assumed)"),
)


def closed_loop_tok_s(row: SummaryRow, run: RunConfig) -> float:
    """Output tokens/s of a closed loop by Little's law (as benchmarks/fidelity.py reads it):
    users × tokens per request ÷ (mean E2E latency + think time)."""
    arrival = run.workload.arrival
    tokens_per_request = row.output_throughput_tok_per_s / row.request_throughput_per_s
    return arrival.users * tokens_per_request / (row.e2el_mean_ms / 1e3 + arrival.think_s)


def capsim_speedup(m: Measurement) -> float:
    """capsim's speed-up for ``m``: its scenario's ``eagle3`` variant over ``none``."""
    loaded = load(HERE / m.scenario)
    traces = TraceCache(loaded.base_dir, str(loaded.path))
    value = {}
    for run in loaded.runs:
        result = simulate(run, traces.get(run.workload, run.seed))
        row = summarize(result, loaded.spec.slo, loaded.class_slos)[0]
        value[run.variant] = (closed_loop_tok_s(row, run) if m.metric == "throughput"
                              else row.tpot_mean_ms)
    if m.metric == "throughput":
        return value["eagle3"] / value["none"]
    return value["none"] / value["eagle3"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="*", help="fnmatch pattern over scenario names")
    args = parser.parse_args(argv)
    errors = []
    for m in MEASUREMENTS:
        if not fnmatch.fnmatch(m.scenario, f"*{args.only}*"):
            continue
        published, predicted = m.published(), capsim_speedup(m)
        error = predicted / published - 1
        errors.append(abs(error))
        print(f"{m.scenario[:-5]:42s} {m.metric:10s} published {published:5.3f}  "
              f"capsim {predicted:5.3f}  error {error:+6.1%}  ({m.source})")
    if errors:
        print(f"speculative speed-ups ({len(errors)}): median |error| "
              f"{sorted(errors)[len(errors) // 2]:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
