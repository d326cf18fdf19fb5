"""Schedulers driven step by step, without SimPy (as vLLM's tests drive its scheduler)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import FINISHED, RUNNING, WAITING, Request
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.static import StaticScheduler
from capsim.kv.allocator import BlockAllocator


def continuous(num_blocks=10_000, block_size=16, budget=512, max_num_seqs=64, chunked=True,
               long_prefill_token_threshold=0):
    alloc = BlockAllocator(num_blocks, block_size)
    itl = ItlRecorder()
    sched = ContinuousScheduler(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                                chunked=chunked, allocator=alloc, num_classes=1, itl=itl,
                                long_prefill_token_threshold=long_prefill_token_threshold)
    return sched, alloc, itl


def run_steps(sched, n, t0=0.0, dt=1.0):
    """Run n steps of dt seconds each; return the steps taken (None when idle)."""
    steps, t = [], t0
    for _ in range(n):
        step = sched.schedule(t)
        steps.append(step)
        if step is None:
            break
        t += dt
        sched.complete(step, t)
    return steps, t


def test_chunked_step_puts_decodes_first_then_fills_the_budget():
    """Sarathi-Serve / vLLM v1: 32 decodes take 32 tokens, a 2,048-token prompt gets the rest."""
    sched, alloc, _ = continuous(budget=512)
    for i in range(32):
        sched.add(Request(i, 0, 0.0, 100, 50))
    run_steps(sched, 1)                       # 32 × 100 = 3,200 > 512: admission is chunked
    steps, t = run_steps(sched, 20, t0=1.0)
    assert all(s.decode_seqs == 32 or s.prefills for s in steps)
    sched.add(Request(99, 0, t, 2048, 10))
    step = sched.schedule(t)
    assert step.decode_seqs == 32
    assert step.prefills == [(sched.running[99], 512 - 32)]
    assert step.batch_tokens == 512


def test_chunked_prefill_takes_ceil_prompt_over_room_steps():
    """Seed 002 Q4 follow-up arithmetic: room per step = budget − decodes; steps = ⌈prompt ÷ room⌉."""
    sched, _, _ = continuous(budget=1560, max_num_seqs=256)
    for i in range(150):
        sched.add(Request(i, 0, 0.0, 8, 1000))
    run_steps(sched, 2)
    sched.add(Request(999, 0, 2.0, 6000, 5))
    chunks = []
    t = 2.0
    while 999 not in [r.rid for r in sched.finished] and len(chunks) < 20:
        step = sched.schedule(t)
        chunks += [n for r, n in step.prefills if r.rid == 999]
        t += 1
        sched.complete(step, t)
        if sched.running.get(999) is None or sched.running[999].dec_epoch0 >= 0:
            break
    assert chunks == [1410, 1410, 1410, 1410, 360]       # ⌈6000 / 1410⌉ = 5 steps


@pytest.mark.parametrize("threshold,steps", [
    # vLLM V1's default (0): the budget alone bounds a chunk, so the prompts prefill one after
    # another, each next one taking what the previous one's last chunk (and decodes) left.
    (0, [[(0, 8192)], [(0, 8192)], [(0, 3616), (1, 4576)], [(1, 8191)],
         [(1, 7233), (2, 958)], [(2, 8190)]]),
    # --long-prefill-token-threshold 3000: every request's chunk is capped, partly prefilled
    # or waiting, so the three share each step's 8,192 tokens and finish together.
    (3000, [[(0, 3000), (1, 3000), (2, 2192)]] * 6
     + [[(0, 2000), (1, 2000), (2, 3000)], [(2, 3000)]]),
])
def test_long_prefill_token_threshold_caps_each_requests_chunk(threshold, steps):
    """vllm/v1/core/sched/scheduler.py ``schedule`` (00024d3): ``num_new_tokens =
    threshold`` when it is smaller, for running and waiting requests alike, then ``min``
    with what is left of the budget (decodes first: one token each)."""
    sched, _, _ = continuous(budget=8192, max_num_seqs=8,
                             long_prefill_token_threshold=threshold)
    for i in range(3):
        sched.add(Request(i, 0, 0.0, 20_000, 4))
    got = []
    for k in range(len(steps)):
        step = sched.schedule(float(k))
        got.append([(r.rid, n) for r, n in step.prefills])
        assert step.batch_tokens <= 8192
        sched.complete(step, k + 1.0)
    assert got == steps


def test_unchunked_prefill_step_stalls_running_decodes():
    """Orca / vLLM v0: a waiting prompt gets a prefill-only step; decodes wait for it."""
    sched, _, itl = continuous(budget=4096, chunked=False)
    for i in range(4):
        sched.add(Request(i, 0, 0.0, 64, 100))
    run_steps(sched, 5)
    sched.add(Request(9, 0, 5.0, 2048, 3))
    step = sched.schedule(5.0)
    assert step.decode_seqs == 0 and [(r.rid, n) for r, n in step.prefills] == [(9, 2048)]
    sched.complete(step, 8.0)                 # a long 3-second prefill step
    step = sched.schedule(8.0)
    assert step.decode_seqs == 5 and not step.prefills
    sched.complete(step, 9.0)
    # The 4 old decoders saw a 4 s gap (prefill + decode step); the new one 1 s.
    runs = sorted(zip(itl.gap_s, itl.count))
    assert (4.0, 4) in runs and (1.0, 1) in runs


def test_tokens_and_ttft_follow_num_computed_tokens():
    """A 40-token prompt at budget 16 needs 3 prefill steps; its first token ends step 3."""
    sched, alloc, itl = continuous(budget=16, max_num_seqs=16)
    req = Request(0, 0, 0.0, 40, 4)
    sched.add(req)
    steps, t = run_steps(sched, 10)
    assert [n for s in steps if s for _, n in s.prefills] == [16, 16, 8]
    assert req.first_token_s == 3.0 and req.finish_s == 6.0
    assert req.state == FINISHED and req.num_generated == 4
    assert list(itl.count) == [1, 1, 1] and list(itl.gap_s) == [1.0, 1.0, 1.0]
    alloc.check_all_free()


def test_blocks_are_allocated_exactly_at_block_boundaries():
    """KV slots = computed tokens: a 16-token prompt at block size 16 takes its 2nd block on its 1st decode."""
    sched, alloc, _ = continuous(block_size=16)
    req = Request(0, 0, 0.0, 16, 20)
    sched.add(req)
    run_steps(sched, 1)
    assert len(req.blocks) == 1 and alloc.num_used_blocks == 1
    run_steps(sched, 1, t0=1.0)
    sched.sync()
    assert req.num_computed == 17 and len(req.blocks) == 2
    run_steps(sched, 15, t0=2.0)              # computed 32 → still 2 blocks
    sched.sync()
    assert req.num_computed == 32 and len(req.blocks) == 2
    run_steps(sched, 1, t0=17.0)
    assert len(req.blocks) == 3


def test_preemption_evicts_the_newest_and_recomputes():
    """vLLM: out of blocks mid-decode → preempt the most recently admitted request (recompute)."""
    sched, alloc, _ = continuous(num_blocks=6, block_size=4, budget=64, max_num_seqs=8)
    a, b = Request(0, 0, 0.0, 8, 14), Request(1, 0, 0.0, 8, 14)   # each ends at 21 tokens = 6 blocks
    sched.add(a)
    sched.add(b)
    run_steps(sched, 1)                       # 2 + 2 blocks
    assert alloc.num_used_blocks == 4
    run_steps(sched, 1, t0=1.0)               # both cross into block 3: 6 blocks used
    assert alloc.num_free_blocks == 0
    steps, t = run_steps(sched, 4, t0=2.0)    # next boundary: b is evicted so a can grow
    assert sched.counters.preemptions >= 1 and b.num_preemptions >= 1 and a.num_preemptions == 0
    run_steps(sched, 200, t0=t)
    assert a.state == FINISHED and b.state == FINISHED
    assert b.num_generated == 14 and a.finish_s < b.finish_s
    alloc.check_all_free()


def test_lone_request_too_big_for_the_pool_is_preempted_not_deadlocked():
    """Two requests that cannot both grow: one is evicted, the other finishes, then it runs."""
    sched, alloc, _ = continuous(num_blocks=4, block_size=4, budget=64, max_num_seqs=4)
    reqs = [Request(i, 0, 0.0, 4, 9) for i in range(2)]     # each ends needing 3 blocks
    for r in reqs:
        sched.add(r)
    run_steps(sched, 100)
    assert all(r.state == FINISHED and r.num_generated == 9 for r in reqs)
    alloc.check_all_free()


def test_max_num_seqs_gate_holds_new_requests_back():
    """Seed 002 Q5: with max_num_seqs running, a new prompt waits though tokens and KV are free."""
    sched, _, _ = continuous(budget=8192, max_num_seqs=4)
    for i in range(5):
        sched.add(Request(i, 0, 0.0, 10, 100))
    run_steps(sched, 3)
    assert sched.num_running == 4 and len(sched.waiting) == 1
    assert sched.waiting[0].rid == 4 and sched.waiting[0].state == WAITING


def test_static_batch_useful_share_matches_pack_q1():
    """Seed 002 Q1: 4 slots, replies 50/150/400/800 → 1,400 of 3,200 slot-steps useful (≈ 44 %),
    and the 50-token user leaves with the batch at step 800."""
    alloc = BlockAllocator(10_000, 16)
    itl = ItlRecorder()
    sched = StaticScheduler(max_num_seqs=4, allocator=alloc, num_classes=1, itl=itl)
    reqs = [Request(i, 0, 0.0, 10, n) for i, n in enumerate([50, 150, 400, 800])]
    for r in reqs:
        sched.add(r)
    steps, t = run_steps(sched, 2000)
    assert sched.counters.steps == 800
    assert sched.counters.slot_steps_useful == 1400 and sched.counters.steps * 4 == 3200
    assert sched.counters.slot_steps_useful / (sched.counters.steps * 4) == pytest.approx(0.4375)
    assert all(r.finish_s == 800.0 for r in reqs)
    assert reqs[0].first_token_s == 800.0          # the reply is held until the batch ends
    assert sum(itl.count) == sum(n - 1 for n in [50, 150, 400, 800])
    alloc.check_all_free()


def test_static_batch_q1_latencies_held_reply_vs_continuous():
    """Seed 002 Q1 (../shared/seeds/002_be97687ecafaf8fa.txt) at "about 5 ms per step": the
    50-token reply is done after 50 steps but leaves with the batch at step 800, "800 × 5 ms
    = 4 s, when they could have had their answer after 50 × 5 ms = 0.25 s". A static-batching
    user receives the whole reply at once, so TTFT = E2EL = 4 s and its 49 gaps are 0 (TPOT 0 =
    mean ITL); continuous batching streams it and lets it go at 0.25 s."""
    step_s, outs = 0.005, [50, 150, 400, 800]
    alloc = BlockAllocator(10_000, 16)
    itl = ItlRecorder()
    sched = StaticScheduler(max_num_seqs=4, allocator=alloc, num_classes=1, itl=itl)
    reqs = [Request(i, 0, 0.0, 10, n) for i, n in enumerate(outs)]
    for r in reqs:
        sched.add(r)
    run_steps(sched, 2000, dt=step_s)
    user50 = reqs[0]
    assert user50.finish_s == pytest.approx(4.0)                 # E2EL: 800 × 5 ms
    assert user50.first_token_s == user50.finish_s               # TTFT = E2EL
    assert user50.max_itl_s == 0.0                               # the tokens arrive together
    tpot_s = (user50.finish_s - user50.first_token_s) / (50 - 1)
    assert tpot_s == 0.0
    gaps = np.frombuffer(itl.gap_s, dtype=np.float64)
    counts = np.frombuffer(itl.count, dtype=itl.count.typecode)
    assert gaps.tolist() == [0.0] and counts.tolist() == [sum(n - 1 for n in outs)]

    sched, alloc, itl = continuous(budget=8192, max_num_seqs=4)
    reqs = [Request(i, 0, 0.0, 10, n) for i, n in enumerate(outs)]
    for r in reqs:
        sched.add(r)
    run_steps(sched, 2000, dt=step_s)
    assert reqs[0].finish_s == pytest.approx(0.25)               # 50 × 5 ms
    assert reqs[0].first_token_s == pytest.approx(0.005)         # streamed from step 1
    assert reqs[3].finish_s == pytest.approx(4.0)


def test_static_prefill_is_padded_to_the_longest_prompt():
    alloc = BlockAllocator(10_000, 16)
    sched = StaticScheduler(max_num_seqs=8, allocator=alloc, num_classes=1, itl=ItlRecorder())
    sched.add(Request(0, 0, 0.0, 100, 5))
    sched.add(Request(1, 0, 0.0, 1000, 5))
    step = sched.schedule(0.0)
    assert step.prefill_tokens == 2 * 1000
    assert not math.isnan(sched.batch[0].first_scheduled_s)
    assert {r.state for r in sched.batch} == {RUNNING}


def test_prefill_role_hands_off_and_decode_role_takes_over():
    """Disaggregation hooks: the prefill side keeps KV until released; the decode side
    reserves blocks, then decodes; the first decode gap runs from token 1 (prefill side)."""
    p_sched, p_alloc, itl = continuous(budget=4096)
    p_sched.role = "prefill"
    d_alloc = BlockAllocator(100, 16)
    d_sched = ContinuousScheduler(max_num_seqs=8, max_num_batched_tokens=512, chunked=True,
                                  allocator=d_alloc, num_classes=1, itl=itl, role="decode")
    req = Request(0, 0, 0.0, 100, 4)
    p_sched.add(req)
    run_steps(p_sched, 1)                     # prefill ends at t=1: token 1
    assert p_sched.handoff == [req] and not p_sched.has_work()
    assert p_alloc.num_used_blocks == 7       # ⌈100 / 16⌉ held until the transfer is done
    assert d_sched.reserve_transfer(req) and d_alloc.num_used_blocks == 7
    p_sched.release_handoff(req)
    p_alloc.check_all_free()
    d_sched.admit_transfer(req)               # KV arrived at t=3
    steps, _ = run_steps(d_sched, 10, t0=3.0)
    assert req.state == FINISHED and req.num_generated == 4 and req.finish_s == 6.0
    assert sorted(zip(itl.gap_s, itl.count)) == [(1.0, 1), (1.0, 1), (3.0, 1)]
    d_alloc.check_all_free()


def test_swap_preemption_keeps_progress_and_charges_the_copy():
    """vLLM v0 swap: the victim's KV goes to host memory and comes back; nothing is recomputed."""
    alloc = BlockAllocator(6, 4)
    itl = ItlRecorder()
    sched = ContinuousScheduler(max_num_seqs=8, max_num_batched_tokens=64, chunked=True,
                                allocator=alloc, num_classes=1, itl=itl,
                                swap_space_bytes=10**9, kv_bytes_per_token=1000)
    a, b = Request(0, 0, 0.0, 8, 14), Request(1, 0, 0.0, 8, 14)
    sched.add(a)
    sched.add(b)
    steps, t = run_steps(sched, 6)
    assert b.state == "swapped" and b.num_preemptions == 1
    assert b.num_computed >= 8 and sched.counters.swap_out_bytes == b.num_computed * 1000
    assert any(s.swap_bytes for s in steps if s)
    run_steps(sched, 100, t0=t)
    assert a.state == FINISHED and b.state == FINISHED and b.num_generated == 14
    assert sched.counters.recomputed_tokens == 0 and sched.counters.swap_in_bytes == sched.counters.swap_out_bytes
    alloc.check_all_free()


def test_swap_falls_back_to_recompute_when_host_space_is_full():
    alloc = BlockAllocator(6, 4)
    sched = ContinuousScheduler(max_num_seqs=8, max_num_batched_tokens=64, chunked=True,
                                allocator=alloc, num_classes=1, itl=ItlRecorder(),
                                swap_space_bytes=100, kv_bytes_per_token=1000)
    a, b = Request(0, 0, 0.0, 8, 14), Request(1, 0, 0.0, 8, 14)
    sched.add(a)
    sched.add(b)
    run_steps(sched, 200)
    assert sched.counters.preemptions >= 1 and sched.counters.swap_out_bytes == 0 and sched.counters.recomputed_tokens > 0
    assert a.state == FINISHED and b.state == FINISHED


def test_parallel_sampling_shares_the_prompt_and_copies_on_first_write():
    """Seed 002 Q7: n = 4 samples of a 1,000-token prompt at block size 16 hold
    ⌈1000 / 16⌉ = 63 shared blocks + 3 copy-on-write copies = 66 blocks; the last
    writer is the sole owner of the partial block and writes in place."""
    sched, alloc, itl = continuous(budget=2048, block_size=16)
    req = Request(0, 0, 0.0, 1000, 5, n=4)
    sched.add(req)
    run_steps(sched, 1)                       # prefill: 63 blocks, 4 samples emit token 1
    assert alloc.num_used_blocks == 63 and sched.num_running == 4
    assert alloc.refcount(req.blocks[0]) == 4
    run_steps(sched, 1, t0=1.0)               # first decode: 3 copies, then in place
    assert alloc.num_used_blocks == 66 and alloc.num_cow_copies == 3
    assert alloc.refcount(req.blocks[0]) == 4 and alloc.refcount(req.blocks[-1]) == 1
    steps, _ = run_steps(sched, 10, t0=2.0)
    assert req.state == FINISHED and req.finish_s == 5.0
    assert sched.finished == [req]            # one request, however many samples
    assert sum(itl.count) == 4 * (5 - 1)
    alloc.check_all_free()


def test_released_sample_leaves_shared_blocks_allocated():
    """Seed 000: a finished sample drops its references; shared blocks stay off the free list."""
    sched, alloc, _ = continuous(budget=2048, block_size=16)
    req = Request(0, 0, 0.0, 96, 3, n=2)      # 96 = 6 full blocks: no copy-on-write needed
    sched.add(req)
    run_steps(sched, 2)
    fork = next(r for r in sched.running.values() if r is not req)
    assert fork.blocks[:6] == req.blocks[:6] and alloc.refcount(req.blocks[0]) == 2
    sched._preempt(fork)                      # release one sample
    assert alloc.refcount(req.blocks[0]) == 1
    assert req.blocks[0] not in alloc._free


def test_decode_run_goes_on_through_finishes_while_nothing_waits():
    """A run's plan: one segment per finish, the batch shrinking (3 → 2 → 1 decoders)."""
    sched, _, _ = continuous()
    for i, out in enumerate((30, 50, 90)):
        sched.add(Request(i, 0, 0.0, 100, out))
    run_steps(sched, 1)                              # prefill: token 1 of each
    step = sched.schedule(1.0)
    plan = sched.plan_decode_run(step)
    # Request i finishes after out − 1 decode steps (29, 49, 89); the run then ends.
    assert plan.ends == [29, 49, 89]
    assert plan.seqs == [3, 2, 1]
    # Σ context at each segment's first step: the tokens computed so far + the new one.
    assert plan.ctx0 == [3 * 101, 2 * 130, 150]
    assert plan.done_tokens == [130, 150, 0]
    # ... as the step-by-step path schedules them
    sched.complete(step, 2.0)
    steps, _ = run_steps(sched, 88, t0=2.0)
    assert [steps[j - 1].decode_ctx_tokens for j in (29, 49)] == plan.ctx0[1:]
    assert [steps[j - 1].decode_seqs for j in (28, 29, 48, 49, 88)] == [3, 2, 2, 1, 1]


def test_decode_run_stops_at_a_finish_when_requests_wait():
    sched, _, _ = continuous(max_num_seqs=2)
    for i, out in enumerate((30, 50, 90)):
        sched.add(Request(i, 0, 0.0, 100, out))
    run_steps(sched, 1)                              # two admitted, one waits for a slot
    plan = sched.plan_decode_run(sched.schedule(1.0))
    assert plan.ends == [29] and plan.seqs == [2]


def test_multi_step_window_holds_a_new_prompt_until_it_ends():
    """vLLM 0.6 --num-scheduler-steps 4 (llm_engine.py _has_remaining_steps at v0.6.0): a
    decode step opens a window of 4; a prompt arriving inside it waits for the window's end,
    then gets its prefill-only step; the next decode step opens a new window."""
    alloc = BlockAllocator(10_000, 16)
    sched = ContinuousScheduler(max_num_seqs=64, max_num_batched_tokens=4096, chunked=False,
                                allocator=alloc, num_classes=1, itl=ItlRecorder(),
                                num_scheduler_steps=4)
    sched.add(Request(0, 0, 0.0, 64, 100))
    steps, t = run_steps(sched, 2)               # the prefill, then window step 1 of 4
    assert steps[0].prefills and steps[1].decode_seqs == 1
    sched.add(Request(1, 0, t, 64, 100))
    kinds = []
    for _ in range(6):
        step = sched.schedule(t)
        kinds.append("P" if step.prefills else step.decode_seqs)
        t += 1.0
        sched.complete(step, t)
    assert kinds == [1, 1, 1, "P", 2, 2]         # window steps 2–4, prefill, a new window


def test_single_step_scheduling_admits_a_prompt_at_the_next_step():
    """The same arrival with num_scheduler_steps 1 gets its prefill at once."""
    sched, _, _ = continuous(budget=4096, chunked=False)
    sched.add(Request(0, 0, 0.0, 64, 100))
    _, t = run_steps(sched, 2)
    sched.add(Request(1, 0, t, 64, 100))
    assert sched.schedule(t).prefills
