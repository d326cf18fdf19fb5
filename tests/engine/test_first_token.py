"""A first token under vLLM V0's asynchronous output processing leaves when the next step
reaches the callback (capsim/engine/first_token.py): after that step's host work for its
sequences and, if it prefills, its eager launches (vllm/worker/model_runner.py
``execute_model``, 0.6.0 sdist: the callback after the forward and logits are launched)."""

from __future__ import annotations

import pytest

from capsim.engine.first_token import FirstTokenDelay
from capsim.profiles.engines import load_engine_preset
from capsim.scenario.load import load


@pytest.fixture
def pool(tmp_path, write_scenario):
    def make(engine: dict):
        doc = {"name": "ft", "seed": 1, "model": "llama-3.1-70b", "hardware": "h100-sxm",
               "engine": {"max_model_len": 4096, "tensor_parallel_size": 4, **engine},
               "workload": {"num_requests": 2, "arrival": {"process": "poisson",
                                                           "rate_per_s": 1},
                            "classes": [{"name": "c", "weight": 1,
                                         "prompt_tokens": {"dist": "fixed", "value": 64},
                                         "output_tokens": {"dist": "fixed", "value": 8}}]}}
        run = load(write_scenario(tmp_path, doc)).runs[0]
        return run.pool(), run.pool().pricer(run.model)
    return make


def test_next_step_host_work_and_eager_launches_at_tp4(pool):
    """vllm-0.6.4, Llama-3.1-70B TP 4 on H100: per_step_s 0.7212 ms + 3 x 0.735 ms + 41.1 us
    per sequence, 3.337 ms for a next step of 10; a next step that prefills adds its 642
    launches x 58.9 us = 37.81 ms (the preset's sources; nothing fitted here)."""
    p, pricer = pool({"preset": "vllm-0.6.4"})
    delay = FirstTokenDelay.of(p, pricer)
    host = load_engine_preset("vllm-0.6.4").host_overhead
    assert delay.seconds(10, 0) == pytest.approx(
        host.per_step_s + 3 * host.per_extra_tp_worker_s + 10 * host.per_seq_s, rel=1e-12)
    assert delay.seconds(10, 0) == pytest.approx(3.3372e-3, abs=1e-7)
    assert delay.seconds(1, 64) - delay.seconds(1, 0) == pytest.approx(37.81e-3, abs=0.01e-3)


def test_vllm_0_6_grows_with_the_next_steps_sequences(pool):
    """vllm-0.6 at TP 4: 0.7212 ms + 3 x 0.735 ms + 41.1 us per sequence of the next step,
    unspread over a multi-step window (its first step schedules and prepares the whole
    window); the last chunk's constant is the step term alone."""
    for steps in (1, 10):
        p, pricer = pool({"preset": "vllm-0.6", "num_scheduler_steps": steps})
        delay = FirstTokenDelay.of(p, pricer)
        assert delay.seconds(17, 0) == pytest.approx(2.9262e-3 + 17 * 41.1e-6, rel=1e-9)
        assert delay.base_s == pytest.approx(2.9262e-3, rel=1e-12)


@pytest.mark.parametrize("engine", [{"preset": "vllm-0.5"}, {"preset": "vllm-v1"},
                                    {"preset": "sglang-0.5"}])
def test_none_without_asynchronous_output_processing(pool, engine):
    assert FirstTokenDelay.of(*pool(engine)) is None
