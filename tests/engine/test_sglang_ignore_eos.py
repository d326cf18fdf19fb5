"""SGLang's admission of ``ignore_eos`` requests without the radix cache
(``PrefillAdder.add_one_req_ignore_eos``, python/sglang/srt/managers/schedule_policy.py of the
sglang 0.5.7 wheel; IGNORE_EOS_RESERVE_TOKENS = 1): the requests' remaining outputs are walked
at ratio 1, not charged at ``new_token_ratio``."""

from __future__ import annotations

import pytest

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler.sglang import SglangScheduler
from capsim.engine.scheduler.sglang_ignore_eos import ignore_eos_fits
from capsim.kv.allocator import BlockAllocator
from capsim.scenario.load import load
from capsim.sim.request_source import RequestSource
from capsim.workload import build
from support.steps import batch, step

SGLANG = dict(schedule_conservativeness=1.0, init_new_token_ratio=0.7,
              min_new_token_ratio_factor=0.14, new_token_ratio_decay_steps=600,
              retract_decode_steps=20, clip_max_new_tokens=4096)


def test_the_walk_needs_room_for_every_request_still_running():
    # free 1,000 - extend 100 = 900. Sorted by tokens to generate: (300, 200), (500, 100).
    # First point, 2 running: 900 - 300 x 2 = 300 > 1 x 2; then 900 + 200 - 500 = 600 > 1.
    assert ignore_eos_fits(500, 100, [(300, 200)], 1000, 100, 10**6, 1)
    # (450, 200) first: 900 - 450 x 2 = 0, not above the reserve of 2.
    assert not ignore_eos_fits(500, 100, [(450, 200)], 1000, 100, 10**6, 1)
    # the early exit: the extend alone exceeds the ratio budget left
    assert not ignore_eos_fits(1, 100, [], 1000, 100, 99, 1)
    # requests with nothing left to generate drop out of the walk
    assert ignore_eos_fits(500, 100, [(0, 5000)], 1000, 100, 10**6, 1)


@pytest.mark.parametrize("ignore_eos, admitted", [(False, True), (True, False)])
def test_a_request_the_ratio_admits_waits_when_its_client_ignores_eos(ignore_eos, admitted):
    """200 blocks of 16 = 3,200 tokens. A (16 prompt, 1,600 output) decodes. B alike:
    ratio path: 16 + 1,600 + 16 < 3,168 free - 0.7 x 1,598 (A's charge) -> admitted;
    ignore-EOS walk (A has generated 2): 3,168 - 16 - 1,598 x 2 = -44 <= 2 -> NO_TOKEN."""
    alloc = BlockAllocator(200, 16)
    sched = SglangScheduler(max_num_seqs=64, max_num_batched_tokens=512, chunked=False,
                            allocator=alloc, num_classes=1, itl=ItlRecorder(),
                            ignore_eos_reserve_tokens=1, **SGLANG)
    a, b = Request(0, 0, 0.0, 16, 1600), Request(1, 0, 1.5, 16, 1600)
    a.ignore_eos = b.ignore_eos = ignore_eos
    sched.add(a)
    assert batch(step(sched, 0.0)) == ([(0, 16)], 0)
    assert batch(step(sched, 1.0)) == ([], 1)
    sched.add(b)
    assert batch(step(sched, 2.0)) == (([(1, 16)], 0) if admitted else ([], 1))


def test_a_class_ignore_eos_reaches_its_requests(write_scenario, tmp_path):
    doc = {"name": "eos", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"preset": "sglang-0.5"},
           "workload": {"num_requests": 4, "arrival": {"process": "poisson", "rate_per_s": 1},
                        "classes": [
                            {"name": "bench", "weight": 1, "ignore_eos": True,
                             "prompt_tokens": {"dist": "fixed", "value": 8},
                             "output_tokens": {"dist": "fixed", "value": 8}},
                            {"name": "chat", "weight": 1,
                             "prompt_tokens": {"dist": "fixed", "value": 8},
                             "output_tokens": {"dist": "fixed", "value": 8}}]}}
    (rc,) = load(write_scenario(tmp_path, doc)).runs
    trace = build(rc.workload, rc.seed, tmp_path)
    source = RequestSource(trace, (), tuple(c.ignore_eos for c in rc.workload.classes))
    reqs = [source.root(rid) for rid in range(len(trace))]
    assert {(r.class_id, r.ignore_eos) for r in reqs} <= {(0, True), (1, False)}
    assert {r.ignore_eos for r in reqs} == {True, False}
