"""Prefix caching: hash-chained blocks, hits at admission, LRU eviction, multi-turn reuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.scenario.load import load
from capsim.kv.allocator import BlockAllocator
from capsim.kv.prefix import OUTPUT, PREFIX, USER, extend_hashes
from capsim.metrics.summary import summarize
from capsim.sim.simulate import simulate
from capsim.workload import build

ROOT = Path(__file__).resolve().parents[1]


def run_variants(path: Path, *overrides: str) -> dict:
    loaded = load(path, list(overrides))
    rows = {}
    for rc in loaded.runs:
        trace = build(rc.workload, rc.seed, loaded.base_dir)
        result = simulate(rc, trace)
        rows[rc.variant] = (summarize(result, loaded.spec.slo)[0], result, trace)
    return rows


def test_seed_000_shared_system_prompt_rows():
    """Seed 000: 50 prompts of 300 shared + 40 own tokens = 17,000 tokens seen.
    100 % sharing → 2,888 prefilled (83.0 % saved), block hit rate 84.0 %;
    0 % → 17,000 prefilled, 0 %. (18 full blocks = 288 tokens are reusable.)"""
    rows = run_variants(ROOT / "scenarios/prefix_sharing.yaml")
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


def test_multi_turn_reuses_previous_prompt_and_reply(tmp_path):
    """Turn 2's prompt = turn 1's prompt + reply + new tokens: it hits every full block
    turn 1 left in the cache (its KV holds prompt + reply − 1 tokens)."""
    doc = (ROOT / "scenarios/prefix_sharing.yaml").read_text()
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


def test_lru_eviction_forgets_the_least_recently_freed_block():
    alloc = BlockAllocator(4, 16, enable_caching=True)
    blocks = alloc.allocate(4)
    for b, h in zip(blocks, (11, 12, 13, 14)):
        alloc.register(b, h)
    alloc.free([blocks[0]])
    alloc.free([blocks[3], blocks[2], blocks[1]])     # tail first, as vLLM frees
    assert alloc.num_free_blocks == 4 and alloc.lookup([11]) == [blocks[0]]
    (b,) = alloc.allocate(1)                           # evicts the LRU block (hash 11)
    assert b == blocks[0] and alloc.lookup([11]) == [] and alloc.num_evictions == 1
    assert alloc.lookup([12, 13, 14]) == [blocks[1], blocks[2], blocks[3]]
    alloc.touch(alloc.lookup([14]))                    # a hit takes it off the free queue
    assert alloc.num_free_blocks == 2 and alloc.refcount(blocks[3]) == 1


def test_block_hashes_share_exactly_the_common_prefix():
    bs = 16
    a = ((PREFIX, 7, 300), (USER, 1, 40), (OUTPUT, 1, 10))
    b = ((PREFIX, 7, 300), (USER, 2, 40), (OUTPUT, 2, 10))
    ha, hb = [], []
    extend_hashes(ha, a, bs, 21)
    extend_hashes(hb, b, bs, 21)
    assert ha[:18] == hb[:18]                          # 288 tokens inside the shared prompt
    assert all(x != y for x, y in zip(ha[18:], hb[18:]))   # block 18 straddles 300
    again = []
    extend_hashes(again, a, bs, 10)
    extend_hashes(again, a, bs, 21)
    assert again == ha                                 # incremental == one go


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["alloc", "free", "hit"]),
                              st.integers(0, 7), st.integers(1, 3)), max_size=60))
def test_prefix_cache_never_returns_a_block_of_other_content(ops):
    """Whatever the order of allocate / register / free / lookup, a hit block holds the
    content (hash) it was looked up by, and refcounts stay consistent."""
    alloc = BlockAllocator(6, 4, enable_caching=True)
    content: dict[int, int] = {}                       # block → hash it was registered with
    held: list[list[int]] = []
    for op, h, n in ops:
        if op == "alloc" and alloc.can_allocate(n):
            blocks = alloc.allocate(n)
            for b in blocks:
                content.pop(b, None)                   # fresh block: old content gone
            for i, b in enumerate(blocks):
                alloc.register(b, h * 10 + i)
                if alloc.cached_hash(b) == h * 10 + i:
                    content[b] = h * 10 + i
            held.append(blocks)
        elif op == "free" and held:
            alloc.free(held.pop(h % len(held))[::-1])
        elif op == "hit":
            hit = alloc.lookup([h * 10 + i for i in range(n)])
            for i, b in enumerate(hit):
                assert content.get(b) == h * 10 + i
            alloc.touch(hit)
            held.append(hit)
        alloc.check_consistency()
    for blocks in held:
        alloc.free(blocks)
    alloc.check_all_free()
