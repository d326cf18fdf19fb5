"""Closed-loop runs (``process: concurrency``), warm-up and all-at-once arrivals, simulated:
who is sent when, how many are in flight, what the metrics leave out, determinism, Little's
law, and macro-steps identical to the step loop."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import capsim.sim.closed_loop as closed_loop
from capsim.common.errors import ScenarioError
from capsim.metrics.summary import request_frame, summarize
from capsim.results.model import FINISHED, REJECTED
from capsim.scenario.load import load
from capsim.sim.request_log import WARMUP
from capsim.sim.simulate import simulate
from capsim.workload import build

ENGINES = Path(__file__).parents[2] / "capsim" / "profiles" / "data" / "engines"


def fixed(prompt: int, output: int, name: str = "chat", weight: float = 1) -> dict:
    return {"name": name, "weight": weight, "prompt_tokens": {"dist": "fixed", "value": prompt},
            "output_tokens": {"dist": "fixed", "value": output}}


UNIFORM = {"name": "chat", "weight": 1,
           "prompt_tokens": {"dist": "uniform", "min": 32, "max": 3000},
           "output_tokens": {"dist": "uniform", "min": 2, "max": 400}}


@pytest.fixture
def scenario(tmp_path, write_scenario):
    """``scenario(arrival, classes, engine=, variants=, **workload)`` → the loaded scenario
    (Llama-3.1-8B on one H100)."""
    def make(arrival: dict, classes: list[dict], engine: dict | None = None,
             variants: list[dict] | None = None, **workload):
        if "duration_s" not in workload:
            workload.setdefault("num_requests", 40)
        doc = {"name": "cl", "seed": 4, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": {"max_model_len": 8192, **(engine or {})},
               "workload": {**workload, "arrival": arrival, "classes": classes}}
        if variants:
            doc["variants"] = variants
        return load(write_scenario(tmp_path, doc))
    return make


def run_of(loaded, i: int = 0, macro_steps: bool = True):
    rc = loaded.runs[i]
    return simulate(rc, build(rc.workload, rc.seed, loaded.base_dir), macro_steps=macro_steps)


def users(n: int, think_time_s: float = 0.0) -> dict:
    return {"process": "concurrency", "users": n, "think_time_s": think_time_s}


def ends(result) -> np.ndarray:
    """When each request ended: its last token, or its arrival if it was rejected."""
    r = result.requests
    return np.where(np.isnan(r.finish_s), r.arrival_s, r.finish_s)


def in_flight_max(result) -> int:
    """The most requests between arrival and end at once (ends first on ties)."""
    a, e = result.requests.arrival_s, ends(result)
    times = np.concatenate([e, a])
    steps = np.concatenate([-np.ones(len(e)), np.ones(len(a))])
    order = np.lexsort((steps, times))
    return int(np.cumsum(steps[order]).max())


@pytest.mark.parametrize("think", [0.0, 0.5])
def test_one_user_sends_each_request_when_the_previous_one_ends(scenario, think):
    result = run_of(scenario(users(1, think), [fixed(200, 30)], num_requests=8))
    r = result.requests
    assert r.arrival_s[0] == 0.0 and (r.status == FINISHED).all()
    assert np.array_equal(r.arrival_s[1:], r.finish_s[:-1] + think)      # exactly
    # Alone on the engine, every request takes the same time.
    e2e = r.finish_s - r.arrival_s
    assert np.allclose(e2e, e2e[0], rtol=1e-9)


@pytest.mark.parametrize("think", [0.0, 0.25])
def test_two_users_each_end_sends_the_next_request(scenario, think):
    result = run_of(scenario(users(2, think), [UNIFORM], num_requests=30))
    r = result.requests
    assert (r.arrival_s[:2] == 0.0).all()
    # Request i >= 2 is sent think seconds after the (i - 1)-th end, in row order.
    assert np.array_equal(r.arrival_s[2:], np.sort(ends(result))[:-2] + think)
    assert np.all(np.diff(r.arrival_s) >= 0)
    assert in_flight_max(result) == 2


def test_never_more_than_users_in_flight(scenario):
    result = run_of(scenario(users(7), [UNIFORM], engine={"max_num_seqs": 4},
                             num_requests=80))
    assert in_flight_max(result) == 7
    assert max(s.peak_running for s in result.replicas) == 4       # the rest wait in the queue


def test_a_rejected_request_releases_the_next_one(scenario):
    too_long = fixed(9000, 10, name="long", weight=1)            # > max_model_len 8192
    result = run_of(scenario(users(1, 0.1), [fixed(100, 10), too_long], num_requests=30))
    r = result.requests
    rejected = r.status == REJECTED
    assert 0 < rejected.sum() < 30
    assert np.array_equal(r.arrival_s[1:], ends(result)[:-1] + 0.1)


def test_a_loop_bounded_by_time_sends_nothing_at_or_after_it(scenario):
    """Tiny requests (~20 ms each) for 9 s: more rows than the first block drawn."""
    loaded = scenario(users(3), [fixed(16, 3)], duration_s=9.0)
    rc = loaded.runs[0]
    trace = build(rc.workload, rc.seed, loaded.base_dir)
    result = simulate(rc, trace)
    r = result.requests
    n = len(r.request_id)
    assert n > len(trace) and (r.arrival_s < 9.0).all() and (r.status == FINISHED).all()
    assert r.arrival_s.max() > 8.9                                  # it ran up to the end
    bounded = build(rc.workload.model_copy(update={"duration_s": None, "num_requests": n}),
                    rc.seed, loaded.base_dir)
    assert np.array_equal(r.prompt_tokens, bounded.prompt_tokens)   # the same rows, in order
    assert simulate(rc, trace, macro_steps=False).requests == r


def test_a_loop_bounded_by_time_whose_requests_are_all_rejected_stops(scenario, monkeypatch):
    monkeypatch.setattr(closed_loop, "MAX_REJECTED_IN_A_ROW", 500)
    loaded = scenario(users(2), [fixed(9000, 10)], duration_s=5.0)
    with pytest.raises(ScenarioError, match="last 500 requests were all rejected") as info:
        run_of(loaded)
    assert info.value.path == "workload.arrival" and "max_model_len" in str(info.value)


def test_warmup_requests_are_simulated_but_measured_by_nothing(scenario):
    loaded = scenario(users(3), [UNIFORM], num_requests=60, warmup_request_count=12)
    result = run_of(loaded)
    r = result.requests
    assert len(r.request_id) == 60
    assert (r.status[:12] == WARMUP).all() and (r.status[12:] == FINISHED).all()
    assert not np.isnan(r.finish_s[:12]).any()                    # they ran to the end
    row = summarize(result, loaded.spec.slo)[0]
    measured = slice(12, None)
    ttft_ms = (r.first_token_s[measured] - r.arrival_s[measured]) * 1e3
    assert row.num_requests == row.num_finished == 48 and row.num_rejected == 0
    assert row.ttft_p50_ms == pytest.approx(float(np.percentile(ttft_ms, 50)), rel=1e-12)
    assert row.ttft_max_ms == pytest.approx(float(ttft_ms.max()), rel=1e-12)
    # ITL: only the measured requests' gaps.
    assert int(np.asarray(result.itl.count).sum()) == int((r.output_tokens[measured] - 1).sum())
    assert (np.asarray(result.itl.class_id) == 0).all()
    span = r.finish_s[measured].max() - r.arrival_s[measured].min()
    assert row.request_throughput_per_s == pytest.approx(48 / span, rel=1e-12)
    assert list(request_frame(result, loaded.spec.slo)["request_id"]) == list(range(12, 60))
    # The run-level figures cover the whole run: busy ≤ 100 % of its span.
    assert 0 < row.gpu_busy_frac <= 1.0


def test_warmup_in_an_open_loop_is_the_first_requests_to_arrive(scenario):
    loaded = scenario({"process": "poisson", "rate_per_s": 6.0}, [UNIFORM], num_requests=50,
                      warmup_request_count=10)
    result = run_of(loaded)
    r = result.requests
    assert (r.status[:10] == WARMUP).all() and (r.status[10:] != WARMUP).all()
    assert summarize(result, loaded.spec.slo)[0].num_requests == 40
    assert int(np.asarray(result.itl.count).sum()) == int((r.output_tokens[10:] - 1).sum())


def test_same_seed_same_run_and_every_variant_sends_the_same_requests(scenario):
    loaded = scenario(users(4), [UNIFORM], num_requests=50,
                      variants=[{"name": "a"}, {"name": "b", "engine": {"max_num_seqs": 2}}])
    a1, a2, b = run_of(loaded, 0), run_of(loaded, 0), run_of(loaded, 1)
    assert a1.requests == a2.requests and a1.itl == a2.itl
    assert np.array_equal(a1.requests.prompt_tokens, b.requests.prompt_tokens)
    assert np.array_equal(a1.requests.output_tokens, b.requests.output_tokens)
    assert not np.array_equal(a1.requests.arrival_s, b.requests.arrival_s)   # served differently


@pytest.mark.parametrize("think", [0.0, 0.3])
def test_littles_law_users_equal_throughput_times_cycle_time(scenario, think):
    """N = X (R + Z): X the sending rate between measured requests, R their mean E2E latency,
    Z the think time (a user is either waiting for a reply or thinking)."""
    n = 6
    result = run_of(scenario(users(n, think), [UNIFORM], num_requests=900,
                             warmup_request_count=60))
    r = result.requests
    m = r.status == FINISHED
    a = r.arrival_s[m]
    x = (m.sum() - 1) / (a.max() - a.min())
    resp = float(np.mean(r.finish_s[m] - a))
    assert x * (resp + think) == pytest.approx(n, rel=0.03)


def test_all_at_once(scenario):
    loaded = scenario({"process": "constant", "rate_per_s": math.inf}, [UNIFORM], num_requests=60)
    result = run_of(loaded)
    assert (result.requests.arrival_s == 0.0).all()
    assert in_flight_max(result) == 60
    assert run_of(loaded, macro_steps=False).requests == result.requests


def test_identical_users_without_think_time_stay_in_lock_step(scenario):
    """Users sent together at t = 0 with identical requests and no think time never drift
    apart (the NIM concurrency sweep's 5- and 25-user TTFT rows, docs/fidelity.md): every
    later round's replies end one decode step apart, so its prompts (each a whole step of
    its own under TensorRT-LLM's unchunked context) arrive together and all but the first
    wait one whole prefill; real clients drift apart."""
    eng = {"preset": "trtllm", "async_scheduling": False}
    alone = run_of(scenario(users(1), [fixed(6000, 300)], engine=eng, num_requests=3))
    p = float((alone.requests.first_token_s - alone.requests.arrival_s)[1])
    r = run_of(scenario(users(4), [fixed(6000, 300)], engine=eng, num_requests=20)).requests
    ttft = (r.first_token_s - r.arrival_s).reshape(5, 4)          # rounds x users
    assert np.allclose(ttft[0] / p, [1, 2, 3, 4], rtol=0.01)      # t = 0: back to back
    for later in ttft[1:]:                                        # every later round alike
        assert later[0] / p == pytest.approx(1.05, abs=0.01)      # waits one decode step
        assert np.allclose(later[1:] / p, 2.01, rtol=0.005)       # then one prefill each
    sent = r.arrival_s.reshape(5, 4)
    span, cycle = sent[1:, -1] - sent[1:, 0], np.diff(sent[:, 0])[1:]
    assert (span < 2.1 * p).all() and (cycle > 15 * p).all()     # each round a burst


def test_a_server_path_in_a_balanced_loop_costs_the_second_wave_far_more_than_itself(
        scenario, tmp_path):
    """Identical long prompts with chunked prefill: the first wave's replies end one prefill
    apart, the next prompt's prefill takes as long, so the loop is balanced and a queue never
    drains. ``request_before_s`` (HTTP, tokenizer, wake-up before scheduling) lets each arrival
    during the short decode steps lose prefill time that is never won back: 50 ms of it adds
    ~0.77 s to the second wave's mean TTFT here (vLLM PR 43232's 30k-token, 64-user B200 run:
    docs/fidelity.md)."""
    preset = yaml.safe_load((ENGINES / "vllm-v1.yaml").read_text())
    preset["host_overhead"]["request_before_s"] = 0.05
    (tmp_path / "v1-path.yaml").write_text(yaml.safe_dump(preset))
    wave = {}
    for name in ("vllm-v1", "v1-path.yaml"):
        r = run_of(scenario(users(8), [fixed(16000, 1000)], num_requests=16,
                            engine={"preset": name, "max_model_len": 32768})).requests
        wave[name] = r.first_token_s - r.arrival_s
    base, path = wave["vllm-v1"], wave["v1-path.yaml"]
    assert np.allclose(path[:8] - base[:8], 0.05, atol=1e-9)      # the first wave: just the path
    assert path[8:].mean() - base[8:].mean() > 10 * 0.05           # the second: ~0.77 s more
    assert (path[8:] >= base[8:]).all()


def simulate_both(loaded, i: int = 0):
    """The step-by-step reference and the macro-step run, asserted identical (ITL runs as a
    multiset: a decode run records its gaps in another order)."""
    ref, fast = run_of(loaded, i, macro_steps=False), run_of(loaded, i)
    assert fast.requests == ref.requests
    assert sorted(zip(fast.itl.gap_s, fast.itl.count, fast.itl.class_id)) == \
        sorted(zip(ref.itl.gap_s, ref.itl.count, ref.itl.class_id))
    assert summarize(fast, loaded.spec.slo) == summarize(ref, loaded.spec.slo)
    assert fast.replicas == ref.replicas
    assert fast.timelines == ref.timelines
    assert fast.disagg == ref.disagg
    assert fast.sim_end_s == ref.sim_end_s
    return fast


@pytest.mark.parametrize("preset,think", [("vllm-v1", 0.0), ("vllm-v1", 0.05),
                                          ("vllm-0.6", 0.0), ("trtllm", 0.0), ("sglang", 0.0),
                                          ("tgi", 0.02)])
def test_macro_steps_equal_step_by_step_in_a_closed_loop(scenario, preset, think):
    long_replies = {**UNIFORM, "output_tokens": {"dist": "uniform", "min": 50, "max": 800}}
    # (TGI's launcher refuses a max_model_len over its 4,145-token prefill budget)
    engine = {"preset": preset, **({"max_model_len": 4096} if preset == "tgi" else {})}
    loaded = scenario(users(5, think), [long_replies], engine=engine,
                      num_requests=60, warmup_request_count=8,
                      variants=[{"name": "one"}, {"name": "two", "cluster": {"num_replicas": 2}}])
    for i in range(2):
        simulate_both(loaded, i)


def test_long_prefill_token_threshold_prefills_prompts_sent_together_side_by_side(scenario):
    """vLLM V1 without the threshold prefills four 16k-token prompts sent together one
    after another (TTFT rising by one prefill each); with 2,048 they share every step's
    8,192 tokens and all get their first token in the same step, as late as the last one
    did. Macro-steps stay identical to the step loop."""
    loaded = scenario(users(4), [fixed(16000, 200)], num_requests=8,
                      engine={"max_model_len": 32768},
                      variants=[{"name": "budget_only"},
                                {"name": "capped", "engine": {
                                    "long_prefill_token_threshold": 2048}}])
    first = []
    for i in range(2):
        r = simulate_both(loaded, i).requests
        first.append((r.first_token_s - r.arrival_s)[:4])
    plain, capped = first
    assert np.all(np.diff(plain) > 0.9 * plain[0])                 # one prefill apart
    assert np.ptp(capped) == 0.0                                   # the same step
    assert capped[0] == pytest.approx(plain[-1], rel=0.05)


def test_macro_steps_equal_step_by_step_in_a_disaggregated_closed_loop(scenario, disagg):
    loaded = scenario(users(6), [UNIFORM], num_requests=60, warmup_request_count=6,
                      variants=[{"name": "1P1D", "disaggregation": disagg(1, 1, "nvlink-4")},
                                {"name": "1P2D", "disaggregation": disagg(1, 2)}])
    for i in range(2):
        result = simulate_both(loaded, i)
        measured = set(range(6, 60))
        assert set(result.disagg.transfers.request_id) <= measured      # warm-up ones left out
        row = summarize(result, loaded.spec.slo)[0]
        assert row.num_requests == 54 and row.kv_transfer_p99_ms > 0
