"""SGLang's ``--scheduler-recv-interval`` (the recv skipper): arrivals are taken in once every
N decode steps, at once after a prefill or when idle.

Source: the sglang 0.5.7 wheel, python/sglang/srt/managers/scheduler_recv_skipper.py
(``SchedulerRecvSkipper.handle``), managers/scheduler.py ``recv_requests`` and environ.py
lines 212-215 (weights: decode 1, none 1, any other mode 1000); the preset sglang-0.5
carries the weights in ``scheduler.knobs``.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler.sglang import SglangScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.scenario.load import load
from capsim.workload import build
from support.macro import simulate_both_ways
from support.steps import batch, step

# The preset sglang-0.5's scheduler.knobs (SGLang's environ.py / schedule_policy.py values).
SGLANG = dict(schedule_conservativeness=1.0, init_new_token_ratio=0.7,
              min_new_token_ratio_factor=0.14, new_token_ratio_decay_steps=600,
              retract_decode_steps=20, clip_max_new_tokens=4096)
SKIPPER = dict(SGLANG, recv_weight_decode=1, recv_weight_other=1000)


def make(cls, **knobs):
    alloc = BlockAllocator(1000, 16)
    sched = cls(max_num_seqs=64, max_num_batched_tokens=512, chunked=False,
                allocator=alloc, num_classes=1, itl=ItlRecorder(), **knobs)
    return sched, alloc, None


def add(sched, *specs, t=0.0):
    """Queue requests given as (rid, prompt, output)."""
    for rid, p, o in specs:
        sched.add(Request(rid, 0, t, p, o))


def test_interval_one_has_no_inbox():
    sched, _, _ = make(SglangScheduler, **SGLANG)
    assert sched.inbox is None
    add(sched, (0, 32, 10))
    assert list(sched.waiting)[0].rid == 0


def test_arrivals_wait_for_the_nth_decode_step_and_a_prefill_recvs_at_once():
    sched, _, _ = make(SglangScheduler, scheduler_recv_interval=3, **SKIPPER)
    add(sched, (0, 32, 100))
    assert batch(step(sched, 0.0)) == ([(0, 32)], 0)     # idle: taken in at once
    assert sched._recv_counter == 0
    add(sched, (1, 16, 100), t=0.5)                       # arrives during the prefill
    # the prefill weighs 1000 >= 3: the next schedule takes it in and prefills it
    assert batch(step(sched, 1.0)) == ([(1, 16)], 0)
    assert batch(step(sched, 2.0)) == ([], 2)            # counter 0 + 1000 -> recv, reset
    add(sched, (2, 16, 100), t=2.5)
    # decode steps add 1 each: counter 1, 2 (request 2 waits), then 3 -> recv
    assert batch(step(sched, 3.0)) == ([], 2) and len(sched.inbox) == 1
    assert batch(step(sched, 4.0)) == ([], 2) and len(sched.inbox) == 1
    assert batch(step(sched, 5.0)) == ([(2, 16)], 0) and not sched.inbox
    assert sched.has_work()


def test_an_engine_that_idles_takes_the_inbox_in_at_once():
    sched, _, _ = make(SglangScheduler, scheduler_recv_interval=30, **SKIPPER)
    add(sched, (0, 16, 2))
    step(sched, 0.0)                                      # prefill (first token)
    step(sched, 1.0)                                      # decode: the request ends
    assert not sched.running and step(sched, 2.0) is None
    add(sched, (1, 16, 2), t=3.0)
    assert batch(step(sched, 3.0)) == ([(1, 16)], 0)      # idle spin: no 30-step wait


def test_an_arrival_during_the_last_decode_step_is_taken_when_the_engine_falls_idle():
    """The request arrives while the last running request's final decode step runs (weight 1,
    counter below the interval): the next pass finds nothing to run, and SGLang's idle loop
    takes the inbox in at once instead of leaving the request unread (it was left forever:
    capsim run ended with an InvariantError at intervals of 50 and above)."""
    sched, _, _ = make(SglangScheduler, scheduler_recv_interval=100, **SKIPPER)
    add(sched, (0, 16, 3))
    step(sched, 0.0)                                      # prefill (first token)
    step(sched, 1.0)                                      # decode: counter 1
    add(sched, (1, 16, 2), t=1.5)                         # arrives during the last decode
    step(sched, 2.0)                                      # decode: request 0 ends
    assert not sched.running and len(sched.inbox) == 1
    assert batch(step(sched, 3.0)) == ([(1, 16)], 0) and not sched.inbox


def test_a_decode_run_counts_its_steps_modulo_the_interval():
    sched, _, _ = make(SglangScheduler, scheduler_recv_interval=4, **SKIPPER)
    sched._recv_counter = 1
    sched._advance_recv(2)                                # 1 -> 3, no reset
    assert sched._recv_counter == 3
    sched._advance_recv(1)                                # 3 -> 4: reset to 0
    assert sched._recv_counter == 0
    sched._advance_recv(11)                               # two resets (4, 8), then 3
    assert sched._recv_counter == 3


def _doc(interval, preset="sglang-0.5"):
    return {"name": "recv", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "engine": {"preset": preset, "max_model_len": 4096, "kv_cache_memory_gib": 4.0,
                       "scheduler_recv_interval": interval},
            "workload": {"num_requests": 120,
                         "arrival": {"process": "concurrency", "users": 16,
                                     "think_time_s": 0.0},
                         "classes": [{"name": "r", "weight": 1,
                                      "prompt_tokens": {"dist": "uniform", "min": 200,
                                                        "max": 1000},
                                      "output_tokens": {"dist": "uniform", "min": 50,
                                                        "max": 300}}]}}


def test_recv_interval_delays_first_tokens_and_macro_steps_change_nothing(
        write_scenario, tmp_path):
    """A closed loop of 16: with an interval of 30 decode steps an arrival waits for the
    next recv (up to 30 steps), so TTFT grows; prefills come in fewer, larger batches."""
    ttft = {}
    for interval in (1, 30):
        (rc,) = load(write_scenario(tmp_path, _doc(interval))).runs
        ref = simulate_both_ways(rc, build(rc.workload, rc.seed, tmp_path))
        assert (np.asarray(ref.requests.status) == "finished").all()
        req = ref.requests
        ttft[interval] = float(np.mean(np.asarray(req.first_token_s) - np.asarray(req.arrival_s)))
    assert ttft[30] > 2 * ttft[1]


def test_recv_interval_is_refused_without_the_skipper(write_scenario, tmp_path):
    with pytest.raises(ScenarioError, match="scheduler_recv_interval") as err:
        load(write_scenario(tmp_path, _doc(10, preset="sglang-0.3")))
    assert "valid: 1, or a preset that has it: sglang, sglang-0.5" in str(err.value)
    with pytest.raises(ScenarioError, match="belongs to the sglang scheduler"):
        load(write_scenario(tmp_path, _doc(10, preset="vllm-v1")))
