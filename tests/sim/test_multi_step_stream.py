"""Whole runs under vLLM 0.6's multi-step scheduling (``num_scheduler_steps``): a window's
tokens reach the client as one chunk (vllm/engine/llm_engine.py ``step`` at v0.6.0,
32e7db2; capsim/engine/window_decode_set.py), so ITL is per window while TPOT stays
(E2EL − TTFT) / (output − 1)."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.engine.first_token import FirstTokenDelay
from capsim.metrics.summary import request_frame, summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

V06 = {"preset": "vllm-0.6", "max_model_len": 4096, "enable_chunked_prefill": False}


@pytest.fixture
def scenario(tmp_path, write_scenario):
    """``scenario(engine, **top)`` → the path of a Llama-3.1-8B / H100 scenario (150 chat
    requests at 4 req/s) with this engine section and top-level keys."""
    def write(engine: dict, **top):
        doc = {"name": "ms", "seed": 2, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": engine,
               "workload": {"num_requests": 150,
                            "arrival": {"process": "poisson", "rate_per_s": 4},
                            "classes": [{"name": "chat", "weight": 1,
                                         "prompt_tokens": {"dist": "uniform", "min": 50,
                                                           "max": 1500},
                                         "output_tokens": {"dist": "uniform", "min": 2,
                                                           "max": 300}}]},
               **top}
        return write_scenario(tmp_path, doc)
    return write


def test_a_lone_reply_streams_a_gap_per_window_of_priced_steps(scenario, trace_of):
    """One 512-token prompt, 31 output tokens, windows of 10: token 1 at the prefill, then
    three chunks of 10 tokens. Each gap is the sum of its window's 10 decode steps as the
    pricer prices them (context 513 + j at step j), so the median ITL is the middle window,
    ~10 decode steps, while TPOT is the mean step: (E2EL − TTFT) / 30. The first token
    waits for the next window's host work, per_seq_s of its one sequence longer than the last
    chunk (capsim/engine/first_token.py), so the client's first gap is that much shorter than
    its window and the gaps add up to E2EL − TTFT exactly."""
    loaded = load(scenario({**V06, "num_scheduler_steps": 10}))
    run = loaded.runs[0]
    result = simulate(run, trace_of([(0.0, 512, 31)]))
    pricer = run.pool().pricer(run.model)
    step_s = [pricer.cost(decode_seqs=1, decode_ctx_tokens=513 + j).seconds for j in range(30)]
    windows_s = [sum(step_s[w * 10:(w + 1) * 10]) for w in range(3)]
    seq_s = run.pool().preset.host_overhead.per_seq_s
    assert seq_s == pytest.approx(41.1e-6, rel=1e-12)       # the vllm-0.6 preset's
    gaps_s = [windows_s[0] - seq_s, *windows_s[1:]]
    assert np.asarray(result.itl.gap_s) == pytest.approx(gaps_s, rel=1e-12)
    assert np.asarray(result.itl.count).tolist() == [1, 1, 1]
    req = result.requests
    assert sum(gaps_s) == pytest.approx(req.finish_s[0] - req.first_token_s[0], rel=1e-12)
    row = summarize(result, loaded.spec.slo)[0]
    assert row.itl_p50_ms == pytest.approx(windows_s[1] * 1e3, rel=1e-12)
    assert row.itl_max_ms == pytest.approx(max(gaps_s) * 1e3, rel=1e-12)
    assert row.tpot_p50_ms == pytest.approx((sum(step_s) - seq_s) / 30 * 1e3, rel=1e-9)
    assert row.itl_p50_ms == pytest.approx(10 * row.tpot_p50_ms, rel=0.01)


@pytest.mark.parametrize("steps", [1, 10])
def test_ttft_tpot_itl_e2el_agree_per_request(scenario, steps, monkeypatch):
    """Under load, with prompts waiting for windows: each request's chunk gaps add up to its
    E2EL − TTFT (Σ over requests = Σ of the recorded gaps), its TPOT never exceeds its
    largest gap, and with windows of 10 the median gap is a window (several decode steps:
    above 5 × TPOT) where one step streams a token per gap (ITL ≈ TPOT). A first token
    waits for the next step's host work (capsim/engine/first_token.py), at least its own
    sequence's per_seq_s longer than the last chunk's constant delay; the engine's steps and
    E2EL are as without that wait, and its first gap, timed at the client as ``vllm bench
    serve`` does, is shorter by it: the recorded gaps add up to those without the wait less
    Σ waits, and to Σ (E2EL − TTFT) exactly."""
    loaded = load(scenario({**V06, "num_scheduler_steps": steps}))
    trace = build(loaded.spec.workload, loaded.spec.seed, loaded.base_dir)
    result = simulate(loaded.runs[0], trace)
    df = request_frame(result)
    with monkeypatch.context() as mp:
        mp.setattr(FirstTokenDelay, "of", classmethod(lambda cls, pool, pricer: None))
        flat_result = simulate(loaded.runs[0], trace)
        flat = request_frame(flat_result)
    waited_ms = df["ttft_ms"] - flat["ttft_ms"]
    assert (df["e2el_ms"] == flat["e2el_ms"]).all()
    seq_ms = loaded.runs[0].pool().preset.host_overhead.per_seq_s * 1e3
    assert (waited_ms[df["output_tokens"] > 1] >= seq_ms - 1e-9).all()
    done = df[(df["status"] == "finished") & (df["output_tokens"] > 1)]
    assert len(done) > 140
    assert (done["tpot_ms"] <= done["max_itl_ms"] + 1e-9).all()
    gaps_ms = np.asarray(result.itl.gap_s) * 1e3
    counts = np.asarray(result.itl.count, np.int64)
    assert (done["e2el_ms"] - done["ttft_ms"]).sum() == pytest.approx(
        float((gaps_ms * counts).sum()), rel=1e-12)
    flat_gaps_ms = np.asarray(flat_result.itl.gap_s) * 1e3
    flat_counts = np.asarray(flat_result.itl.count, np.int64)
    assert counts.sum() == flat_counts.sum()
    assert float((flat_gaps_ms * flat_counts).sum()) - waited_ms[done.index].sum() == \
        pytest.approx(float((gaps_ms * counts).sum()), rel=1e-12)
    assert (df["max_itl_ms"] <= flat["max_itl_ms"] + 1e-9).all()
    row = summarize(result, loaded.spec.slo)[0]
    if steps == 1:
        assert counts.sum() == (done["output_tokens"] - 1).sum()
        assert row.itl_p50_ms < 1.5 * row.tpot_p50_ms
    else:
        assert counts.sum() < 0.15 * (done["output_tokens"] - 1).sum()
        assert row.itl_p50_ms > 5 * row.tpot_p50_ms


def test_a_failure_mid_window_loses_the_unstreamed_tokens(tmp_path, write_scenario):
    """A replica that fails mid-window never streamed that window's tokens: the lost gaps the
    fleet counts are the streamed ones (the run's gap invariant, checked inside simulate,
    holds), and every request still finishes on a retry."""
    doc = {"name": "f", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {**V06, "num_scheduler_steps": 10, "max_num_seqs": 32},
           "cluster": {"num_replicas": 2, "failures": {
               "at": [{"replica": 0, "at_s": 30.05, "repair_s": 20}]}},
           "workload": {"duration_s": 60, "arrival": {"process": "poisson", "rate_per_s": 6},
                        "classes": [{"name": "chat", "weight": 1,
                                     "prompt_tokens": {"dist": "uniform", "min": 100,
                                                       "max": 1500},
                                     "output_tokens": {"dist": "uniform", "min": 50,
                                                       "max": 300}}]}}
    run = load(write_scenario(tmp_path, doc)).runs[0]
    result = simulate(run, build(run.workload, run.seed, tmp_path))
    assert result.fleet.retried_requests > 0
    assert (np.asarray(result.requests.status) == "finished").all()


def test_the_engine_label_says_itl_is_per_chunk(scenario):
    """The label the terminal and the report print beside a variant's figures."""
    label = load(scenario({**V06, "num_scheduler_steps": 10})).runs[0].pool().engine_label
    assert label == "vllm-0.6 (vLLM 0.6.0), num_scheduler_steps 10 (ITL per chunk of up to " \
                    "10 tokens)"
    assert load(scenario(V06)).runs[0].pool().engine_label == "vllm-0.6 (vLLM 0.6.0)"


@pytest.mark.parametrize("output", [31, 5])
def test_a_split_decode_pool_streams_token_2_with_its_window(disagg_scenario, disagg, trace_of,
                                                             output):
    """Disaggregated, the decode pool running windows of 10: token 2 reaches the client with
    the first chunk, at the window's end (token 1 + the first recorded gap), or with the
    last chunk when the reply ends inside that window (5 tokens: at its finish)."""
    path = disagg_scenario([{"name": "split", "disaggregation": disagg(1, 1)}],
                           engine={**V06, "num_scheduler_steps": 10})
    run = load(path).runs[0]
    result = simulate(run, trace_of([(0.0, 512, output)]))
    second = result.disagg.transfers.second_token_s[0]
    req = result.requests
    if output == 31:
        assert second == pytest.approx(req.first_token_s[0] + result.itl.gap_s[0], rel=1e-12)
        assert second < req.finish_s[0]
    else:
        assert second == req.finish_s[0]
        assert np.asarray(result.itl.count).tolist() == [1]
