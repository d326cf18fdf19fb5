"""Prefix caching under SGLang's and TensorRT-LLM's own policies, driven step by step (no
SimPy) with batches and block counts checked by hand.

Requests share a system prompt as the workload describes it (``shared_prefix``): segments
(PREFIX, template, n) + (USER, rid, m); two requests hold identical tokens only inside the
shared prompt, so a block that straddles its end is never shared."""

from __future__ import annotations

import numpy as np

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import FINISHED, RUNNING, WAITING, Request
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.sglang import SglangScheduler
from capsim.engine.scheduler.trtllm import TrtllmMaxUtilizationScheduler, TrtllmScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.kv.prefix import PREFIX, USER
from support.macro import simulate_both_ways
from support.steps import batch, step

SGLANG = dict(schedule_conservativeness=1.0, init_new_token_ratio=0.7,
              min_new_token_ratio_factor=0.14, new_token_ratio_decay_steps=600,
              retract_decode_steps=20, clip_max_new_tokens=4096)


def make(cls, num_blocks=1000, block_size=16, budget=4096, max_num_seqs=64, chunked=False,
         caching=True, **knobs):
    alloc = BlockAllocator(num_blocks, block_size, enable_caching=caching)
    sched = cls(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, chunked=chunked,
                allocator=alloc, num_classes=1, itl=ItlRecorder(), **knobs)
    return sched, alloc


def shared(sched, rid, prefix, own, output, t=0.0, template=7):
    """Queue a request whose prompt is the shared system prompt ``template`` of ``prefix``
    tokens followed by ``own`` tokens of its own."""
    req = Request(rid, 0, t, prefix + own, output, ((PREFIX, template, prefix), (USER, rid, own)))
    sched.add(req)
    return req


def private(sched, rid, prompt, output, t=0.0):
    req = Request(rid, 0, t, prompt, output)
    sched.add(req)
    return req


# ------------------------------------------------------------------------- SGLang


def test_sglang_second_request_takes_the_cached_prefix_and_extends_the_rest():
    """300 shared + 40 own tokens in 16-token blocks: 18 full blocks (288 tokens) lie inside
    the shared prompt. SGLang inserts a prompt into its radix tree after its prefill, so a
    request arriving later matches it and extends only 340 − 288 = 52 tokens (SGLang would
    match all 300 tokens: capsim rounds hits down to whole blocks)."""
    sched, alloc = make(SglangScheduler, **SGLANG)
    a = shared(sched, 0, 300, 40, 50)
    assert batch(step(sched, 0.0)) == ([(0, 340)], 0)
    assert alloc.num_used_blocks == 22
    b = shared(sched, 1, 300, 40, 50, t=1.0)
    s = step(sched, 1.0)
    assert batch(s) == ([(1, 52)], 0)                  # prefill first: a's decode waits
    assert s.prefill_kv_tokens == 340                  # attends over the cached 288
    assert b.blocks[:18] == a.blocks[:18] and alloc.num_used_blocks == 22 + 4
    assert (sched.counters.prefix_hit_tokens, sched.counters.prefix_queried_tokens) == (288, 680)
    assert batch(step(sched, 2.0)) == ([], 2)


def test_sglang_same_prefill_batch_computes_the_prefix_twice_vllm_shares_it():
    """Two requests admitted in the same prefill batch: SGLang (fcfs) inserts neither
    before the forward, so both compute the whole prompt; vLLM v1 caches blocks as it
    schedules them and the second one hits the first one's 18 blocks in the same step."""
    sched, _ = make(SglangScheduler, **SGLANG)
    shared(sched, 0, 300, 40, 5)
    shared(sched, 1, 300, 40, 5)
    assert batch(step(sched, 0.0)) == ([(0, 340), (1, 340)], 0)
    vllm, _ = make(ContinuousScheduler, chunked=True)
    shared(vllm, 0, 300, 40, 5)
    shared(vllm, 1, 300, 40, 5)
    assert batch(step(vllm, 0.0)) == ([(0, 340), (1, 52)], 0)


def test_sglang_a_cached_prefix_nobody_holds_counts_once_against_free_memory():
    """``_lock_node``: the matched prefix is pinned while the budget is checked, so the part
    of it on the free queue leaves the free tokens. 60 blocks of 16; c (16 + 200 output)
    runs and holds 1 block; a (300 + 40, one token) has finished: its 18 prefix blocks are
    cached but free. b extends 52 tokens: it is admitted iff 52 + X + 16 < 59 × 16 − 288 −
    0.7 × 199 = 516.7, i.e. X ≤ 448 (without the pin the bound would be 804.7)."""
    for output, admitted in ((448, True), (449, False)):
        sched, alloc = make(SglangScheduler, num_blocks=60, **SGLANG)
        private(sched, 0, 16, 200)
        a = shared(sched, 1, 300, 40, 1)
        assert batch(step(sched, 0.0)) == ([(0, 16), (1, 340)], 0)
        assert a.state == FINISHED and alloc.num_used_blocks == 1
        b = shared(sched, 2, 300, 40, output, t=1.0)
        s = step(sched, 1.0)
        if admitted:
            assert batch(s) == ([(2, 52)], 0) and alloc.num_used_blocks == 1 + 18 + 4
        else:
            assert batch(s) == ([], 1) and b.state == WAITING and sched.batch_full


def test_sglang_full_pool_evicts_the_least_recently_freed_cached_blocks_first():
    """40 blocks of 16. a (300 + 40, one token) ends: its 22 blocks go back to the free
    queue last block first, 21 of them cached. d (480 tokens, 30 blocks) takes the 18
    never-used blocks, then a's last 12: its partial block and 11 cached ones (the leaves
    of the prompt, as SGLang evicts leaves first). b then reuses the 10 blocks left (160
    tokens) and extends 180."""
    sched, alloc = make(SglangScheduler, num_blocks=40, **SGLANG)
    a = shared(sched, 0, 300, 40, 1)
    step(sched, 0.0)
    assert a.state == FINISHED and alloc.num_free_blocks == 40
    private(sched, 1, 480, 1, t=1.0)
    step(sched, 1.0)
    assert alloc.num_evictions == 11
    shared(sched, 2, 300, 40, 5, t=2.0)
    assert batch(step(sched, 2.0)) == ([(2, 180)], 0)
    assert sched.counters.prefix_hit_tokens == 160


def test_sglang_retracted_request_reuses_what_its_prefill_cached():
    """A retracted request's output is released without being inserted (``release_req``);
    its prompt was inserted after its prefill. b (40 tokens of its own) is retracted at
    its 10th token, when its KV (48 tokens) needs a 4th block: its recompute of 40 + 9
    tokens hits the prompt's 2 full blocks (32 tokens) and extends 17, although it shares
    nothing with anyone. (vLLM keeps every computed full block cached.)"""
    sched, alloc = make(SglangScheduler, num_blocks=100, **SGLANG)
    a = private(sched, 0, 64, 100)
    for t in range(5):
        step(sched, float(t))
    b = private(sched, 1, 40, 100, t=5.0)
    for t in range(5, 14):                                # b's prefill, then 8 decodes
        step(sched, float(t))
    sched.sync()
    assert (b.num_generated, b.num_computed) == (9, 48) and b in sched.decoders.crossing().values()
    hog = alloc.allocate(alloc.num_free_blocks)           # KV held elsewhere
    s = step(sched, 14.0)
    assert batch(s) == ([], 1) and sched.counters.preemptions == 1 and b.state == WAITING
    alloc.free(hog)
    assert batch(step(sched, 15.0)) == ([(1, 17)], 0)     # 40 + 9 − 32
    assert sched.counters.prefix_hit_tokens == 32 and a.state == RUNNING


# ------------------------------------------------------------------ TensorRT-LLM


def test_trtllm_second_request_reuses_the_stored_full_blocks_only():
    """tokens_per_block 32: a 2,000-token system prompt fills 62 blocks (1,984 tokens); the
    block holding tokens 1,984–2,015 also holds each request's own tokens, so it is not
    reused (TensorRT-LLM's partial reuse would copy its 16 matching tokens). The prompt's
    blocks are stored once its context has run: b, a step later, computes 2,100 − 1,984
    = 116 tokens next to a's decode, but the token budget counted its whole prompt."""
    sched, alloc = make(TrtllmScheduler, block_size=32, budget=8192)
    a = shared(sched, 0, 2000, 100, 12)
    assert batch(step(sched, 0.0)) == ([(0, 2100)], 0)
    assert len(a.blocks) == 66                            # ceil(2,120 / 32), reserved
    b = shared(sched, 1, 2000, 100, 12, t=1.0)
    s = step(sched, 1.0)
    assert batch(s) == ([(1, 116)], 1)
    assert b.blocks[:62] == a.blocks[:62] and b.blocks[62] not in a.blocks
    assert sched.counters.prefix_hit_tokens == 1984


def test_trtllm_reservation_counts_reused_blocks_once_but_the_check_counts_them_all():
    """GUARANTEED_NO_EVICT: a new context needs the blocks of prompt + max_new_tokens free
    (66 here) — TensorRT-LLM learns the reuse only when it adds the sequence — but takes
    only the 4 it does not reuse: with a holding 66 of 131 blocks b waits; of 132 it runs
    and the pool holds 66 + 4 blocks, the 62 shared ones once."""
    for num_blocks, admitted in ((131, False), (132, True)):
        sched, alloc = make(TrtllmScheduler, num_blocks=num_blocks, block_size=32)
        shared(sched, 0, 2000, 100, 12)
        step(sched, 0.0)
        b = shared(sched, 1, 2000, 100, 12, t=1.0)
        s = step(sched, 1.0)
        if admitted:
            assert batch(s) == ([(1, 116)], 1) and alloc.num_used_blocks == 70
            assert len(b.blocks) == 66
        else:
            assert batch(s) == ([], 1) and b.state == WAITING
            assert alloc.num_used_blocks == 66


def test_trtllm_skips_a_context_whose_next_block_an_earlier_one_will_store():
    """beneficialToSkip: a and b arrive together; b's first block not yet stored is the one
    a's context will store, so b waits a step (c, behind it, shares nothing and starts);
    then b reuses a's 62 blocks."""
    sched, _ = make(TrtllmScheduler, block_size=32, budget=8192)
    shared(sched, 0, 2000, 100, 12)
    b = shared(sched, 1, 2000, 100, 12)
    private(sched, 2, 300, 20)
    assert batch(step(sched, 0.0)) == ([(0, 2100), (2, 300)], 0)
    assert list(sched.waiting) == [b]
    assert batch(step(sched, 1.0)) == ([(1, 116)], 2)


def test_trtllm_chunked_context_after_reuse_ends_on_a_block_boundary():
    """Chunked context: b's first chunk is sized as if nothing were reused, 511 → 480
    tokens (a multiple of tokens_per_block); it then starts at 1,984 and runs 480 tokens,
    ending at 2,464; the rest, 3,000 − 2,464 = 536, takes two more chunks (480, 56)."""
    sched, _ = make(TrtllmScheduler, block_size=32, budget=512, chunked=True)
    shared(sched, 0, 2000, 100, 50)
    for t in range(5):
        step(sched, float(t))                             # a's context: 480 × 4 + 180
    shared(sched, 1, 2000, 1000, 5, t=5.0)
    got = [batch(step(sched, float(t))) for t in range(5, 8)]
    assert got == [([(1, 480)], 1), ([(1, 480)], 1), ([(1, 56)], 1)]


def test_trtllm_max_utilization_reuses_the_prompt_blocks_at_its_first_chunk():
    """MAX_UTILIZATION takes a new context's prompt blocks at its first chunk: with reuse,
    the 62 shared ones by reference and 4 new ones."""
    sched, alloc = make(TrtllmMaxUtilizationScheduler, block_size=32)
    a = shared(sched, 0, 2000, 100, 12)
    step(sched, 0.0)
    used = alloc.num_used_blocks
    b = shared(sched, 1, 2000, 100, 12, t=1.0)
    assert batch(step(sched, 1.0)) == ([(1, 116)], 1)
    assert alloc.num_used_blocks == used + 4 and b.blocks[:62] == a.blocks[:62]


# ------------------------------------------------------------------ whole runs


def test_engine_presets_reuse_prefixes_in_whole_runs_and_macro_steps_change_nothing(
        write_scenario, tmp_path):
    """Shared system prompts and multi-turn conversations under each engine that models
    prefix caching, in a small KV cache (evictions, MAX_UTILIZATION pauses and SGLang
    retractions happen): every request finishes, the cache saves prefill tokens (none
    with caching off), and macro-steps give exactly the step-by-step result."""
    from capsim.scenario.load import load
    from capsim.workload import build

    doc = {"name": "presets_prefix", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 4096, "kv_cache_memory_gib": 0.5},
           "workload": {"num_requests": 120, "arrival": {"process": "poisson", "rate_per_s": 10},
                        "classes": [{"name": "chat", "weight": 1,
                                     "prompt_tokens": {"dist": "uniform", "min": 20, "max": 300},
                                     "output_tokens": {"dist": "uniform", "min": 8, "max": 200},
                                     "shared_prefix": {"tokens": 700, "fraction": 0.8,
                                                       "num_templates": 2},
                                     "conversation": {"turns": {"dist": "uniform", "min": 1,
                                                                "max": 3},
                                                      "think_time_s": 0.5}}]},
           "variants": [
               {"name": "trtllm", "engine": {"preset": "trtllm"}},
               {"name": "trtllm-off", "engine": {"preset": "trtllm",
                                                 "enable_prefix_caching": False}},
               {"name": "trtllm-chunked", "engine": {"preset": "trtllm",
                                                     "enable_chunked_prefill": True,
                                                     "max_num_batched_tokens": 512}},
               {"name": "trtllm-maxutil", "engine": {
                   "preset": "trtllm", "capacity_scheduler_policy": "MAX_UTILIZATION",
                   "enable_chunked_prefill": True, "max_num_batched_tokens": 512}},
               {"name": "sglang", "engine": {"preset": "sglang",
                                             "max_num_batched_tokens": 1024}}]}
    loaded = load(write_scenario(tmp_path, doc))
    saved, paused = {}, {}
    for rc in loaded.runs:
        trace = build(rc.workload, rc.seed, loaded.base_dir)
        ref = simulate_both_ways(rc, trace)
        assert (np.asarray(ref.requests.status) == "finished").all(), rc.variant
        saved[rc.variant] = sum(r.prefix_hit_tokens for r in ref.replicas)
        paused[rc.variant] = sum(r.preemptions for r in ref.replicas)
    assert saved["trtllm-off"] == 0
    for name in ("trtllm", "trtllm-chunked", "trtllm-maxutil", "sglang"):
        assert saved[name] > 0, name
    assert paused["trtllm-maxutil"] > 0 and paused["sglang"] > 0
