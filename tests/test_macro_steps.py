"""Macro-steps (decode-only stretches advanced in one event) give exactly the step-by-step result."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.config import load
from capsim.metrics import summarize
from capsim.sim import simulate
from capsim.workload import build

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    ("rag_mix.yaml", ["workload.duration_s=40"]),
    # preemption-heavy: a small fixed KV cache under chat load
    ("rag_mix.yaml", ["workload.duration_s=30", "engine.kv_cache_memory_gib=0.4"]),
    ("rag_mix.yaml", ["workload.duration_s=30", "engine.kv_cache_memory_gib=0.4",
                      "engine.preemption_mode=swap"]),
    # prefix-cache-heavy: shared system prompts and multi-turn conversations
    ("prefix_sharing.yaml", ["workload.num_requests=150",
                             "workload.classes.0.conversation={turns: {dist: uniform, min: 1, "
                             "max: 4}, think_time_s: 0.5}"]),
    ("kv_allocators.yaml", ["workload.num_requests=200"]),
    ("parallel_sampling.yaml", ["workload.num_requests=80"]),
]


@pytest.mark.parametrize("scenario,overrides", CASES)
def test_macro_steps_equal_step_by_step(scenario, overrides):
    loaded = load(ROOT / "scenarios" / scenario, overrides)
    for rc in loaded.runs:
        trace = build(rc.workload, rc.seed, loaded.base_dir)
        ref = simulate(rc, trace, macro_steps=False)
        fast = simulate(rc, trace, macro_steps=True)
        assert fast.requests == ref.requests, rc.variant
        assert fast.replicas == ref.replicas, rc.variant
        rows_ref = [r.model_dump_json() for r in summarize(ref, loaded.spec.slo)]
        rows_fast = [r.model_dump_json() for r in summarize(fast, loaded.spec.slo)]
        assert rows_fast == rows_ref, rc.variant
        assert sorted(zip(fast.itl.gap_s, fast.itl.count)) == sorted(zip(ref.itl.gap_s,
                                                                         ref.itl.count))


def test_preemption_case_really_preempts():
    loaded = load(ROOT / "scenarios/rag_mix.yaml", CASES[1][1])
    rc = next(r for r in loaded.runs if r.variant == "chunked-512")
    result = simulate(rc, build(rc.workload, rc.seed, loaded.base_dir))
    assert sum(r.preemptions for r in result.replicas) > 0
