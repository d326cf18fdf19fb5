"""--trace-events: the traced steps are the run's steps, and tracing changes no figure."""

from __future__ import annotations

import pytest
import yaml

from capsim.engine.recorder import TimelineRecorder
from capsim.engine.step_trace import StepTracer, TracingTimeline
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

#: (scenario, --set): co-located with decode runs, preempting (a 0.4 GiB KV cache, as
#: tests/engine/test_macro_steps.py), disaggregated (KV transfers), speculative decoding.
CASES = [
    ("rag_mix.yaml", ["workload.duration_s=30"]),
    ("rag_mix.yaml", ["workload.duration_s=20", "engine.kv_cache_memory_gib=0.4",
                      "engine.max_model_len=3264"]),
    ("disagg_ratio.yaml", ["workload.duration_s=30"]),
    ("spec_decode.yaml", ["workload.num_requests=60"]),
]

#: Pipeline parallelism, two batches in flight (tests/engine/test_pipeline.py's scenario).
PP_DOC = {
    "name": "pp", "model": "llama-3.1-70b", "hardware": "h100-sxm",
    "engine": {"tensor_parallel_size": 4, "pipeline_parallel_size": 2, "max_model_len": 8192,
               "max_num_batched_tokens": 2048, "enable_prefix_caching": False},
    "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate_per_s": ".inf"},
                 "classes": [{"name": "p", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 2048},
                              "output_tokens": {"dist": "fixed", "value": 16}}]},
}


def _same_run(traced, plain) -> None:
    assert traced.requests == plain.requests
    assert traced.replicas == plain.replicas
    assert traced.timelines == plain.timelines
    assert traced.disagg == plain.disagg
    assert traced.sim_end_s == plain.sim_end_s
    assert sorted(zip(traced.itl.gap_s, traced.itl.count)) == sorted(zip(plain.itl.gap_s,
                                                                         plain.itl.count))


@pytest.mark.parametrize("scenario,overrides", CASES)
def test_tracing_changes_no_figure(scenario, overrides, scenarios_dir):
    """A window in the middle of the run (20 % to 50 % of it): the replicas step one by one
    until its end, then take decode runs again; every record equals the untraced run's (which takes decode runs
    from the start)."""
    loaded = load(scenarios_dir / scenario, overrides)
    for rc in loaded.runs:
        trace = build(rc.workload, rc.seed, loaded.base_dir)
        plain = simulate(rc, trace)
        start, end = 0.2 * plain.sim_end_s, 0.5 * plain.sim_end_s
        traced = simulate(rc, trace, trace_window=(start, end))
        _same_run(traced, plain)
        assert plain.step_trace is None
        steps = traced.step_trace.steps
        assert len(steps.start_s) > 0, rc.variant
        # Every step overlaps the window.
        assert (steps.end_s >= start).all() and (steps.start_s <= end).all()


@pytest.mark.parametrize("scenario,overrides", CASES)
def test_a_window_over_the_whole_run_holds_every_step(scenario, overrides, scenarios_dir):
    """Traced steps add up to each replica's own totals: steps, prompt and decode tokens,
    preemptions; the KV blocks never exceed the pool; steps of one batch slot never
    overlap."""
    loaded = load(scenarios_dir / scenario, overrides)
    rc = loaded.runs[-1]
    result = simulate(rc, build(rc.workload, rc.seed, loaded.base_dir),
                      trace_window=(0.0, 1e9))
    tr = result.step_trace
    s = tr.steps
    assert len(tr.replicas) == len(result.replicas)
    for i, (rep, stats) in enumerate(zip(tr.replicas, result.replicas)):
        mine = s.replica == i
        assert rep.replica == stats.replica and rep.pool == stats.pool
        assert int(mine.sum()) == stats.steps
        assert int(s.prefill_tokens[mine].sum()) == stats.prefill_tokens
        assert int(s.decode_tokens[mine].sum()) == stats.decode_tokens
        assert int(s.preemptions[mine].sum()) == stats.preemptions
        assert int(s.kv_used_blocks[mine].max()) == stats.peak_kv_used_blocks <= rep.num_gpu_blocks
        start, end = s.start_s[mine], s.end_s[mine]
        assert (end >= start).all() and (start[1:] >= end[:-1] - 1e-9).all()


def test_the_preemption_case_traces_preemptions(scenarios_dir):
    loaded = load(scenarios_dir / "rag_mix.yaml", CASES[1][1])
    rc = next(r for r in loaded.runs if r.variant == "chunked-512")
    result = simulate(rc, build(rc.workload, rc.seed, loaded.base_dir), trace_window=(0.0, 1e9))
    assert int(result.step_trace.steps.preemptions.sum()) == \
        sum(r.preemptions for r in result.replicas) > 0


def test_pipelined_batches_get_their_own_slots(tmp_path):
    """PP 2: two batches in flight, each on its own batch slot (tid); a slot's batches do
    not overlap, the two slots do; the figures equal the untraced run's."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(PP_DOC).replace("'.inf'", ".inf"))
    rc = load(path).runs[0]
    trace = build(rc.workload, rc.seed, base_dir=tmp_path)
    plain = simulate(rc, trace)
    traced = simulate(rc, trace, trace_window=(0.0, 1e9))
    _same_run(traced, plain)
    s = traced.step_trace.steps
    assert set(s.lane.tolist()) == {0, 1}
    for lane in (0, 1):
        start, end = s.start_s[s.lane == lane], s.end_s[s.lane == lane]
        assert (start[1:] >= end[:-1]).all()
    # Batches of the two slots overlap in time (every prompt at t = 0: the pipeline is full).
    a0, a1 = s.start_s[s.lane == 0], s.end_s[s.lane == 0]
    b0 = s.start_s[s.lane == 1]
    k = min(len(a0), len(b0))
    assert ((a0[:k] <= b0[:k]) & (b0[:k] < a1[:k])).sum() > k // 2


def test_a_run_without_the_flag_takes_the_plain_recorder(scenarios_dir):
    """No tracer: the replicas' timelines are the plain class (no per-step work at all)."""
    from capsim.engine.clock import Environment

    assert Environment().step_trace is None
    loaded = load(scenarios_dir / "rag_mix.yaml", ["workload.duration_s=5"])
    rc = loaded.runs[1]
    seen = []
    original = TimelineRecorder.result

    def spy(self):
        seen.append(type(self))
        return original(self)

    TimelineRecorder.result = spy
    try:
        simulate(rc, build(rc.workload, rc.seed, loaded.base_dir))
        simulate(rc, build(rc.workload, rc.seed, loaded.base_dir), trace_window=(0.0, 1.0))
    finally:
        TimelineRecorder.result = original
    n = rc.num_replicas
    assert seen[:n] == [TimelineRecorder] * n and seen[n:] == [TracingTimeline] * n


def test_decode_runs_resume_after_the_window(scenarios_dir):
    """A replica traced until 2 s takes decode runs again afterwards: its macro_steps flag is
    back on at the end of the run."""
    loaded = load(scenarios_dir / "rag_mix.yaml", ["workload.duration_s=10"])
    rc = next(r for r in loaded.runs if r.variant == "chunked-2048")
    made = []
    original = StepTracer.timeline

    def keep(self, replica, bin_s):
        made.append(replica)
        return original(self, replica, bin_s)

    StepTracer.timeline = keep
    try:
        result = simulate(rc, build(rc.workload, rc.seed, loaded.base_dir), trace_window=(0.0, 2.0))
    finally:
        StepTracer.timeline = original
    assert made and all(r.macro_steps for r in made)
    assert 0 < result.step_trace.steps.end_s.max() < 2.5


def test_a_window_after_the_run_writes_an_empty_trace_and_says_so(scenarios_dir, tmp_path,
                                                                   caplog):
    """--trace-events 1000:2000 on a 5-s run wrote a trace of names only, exit 0 and no
    word (a bad-input sweep, issue 31): it says the window holds no step."""
    from capsim.report.run import step_trace

    loaded = load(scenarios_dir / "rag_mix.yaml", ["workload.duration_s=5"])
    rc = loaded.runs[1]
    result = simulate(rc, build(rc.workload, rc.seed, loaded.base_dir),
                      trace_window=(1000.0, 2000.0))
    assert result.step_trace.steps.start_s.size == 0 and result.sim_end_s < 1000
    with caplog.at_level("WARNING"):
        assert step_trace.write_all(tmp_path, [result]) == ["trace_continuous.json"]
    assert [r.getMessage() for r in caplog.records] == [
        "trace_continuous.json: no engine step in --trace-events 1000:2000; the run's steps "
        f"end by {result.sim_end_s:.4g} s (simulated), so the trace holds no step"]
