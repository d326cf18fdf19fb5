"""Macro-steps (decode-only stretches advanced in one event) give exactly the step-by-step result."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy as np

from capsim.scenario.load import load
from capsim.engine.recorder import TimelineRecorder
from capsim.engine.decode_set import DecodeSet
from capsim.metrics.summary import summarize
from capsim.sim.simulate import simulate
from capsim.workload import build

CASES = [
    ("rag_mix.yaml", ["workload.duration_s=40"]),
    # preemption-heavy: a small fixed KV cache under chat load
    # (max_model_len within its 3,264 tokens, as vLLM requires: the long RAG prompts are rejected)
    ("rag_mix.yaml", ["workload.duration_s=30", "engine.kv_cache_memory_gib=0.4",
                      "engine.max_model_len=3264"]),
    ("rag_mix.yaml", ["workload.duration_s=30", "engine.kv_cache_memory_gib=0.4",
                      "engine.max_model_len=3264",
                      "engine.preset=vllm-0.6", "engine.preemption_mode=swap"]),
    # prefix-cache-heavy: shared system prompts and multi-turn conversations
    ("prefix_sharing.yaml", ["workload.num_requests=150",
                             "workload.classes.0.conversation={turns: {dist: uniform, min: 1, "
                             "max: 4}, think_time_s: 0.5}"]),
    ("kv_allocators.yaml", ["workload.num_requests=200"]),
    # quantized weights (int4 AWQ): the step prices change, macro-steps stay exact
    ("rag_mix.yaml", ["workload.duration_s=30", "engine.quantization=awq"]),
    ("parallel_sampling.yaml", ["workload.num_requests=80"]),
    # mixture of experts: TP 8, DP attention + EP 8 (all-to-all), a split of two such nodes
    ("moe_deepseek_v3.yaml", ["workload.duration_s=20"]),
    # disaggregated: transfers cut decode runs; decode slots run out (prefilled requests
    # wait, every decode finish is observed); round-robin placement; layer-wise overlap
    ("disagg_ratio.yaml", ["workload.duration_s=60",
                           "variants.1.disaggregation.router=round_robin",
                           "variants.2.disaggregation.decode.engine={max_num_seqs: 12}",
                           "variants.3.disaggregation.layerwise_overlap=true",
                           "variants.3.disaggregation.link=infiniband-ndr"]),
    # decode-pool preemptions with prefix caching: a run's blocks evict cached blocks a
    # preempted request waits to reuse
    ("disagg_ratio.yaml", ["workload.duration_s=40",
                           "variants.1.disaggregation.decode.engine={kv_cache_memory_gib: 1.0, "
                           "max_model_len: 8192}"]),
]


def simulate_both(rc, trace):
    """The step-by-step reference and the macro-step run of one variant, asserted identical
    in every per-request record, replica figure, timeline bin, transfer and the end time."""
    ref = simulate(rc, trace, macro_steps=False)
    fast = simulate(rc, trace, macro_steps=True)
    assert fast.requests == ref.requests, rc.variant
    assert fast.replicas == ref.replicas, rc.variant
    assert fast.timelines == ref.timelines, rc.variant
    assert fast.disagg == ref.disagg, rc.variant
    assert fast.sim_end_s == ref.sim_end_s, rc.variant
    return ref, fast


@pytest.fixture(scope="module")
def both_ways(scenarios_dir):
    """``both_ways(SCENARIO, OVERRIDES)`` → (loaded, [(run, ref, fast) per variant]) of
    :func:`simulate_both`, simulated once per module: the saturation test reads the
    disaggregated cases' step-by-step results instead of simulating them again."""
    done: dict[tuple, tuple] = {}

    def get(scenario: str, overrides: list[str]):
        key = (scenario, tuple(overrides))
        if key not in done:
            loaded = load(scenarios_dir / scenario, overrides)
            done[key] = loaded, [(rc, *simulate_both(rc, build(rc.workload, rc.seed,
                                                                loaded.base_dir)))
                                 for rc in loaded.runs]
        return done[key]
    return get


@pytest.mark.parametrize("scenario,overrides", CASES)
def test_macro_steps_equal_step_by_step(scenario, overrides, both_ways):
    loaded, runs = both_ways(scenario, overrides)
    for rc, ref, fast in runs:
        rows_ref = [r.model_dump_json() for r in summarize(ref, loaded.spec.slo)]
        rows_fast = [r.model_dump_json() for r in summarize(fast, loaded.spec.slo)]
        assert rows_fast == rows_ref, rc.variant
        assert sorted(zip(fast.itl.gap_s, fast.itl.count)) == sorted(zip(ref.itl.gap_s,
                                                                         ref.itl.count))


def test_preemption_case_really_preempts(both_ways):
    """The preemption-heavy case preempts (its macro-step run, simulated by the equivalence
    test or here, is the run a plain simulate() gives: macro-steps are the default)."""
    result = next(fast for rc, _, fast in both_ways(*CASES[1])[1] if rc.variant == "chunked-512")
    assert sum(r.preemptions for r in result.replicas) > 0


def test_disaggregated_cases_saturate_the_decode_pool(both_ways):
    """The disaggregated cases above reach what they are there for: prefilled requests
    waiting for decode slots, and preemptions on decode replicas (their step-by-step runs,
    simulated by the equivalence test or here)."""
    def ref(case, variant):
        return next(r for rc, r, _ in both_ways(*case)[1] if rc.variant == variant)
    assert ref(CASES[-2], "2P2D").disagg.decode_saturated_s > 1
    assert sum(r.preemptions for r in ref(CASES[-1], "1P3D").replicas if r.pool == "decode") > 0


@pytest.mark.parametrize("seed", range(5))
def test_timeline_run_equals_its_steps(seed):
    """TimelineRecorder.record over a decode run's steps bins exactly as one record() per
    step, also across bin edges and when the bins coarsen mid-run."""
    rng = np.random.default_rng(seed)
    one, bulk = TimelineRecorder(0, "colocated", 0.1, 8), TimelineRecorder(0, "colocated", 0.1, 8)
    t = 0.0
    for _ in range(30):
        m = int(rng.integers(1, 40))
        secs = rng.uniform(0.001, 0.05, m)
        ends = np.cumsum(np.concatenate(([t], secs)))[1:]
        kv = np.sort(rng.integers(0, 100, m)).tolist()
        q0, r0, q1, r1 = (int(x) for x in rng.integers(0, 9, 4))
        for j in range(m):
            last = j == m - 1
            one.record((float(ends[j]),), [float(secs[j])], 0, 3, kv[j], 0, 0,
                       q1 if last else q0, r1 if last else r0)
        bulk.record(ends, secs, 0, 3, kv.__getitem__ if m > 1 else kv[0], q0, r0, q1, r1)
        t = float(ends[-1])
        assert bulk.bins == one.bins and bulk.bin_s == one.bin_s
    assert one.bin_s > 0.1                                    # it did coarsen


def test_forgetting_old_decode_epochs_changes_nothing(monkeypatch, scenarios_dir):
    """Trimming the decode epochs' end times (memory) gives the same results, both paths."""
    loaded = load(scenarios_dir / "rag_mix.yaml", ["workload.duration_s=20"])
    rc = next(r for r in loaded.runs if r.variant == "chunked-2048")
    trace = build(rc.workload, rc.seed, loaded.base_dir)
    ref = simulate(rc, trace, macro_steps=False)
    monkeypatch.setattr(DecodeSet, "trim_epochs", 64)
    for macro in (False, True):
        got = simulate(rc, trace, macro_steps=macro)
        assert got.requests == ref.requests and got.replicas == ref.replicas
        assert sorted(zip(got.itl.gap_s, got.itl.count)) == sorted(zip(ref.itl.gap_s,
                                                                       ref.itl.count))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(kv_gib=st.sampled_from([0.3, 0.6, 4.0]), block_size=st.sampled_from([8, 16, 32]),
       max_num_seqs=st.sampled_from([4, 24, 128]), router=st.sampled_from(
           ["round_robin", "least_outstanding_tokens"]), replicas=st.sampled_from([1, 3]),
       chunked=st.booleans(), rate=st.sampled_from([2.0, 9.0]))
def test_macro_steps_equal_step_by_step_across_engine_settings(kv_gib, block_size, max_num_seqs,
                                                              router, replicas, chunked, rate,
                                                              scenarios_dir):
    """Runs that go on through finishes, stop at KV shortages, or are cut by arrivals that
    the router places by outstanding tokens: identical to step by step whatever the knobs."""
    overrides = ["workload.duration_s=20", f"workload.arrival.rate_per_s={rate}",
                 f"engine.kv_cache_memory_gib={kv_gib}", f"engine.block_size={block_size}",
                 # within the cache (128 KiB of KV per token), as vLLM requires
                 f"engine.max_model_len={ {0.3: 2048, 0.6: 4096, 4.0: 16384}[kv_gib]}",
                 f"engine.max_num_seqs={max_num_seqs}", f"cluster.router={router}",
                 f"cluster.num_replicas={replicas}"]
    loaded = load(scenarios_dir / "rag_mix.yaml", overrides)
    rc = next(r for r in loaded.runs if r.variant == ("chunked-512" if chunked else "continuous"))
    simulate_both(rc, build(rc.workload, rc.seed, loaded.base_dir))


def test_timeline_starting_wide_has_the_bins_coarsening_would_reach():
    """sim.py starts a replica's timeline at the width its trace's span needs (fewer runs
    cross a bin edge); the bins are those the 0.1 s default would coarsen to."""
    assert TimelineRecorder.start_width_s(100.0) == 0.1
    assert TimelineRecorder.start_width_s(204.8) == 0.2        # 2,048 bins of 0.1 s: one too few
    assert TimelineRecorder.start_width_s(3504.0) == pytest.approx(3.2)   # benchmark 1's run
    rng = np.random.default_rng(7)
    ends = np.cumsum(rng.uniform(0.001, 0.3, 3000))
    narrow = TimelineRecorder(0, "colocated", 0.1, 64)
    wide = TimelineRecorder(0, "colocated", TimelineRecorder.start_width_s(ends[-1], 0.1, 64), 64)
    for t in ends.tolist():
        for rec in (narrow, wide):
            rec.record((t,), (0.01,), 0, 4, int(t), 0, 0, 1, 4)
    assert narrow.bin_s == wide.bin_s
    assert {k: v for k, v in narrow.bins.items() if k != "busy_s"} == \
        {k: v for k, v in wide.bins.items() if k != "busy_s"}
    assert narrow.bins["busy_s"] == pytest.approx(wide.bins["busy_s"], rel=1e-12)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(split=st.sampled_from(["1P3D", "2P2D", "3P1D"]),
       router=st.sampled_from(["least_kv", "round_robin"]),
       decode_seqs=st.sampled_from([6, 32, 128]), decode_kv_gib=st.sampled_from([1.0, 8.0]),
       caching=st.booleans(), rate=st.sampled_from([8.0, 24.0]))
def test_disaggregated_macro_steps_equal_step_by_step(split, router, decode_seqs, decode_kv_gib,
                                                      caching, rate, scenarios_dir):
    """Decode pools skip too: transfers cut runs, placements read and sync replicas mid-run,
    waiting transfers make finishes observed. Identical whatever the split and knobs."""
    i = ["1P3D", "2P2D", "3P1D"].index(split) + 1
    overrides = ["workload.duration_s=12", f"workload.arrival.rate_per_s={rate}",
                 f"variants.{i}.disaggregation.router={router}",
                 f"variants.{i}.disaggregation.decode.engine={{max_num_seqs: {decode_seqs}, "
                 f"kv_cache_memory_gib: {decode_kv_gib}, enable_prefix_caching: {caching}, "
                 f"max_model_len: {int(decode_kv_gib * 8192)}}}"]   # within the cache
    loaded = load(scenarios_dir / "disagg_ratio.yaml", overrides)
    rc = next(r for r in loaded.runs if r.variant == split)
    simulate_both(rc, build(rc.workload, rc.seed, loaded.base_dir))


def test_a_run_ends_at_its_exact_instant_even_when_no_delay_reaches_it():
    """No float delay takes SimPy from 0.37091528969081083 to 0.9918828499104085 (the
    sum rounds to one ulp below or above): a 94-step decode run of a 1P3D decode replica
    ended there, one ulp early, and the pool figures drifted from the step-by-step ones."""
    from capsim.engine.clock import Environment

    start, end = 0.37091528969081083, 0.9918828499104085
    assert all(start + d != end for d in (end - start, np.nextafter(end - start, 1),
                                          np.nextafter(end - start, 0)))
    env = Environment(initial_time=start)
    fired = []

    def wait():
        yield env.timeout_at(end)
        fired.append(env.now)

    env.process(wait())
    env.run()
    assert fired == [end]


def test_ten_minutes_of_the_day_equal_step_by_step(scenarios_dir):
    """Ten minutes of day_in_the_life (diurnal load, autoscaling, the failure moved to 7
    minutes in, when replica 0 holds 2 requests: retries, N+1): macro-steps give the
    step-by-step requests, replicas (a replica failing mid-run keeps the busy time of the
    steps it had run), timelines, fleet history and day samples (the sampler commits every
    run up to its instant first, so the ITL gaps recorded by then match). Half an hour
    (4,681 requests) was 45 s of the suite and covers nothing more: the same scale-up, the
    same failure with retries, and the same day samples, on 1,632 requests."""
    loaded = load(scenarios_dir / "day_in_the_life.yaml", [
        "workload.duration_s=600", "variants.2.cluster.failures.at.0.at_s=420",
        "variants.3.cluster.failures.at.0.at_s=420"])
    trace = build(loaded.runs[0].workload, loaded.runs[0].seed, loaded.base_dir)
    for rc in loaded.runs:
        ref = simulate(rc, trace, macro_steps=False)
        fast = simulate(rc, trace, macro_steps=True)
        for field in ("requests", "replicas", "timelines", "sim_end_s", "fleet", "day"):
            assert getattr(fast, field) == getattr(ref, field), (rc.variant, field)
        assert ref.day is not None and len(ref.day.times_s) > 12, rc.variant
        if rc.variant.startswith("autoscaled") and rc.variant != "autoscaled-failure-n+1":
            assert ref.fleet.scale_ups >= 1, rc.variant          # the autoscaler acts
        if "failure" in rc.variant:
            assert [f[1] for f in ref.fleet.failures] == [420.0], rc.variant
            assert ref.fleet.retried_requests > 0, rc.variant


def test_a_request_submitted_mid_run_costs_no_extra_event(monkeypatch, scenarios_dir):
    """vLLM V1's async scheduling (vllm/v1/engine/core.py step_with_batch_queue, v0.19.0):
    a request submitted during step k joins step k + 2, so the step between still decodes
    as planned. A decode run cut by such a request goes on through that step (one event,
    not a run plus a single step): the step-by-step result, and fewer SimPy events than a
    run that stops after the step in progress."""
    import capsim.sim.simulate as sim
    from capsim.engine.clock import Environment
    from capsim.engine.macro.runner import DecodeRunner

    loaded = load(scenarios_dir / "rag_mix.yaml", ["workload.duration_s=60"])
    rc = next(r for r in loaded.runs if r.variant == "chunked-2048")
    assert rc.pool().host_overhead.overlap == "async"          # vllm-v1's default
    trace = build(rc.workload, rc.seed, loaded.base_dir)
    envs: list[Environment] = []

    class Counting(Environment):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            envs.append(self)

    monkeypatch.setattr(sim, "Environment", Counting)
    folded = []
    late_run_end = DecodeRunner._late_run_end

    def spy(run, t_s):
        m = late_run_end(run, t_s)
        folded.append(m - (run.step_at(t_s) + 1))
        return m

    monkeypatch.setattr(DecodeRunner, "_late_run_end", staticmethod(spy))
    ref, fast = simulate_both(rc, trace)
    events = next(envs[-1]._eid)
    # The same run, each cut run stopping after the step in progress (the step between
    # then runs on its own): the same result, one more event per folded cut.
    monkeypatch.setattr(DecodeRunner, "_late_run_end",
                        staticmethod(lambda run, t_s: run.step_at(t_s) + 1))
    unfolded = simulate(rc, trace, macro_steps=True)
    assert unfolded.requests == fast.requests and unfolded.timelines == fast.timelines
    assert unfolded.replicas == fast.replicas
    extra = next(envs[-1]._eid) - events
    assert len(folded) > 100 and all(x >= 1 for x in folded)      # 300 here
    assert extra == len(folded)


def test_runs_planned_on_after_a_sync_equal_step_by_step(monkeypatch, scenarios_dir):
    """A run plans only about as far as the next arrival and is planned further as it
    goes on (``RunPlan.more``, :meth:`DecodeRunner._extend`); the day view's sampler
    commits runs up to its instant (:meth:`DecodeRunner.sync`) between those extensions.
    Sampling every 0.25 s makes that common: the step-by-step result still, and runs were
    extended through finishes after a sync (the path this checks)."""
    import capsim.sim.day as day
    from capsim.engine.macro.runner import DecodeRunner

    monkeypatch.setattr(day, "SAMPLE_S", 0.25)
    seen = {"after_sync": 0}
    extend = DecodeRunner._extend

    def counting(self, run):
        segments = len(run.plan.ends)
        extend(self, run)
        if run.done and len(run.plan.ends) > segments + 1:
            seen["after_sync"] += 1

    monkeypatch.setattr(DecodeRunner, "_extend", counting)
    loaded = load(scenarios_dir / "day_in_the_life.yaml", ["workload.duration_s=300"])
    rc = loaded.runs[0]
    trace = build(rc.workload, rc.seed, loaded.base_dir)
    ref = simulate(rc, trace, macro_steps=False)
    fast = simulate(rc, trace, macro_steps=True)
    for field in ("requests", "replicas", "timelines", "sim_end_s", "day"):
        assert getattr(fast, field) == getattr(ref, field), field
    assert seen["after_sync"] > 0
