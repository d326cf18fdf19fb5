"""Pipeline parallelism with up to PP batches in flight (vLLM V1's batch queue,
``EngineCore.step_with_batch_queue`` in vllm/v1/engine/core.py at 00080ee; the
scheduler skips requests in flight, ``Scheduler.schedule`` in
vllm/v1/core/sched/scheduler.py at 00024d3).

The scheduler is driven by hand (batches scheduled and completed in pipeline order); the
replica is run on Llama-3.1-70B, TP 4 × PP 2 on H100 SXM, against the stage times its
:class:`~capsim.cost.pipeline.PipelinePricer` gives.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from capsim.cost.terms import step_input
from capsim.engine.pipeline import PipelinedReplica
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload.build import build


def pipelined(budget=8, batches=2, num_blocks=1000):
    sched = ContinuousScheduler(max_num_seqs=16, max_num_batched_tokens=budget, chunked=True,
                                allocator=BlockAllocator(num_blocks, 4), num_classes=1,
                                itl=ItlRecorder())
    sched.enable_pipeline(batches)
    return sched


def _launch(sched, t, logits=None):
    """Schedule a batch at ``t`` and send it down the pipeline (its LM-head rows, read
    before it leaves as the replica prices it, appended to ``logits``)."""
    step = sched.schedule(t)
    if step is not None:
        if logits is not None:
            logits.append(step.logits_seqs)
        sched.launch(step)
    return step


def test_a_new_batch_takes_only_what_is_not_in_flight():
    """A 12-token prompt under an 8-token budget: batch A carries its first 8 tokens;
    batch B, scheduled while A is in flight, its last 4 on top of A's 8 (vLLM advances
    ``num_computed_tokens`` at scheduling, so the next chunk may follow down the
    pipeline). Its first token comes when B leaves the last stage; its decode is the
    next batch, and while that decode is in flight nothing else is schedulable."""
    sched = pipelined()
    sched.add(Request(0, 0, 0.0, 12, 3))
    logits = []
    a = _launch(sched, 0.0, logits)
    assert [(r.rid, n) for r, n in a.prefills] == [(0, 8)]
    b = _launch(sched, 0.0, logits)
    assert [(r.rid, n) for r, n in b.prefills] == [(0, 4)]
    assert b.prefill_attn_pairs == 4 * 8 + 4 * 5 / 2         # 4 new tokens over 8 cached
    assert logits == [0, 1]                                  # only the last chunk's LM head
    assert _launch(sched, 0.0) is None                       # every prompt token in flight
    sched.complete(a, 1.0)
    req = sched.running[0]
    assert req.num_computed == 8 and req.num_generated == 0
    assert _launch(sched, 1.0) is None                       # B still carries the rest
    sched.complete(b, 1.5)
    assert req.first_token_s == 1.5 and req.num_inflight == 0
    c = _launch(sched, 1.5)
    assert c.decode_seqs == 1 and c.decode_ctx_tokens == 13
    assert _launch(sched, 1.5) is None                       # its decode is in flight
    sched.complete(c, 2.5)
    d = _launch(sched, 2.5)
    assert d.decode_seqs == 1
    sched.complete(d, 3.5)
    assert sched.finished == [req] and req.finish_s == 3.5
    assert req.max_itl_s == 1.0                              # 1.5 → 2.5 → 3.5


def test_decoders_keep_the_lane_of_the_batch_that_emitted_their_token():
    """Two prompts in two batches decode in two lanes: each batch carries one decode, so
    a PP-2 pipeline holds both sequences at once, each waiting only for its own batch."""
    sched = pipelined(budget=8)
    sched.add(Request(0, 0, 0.0, 8, 4))
    sched.add(Request(1, 0, 0.0, 8, 4))
    a, b = _launch(sched, 0.0), _launch(sched, 0.0)
    assert [r.rid for r, _ in a.prefills] == [0] and [r.rid for r, _ in b.prefills] == [1]
    sched.complete(a, 1.0)
    c = _launch(sched, 1.0)                                  # r0's decode, r1 still in B
    assert c.decode_seqs == 1 and not c.prefills
    sched.complete(b, 1.5)
    d = _launch(sched, 1.5)
    assert d.decode_seqs == 1 and d.lane is b.lane and c.lane is a.lane
    assert sched.num_decoding == 2


def test_preemption_never_picks_a_request_in_flight():
    """KV for 3 blocks of 4 tokens, a 16-token prompt under an 8-token budget: A carries
    its first chunk (2 blocks); its second chunk needs 2 blocks with 1 free, and the only
    prefill to preempt is in flight, so B waits instead (vLLM's ``self.running.pop()``
    can take an in-flight request; capsim does not). Once A is back, the chunk is
    scheduled as without PP: short of blocks, the request preempts itself."""
    sched = pipelined(budget=8, num_blocks=3)
    sched.add(Request(0, 0, 0.0, 16, 2))
    a = _launch(sched, 0.0)
    assert [(r.rid, n) for r, n in a.prefills] == [(0, 8)]
    assert _launch(sched, 0.0) is None
    assert sched.running[0].num_inflight == 8 and sched.counters.preemptions == 0
    sched.complete(a, 1.0)
    assert _launch(sched, 1.0) is None and sched.counters.preemptions == 1


# ------------------------------------------------------------------ the replica

DOC = {
    "name": "pp", "model": "llama-3.1-70b", "hardware": "h100-sxm",
    "engine": {"tensor_parallel_size": 4, "pipeline_parallel_size": 2, "max_model_len": 8192,
               "max_num_batched_tokens": 2048, "enable_prefix_caching": False},
    "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate_per_s": ".inf"},
                 "classes": [{"name": "p", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 2048},
                              "output_tokens": {"dist": "fixed", "value": 1}}]},
    # vLLM with its host work in series (--no-async-scheduling) and SGLang overlapping it.
    "variants": [{"name": "vllm", "engine": {"async_scheduling": False}},
                 {"name": "sglang", "engine": {"preset": "sglang"}}],
}


def _run(tmp_path, doc=DOC, variant="vllm", macro_steps=True):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc).replace("'.inf'", ".inf"))
    rc = next(r for r in load(path).runs if r.variant == variant)
    return rc, simulate(rc, build(rc.workload, rc.seed, base_dir=path.parent),
                        macro_steps=macro_steps)


def test_prefill_batches_stream_through_the_stages(tmp_path):
    """40 prompts of 2,048 tokens at t = 0, one per batch. The first leaves after the round
    trip R = host + stage 0 + handoff + stage 1. Two batches are in flight and a new one
    is scheduled only when the oldest comes back (vLLM's queue of PP batches), so batch
    k + 2 leaves R after batch k — unless one resource is slower than R / 2: every two
    batches take max(R, 2 × slowest of host, stage 0, stage 1). Here the stages are
    balanced (~0.078 s each), so the prompts leave in pairs per R: twice the throughput
    of one batch in flight (R per prompt)."""
    rc, res = _run(tmp_path)
    pricer = rc.pool().pricer(rc.model)
    kw = dict(prefill_tokens=2048, prefill_attn_pairs=2048 * 2049 / 2, prefill_kv_tokens=2048,
              logits_seqs=1, prefill_seqs=1)
    (s0, s1), (h,), host, overlapped, _, bound = pricer.stage_times(*step_input(**kw))
    assert bound
    assert not overlapped and s0 > 0.05 and s1 > 0.05       # compute-bound prefill
    trip = host + s0 + h + s1
    assert trip == pytest.approx(pricer.cost(**kw).seconds, rel=1e-12)
    done = np.sort(res.requests.finish_s)
    assert done[0] == pytest.approx(trip, rel=1e-9)
    pair = max(trip, 2 * max(host, s0, s1))
    assert pair == trip
    assert done[2:] - done[:-2] == pytest.approx(np.full(38, pair), rel=1e-9)
    assert trip * 40 / (done[-1] - done[0] + trip) == pytest.approx(2.0, rel=0.03)


def test_a_batch_alone_takes_the_sum_of_the_stages(tmp_path):
    """At low load (one request, no overlap) the pipeline's latency is the one-batch
    price: TTFT of a 2,048-token prompt = cost().seconds; each decode gap = a decode
    batch's cost."""
    doc = copy.deepcopy(DOC)
    doc["workload"]["num_requests"] = 1
    doc["workload"]["classes"][0]["output_tokens"]["value"] = 4
    rc, res = _run(tmp_path, doc)
    pricer = rc.pool().pricer(rc.model)
    r = res.requests
    ttft = float(r.first_token_s[0] - r.arrival_s[0])
    assert ttft == pytest.approx(pricer.cost(prefill_tokens=2048,
                                             prefill_attn_pairs=2048 * 2049 / 2,
                                             prefill_kv_tokens=2048, logits_seqs=1,
                                             prefill_seqs=1).seconds, rel=1e-12)
    decode = [pricer.cost(decode_seqs=1, decode_ctx_tokens=2048 + i, logits_seqs=1).seconds
              for i in range(1, 4)]
    assert float(r.finish_s[0] - r.first_token_s[0]) == pytest.approx(sum(decode), rel=1e-12)


def test_macro_steps_do_not_change_a_pipelined_run(tmp_path):
    """Macro-steps are off in a pipelined replica: the run is the step-by-step one."""
    doc = copy.deepcopy(DOC)
    doc["workload"] = {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 8},
                       "classes": [{"name": "c", "weight": 1,
                                    "prompt_tokens": {"dist": "uniform", "min": 100,
                                                      "max": 3000},
                                    "output_tokens": {"dist": "uniform", "min": 5,
                                                      "max": 300}}]}
    _, a = _run(tmp_path, doc, macro_steps=True)
    _, b = _run(tmp_path, doc, macro_steps=False)
    assert (a.requests.status == "finished").all()
    np.testing.assert_array_equal(a.requests.finish_s, b.requests.finish_s)
    np.testing.assert_array_equal(a.requests.first_token_s, b.requests.first_token_s)


def test_engines_without_batches_in_flight_run_one_at_a_time(tmp_path):
    """SGLang's policy is not pipelined here: one batch at a time, the sum of the stages
    per prompt (docs/how-it-works/moe-mla.md, Parallelism)."""
    rc, res = _run(tmp_path, variant="sglang")
    pricer = rc.pool().pricer(rc.model)
    done = np.sort(res.requests.finish_s)
    one = pricer.cost(prefill_tokens=2048, prefill_attn_pairs=2048 * 2049 / 2,
                      prefill_kv_tokens=2048, logits_seqs=1, prefill_seqs=1).seconds
    assert float(np.median(np.diff(done))) >= 0.95 * one


def test_pipelined_replica_is_used_for_pp_only(tmp_path):
    from capsim.engine.pipeline import replica_class
    from capsim.engine.replica import Replica
    rc, _ = _run(tmp_path)
    assert replica_class(rc.pool()) is PipelinedReplica
    doc = copy.deepcopy(DOC)
    doc["engine"]["pipeline_parallel_size"] = 1
    rc1, _ = _run(tmp_path, doc)
    assert replica_class(rc1.pool()) is Replica
