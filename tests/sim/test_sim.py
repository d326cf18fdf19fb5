"""Whole runs: the seeds' qualitative results, determinism, invariants."""

from __future__ import annotations

import math

from pathlib import Path

import numpy as np
import pytest

from capsim.scenario.load import load
from capsim.metrics.summary import request_frame, summarize
from capsim.cost.pricer import StepPricer
from capsim.sim.simulate import simulate
from capsim.workload import build


@pytest.fixture
def scenario(tmp_path, write_scenario):
    """``scenario(**overrides)`` → the path of the test scenario (Llama-3.1-8B on one H100,
    200 chat requests) with these top-level keys replaced."""
    def write(**overrides) -> Path:
        doc = {
            "name": "t", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "engine": {"max_model_len": 8192},
            "workload": {"num_requests": 200, "arrival": {"process": "poisson", "rate_per_s": 4},
                         "classes": [{"name": "chat", "weight": 1,
                                      "prompt_tokens": {"dist": "uniform", "min": 50, "max": 3000},
                                      "output_tokens": {"dist": "uniform", "min": 2, "max": 300}}]},
        }
        for key, value in overrides.items():
            doc[key] = value
        return write_scenario(tmp_path, doc)
    return write


@pytest.fixture
def seed_experiment(scenario, trace_of):
    """``seed_experiment(engine)`` → (run, result) of seed 000: 32 sequences decoding at
    ~512 context, one 2,048-token prompt arriving."""
    def run_seed(engine: dict) -> tuple:
        path = scenario(model="llama-2-7b", hardware="a100-80gb",
                        engine={"max_model_len": 4096, "max_num_seqs": 64, **engine})
        run = load(path).runs[0]
        rows = [(0.0, 512, 60)] * 32 + [(0.25, 2048, 2)]
        result = simulate(run, trace_of(rows))
        return run, result
    return run_seed


def decode_step_s(run, ctx: int) -> float:
    pricer = run.pool().pricer(run.model)      # with the engine's host overhead
    return pricer.cost(decode_seqs=32, decode_ctx_tokens=32 * ctx).seconds


def test_unchunked_max_itl_is_a_whole_prefill_plus_a_decode_step(seed_experiment, scenario):
    """Seed 000 "shared GPU": the median gap stays one decode step; the worst gap is one
    2,048-token prefill plus one decode step (84 ms vs 11 ms in the seed's A100 arithmetic)."""
    # A budget that prefills the 32 prompts in one step, so all 32 then decode in lockstep.
    run, result = seed_experiment({"enable_chunked_prefill": False,
                                   "max_num_batched_tokens": 16384})
    row = summarize(result, load(scenario()).spec.slo)[0]
    pricer = run.pool().pricer(run.model)
    prefill_s = pricer.cost(prefill_tokens=2048, prefill_attn_pairs=2048 * 2049 / 2,
                            prefill_kv_tokens=2048, logits_seqs=1).seconds
    decode_s = decode_step_s(run, 540)
    assert row.itl_p50_ms == pytest.approx(decode_s * 1e3, rel=0.05)
    assert row.itl_max_ms == pytest.approx((prefill_s + decode_s) * 1e3, rel=0.05)
    assert row.itl_max_ms > 5 * row.itl_p50_ms


def test_chunking_caps_the_stall(seed_experiment, scenario):
    """Seed 000 "chunked prefill": chunk 512 cuts the worst gap to a fraction of the unchunked one."""
    _, unchunked = seed_experiment({"enable_chunked_prefill": False,
                                    "max_num_batched_tokens": 16384})
    _, chunked = seed_experiment({"max_num_batched_tokens": 512})
    slo = load(scenario()).spec.slo
    u, c = summarize(unchunked, slo)[0], summarize(chunked, slo)[0]
    assert c.itl_max_ms < 0.5 * u.itl_max_ms
    assert c.itl_p50_ms == pytest.approx(u.itl_p50_ms, rel=0.05)


def test_static_batching_wastes_slot_steps_continuous_does_not(scenario, trace_of):
    """Seed 000: with a queue always full, static batching idles most slot-steps
    (uneven reply lengths), continuous batching keeps slots busy."""
    rng = np.random.default_rng(0)
    outs = rng.choice([8, 16, 32, 64, 128], size=64)
    rows = [(0.0, 64, int(o)) for o in outs]
    occ = {}
    for sched in ("static", "continuous"):
        path = scenario(engine={"scheduler": sched, "max_num_seqs": 8,
                                "max_model_len": 4096})
        result = simulate(load(path).runs[0], trace_of(rows))
        occ[sched] = summarize(result, load(path).spec.slo)[0].slot_occupancy
    assert occ["static"] < 0.6
    assert occ["continuous"] > 0.85
    # Same tokens either way: Σ outputs = useful slot-steps.
    assert occ["continuous"] > 1.5 * occ["static"]


@pytest.mark.parametrize("sched", ["static", "continuous"])
def test_ttft_tpot_itl_e2el_agree_per_request(scenario, sched):
    """Issue 16 item 4: each request's TPOT is the mean of its own gaps, so it can never exceed
    its max ITL, and E2EL = TTFT + Σ gaps. Static batching holds every reply until the batch
    ends (seed 002 Q1: the 50-token user "can't leave until the batch finishes"): TTFT = E2EL,
    TPOT 0, every recorded gap 0 — the batch's wait is in TTFT and E2EL alike; no gap reaches
    the client, so its ITL figures and max ITL are n/a (NaN, issue 31 item 9), as vllm bench
    serve records no ITL for a reply in one chunk."""
    path = scenario(engine={"scheduler": sched, "max_num_seqs": 16, "max_model_len": 8192})
    loaded = load(path)
    trace = build(loaded.spec.workload, loaded.spec.seed, loaded.base_dir)
    result = simulate(loaded.runs[0], trace)
    df = request_frame(result)
    done = df[(df["status"] == "finished") & (df["output_tokens"] > 1)]
    assert len(done) > 150
    if sched != "static":
        assert (done["tpot_ms"] <= done["max_itl_ms"] + 1e-9).all()
    row = summarize(result, loaded.spec.slo)[0]
    gaps_ms = np.asarray(result.itl.gap_s) * 1e3
    counts = np.asarray(result.itl.count, np.int64)
    # Σ over requests of (E2EL − TTFT) = Σ of all recorded gaps.
    assert (done["e2el_ms"] - done["ttft_ms"]).sum() == pytest.approx(
        float((gaps_ms * counts).sum()), rel=1e-9)
    if sched == "static":
        assert (done["ttft_ms"] == done["e2el_ms"]).all()
        assert (done["tpot_ms"] == 0).all() and done["max_itl_ms"].isna().all()
        assert (gaps_ms == 0).all()
        assert math.isnan(row.itl_max_ms) and math.isnan(row.itl_p99_ms)
        assert row.tpot_p50_ms == 0 and row.itl_stalls == 0
        assert row.ttft_p50_ms == row.e2el_p50_ms > 1000     # the batch's wait, seen up front
    else:
        assert row.ttft_p50_ms < row.e2el_p50_ms
        assert row.itl_max_ms >= row.tpot_p99_ms > 0


def test_timeline_shows_the_head_of_line_stall_the_mean_hides(scenario):
    """Issue 16 item 5 (seed 002 Q10: a whole long prompt in one step stalls every running
    decode): on the timeline's display grid the longest step per bin of unchunked continuous
    batching is several times chunked-512's, while the per-bin mean step stays close. The
    data behind the chart: the same numbers the timeline panel draws."""
    from capsim.report.run.timeline import display_grid, step_times_ms
    workload = {"num_requests": 300, "arrival": {"process": "poisson", "rate_per_s": 6},
                "classes": [{"name": "chat", "weight": 3,
                             "prompt_tokens": {"dist": "uniform", "min": 100, "max": 800},
                             "output_tokens": {"dist": "uniform", "min": 50, "max": 300}},
                            {"name": "rag", "weight": 1,
                             "prompt_tokens": {"dist": "uniform", "min": 4000, "max": 7000},
                             "output_tokens": {"dist": "uniform", "min": 50, "max": 200}}]}
    longest, mean = {}, {}
    for name, engine in (("unchunked", {"enable_chunked_prefill": False,
                                        "max_num_batched_tokens": 8192}),
                         ("chunked", {"enable_chunked_prefill": True,
                                      "max_num_batched_tokens": 512})):
        path = scenario(engine={"max_model_len": 8192, **engine}, workload=workload)
        loaded = load(path)
        result = simulate(loaded.runs[0], build(loaded.spec.workload, loaded.spec.seed,
                                                loaded.base_dir))
        width, n = display_grid(result.timelines, result.sim_end_s)
        mean[name], longest[name] = step_times_ms(result.timelines, width, n)
        assert (longest[name] >= mean[name] - 1e-9).all()
    busy = (mean["unchunked"] > 0) & (mean["chunked"] > 0)
    # A 4,000-7,000-token prefill in one step vs at most 512 tokens a step.
    assert longest["unchunked"].max() > 4 * longest["chunked"].max()
    # In a quarter of the busy bins or more, unchunked's longest step is over twice the longest
    # step chunked-512 takes anywhere in the run (40 % of 170 bins with this seed) ...
    assert (longest["unchunked"][busy] > 2 * longest["chunked"].max()).mean() > 0.25
    # ... while the typical mean step is about the same (10 ms vs 12 ms at the median bin).
    assert 0.67 < np.median(mean["unchunked"][busy]) / np.median(mean["chunked"][busy]) < 1.5


def test_same_seed_same_numbers(scenario):
    path = scenario()
    loaded = load(path)
    trace = build(loaded.spec.workload, loaded.spec.seed, loaded.base_dir)
    a = summarize(simulate(loaded.runs[0], trace), loaded.spec.slo)
    b = summarize(simulate(loaded.runs[0], trace), loaded.spec.slo)
    assert [r.model_dump() for r in a] == [r.model_dump() for r in b]
    other = load(path, seed=2)
    trace2 = build(other.spec.workload, other.spec.seed, other.base_dir)
    c = summarize(simulate(other.runs[0], trace2), other.spec.slo)
    assert c[0].ttft_p50_ms != a[0].ttft_p50_ms


def test_requests_too_long_are_rejected_and_counted(scenario, trace_of):
    path = scenario(engine={"max_model_len": 1024})
    run = load(path).runs[0]
    result = simulate(run, trace_of([(0.0, 100, 10), (0.1, 1000, 100), (0.2, 50, 5)]))
    assert result.requests.status.tolist() == ["finished", "rejected", "finished"]
    assert "max_model_len 1024" in result.requests.reject_reason[1]
    row = summarize(result, load(path).spec.slo)[0]
    assert row.num_rejected == 1 and row.num_finished == 2


def test_kv_pressure_preempts_and_still_conserves_everything(scenario, trace_of):
    """A tiny KV cache forces recompute preemptions; invariants (checked inside simulate) hold."""
    path = scenario(engine={"max_model_len": 4096, "kv_cache_memory_gib": 1.7})
    run = load(path).runs[0]
    assert run.pool().kv.num_gpu_blocks * 16 < 40 * 1400 / 3     # far less than the 40 requests need
    rows = [(i * 0.01, 1000, 400) for i in range(40)]
    result = simulate(run, trace_of(rows))
    assert sum(r.preemptions for r in result.replicas) > 0
    assert all(s == "finished" for s in result.requests.status)
    assert result.itl.count.sum() == 40 * 399


def test_result_round_trips_through_json(scenario):
    path = scenario(workload={"num_requests": 20, "arrival": {"process": "constant",
                              "rate_per_s": 5}, "classes": [
        {"name": "a", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 100},
         "output_tokens": {"dist": "fixed", "value": 1}}]})
    loaded = load(path)
    result = simulate(loaded.runs[0], build(loaded.spec.workload, 1, loaded.base_dir))
    again = type(result).model_validate_json(result.model_dump_json())
    assert again.requests.first_token_s.tolist() == result.requests.first_token_s.tolist()
    assert np.isnan(summarize(again, loaded.spec.slo)[0].tpot_p50_ms)   # 1-token replies: no TPOT


def test_a_request_larger_than_the_whole_kv_cache(scenario, trace_of):
    """vLLM refuses to start when one max_model_len request cannot fit (its start-up check,
    vllm/v1/core/kv_cache_utils.py); SGLang serves what fits and rejects the rest."""
    from capsim.common.errors import ScenarioError

    with pytest.raises(ScenarioError, match="vLLM refuses to start"):
        load(scenario(engine={"max_model_len": 8192, "kv_cache_memory_gib": 0.5}))
    run = load(scenario(engine={"preset": "sglang", "max_model_len": 8192,
                                "kv_cache_memory_gib": 0.5})).runs[0]
    cache_tokens = run.pool().kv.num_gpu_blocks * run.pool().engine.block_size
    assert cache_tokens == 4096                       # 0.5 GiB / 128 KiB per token
    result = simulate(run, trace_of([(0.0, 4000, 200), (0.1, 3000, 100)]))
    assert result.requests.status.tolist() == ["rejected", "finished"]
    assert "KV blocks" in result.requests.reject_reason[0]


@pytest.fixture
def small_run(scenario, trace_of):
    run = load(scenario()).runs[0]
    return run, trace_of([(0.0, 100, 10), (0.1, 200, 10), (0.2, 300, 10)])


def test_a_request_that_never_ends_breaks_the_run(small_run, monkeypatch):
    import capsim.sim.simulate as sim
    from capsim.sim.traffic import Traffic
    run, trace = small_run
    admit = Traffic.admit
    monkeypatch.setattr(Traffic, "admit",
                        lambda self, req: None if req.rid == 1 else admit(self, req))
    with pytest.raises(sim.InvariantError,
                       match=r"request 1 neither finished nor rejected \(2 of 3 requests ended\)"):
        simulate(run, trace)


def test_lost_tokens_and_unrecorded_gaps_break_the_run(small_run, monkeypatch):
    import capsim.sim.simulate as sim
    from capsim.engine.recorder import ItlRecorder
    from capsim.sim.request_log import RequestLog
    run, trace = small_run
    total_gaps = ItlRecorder.total_gaps
    with monkeypatch.context() as m:
        m.setattr(ItlRecorder, "total_gaps", lambda self: total_gaps(self) - 1)
        with pytest.raises(sim.InvariantError,
                           match="recorded 26 inter-token gaps; finished requests imply 27"):
            simulate(run, trace)
    record = RequestLog.record

    def lose_one_token(self, req):
        if req.rid == 2:
            req.num_generated -= 1
        record(self, req)

    monkeypatch.setattr(RequestLog, "record", lose_one_token)
    with pytest.raises(sim.InvariantError, match="request 2 emitted 9 of 10 tokens"):
        simulate(run, trace)


def test_server_path_delays_scheduling_by_request_before(scenario, trace_of):
    """SGLang's preset: HTTP, tokenizer and detokenizer processes take request_before_s
    (8.3 ms, fitted to load_sglang030_a100_llama31_8b_sharegpt_rps4_rps8) before a request
    can be scheduled; a lone request's TTFT is that plus its prefill step (with host work)."""
    run = load(scenario(engine={"preset": "sglang", "max_model_len": 8192})).runs[0]
    before_s = run.pool().preset.host_overhead.request_before_s
    assert before_s == pytest.approx(8.3e-3)
    result = simulate(run, trace_of([(1.0, 1000, 2)]))
    prefill_s = run.pool().pricer(run.model).cost(
        prefill_tokens=1000, prefill_attn_pairs=1000 * 1001 / 2, prefill_kv_tokens=1000,
        logits_seqs=1).seconds
    req = result.requests
    assert req.first_scheduled_s[0] == pytest.approx(1.0 + before_s, abs=1e-12)
    assert req.first_token_s[0] - req.arrival_s[0] == pytest.approx(before_s + prefill_s,
                                                                     rel=1e-9)


def test_async_engine_takes_a_request_arriving_mid_step_two_steps_later(scenario, trace_of):
    """vLLM 0.19 schedules asynchronously (vllm/v1/engine/core.py step_with_batch_queue):
    step k + 1 is composed while step k runs, so B, arriving during A's prefill step, is
    first scheduled when A's decode step ends (A's finish: 2 tokens); in series (the
    2024-25 builds) when the prefill step ends. A lone arrival at an idle engine waits for
    nothing (A at t = 0)."""
    trace = [(0.0, 1000, 2), (0.004, 100, 2)]
    for knob in (True, False):
        run = load(scenario(engine={"max_model_len": 8192, "async_scheduling": knob})).runs[0]
        assert run.pool().host_overhead.overlap == ("async" if knob else "serial")
        req = simulate(run, trace_of(trace)).requests
        assert req.first_scheduled_s[0] == 0.0
        assert req.first_token_s[0] > 0.004                 # B arrives during A's prefill
        at = req.finish_s[0] if knob else req.first_token_s[0]
        assert req.first_scheduled_s[1] == pytest.approx(at, abs=1e-12)


def test_async_scheduling_defaults_by_preset_and_drafter(scenario):
    """vllm/config/vllm.py at v0.19.0: async scheduling unless the drafter is neither EAGLE
    nor MTP; presets without the knob keep their own overlap (TGI 2.1: serial)."""
    def overlap(**engine) -> str:
        return load(scenario(engine={"max_model_len": 8192, **engine})).runs[0] \
            .pool().host_overhead.overlap
    assert overlap() == "async"
    assert overlap(speculative={"method": "ngram", "num_speculative_tokens": 3,
                                   "acceptance_rate": 0.6}) == "serial"
    assert overlap(speculative={"method": "eagle", "num_speculative_tokens": 3,
                                   "acceptance_rate": 0.6}) == "async"
    assert overlap(preset="sglang", async_scheduling=False) == "serial"
    # What a run names: the preset, and the switch where it departs from the default.
    pool = load(scenario(engine={"max_model_len": 8192, "async_scheduling": False})).runs[0].pool()
    assert pool.engine_label == "vllm-v1 (vLLM 0.19.0), async scheduling off"
    assert load(scenario(engine={"max_model_len": 8192})).runs[0].pool().engine_label == \
        "vllm-v1 (vLLM 0.19.0)"
    assert overlap(preset="tgi", enable_chunked_prefill=False,
                   max_num_batched_tokens=8192) == "serial"


def test_multi_step_spreads_the_host_step_over_its_window(scenario):
    """vLLM 0.6 with --num-scheduler-steps 10 schedules and prepares inputs once per window:
    each decode step carries a tenth of the preset's 1.05 ms per-step host work."""
    def decode_s(steps: int) -> float:
        engine = {"preset": "vllm-0.6", "max_model_len": 8192, "enable_chunked_prefill": False,
                  "num_scheduler_steps": steps}
        run = load(scenario(engine=engine)).runs[0]
        return run.pool().pricer(run.model).cost(decode_seqs=8, decode_ctx_tokens=8000).seconds
    assert decode_s(1) - decode_s(10) == pytest.approx(1.05e-3 * 0.9, rel=1e-9)
