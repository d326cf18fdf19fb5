"""Prefix caching: hash-chained blocks, LRU eviction, hits that always hold their content.
Hits at admission and multi-turn reuse in whole runs: shipped_scenarios/test_prefix_sharing.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.kv.allocator import BlockAllocator
from capsim.kv.prefix import OUTPUT, PREFIX, USER, extend_hashes


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
