"""Prefix caching in whole runs of scenarios/prefix_sharing.yaml: hits at admission
(seed 000's shared system prompt) and multi-turn reuse of the previous prompt and reply."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.scenario.load import load
from capsim.metrics.summary import summarize
from capsim.sim.simulate import simulate
from capsim.workload import build


def run_variants(path: Path, *overrides: str) -> dict:
    loaded = load(path, list(overrides))
    rows = {}
    for rc in loaded.runs:
        trace = build(rc.workload, rc.seed, loaded.base_dir)
        result = simulate(rc, trace)
        rows[rc.variant] = (summarize(result, loaded.spec.slo)[0], result, trace)
    return rows


def test_seed_000_shared_system_prompt_rows(scenarios_dir):
    """Seed 000: 50 prompts of 300 shared + 40 own tokens = 17,000 tokens seen.
    100 % sharing → 2,888 prefilled (83.0 % saved), block hit rate 84.0 %;
    0 % → 17,000 prefilled, 0 %. (18 full blocks = 288 tokens are reusable.)"""
    rows = run_variants(scenarios_dir / "prefix_sharing.yaml")
    full, _, trace = rows["shared-100"]
    assert trace.total_prompt_tokens == 17_000
    assert full.prefill_tokens_saved == 14_112 and 17_000 - 14_112 == 2_888
    assert full.prefix_hit_rate == pytest.approx(0.830, abs=5e-4)
    assert full.prefix_block_hit_rate == pytest.approx(0.840, abs=5e-4)
    none, _, trace0 = rows["shared-0"]
    assert trace0.total_prompt_tokens == 17_000
    assert none.prefill_tokens_saved == 0 and none.prefix_hit_rate == 0.0
    half, _, trace50 = rows["shared-50"]
    users = int((trace50.prefix_id >= 0).sum())
    assert half.prefill_tokens_saved == (users - 1) * 288
    off, result_off, _ = rows["caching-off"]
    assert off.prefill_tokens_saved == 0
    # Hits skip prefill work: the hit run computes 14,112 fewer prefill tokens.
    computed = {v: sum(r.prefill_tokens for r in rows[v][1].replicas) for v in rows}
    assert computed["caching-off"] - computed["shared-100"] == 14_112


def test_multi_turn_reuses_previous_prompt_and_reply(tmp_path, scenarios_dir):
    """Turn 2's prompt = turn 1's prompt + reply + new tokens: it hits every full block
    turn 1 left in the cache (its KV holds prompt + reply − 1 tokens)."""
    doc = (scenarios_dir / "prefix_sharing.yaml").read_text()
    path = tmp_path / "conv.yaml"
    path.write_text(doc)
    loaded = load(path, ["workload.num_requests=1",
                         "workload.classes.0.shared_prefix.fraction=0",
                         "workload.classes.0.conversation={turns: {dist: fixed, value: 2}, "
                         "think_time_s: 1.0}"])
    rc = loaded.runs[0]
    trace = build(rc.workload, rc.seed, loaded.base_dir)
    assert len(trace) == 2 and trace.parent.tolist() == [-1, 0]
    p1, o1 = int(trace.prompt_tokens[0]), int(trace.output_tokens[0])
    assert trace.prompt_tokens[1] == p1 + o1 + 40
    result = simulate(rc, trace)
    row = summarize(result, loaded.spec.slo)[0]
    assert row.prefill_tokens_saved == (p1 + o1 - 1) // 16 * 16
    # The next turn arrives think_s after the previous reply's last token.
    finish0 = result.requests.finish_s[0]
    assert result.requests.arrival_s[1] == pytest.approx(finish0 + float(trace.think_s[1]))
