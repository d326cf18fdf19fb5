"""TensorRT-LLM's, SGLang's and TGI's schedulers driven step by step (no SimPy), with
batches checked by hand, then whole runs with each engine preset."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.engine.recorder import ItlRecorder
from capsim.engine.scheduler import make_kv, make_scheduler
from capsim.engine.request import RUNNING, WAITING, Request
from capsim.engine.scheduler.sglang import SglangScheduler
from capsim.engine.scheduler.tgi import TgiScheduler
from capsim.engine.scheduler.trtllm import TrtllmMaxUtilizationScheduler, TrtllmScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.kv.blocks import blocks_needed
from capsim.scenario.load import load
from capsim.workload import build
from support.macro import simulate_both_ways
from support.steps import batch, step

SGLANG = dict(schedule_conservativeness=1.0, init_new_token_ratio=0.7,
              min_new_token_ratio_factor=0.14, new_token_ratio_decay_steps=600,
              retract_decode_steps=20, clip_max_new_tokens=4096)


def make(cls, num_blocks=1000, block_size=16, budget=512, max_num_seqs=64, chunked=False,
         **knobs):
    alloc = BlockAllocator(num_blocks, block_size)
    itl = ItlRecorder()
    sched = cls(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, chunked=chunked,
                allocator=alloc, num_classes=1, itl=itl, **knobs)
    return sched, alloc, itl


def add(sched, *specs, t=0.0):
    """Queue requests given as (rid, prompt, output); returns them."""
    reqs = [Request(rid, 0, t, p, o) for rid, p, o in specs]
    for r in reqs:
        sched.add(r)
    return reqs


# ------------------------------------------------------------------ TensorRT-LLM


def test_trtllm_mixes_decodes_and_a_whole_prompt_in_one_step():
    """In-flight batching: running decodes and a new prompt share one forward; a prompt
    longer than what the decodes leave of max_num_tokens waits whole (no chunking), and so
    does the request behind it."""
    sched, alloc, _ = make(TrtllmScheduler, budget=512)
    add(sched, *[(i, 64, 100) for i in range(4)])
    assert batch(step(sched, 0.0)) == ([(0, 64), (1, 64), (2, 64), (3, 64)], 0)
    add(sched, (9, 300, 50), t=1.0)
    assert batch(step(sched, 1.0)) == ([(9, 300)], 4)            # 4 decodes + 300 = 304
    add(sched, (10, 600, 5), (11, 10, 5), t=2.0)
    used = alloc.num_used_blocks
    for t in range(2, 6):
        assert batch(step(sched, float(t))) == ([], 5)            # 600 > 512 − 5: waits
        assert alloc.num_used_blocks == used                      # nothing grows
    assert [r.rid for r in sched.waiting] == [10, 11]


def test_trtllm_reserves_prompt_plus_output_and_the_head_blocks_the_queue():
    """GUARANTEED_NO_EVICT: a new request takes the blocks of prompt + max_new_tokens at
    once (100 + 157 = 257 tokens → 17 blocks of 16); the head that does not fit waits with
    everyone behind it, though its prompt would fit; nothing is ever preempted."""
    sched, alloc, _ = make(TrtllmScheduler, num_blocks=30)
    a, b, c = add(sched, (0, 100, 157), (1, 50, 200), (2, 10, 10))
    assert batch(step(sched, 0.0)) == ([(0, 100)], 0)
    assert len(a.blocks) == alloc.num_used_blocks == 17          # 257 tokens
    t = 1.0
    while a.state == RUNNING:
        s = step(sched, t)
        assert batch(s) == ([], 1) and alloc.num_used_blocks == (17 if s.decode_seqs and
                                                                 a.state == RUNNING else 0)
        t += 1
    assert sched.counters.steps == 157 and b.state == c.state == WAITING
    assert batch(step(sched, t)) == ([(1, 50), (2, 10)], 0)       # 16 + 2 blocks
    assert alloc.num_used_blocks == blocks_needed(250, 16) + blocks_needed(20, 16)
    assert sched.counters.preemptions == 0


def test_trtllm_chunked_context_is_first_come_first_served_in_chunk_units():
    """enable_chunked_prefill: the context gets what the decodes leave (100 − 3 = 97),
    cut down to a multiple of tokens_per_block (96); its last chunk is the rest."""
    sched, _, _ = make(TrtllmScheduler, budget=100, chunked=True)
    add(sched, (0, 16, 50), (1, 16, 50), (2, 16, 50))
    step(sched, 0.0)
    add(sched, (9, 300, 5), t=1.0)
    chunks = [batch(step(sched, float(t))) for t in range(1, 5)]
    assert chunks == [([(9, 96)], 3), ([(9, 96)], 3), ([(9, 96)], 3), ([(9, 12)], 3)]


def test_trtllm_max_utilization_pauses_the_newest_and_recomputes_it():
    """MAX_UTILIZATION: blocks are taken as tokens arrive; when the decodes' next blocks
    are short, the most recently started request is paused (KV freed, back at the head of
    the queue, prompt + generated recomputed later) and nothing starts in that step."""
    sched, alloc, _ = make(TrtllmMaxUtilizationScheduler, num_blocks=6)
    a, b = add(sched, (0, 32, 40), (1, 32, 40))
    step(sched, 0.0)
    assert alloc.num_used_blocks == 4                             # prompt blocks only
    for t in range(1, 17):                                        # tokens 33..48: 3rd block
        assert batch(step(sched, float(t))) == ([], 2)
    assert alloc.num_used_blocks == 6 and sched.counters.preemptions == 0
    s = step(sched, 17.0)                                         # token 49 needs a 4th each
    assert batch(s) == ([], 1) and sched.counters.preemptions == 1
    assert list(sched.waiting) == [b] and b.num_computed == 0 and b.num_generated == 17
    assert len(a.blocks) == 4 and alloc.num_used_blocks == 4
    # b must recompute 32 + 17 = 49 tokens (4 blocks); only 2 are free: it waits.
    assert batch(step(sched, 18.0)) == ([], 1)


def test_trtllm_parallel_samples_reserve_their_own_output_blocks_up_front():
    """n = 3 samples of a 40-token prompt with 20 output tokens: the prompt's 2 full blocks
    are shared, each sample reserves the other 2 of its 4 (60 tokens): 8 blocks at
    admission, none taken later, all returned at the end."""
    sched, alloc, _ = make(TrtllmScheduler)
    req = Request(0, 0, 0.0, 40, 20, n=3)
    sched.add(req)
    step(sched, 0.0)
    assert alloc.num_used_blocks == 8 and sched.num_running == 3
    samples = list(sched.running.values())
    assert all(s.blocks[:2] == req.blocks[:2] for s in samples)
    assert len({b for s in samples for b in s.blocks[2:]}) == 6
    t = 1.0
    while sched.running:
        step(sched, t)
        assert alloc.num_used_blocks in (8, 0)
        t += 1
    assert sched.finished == [req] and alloc.num_used_blocks == 0
    alloc.check_all_free()


# ------------------------------------------------------------------------- SGLang


def test_sglang_prefill_step_runs_without_the_decodes():
    """Prefill first: a step that prefills a new request does not decode; the running
    requests' token gap spans it."""
    sched, _, itl = make(SglangScheduler, **SGLANG)
    add(sched, (0, 32, 100), (1, 32, 100))
    assert batch(step(sched, 0.0)) == ([(0, 32), (1, 32)], 0)
    assert batch(step(sched, 1.0)) == ([], 2)
    add(sched, (2, 64, 10), t=2.0)
    assert batch(step(sched, 2.0, dt=3.0)) == ([(2, 64)], 0)
    assert batch(step(sched, 5.0)) == ([], 3)
    assert (4.0, 2) in set(zip(itl.gap_s, itl.count))             # 3 s prefill + 1 s decode


def test_sglang_new_token_ratio_decays_per_decode_step_and_resets_when_idle():
    sched, _, _ = make(SglangScheduler, **SGLANG)
    init, low = 0.7, 0.7 * 0.14
    decay = (init - low) / 600
    assert sched.new_token_ratio == init
    add(sched, (0, 16, 700))
    step(sched, 0.0)                                              # prefill: no decay
    for k in range(1, 700):
        step(sched, float(k))
        if k in (1, 10, 300):
            assert sched.new_token_ratio == pytest.approx(init - k * decay)
    assert sched.new_token_ratio == low                           # floor after 600 steps
    assert not sched.running and step(sched, 700.0) is None       # idle
    assert sched.new_token_ratio == init


def test_sglang_admission_budget_charges_running_outputs_by_the_ratio():
    """A request is admitted iff prompt + min(output, 4096) + page < free tokens −
    ratio × Σ running min(remaining output, 4096), checked here at the boundary."""
    # 200 blocks of 16 = 3,200 tokens; the running request holds 7 blocks (100 tokens).
    # Free 193 × 16 = 3,088; charge 0.7 × 999 = 699.3; room 2,388.7.
    for output, admitted in ((1372, True), (1373, False)):        # 1000 + output + 16
        sched, _, _ = make(SglangScheduler, num_blocks=200, budget=2048, chunked=True,
                           **SGLANG)
        add(sched, (0, 100, 1000))
        step(sched, 0.0)
        add(sched, (1, 1000, output), t=1.0)
        s = step(sched, 1.0)
        assert batch(s) == (([(1, 1000)], 0) if admitted else ([], 1))
        assert sched.batch_full      # NO_TOKEN: for request 1, or for whoever would be next


def sglang_room(sched, alloc):
    """Free tokens − ratio × Σ running min(remaining output, 4096): SGLang's admission room."""
    sched.sync()
    left = sum(min(r.output_tokens - r.num_generated, 4096) for r in sched.running.values())
    return alloc.num_free_blocks * alloc.block_size - sched.new_token_ratio * left


def test_sglang_no_admission_retry_until_a_running_request_leaves():
    """After a request fails the budget (NO_TOKEN) the batch is full: no admission is
    tried while the ratio decays, only once a running request has finished."""
    sched, alloc, _ = make(SglangScheduler, num_blocks=200, budget=2048, chunked=True,
                           **SGLANG)
    add(sched, (0, 100, 1000), (1, 16, 40))
    step(sched, 0.0)
    e, = add(sched, (2, 1000, 1330), t=1.0)
    want = 1000 + 1330 + 16
    assert want >= sglang_room(sched, alloc) > want - 1           # 2,345.4
    assert batch(step(sched, 1.0)) == ([], 2) and sched.batch_full
    for t in range(2, 30):
        assert batch(step(sched, float(t))) == ([], 2)
    assert want < sglang_room(sched, alloc) and e.state == WAITING   # it would fit by now …
    t = 30.0
    while sched.running.get(1) is not None:                       # … but waits for a finish
        assert batch(step(sched, t)) == ([], 2)
        t += 1
    assert batch(step(sched, t)) == ([(2, 1000)], 0)


def test_sglang_retracts_the_fewest_generated_to_the_back_of_the_queue():
    """The request with the fewest output tokens goes first, whatever its prompt; it frees
    its KV and queues behind the requests already waiting; the ratio becomes (Σ generated
    + 20 × running) / (Σ max_new_tokens + 1) over those left."""
    sched, alloc, _ = make(SglangScheduler, num_blocks=100, **SGLANG)
    a, = add(sched, (0, 64, 100))
    for t in range(5):
        step(sched, float(t))                                     # a: 5 tokens
    b, = add(sched, (1, 16, 100), t=5.0)
    step(sched, 5.0)                                              # b's prefill: 1 token
    w, = add(sched, (2, 16, 5), t=6.0)
    hog = alloc.allocate(alloc.num_free_blocks)                   # KV held elsewhere
    s = step(sched, 6.0)                                          # b's 17th token: no block
    assert batch(s) == ([], 1) and sched.counters.preemptions == 1
    assert b.state == WAITING and list(sched.waiting) == [w, b]
    assert b.num_computed == 0 and b.num_generated == 1 and a.state == RUNNING
    assert sched.new_token_ratio == (5 + 20) / (100 + 1)
    alloc.free(hog)


def test_sglang_retraction_ties_go_to_the_longest_prompt():
    """Equal output so far: the longest prompt is retracted first, one is enough."""
    sched, alloc, _ = make(SglangScheduler, num_blocks=100, **SGLANG)
    a, b, c = add(sched, (0, 16, 100), (1, 48, 100), (2, 32, 100))
    step(sched, 0.0)
    hog = alloc.allocate(alloc.num_free_blocks)
    s = step(sched, 1.0)                                          # all three need a block
    assert batch(s) == ([], 2) and sched.counters.preemptions == 1
    assert b.state == WAITING and a.state == c.state == RUNNING
    assert sched.new_token_ratio == (1 + 1 + 2 * 20) / (200 + 1)
    alloc.free(hog)


def test_sglang_one_chunked_request_at_a_time_and_decodes_stall_during_chunks():
    sched, _, _ = make(SglangScheduler, budget=256, chunked=True, **SGLANG)
    add(sched, (0, 600, 20), (1, 600, 20))
    got = [batch(step(sched, float(t))) for t in range(5)]
    assert got == [([(0, 256)], 0), ([(0, 256)], 0),
                   ([(0, 88), (1, 160)], 0),                      # 256 − ceil16(88) = 160
                   ([(1, 256)], 0),                               # request 0's decode waits
                   ([(1, 184)], 0)]
    assert batch(step(sched, 5.0)) == ([], 2)


# ---------------------------------------------------------------------------- TGI


def tgi(**kw):
    return make(TgiScheduler, **{"max_waiting_tokens": 5, "waiting_served_ratio": 0.3, **kw})


def test_tgi_waits_for_enough_queued_requests_or_max_waiting_tokens():
    sched, _, itl = tgi(budget=4096)
    add(sched, *[(i, 32, 100) for i in range(10)])
    assert batch(step(sched, 0.0))[0] == [(i, 32) for i in range(10)]
    assert batch(step(sched, 1.0)) == ([], 10)                    # waiting_tokens 1 → 2
    add(sched, (10, 32, 100), (11, 32, 100), t=2.0)
    for t in (2.0, 3.0, 4.0):                                     # 2 queued < floor(10 × 0.3)
        assert batch(step(sched, t)) == ([], 10)
    assert sched.waiting_tokens == 5
    assert batch(step(sched, 5.0, dt=2.0)) == ([(10, 32), (11, 32)], 0)   # waited 5 tokens
    assert sched.waiting_tokens == 1
    assert batch(step(sched, 7.0)) == ([], 12)                    # the prefill's decode
    assert (3.0, 10) in set(zip(itl.gap_s, itl.count))            # the old 10 waited 3 s
    add(sched, (12, 32, 100), (13, 32, 100), (14, 32, 100), t=8.0)
    assert batch(step(sched, 8.0))[0] == [(12, 32), (13, 32), (14, 32)]  # 3 ≥ floor(3.6)


def test_tgi_idle_batch_then_a_second_prefill_before_the_first_decode():
    """The prefill budget (100 → 112, whole blocks) takes two 40-token prompts; the batch
    loop then tries again before decoding (minimum size floor(2 × 0.3) = 0)."""
    sched, _, _ = tgi(budget=100)
    add(sched, *[(i, 40, 10) for i in range(4)])
    assert batch(step(sched, 0.0)) == ([(0, 40), (1, 40)], 0)
    assert batch(step(sched, 1.0)) == ([(2, 40), (3, 40)], 0)
    assert batch(step(sched, 2.0)) == ([], 4)


def test_tgi_reserves_prompt_plus_output_minus_one_and_never_preempts():
    """Router v3: blocks for prompt + max_new_tokens − 1 tokens (100 + 157 − 1 = 256: 16
    blocks) at admission; the head that does not fit waits, the queue behind it too."""
    sched, alloc, _ = tgi(num_blocks=30)
    a, b, c = add(sched, (0, 100, 157), (1, 50, 200), (2, 10, 10))
    assert batch(step(sched, 0.0)) == ([(0, 100)], 0)
    assert len(a.blocks) == alloc.num_used_blocks == 16
    t = 1.0
    while a.state == RUNNING:
        assert batch(step(sched, t)) == ([], 1)
        assert alloc.num_used_blocks == (16 if a.state == RUNNING else 0)
        t += 1
    assert b.state == c.state == WAITING and sched.counters.preemptions == 0
    assert batch(step(sched, t)) == ([(1, 50), (2, 10)], 0)


def test_make_scheduler_takes_each_presets_policy_and_knobs(write_scenario, tmp_path):
    """The factory builds the preset's policy with the engine knobs and the preset's
    scheduler.knobs (SGLang's constants); MAX_UTILIZATION picks its own class; an engine's
    policy over a contiguous KV layout is refused."""
    doc = {"name": "f", "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 4096},
           "workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1},
                        "classes": [{"name": "c", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 10},
                                     "output_tokens": {"dist": "fixed", "value": 10}}]},
           "variants": [{"name": "t", "engine": {"preset": "trtllm"}},
                        {"name": "m", "engine": {"preset": "trtllm", "capacity_scheduler_policy":
                                                 "MAX_UTILIZATION"}},
                        {"name": "s", "engine": {"preset": "sglang",
                                                 "schedule_conservativeness": 0.5}},
                        {"name": "g", "engine": {"preset": "tgi"}}]}
    pools = {rc.variant: rc.pool() for rc in load(write_scenario(tmp_path, doc)).runs}
    built = {}
    for name, pool in pools.items():
        alloc = make_kv(pool.engine, 100)
        built[name] = make_scheduler(pool.engine, alloc, 0, 1, ItlRecorder(),
                                     knobs=pool.preset.scheduler.knobs)
    assert type(built["t"]) is TrtllmScheduler and built["t"].bs == 32
    assert type(built["m"]) is TrtllmMaxUtilizationScheduler
    s = built["s"]
    assert type(s) is SglangScheduler and s.chunked and s.clip == 4096
    assert s.ratio_init == 0.35 and s.ratio_min == 0.35 * 0.14
    g = built["g"]
    assert type(g) is TgiScheduler and (g.max_waiting_tokens, float(g.waiting_served_ratio)) \
        == (20, float(np.float32(0.3)))
    contiguous = pools["g"].engine.model_copy(update={"kv_allocator": "contiguous_max_tokens"})
    with pytest.raises(ValueError, match="paged KV allocator"):
        make_scheduler(contiguous, make_kv(contiguous, 100), 0, 1, ItlRecorder())


# ------------------------------------------------------------------ whole runs


def _scenario(write_scenario, tmp_path):
    doc = {"name": "policies", "seed": 4, "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 4096, "kv_cache_memory_gib": 1.0},
           "workload": {"num_requests": 160,
                        "arrival": {"process": "poisson", "rate_per_s": 12},
                        "classes": [
                            {"name": "chat", "weight": 3,
                             "prompt_tokens": {"dist": "lognormal", "mean": 700, "sigma": 0.8,
                                               "min": 4, "max": 3000},
                             "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.8,
                                               "min": 1, "max": 1000}},
                            {"name": "samples", "weight": 1, "n": 3,
                             "prompt_tokens": {"dist": "uniform", "min": 10, "max": 600},
                             "output_tokens": {"dist": "uniform", "min": 1, "max": 200}}]},
           "variants": [
               {"name": "trtllm", "engine": {"preset": "trtllm"}},
               {"name": "trtllm-chunked", "engine": {"preset": "trtllm",
                                                     "enable_chunked_prefill": True,
                                                     "max_num_batched_tokens": 1024}},
               {"name": "trtllm-maxutil", "engine": {
                   "preset": "trtllm", "capacity_scheduler_policy": "MAX_UTILIZATION",
                   "enable_chunked_prefill": True, "max_num_batched_tokens": 1024}},
               {"name": "sglang", "engine": {"preset": "sglang",
                                             "max_num_batched_tokens": 1024}},
               {"name": "sglang-unchunked", "engine": {"preset": "sglang",
                                                       "enable_chunked_prefill": False,
                                                       "schedule_conservativeness": 0.3}},
               {"name": "tgi", "engine": {"preset": "tgi", "waiting_served_ratio": 1.2,
                                          "max_waiting_tokens": 10}}]}
    return load(write_scenario(tmp_path, doc))


def test_each_engine_preset_runs_every_request_and_macro_steps_change_nothing(
        write_scenario, tmp_path):
    loaded = _scenario(write_scenario, tmp_path)
    retracted = {}
    for rc in loaded.runs:
        trace = build(rc.workload, rc.seed, loaded.base_dir)
        ref = simulate_both_ways(rc, trace)
        status = np.asarray(ref.requests.status)
        assert (status == "finished").all(), rc.variant
        retracted[rc.variant] = sum(r.preemptions for r in ref.replicas)
    assert retracted["trtllm"] == retracted["trtllm-chunked"] == retracted["tgi"] == 0
    assert retracted["trtllm-maxutil"] > 0 and retracted["sglang"] > 0
