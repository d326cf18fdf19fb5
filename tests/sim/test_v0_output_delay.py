"""vLLM V0's request path around the first token (issue "Fidelity where nothing was fitted",
item 2): from 0.6.0 a step's outputs are streamed during the next step, after that step's
host work (asynchronous output processing: vllm/engine/llm_engine.py ``step`` and
vllm/worker/model_runner.py ``execute_model`` at v0.6.0, 32e7db2), and under multi-step
scheduling a prefill step is a window of its own that schedules and prepares its input alone
(vllm/core/scheduler.py ``_schedule_prefills``). A first token leaves once the next step
reaches the callback: its host work grows with its sequences, and a next step that prefills
launches its eager forward first (capsim/engine/first_token.py). Nothing is fitted: the terms
are the preset's own ``per_step_s`` (with the TP term), ``per_seq_s`` and eager floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from capsim.metrics.summary import request_frame
from capsim.profiles.engines import load_engine_preset
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

ENGINES = Path(__file__).parents[2] / "capsim" / "profiles" / "data" / "engines"
# vllm-0.6's per_step_s and per_extra_tp_worker_s (1.05 / 0.735 ms, fitted to the step_vllm_perfbench
# latency cases: the preset's sources)
_V06 = load_engine_preset("vllm-0.6").host_overhead
V06_STEP_S, V06_TP_WORKER_S = _V06.per_step_s, _V06.per_extra_tp_worker_s


@pytest.fixture
def loaded(tmp_path, write_scenario):
    """``loaded(engine, arrival=None, preset_off=False)`` → the loaded Llama-3.1-8B / H100
    scenario; ``preset_off`` runs a copy of the engine preset without
    ``async_output_proc``."""
    def make(engine: dict, arrival: dict | None = None, preset_off: bool = False, **wl):
        engine = {"max_model_len": 4096, **engine}
        if preset_off:
            doc = yaml.safe_load((ENGINES / f"{engine['preset']}.yaml").read_text())
            doc["host_overhead"]["async_output_proc"] = False
            (tmp_path / "off.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            engine["preset"] = "off.yaml"
        doc = {"name": "v0", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": engine,
               "workload": {"num_requests": 6, **wl,
                            "arrival": arrival or {"process": "poisson", "rate_per_s": 1},
                            "classes": [{"name": "chat", "weight": 1,
                                         "prompt_tokens": {"dist": "fixed", "value": 300},
                                         "output_tokens": {"dist": "fixed", "value": 25}}]}}
        return load(write_scenario(tmp_path, doc, name=f"s{len(list(tmp_path.iterdir()))}.yaml"))
    return make


def _requests(loaded_scenario, trace):
    return request_frame(simulate(loaded_scenario.runs[0], trace))


@pytest.mark.parametrize("tp, delay_s", [(1, V06_STEP_S), (2, V06_STEP_S + V06_TP_WORKER_S),
                                         (4, V06_STEP_S + 3 * V06_TP_WORKER_S)])
def test_the_delay_is_one_step_of_host_work_with_the_tp_term(loaded, tp, delay_s):
    pool = loaded({"preset": "vllm-0.6", "tensor_parallel_size": tp}).runs[0].pool()
    assert pool.output_delay_s == pytest.approx(delay_s, rel=1e-12)


@pytest.mark.parametrize("engine", [
    {"preset": "vllm-0.5"},                                   # outputs processed in series
    {"preset": "vllm-v1"},
    {"preset": "vllm-0.6", "pipeline_parallel_size": 2},      # vLLM turns it off with PP
])
def test_no_delay_where_vllm_has_no_asynchronous_output_processing(loaded, engine):
    assert loaded(engine).runs[0].pool().output_delay_s == 0.0


@pytest.mark.parametrize("preset", ["vllm-0.6", "vllm-0.6.4"])
def test_shipped_v0_6_presets_process_outputs_asynchronously(preset):
    assert load_engine_preset(preset).host_overhead.async_output_proc is True
    assert load_engine_preset("vllm-0.5").host_overhead.async_output_proc is False


def test_every_token_of_a_request_leaves_during_the_next_step(loaded, trace_of):
    """The same requests with and without asynchronous output processing (Llama-3.1-8B, H100,
    TP 1). E2EL grows by the constant delay (per_step_s, 0.72 ms: the last chunk); TTFT by
    the host work of the step after the prefill, up to the callback
    (capsim/engine/first_token.py): request 0's next step is request 1's prefill (one
    sequence, run eagerly: + its 192 launches x 58.9 us = 11.31 ms), 12.07 ms in all;
    request 1's is the decode of both (per_step_s + 2 x per_seq_s, 0.80 ms), request 2's the
    decode of itself alone (0.76 ms). TPOT shrinks by what the first token gained over the
    last, and so does its first gap as the client times it (``vllm bench serve``: between
    chunk arrivals): request 0's, its longest (request 1's prefill inside it), by 11.35 ms;
    requests 1 and 2 keep their longest gaps (later ones). Each request's gaps add up to its
    E2EL − TTFT with and without the wait."""
    trace = trace_of([(0.0, 300, 25), (0.004, 800, 40), (0.5, 100, 10)])
    results = [simulate(ld.runs[0], trace) for ld in (
        loaded({"preset": "vllm-0.6"}), loaded({"preset": "vllm-0.6"}, preset_off=True))]
    on, off = (request_frame(r) for r in results)
    for r, df in zip(results, (on, off)):
        gaps_ms = np.asarray(r.itl.gap_s) * 1e3 @ np.asarray(r.itl.count, np.float64)
        assert gaps_ms == pytest.approx((df["e2el_ms"] - df["ttft_ms"]).sum(), rel=1e-12)
    op_s, seq_s = _V06.eager_prefill_op_s, _V06.per_seq_s
    first_s = np.array([V06_STEP_S + seq_s + 192 * op_s, V06_STEP_S + 2 * seq_s,
                        V06_STEP_S + seq_s])
    assert first_s * 1e3 == pytest.approx([12.0711, 0.8034, 0.7623], abs=1e-4)
    assert np.allclose(on["ttft_ms"] - off["ttft_ms"], first_s * 1e3, rtol=0, atol=1e-9)
    assert np.allclose(on["e2el_ms"] - off["e2el_ms"], V06_STEP_S * 1e3, rtol=0, atol=1e-9)
    gained_ms = (first_s - V06_STEP_S) * 1e3 / (np.array([25, 40, 10]) - 1)
    assert np.allclose(off["tpot_ms"] - on["tpot_ms"], gained_ms, rtol=0, atol=1e-9)
    assert (first_s[0] - V06_STEP_S) * 1e3 == pytest.approx(11.3499, abs=1e-4)
    assert np.allclose(off["max_itl_ms"] - on["max_itl_ms"],
                       [(first_s[0] - V06_STEP_S) * 1e3, 0, 0], rtol=0, atol=1e-9)


def test_multi_step_prefill_pays_the_whole_host_step(loaded, trace_of):
    """Under ``num_scheduler_steps`` 10 a window's decode steps share one step of host work
    (a tenth each of per_step_s + per_seq_s per sequence, once per window), but a prefill is
    scheduled and prepared on its own: its step costs what it costs without multi-step, its
    per-sequence term included, so a lone request's TTFT is the same with windows of 1 and
    of 10."""
    ttft, decode_overhead = {}, {}
    for steps in (1, 10):
        ld = loaded({"preset": "vllm-0.6", "num_scheduler_steps": steps})
        run = ld.runs[0]
        ttft[steps] = float(_requests(ld, trace_of([(0.0, 300, 25)]))["ttft_ms"].iloc[0])
        pricer = run.pool().pricer(run.model)
        decode_overhead[steps] = pricer.cost(decode_seqs=1, decode_ctx_tokens=301).overhead_s
    assert ttft[10] == pytest.approx(ttft[1], rel=1e-12)
    assert decode_overhead[1] - decode_overhead[10] == pytest.approx(
        0.9 * (V06_STEP_S + _V06.per_seq_s), rel=1e-9)


def test_a_closed_loop_user_sends_after_the_reply_reaches_it(loaded):
    """One user, think time 0.2 s: each request is sent 0.2 s after the previous reply
    reached the client (its finish_s, the delay included), not when the engine ended it."""
    ld = loaded({"preset": "vllm-0.6"},
                arrival={"process": "concurrency", "users": 1, "think_time_s": 0.2},
                num_requests=5)
    rc = ld.runs[0]
    r = simulate(rc, build(rc.workload, rc.seed, ld.base_dir)).requests
    assert np.allclose(r.arrival_s[1:], r.finish_s[:-1] + 0.2, rtol=0, atol=1e-12)


def test_a_two_token_reply_gap_is_its_e2el_minus_ttft(loaded, trace_of):
    """Request 0 (2 tokens) waits for request 1's eager prefill before its first token
    leaves (per_step_s + per_seq_s + 192 x 58.9 us = 12.07 ms, the constant 0.72 ms of its
    last token included): its one gap, timed between the two chunks' arrivals, is its
    E2EL − TTFT, 11.35 ms shorter than the engine's gap between the two steps (the run's
    per-request gap invariant, sim/request_log.py, would fail otherwise)."""
    trace = trace_of([(0.0, 300, 2), (0.004, 800, 2)])
    on = simulate(loaded({"preset": "vllm-0.6"}).runs[0], trace)
    off = simulate(loaded({"preset": "vllm-0.6"}, preset_off=True).runs[0], trace)
    r, o = on.requests, off.requests
    wait_s = _V06.per_seq_s + 192 * _V06.eager_prefill_op_s
    assert wait_s * 1e3 == pytest.approx(11.3499, abs=1e-4)
    assert r.max_itl_s[0] == pytest.approx(r.finish_s[0] - r.first_token_s[0], rel=1e-12)
    assert r.max_itl_s[0] == pytest.approx(o.max_itl_s[0] - wait_s, rel=1e-12)
    assert sorted(np.asarray(on.itl.gap_s)) == pytest.approx(
        sorted([r.max_itl_s[0], r.max_itl_s[1]]), rel=1e-12)
