"""Derive vLLM 0.5.4's host seconds per running sequence per step from vLLM's own profile.

vLLM's blog of 2024-09-05 ("vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency
Reduction", vllm-project/vllm-project.github.io _posts/2024-09-05-perf-update.md at 0dd37ad)
profiled v0.5.3 serving Llama-3-8B on one H100: the HTTP API server took 33 % of the time,
scheduling (gathering the last step's results, scheduling, preparing inputs) 29 %, the GPU
38 %. Its benchmark: 500 ShareGPT prompts (average 202 input, 179 output tokens) sent at once.
v0.5.4 moved the API server to its own process (vLLM PR 6883; "We introduced multiprocessing
into the frontend in v0.5.4", vllm-project/vllm issue 7653, 2024-08-20), so what stays in
series with the GPU is the scheduling share: 0.29 / 0.38 of the GPU's seconds.

With every request present at t = 0 the sequence of steps capsim runs does not depend on
their durations, so the run's length is linear in the host terms:
``T(x) = G + n × per_step_s + S × x`` (G the GPU seconds, n the steps, S the sequences summed
over steps). Three runs give G, n·per_step_s and S; then

    x = (0.29 / 0.38 × G − n × per_step_s) / S.

Usage: python benchmarks/calibration/v0_host_per_seq.py   (prints x in µs)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import yaml

from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import TraceCache

SERIAL_SHARE, GPU_SHARE = 0.29, 0.38     # the blog's scheduling and GPU shares of v0.5.3's time
SCENARIO = {
    "name": "vllm_blog_v053_llama3_8b_h100_sharegpt500",
    "seed": 0, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    # vLLM 0.5.3's serving defaults: max_num_seqs 256, no chunked prefill below 32k context,
    # no prefix caching; Meta-Llama-3-8B's context 8192.
    "engine": {"preset": "vllm-0.5", "max_model_len": 8192},
    "workload": {"num_requests": 500, "arrival": {"process": "constant", "rate_per_s": 1.0e9},
                 "classes": [{"name": "sharegpt", "weight": 1, "shape": "sharegpt"}]},
}


def run_length_s(per_step_s: float, per_seq_s: float, path: Path) -> float:
    """The simulated run's length with these host terms (all requests at t = 0)."""
    loaded = load(path)
    run = loaded.runs[0]
    pool = run.pools[0]
    preset = pool.preset.model_copy(update={"host_overhead": pool.preset.host_overhead.model_copy(
        update={"per_step_s": per_step_s, "per_seq_s": per_seq_s})})
    run = dataclasses.replace(run, pools=(dataclasses.replace(pool, preset=preset),))
    result = simulate(run, TraceCache(loaded.base_dir, str(path)).get(run.workload, run.seed))
    return float(np.nanmax(result.requests.finish_s))


def main() -> int:
    path = Path("/tmp") / f"{SCENARIO['name']}.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    per_step_s = load(path).runs[0].pools[0].preset.host_overhead.per_step_s
    gpu = run_length_s(0.0, 0.0, path)
    with_step = run_length_s(per_step_s, 0.0, path)
    probe_s = 1e-4
    seq_sum = (run_length_s(per_step_s, probe_s, path) - with_step) / probe_s
    x = (SERIAL_SHARE / GPU_SHARE * gpu - (with_step - gpu)) / seq_sum
    print(f"GPU {gpu:.3f} s, per-step host {with_step - gpu:.3f} s, sequence-steps {seq_sum:,.0f}")
    print(f"per_seq_s = {x * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
