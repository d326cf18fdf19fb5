"""The vLLM performance benchmark's 200 ShareGPT requests (benchmarks/fidelity/traces/
perfbench_sharegpt200_*.csv, the case load_vllm_perfbench_h100_llama3_70b_tp4_sharegpt_qps1_and_
throughput) and how benchmarks/fidelity.py places a replayed trace with its own arrival times in
a load band.

The traces' figures come from LambdaLabsML/vllm-benchmark results/prompt_320 at a4f9f437 (the
same seed-0 ShareGPT draw as vLLM's benchmark_throughput.py / benchmark_serving.py): the
Llama-3 input_lens sum to 42,659 over the first 200 requests, the Mixtral ones to 47,645.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from capsim.scenario.load import load
from conftest import load_fidelity

TRACES = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity" / "traces"


def _rows(name: str) -> list[dict[str, float]]:
    with open(TRACES / name, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


@pytest.mark.parametrize("name, prompt_sum, output_sum, longest", [
    ("perfbench_sharegpt200_llama3.csv", 42_659, 41_476, 780),
    ("perfbench_sharegpt200_llama3_qps1.csv", 42_659, 41_476, 780),
    ("perfbench_sharegpt200_mistral.csv", 47_645, 46_743, 971),
])
def test_each_trace_holds_the_200_requests_within_the_benchmark_filter(
        name, prompt_sum, output_sum, longest):
    rows = _rows(name)
    prompts = [r["prompt_tokens"] for r in rows]
    outputs = [r["output_tokens"] for r in rows]
    assert len(rows) == 200
    assert (sum(prompts), sum(outputs), max(outputs)) == (prompt_sum, output_sum, longest)
    # sample_requests' filter: prompt and reply >= 4 tokens, prompt <= 1024, total <= 2048.
    assert min(prompts) >= 4 and min(outputs) >= 4 and max(prompts) <= 1024
    assert max(p + o for p, o in zip(prompts, outputs)) <= 2048


def test_mixtral_prompts_are_the_first_200_of_the_mistral_tokenizer_trace():
    """Mixtral-8x7B-v0.1's and Mistral-7B-v0.3's files hold the same input_lens; the replies
    are the longer of the two runs', so never shorter than the Mistral trace's."""
    ours, lambda_ = _rows("perfbench_sharegpt200_mistral.csv"), \
        _rows("lambda_vllm054_mistral7b_sharegpt320.csv")[:200]
    assert [r["prompt_tokens"] for r in ours] == [r["prompt_tokens"] for r in lambda_]
    assert all(o["output_tokens"] >= max(4, m["output_tokens"]) for o, m in zip(ours, lambda_))


def test_serving_arrivals_are_benchmark_serving_draws_at_1_req_s():
    """get_request: the first request at 0, then np.random.exponential(1 / rate) after each
    (np.random.seed(0) in main); the same requests as the offline trace."""
    serving, offline = _rows("perfbench_sharegpt200_llama3_qps1.csv"), \
        _rows("perfbench_sharegpt200_llama3.csv")
    np.random.seed(0)
    gaps = [np.random.exponential(1.0) for _ in range(199)]
    expected = np.concatenate([[0.0], np.cumsum(gaps)])
    assert np.allclose([r["arrival_s"] for r in serving], expected, atol=1e-6)
    assert [r["arrival_s"] for r in offline] == [0.0] * 200
    assert [(r["prompt_tokens"], r["output_tokens"]) for r in serving] == \
        [(r["prompt_tokens"], r["output_tokens"]) for r in offline]


def _scenario(tmp_path: Path, name: str, arrivals: list[float]) -> Path:
    trace = tmp_path / f"{name}.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{t},{100 + 10 * i},{50 + 5 * i}\n"
                               for i, t in enumerate(arrivals)))
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""name: {name}
seed: 0
model: llama-3.1-8b
hardware: a100-80gb
engine: {{preset: vllm-0.6.4}}
workload:
  trace: {{path: {trace.name}, format: columns,
          columns: {{arrival: arrival_s, prompt_tokens: prompt_tokens,
                    output_tokens: output_tokens}}}}
""")
    return path


def test_a_timed_trace_s_load_is_its_rate_over_the_same_requests_at_once(tmp_path):
    """A replayed trace with its own times offers (n − 1) / its arrival span (20 requests over
    9.5 s: 2 req/s); its saturation is the same requests all at t = 0, which the all-at-once
    trace's own run gives."""
    fidelity = load_fidelity("fidelity_trace_band")
    timed = load(str(_scenario(tmp_path, "timed", [0.5 * i for i in range(20)])))
    at_once = load(str(_scenario(tmp_path, "at_once", [0.0] * 20)))
    assert fidelity.load_fraction(at_once, at_once.runs[0]) == 1.0
    saturation = fidelity.summary_rows(at_once, [at_once.runs[0].variant])[
        at_once.runs[0].variant].request_throughput_per_s
    assert fidelity.load_fraction(timed, timed.runs[0]) == pytest.approx(2.0 / saturation,
                                                                       rel=1e-9)
