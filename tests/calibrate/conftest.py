"""What the calibration tests share: a vllm bench serve result simulated with a known profile.

``bench_scenario`` → the path of the scenario it is simulated with.

``bench_result(SCALE, OVERHEAD_S, RATE="inf")`` → (RunConfig, path): 32 requests
(prompts 50–3000, replies 2–40 tokens) simulated on the test scenario's engine with GPU
time × SCALE and OVERHEAD_S per step, written as ``vllm bench serve --save-result
--save-detailed`` writes them (tests/calibrate/fixtures/README.md): ``start_times``
(perf_counter s) when RATE is finite, ``latencies``, and ``itls`` of each request's mean
gap. Replaying it with the same profile must give the measured TTFT, TPOT and E2E back.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from capsim.calibrate.measured import MeasuredRun
from capsim.calibrate.replay import replay
from capsim.calibrate.serving import request_latencies, scaled_profile, simulate_replay
from capsim.scenario.load import load

SCENARIO = """\
name: bench
model: llama-3.1-8b
hardware: h100-sxm
engine: {max_num_seqs: 16, max_num_batched_tokens: 512, max_model_len: 4096}
workload:
  num_requests: 1
  arrival: {process: constant, rate_per_s: 1.0}
  classes:
    - {name: a, weight: 1, prompt_tokens: {dist: fixed, value: 100},
       output_tokens: {dist: fixed, value: 10}}
"""


@pytest.fixture
def bench_scenario(tmp_path):
    """The scenario the synthetic results are simulated with (H100, Llama-3.1-8B, chunks of
    512 tokens, 16 sequences), written as tmp_path / "s.yaml"."""
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture
def bench_result(tmp_path, bench_scenario):
    def make(scale: float, overhead_s: float, rate: str = "inf"):
        run = load(bench_scenario).runs[0]
        rng = np.random.default_rng(0)
        n = 32
        prompts, outs = rng.integers(50, 3000, n), rng.integers(2, 40, n)
        arrival = np.zeros(n) if rate == "inf" else np.sort(rng.uniform(0, 2.0, n))
        ones = np.ones(n)
        plan = MeasuredRun(path="synthetic", format="vllm-bench", label="synthetic",
                           source="synthetic", run_label="", send_s=arrival,
                           prompt_tokens=prompts, output_tokens=outs, ttft_s=ones, e2e_s=ones,
                           success=ones.astype(bool))
        rep = replay(plan)
        hw = scaled_profile(run.pool().hardware, scale, overhead_s)
        ttft, tpot, e2e = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        ttft[rep.rows], tpot[rep.rows], e2e[rep.rows] = request_latencies(
            simulate_replay(run, rep, hw))
        data = {"date": "20250101-000000", "backend": "vllm",
                "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": n,
                "request_rate": rate, "burstiness": 1.0, "max_concurrency": None,
                "input_lens": prompts.tolist(), "output_lens": outs.tolist(),
                "ttfts": ttft.tolist(), "latencies": e2e.tolist(), "errors": [""] * n,
                "itls": [[float(t)] * int(o - 1) for t, o in zip(tpot, outs)]}
        if rate != "inf":
            data["start_times"] = (arrival + 5000.0).tolist()    # perf_counter seconds
        path = tmp_path / "bench.json"
        path.write_text(json.dumps(data))
        return run, path
    return make
