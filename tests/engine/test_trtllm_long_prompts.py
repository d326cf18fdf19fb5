"""20,000-token prompts on TensorRT-LLM's scheduler with the settings trtllm-bench picks
(preset trtllm-bench: Llama-3.1-8B FP8 on one H100, the 20000/2000 cell of case
tput_trtllm_v10_h100_fp8_llama31_8b_isl_osl_grid): each prompt runs whole in one forward
beside the running decodes; with chunked context it runs in chunks beside them."""

from __future__ import annotations

import copy

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import FINISHED, Request
from capsim.engine.scheduler import make_kv, make_scheduler
from capsim.metrics.summary import summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build
from support.steps import batch, step

DOC = {"name": "long", "model": "llama-3.1-8b", "hardware": "h100-sxm",
       "engine": {"preset": "trtllm-bench", "dtype": "fp8", "kv_cache_dtype": "fp8",
                  "free_gpu_memory_fraction": 0.95},
       "workload": {"num_requests": 60, "arrival": {"process": "constant", "rate_per_s": 1e9},
                    "classes": [{"name": "c", "weight": 1,
                                 "prompt_tokens": {"dist": "fixed", "value": 20000},
                                 "output_tokens": {"dist": "fixed", "value": 2000}}]}}


def _loaded(tmp_path, write_scenario, **engine):
    doc = copy.deepcopy(DOC)
    doc["engine"].update(engine)
    return load(write_scenario(tmp_path, doc))


def _scheduler(pool):
    alloc = make_kv(pool.engine, pool.kv.num_gpu_blocks)
    sched = make_scheduler(pool.engine, alloc, 0, 1, ItlRecorder(),
                           knobs=pool.preset.scheduler.knobs)
    return sched, alloc


def test_each_20k_prompt_runs_whole_beside_every_running_decode(tmp_path, write_scenario):
    """Budget 20,064 = one 20,000-token prompt + up to 64 decodes. The KV pool holds 33,153
    blocks of 32: 48 reservations of 22,000 tokens (688 blocks each). Prompts 0..47 start one
    per step beside the k decodes already running; the 49th waits for the first to end
    (GUARANTEED_NO_EVICT), then starts beside the 47 still decoding; all 60 end, none paused."""
    pool = _loaded(tmp_path, write_scenario).runs[0].pool()
    assert (pool.engine.max_num_batched_tokens, pool.engine.max_num_seqs) == (20064, 64)
    assert pool.kv.num_gpu_blocks == 33153
    sched, alloc = _scheduler(pool)
    reqs = [Request(i, 0, 0.0, 20000, 2000) for i in range(60)]
    for r in reqs:
        sched.add(r)
    for k in range(48):
        assert batch(step(sched, float(k))) == ([(k, 20000)], k)
    assert alloc.num_free_blocks == 33153 - 48 * 688 < 688
    t, mixed = 48.0, []
    while sched.has_work():
        s = step(sched, t)
        if s.prefills:
            mixed.append(batch(s))
        t += 1
    assert mixed[0] == ([(48, 20000)], 47)                # first end frees one reservation
    assert all(len(p) == 1 and p[0][1] == 20000 and d >= 36 for p, d in mixed)
    assert len(mixed) == 12 and all(r.state == FINISHED for r in reqs)
    assert sched.counters.preemptions == 0 and alloc.num_used_blocks == 0


def test_with_chunked_context_a_20k_prompt_runs_in_chunks_beside_the_decodes(tmp_path,
                                                                              write_scenario):
    """enable_chunked_prefill: trtllm-bench keeps its estimate (2,048 tokens, no floor); a
    20,000-token prompt takes what the decodes leave, cut to a multiple of 32: with one
    decode running, 2,047 -> 2,016 tokens a step, nine chunks of 2,016 then 1,856, the
    decode advancing every step; its first token comes with the last chunk."""
    pool = _loaded(tmp_path, write_scenario, enable_chunked_prefill=True).runs[0].pool()
    assert (pool.engine.max_num_batched_tokens, pool.engine.chunked) == (2048, True)
    sched, _ = _scheduler(pool)
    short, long = Request(0, 0, 0.0, 64, 500), Request(1, 0, 0.0, 20000, 2000)
    sched.add(short)
    assert batch(step(sched, 0.0)) == ([(0, 64)], 0)
    sched.add(long)
    chunks = [batch(step(sched, float(t))) for t in range(1, 11)]
    assert chunks == [([(1, 2016)], 1)] * 9 + [([(1, 1856)], 1)]
    sched.sync()
    assert short.num_generated == 11 and long.num_generated == 1


def test_trtllm_bench_serves_every_20k_prompt_of_the_grid_cell(tmp_path, write_scenario):
    """The whole run: 60 requests of 20,000 / 2,000 tokens all complete (the trtllm preset
    rejected every one), with no preemption."""
    loaded = _loaded(tmp_path, write_scenario)
    run = loaded.runs[0]
    result = simulate(run, build(run.workload, run.seed, loaded.base_dir))
    assert len(result.requests.reject_reason) == 60
    assert (result.requests.reject_reason == "").all()
    assert result.replicas[0].preemptions == 0


def test_a_budget_with_no_room_beside_the_prompt_runs_each_prompt_alone(tmp_path,
                                                                        write_scenario):
    """The gap the issue measured: with max_num_tokens exactly 20,000 a prompt fits only
    when no decode runs, so the 12 requests run one after another (each prompt alone, then
    its 2,000 decodes); trtllm-bench's 20,064 lets each start beside the decodes, over four
    times the output throughput (capsim: 896 vs 191 tok/s when written)."""
    tput = {}
    for budget in (None, 20000):
        extra = {} if budget is None else {"max_num_batched_tokens": budget}
        doc = copy.deepcopy(DOC)
        doc["engine"].update(extra)
        doc["workload"]["num_requests"] = 12
        loaded = load(write_scenario(tmp_path, doc))
        run = loaded.runs[0]
        result = simulate(run, build(run.workload, run.seed, loaded.base_dir))
        tput[budget] = summarize(result, loaded.spec.slo)[0].output_throughput_tok_per_s
    assert tput[None] > 4 * tput[20000]
