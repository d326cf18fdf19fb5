"""SGLang's scheduler with speculation (SglangSpecScheduler): decode steps verify k + 1
tokens per request, room for 2k + 1 tokens each (scheduler.py update_running_batch,
decode_mem_cache_buf_multiplier = num_draft_tokens + topk x num_steps, sglang 0.5.7 wheel),
SGLang's retraction order when it is short, and prefill steps still run alone."""

from __future__ import annotations

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import RUNNING, WAITING, Request
from capsim.engine.scheduler.sglang_spec import SglangSpecScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.scenario.speculative import SpecDecoding
from support.steps import batch, step

SGLANG = dict(schedule_conservativeness=1.0, init_new_token_ratio=0.7,
              min_new_token_ratio_factor=0.14, new_token_ratio_decay_steps=600,
              retract_decode_steps=20, clip_max_new_tokens=4096)


def spec(k: int = 3, alpha: float = 0.0) -> SpecDecoding:
    """MTP with k drafts (k lookahead slots, as SGLang's 2k + 1 per request)."""
    return SpecDecoding(method="mtp", k=k, lookahead_tokens=k, alpha_by_class=(alpha,),
                        draft=None, draft_weight_bytes_per_gpu=0, draft_kv_bytes_per_token=0,
                        seed=0)


def make(num_blocks=1000, k=3, alpha=0.0):
    alloc = BlockAllocator(num_blocks, 16)
    sched = SglangSpecScheduler(spec=spec(k, alpha), max_num_seqs=64,
                                max_num_batched_tokens=512, chunked=False, allocator=alloc,
                                num_classes=1, itl=ItlRecorder(), **SGLANG)
    return sched, alloc


def test_decode_step_verifies_k_plus_1_tokens_per_request():
    """After the prefill step (alone, as SGLang's), each decode step schedules k + 1 = 4
    tokens per request; with alpha 0 each emits one token per step."""
    sched, _ = make()
    a, b = Request(0, 0, 0.0, 100, 50), Request(1, 0, 0.0, 60, 50)
    sched.add(a)
    sched.add(b)
    s = step(sched, 0.0)
    assert batch(s) == ([(0, 100), (1, 60)], 0)
    s = step(sched, 1.0)
    assert s.decode_seqs == 2 and sched.width == 4
    assert a.num_generated == 2 and b.num_generated == 2      # first token + 1 per step


def test_all_drafts_accepted_advance_k_plus_1():
    """alpha -> 1 (0.999999): every draft accepted, 4 tokens per request per step."""
    sched, _ = make(alpha=0.999999)
    a = Request(0, 0, 0.0, 100, 50)
    sched.add(a)
    step(sched, 0.0)
    step(sched, 1.0)
    assert a.num_generated == 1 + 4
    assert sched.emitted_tokens == 4


def test_decoders_hold_room_for_2k_plus_1_tokens():
    """A request at 100 computed tokens holds blocks up to 100 + (k + 1) + k = 107 tokens:
    7 blocks of 16 (SGLang's check_decode_mem of 2k + 1 per request)."""
    sched, alloc = make()
    a = Request(0, 0, 0.0, 100, 50)
    sched.add(a)
    step(sched, 0.0)                       # prefill: 100 tokens, 7 blocks
    free = alloc.num_free_blocks
    step(sched, 1.0)                       # the decode step reserves to 101 + 7 = 108
    assert free - alloc.num_free_blocks == -(-108 // 16) - -(-100 // 16)


def test_short_kv_retracts_in_sglang_order():
    """When the verification room is short, the request with the fewest output tokens is
    retracted to the back of the queue (not the newest preempted, as vLLM's)."""
    sched, alloc = make(num_blocks=60)
    a, b = Request(0, 0, 0.0, 200, 300), Request(1, 0, 0.0, 208, 300)
    sched.add(a)
    step(sched, 0.0)                       # a prefills
    for t in range(1, 4):
        step(sched, float(t))              # a: 4 tokens
    sched.add(b)
    step(sched, 4.0)                       # b prefills 208 tokens: 13 full blocks
    hog = alloc.allocate(alloc.num_free_blocks)
    step(sched, 5.0)
    assert b.state == WAITING and a.state == RUNNING
    assert sched.counters.preemptions == 1
    alloc.free(hog)
