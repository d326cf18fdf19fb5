"""TensorRT-LLM's batch waiting (``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio``)
with the values InferenceX gives trtllm-serve for DeepSeek-R1 1k/1k at 64 or more in flight
(SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_b200_trt.sh at 2fc18b759: 40 and
0.8, ``max_num_tokens`` 8192, so contexts run once prompts + decode tokens reach 6,553.6).
The rule is TensorRT-LLM's (tensorrt_llm/_torch/pyexecutor/py_executor.py at 0004396,
``enable_batch_waiting``; module capsim.engine.scheduler.trtllm); the model here is
Llama-3.1-8B on one H100 with 1,000-token prompts, so only the scheduler's counts matter."""

from __future__ import annotations

import copy

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler import make_kv, make_scheduler
from capsim.scenario.load import load
from support.steps import batch, step

DOC = {"name": "wait", "model": "llama-3.1-8b", "hardware": "h100-sxm",
       "engine": {"preset": "trtllm", "max_num_batched_tokens": 8192},
       "workload": {"num_requests": 1, "arrival": {"process": "constant", "rate_per_s": 1},
                    "classes": [{"name": "c", "weight": 1,
                                 "prompt_tokens": {"dist": "fixed", "value": 1000},
                                 "output_tokens": {"dist": "fixed", "value": 1000}}]}}
INFERENCEX = {"batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8}


def _scheduler(tmp_path, write_scenario, **engine):
    doc = copy.deepcopy(DOC)
    doc["engine"].update(engine)
    pool = load(write_scenario(tmp_path, doc)).runs[0].pool()
    alloc = make_kv(pool.engine, pool.kv.num_gpu_blocks)
    return make_scheduler(pool.engine, alloc, 0, 1, ItlRecorder(),
                          knobs=pool.preset.scheduler.knobs)


def _two_decoding(sched):
    """Requests 0 and 1 prefill together at t 0 (no decodes yet: nothing waits)."""
    for rid in (0, 1):
        sched.add(Request(rid, 0, 0.0, 1000, 1000))
    assert batch(step(sched, 0.0)) == ([(0, 1000), (1, 1000)], 0)


def test_a_lone_context_waits_40_iterations_beside_the_decodes(tmp_path, write_scenario):
    """1,000 prompt + 2 decode tokens < 6,553.6: request 2 waits 40 decode-only steps and
    runs in the 41st."""
    sched = _scheduler(tmp_path, write_scenario, **INFERENCEX)
    _two_decoding(sched)
    sched.add(Request(2, 0, 1.0, 1000, 1000))
    held = [batch(step(sched, 1.0 + k)) for k in range(40)]
    assert held == [([], 2)] * 40
    assert batch(step(sched, 41.0)) == ([(2, 1000)], 2)


def test_seven_prompts_reach_the_token_share_at_once(tmp_path, write_scenario):
    """7 x 1,000 + 2 = 7,002 >= 6,553.6: all seven run in the first step; six (6,002) wait."""
    sched = _scheduler(tmp_path, write_scenario, **INFERENCEX)
    _two_decoding(sched)
    for rid in range(2, 9):
        sched.add(Request(rid, 0, 1.0, 1000, 1000))
    assert batch(step(sched, 1.0)) == ([(rid, 1000) for rid in range(2, 9)], 2)
    sched = _scheduler(tmp_path, write_scenario, **INFERENCEX)
    _two_decoding(sched)
    for rid in range(2, 8):
        sched.add(Request(rid, 0, 1.0, 1000, 1000))
    assert batch(step(sched, 1.0)) == ([], 2)


def test_the_count_restarts_after_the_contexts_run(tmp_path, write_scenario):
    """After the 41st step lets request 2 run, request 3 waits 40 steps of its own."""
    sched = _scheduler(tmp_path, write_scenario, **INFERENCEX)
    _two_decoding(sched)
    sched.add(Request(2, 0, 1.0, 1000, 1000))
    for k in range(41):
        step(sched, 1.0 + k)
    sched.add(Request(3, 0, 42.0, 1000, 1000))
    held = [batch(step(sched, 42.0 + k)) for k in range(40)]
    assert held == [([], 3)] * 40
    assert batch(step(sched, 82.0)) == ([(3, 1000)], 3)


def test_off_by_default_as_in_trtllm_serve(tmp_path, write_scenario):
    """The preset's knobs are TensorRT-LLM's defaults (0 and 0): a context runs beside the
    decodes in the next step."""
    sched = _scheduler(tmp_path, write_scenario)
    _two_decoding(sched)
    sched.add(Request(2, 0, 1.0, 1000, 1000))
    assert batch(step(sched, 1.0)) == ([(2, 1000)], 2)


def test_timeout_zero_never_waits(tmp_path, write_scenario):
    """batch_wait_timeout_iters 0 with a ratio: the iteration count already meets the
    timeout, so TensorRT-LLM's rule lets every context run at once."""
    sched = _scheduler(tmp_path, write_scenario, batch_wait_timeout_iters=0,
                       batch_wait_max_tokens_ratio=0.8)
    _two_decoding(sched)
    sched.add(Request(2, 0, 1.0, 1000, 1000))
    assert batch(step(sched, 1.0)) == ([(2, 1000)], 2)
