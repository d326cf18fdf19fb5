"""Priority classes: vLLM's scheduling_policy priority (waiting order and preemption by
priority, vllm/v1/core/sched/scheduler.py at 6cf7b26) driven step by step, and the
gateway's saturation detector that drops sheddable requests (Gateway API Inference
Extension's utilization detector, llm-d-inference-scheduler at 520af47)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.router import RouterGate, pool_saturation
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.results.model import SHED, reject_kind
from capsim.scenario.routing import SaturationConfig
from support.steps import batch, step


def _sched(num_blocks=1000, max_num_seqs=64, by_priority=True):
    alloc = BlockAllocator(num_blocks, 16)
    return ContinuousScheduler(max_num_seqs=max_num_seqs, max_num_batched_tokens=4096,
                               chunked=True, allocator=alloc, num_classes=1,
                               itl=ItlRecorder(), priority_scheduling=by_priority)


def _req(rid, priority, arrival, prompt=64, out=8):
    r = Request(rid, 0, arrival, prompt, out)
    r.priority = priority
    return r


def test_the_waiting_queue_is_in_priority_then_arrival_order():
    sched = _sched()
    for rid, prio, t in ((0, 1, 0.0), (1, 0, 0.1), (2, 1, 0.2), (3, 0, 0.3), (4, -1, 0.4)):
        sched.add(_req(rid, prio, t))
    assert [r.rid for r in sched.waiting] == [4, 1, 3, 0, 2]
    fcfs = _sched(by_priority=False)
    for rid, prio, t in ((0, 1, 0.0), (1, 0, 0.1)):
        fcfs.add(_req(rid, prio, t))
    assert [r.rid for r in fcfs.waiting] == [0, 1]


def test_only_two_fit_and_the_higher_priority_ones_go_first():
    """max_num_seqs 2: of three waiting requests the two of priority 0 are admitted even
    though the priority-1 one arrived first."""
    sched = _sched(max_num_seqs=2)
    sched.add(_req(0, 1, 0.0))
    sched.add(_req(1, 0, 0.1))
    sched.add(_req(2, 0, 0.2))
    assert batch(step(sched, 1.0)) == ([(1, 64), (2, 64)], 0)


def test_a_preemption_takes_the_lowest_priority_latest_arrival():
    """vLLM: max(running, key=(priority, arrival_time)); FCFS would take the newest."""
    sched = _sched()
    reqs = [_req(0, 0, 0.0), _req(1, 2, 0.1), _req(2, 2, 0.2), _req(3, 1, 0.3)]
    for r in reqs:
        sched.add(r)
    step(sched, 1.0)
    assert sched._victim() is reqs[2]
    fcfs = _sched(by_priority=False)
    for r in [_req(0, 0, 0.0), _req(1, 2, 0.1), _req(2, 2, 0.2), _req(3, 1, 0.3)]:
        fcfs.add(r)
    step(fcfs, 1.0)
    assert fcfs._victim().rid == 3
    sched._preempt(reqs[2])
    sched.add(_req(4, 2, 0.5))
    assert [r.rid for r in sched.waiting] == [2, 4]      # back by its arrival, not at the front


def _rep(waiting, used, blocks=100):
    return SimpleNamespace(num_waiting=waiting, kv_load=lambda: (used, 0),
                           alloc=SimpleNamespace(num_blocks=blocks))


def test_pool_saturation_is_the_mean_of_each_replicas_worst_ratio():
    """Defaults 5 waiting, 0.8 KV use: replica 0 max(10/5, 40/80) = 2, replica 1
    max(0/5, 60/80) = 0.75: mean 1.375, saturated; no replica serving: inf."""
    sat = SaturationConfig()
    assert pool_saturation([_rep(10, 40), _rep(0, 60)], sat) == (2 + 0.75) / 2
    assert pool_saturation([_rep(2, 40), _rep(0, 60)], sat) == (0.5 + 0.75) / 2
    assert math.isinf(pool_saturation([], sat))


def test_the_gate_drops_only_sheddable_classes_and_only_when_saturated():
    gate = RouterGate(None, None, 0.0, SaturationConfig(), sheddable=(False, True))
    busy, calm = [_rep(10, 90)], [_rep(1, 10)]
    assert gate.refusal(0.0, busy, 0, class_id=0) == ""
    reason = gate.refusal(0.0, busy, 0, class_id=1)
    assert reason.startswith(f"{SHED}: ") and reject_kind(reason) == SHED
    assert gate.refusal(0.0, calm, 0, class_id=1) == ""
