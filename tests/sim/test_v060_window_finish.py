"""vLLM 0.6.0's output path under multi-step windows: a request that finishes inside a window
streams its last chunk when the engine's event loop next wakes, at the window's end or when a
new request arrives, not at its own step (the vllm-0.6 preset's
``host_overhead.outputs_wait_step_return``; code reading of the v0.6.0 wheel: vllm/engine/
async_llm_engine.py ``AsyncStream.put`` from the executor thread of vllm/utils.py
``make_async``, vllm/worker/multi_step_model_runner.py ``_final_process_outputs``;
capsim/engine/window_decode_set.py). Nothing is fitted: the times are the run's own steps and
the preset's output delay (``per_step_s`` with the TP term, fitted to the
step_vllm_perfbench latency cases: the preset's sources)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from capsim.profiles.engines import load_engine_preset
from capsim.scenario.load import load
from capsim.sim.simulate import simulate

ENGINES = Path(__file__).parents[2] / "capsim" / "profiles" / "data" / "engines"
V06 = {"preset": "vllm-0.6", "max_model_len": 4096, "enable_chunked_prefill": False,
       "num_scheduler_steps": 10}
# Two 512-token prompts at t = 0, prefilled in one step, then windows of 10 decode steps:
# request 0's 25th token is decode step 24 (window 3's 4th step), request 1's 31st is step 30,
# the last of window 3.
TWO = [(0.0, 512, 25), (0.0, 512, 31)]


@pytest.fixture
def run_of(tmp_path, write_scenario):
    """``run_of(hold=True, **engine)`` → the Llama-3.1-8B / H100 run with the vllm-0.6 preset
    (``hold`` False: a copy of it with ``outputs_wait_step_return`` off)."""
    def make(hold: bool = True, **engine):
        eng = {**V06, **engine}
        if not hold:
            doc = yaml.safe_load((ENGINES / "vllm-0.6.yaml").read_text())
            doc["name"] = "vllm-0.6-callback"
            doc["host_overhead"]["outputs_wait_step_return"] = False
            (tmp_path / "callback.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            eng["preset"] = "callback.yaml"
        doc = {"name": "w", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": eng,
               "workload": {"num_requests": 2,
                            "arrival": {"process": "poisson", "rate_per_s": 1},
                            "classes": [{"name": "chat", "weight": 1,
                                         "prompt_tokens": {"dist": "fixed", "value": 512},
                                         "output_tokens": {"dist": "fixed", "value": 25}}]}}
        name = f"s{len(list(tmp_path.iterdir()))}.yaml"
        return load(write_scenario(tmp_path, doc, name=name)).runs[0]
    return make


def _times(run, trace):
    req = simulate(run, trace).requests
    return np.asarray(req.first_token_s), np.asarray(req.finish_s)


def test_only_the_vllm_0_6_0_preset_holds_window_finishes(run_of):
    """The vllm-0.6 preset (vLLM 0.6.0) holds them under windows; without windows, or with
    vllm-0.6.4 (0.6.2's MQLLMEngine sends from the callback), nothing is held."""
    assert load_engine_preset("vllm-0.6").host_overhead.outputs_wait_step_return is True
    assert load_engine_preset("vllm-0.6.4").host_overhead.outputs_wait_step_return is False
    assert run_of().pool().holds_window_finishes is True
    assert run_of(num_scheduler_steps=1).pool().holds_window_finishes is False
    assert run_of(preset="vllm-0.6.4").pool().holds_window_finishes is False
    assert run_of(hold=False).pool().holds_window_finishes is False


def test_a_finish_inside_a_window_streams_at_the_window_end(run_of, trace_of):
    """Request 0 ends at window 3's 4th step. With vLLM 0.6.0's path its last chunk leaves
    when that window's last step returns: at the end of step 30, exactly ``output_delay_s``
    before request 1's last chunk (which, computed at the window's last step, waits for the
    next step's callback as every chunk does). Through the callback (the flag off) it left
    at its own step, 6 decode steps earlier. The engine's steps are the same either way:
    request 1 finishes at the same time and both first tokens are unchanged."""
    run = run_of()
    delay_s = run.pool().output_delay_s
    assert delay_s == pytest.approx(load_engine_preset("vllm-0.6").host_overhead.per_step_s,
                                    rel=1e-12)                      # 0.7212 ms at TP 1
    first, finish = _times(run, trace_of(TWO))
    first_cb, finish_cb = _times(run_of(hold=False), trace_of(TWO))
    assert finish[0] == pytest.approx(finish[1] - delay_s, rel=1e-12)
    assert finish[1] == finish_cb[1]
    assert (first == first_cb).all()
    step_s = run.pool().pricer(run.model).cost(decode_seqs=2, decode_ctx_tokens=2 * 537).seconds
    assert finish[0] - finish_cb[0] == pytest.approx(6 * step_s - delay_s, rel=0.01)


def test_an_arrival_wakes_the_loop_and_releases_it(run_of, trace_of):
    """A third request arriving between request 0's last step (+ the output delay) and the
    window's end wakes vLLM's loop (its ZMQ message): request 0's last chunk leaves at that
    arrival. One arriving before its step's end + the output delay cannot hurry it: it
    leaves as it would through the callback. The newcomer waits for the window's end
    either way, so requests 0 and 1's steps are unchanged."""
    _, finish_cb = _times(run_of(hold=False), trace_of(TWO))
    _, finish = _times(run_of(), trace_of(TWO))
    step_end_plus_delay, window_end = finish_cb[0], finish[0]
    mid = (step_end_plus_delay + window_end) / 2
    _, woken = _times(run_of(), trace_of([*TWO, (mid, 64, 8)]))
    assert woken[0] == mid
    assert woken[1] == finish[1]
    early = step_end_plus_delay - 1e-4          # after step 24's end, before + output delay
    _, early_fin = _times(run_of(), trace_of([*TWO, (early, 64, 8)]))
    assert early_fin[0] == pytest.approx(step_end_plus_delay, rel=1e-12)


def test_a_window_left_by_all_its_members_streams_at_once(run_of, trace_of):
    """A lone request ending inside a window leaves the window empty: capsim runs no steps of
    ghosts alone, so the window ends there and its last chunk streams at its step, as
    through the callback."""
    _, finish = _times(run_of(), trace_of([(0.0, 512, 25)]))
    _, finish_cb = _times(run_of(hold=False), trace_of([(0.0, 512, 25)]))
    assert finish[0] == finish_cb[0]
