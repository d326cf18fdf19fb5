"""The KV facade (capsim.kv.manager, capsim.kv.contiguous.ContiguousKV): what a scheduler
asks of its KV cache, checked against the block pool underneath."""

from __future__ import annotations

import pytest

from capsim.kv.allocator import BlockAllocator
from capsim.kv.contiguous import ContiguousAllocator, ContiguousKV
from capsim.kv.manager import KVCacheManager
from capsim.kv.prefix import PREFIX, USER


class Seq:
    """A sequence as the facade sees it (the engine's Request has these attributes)."""

    def __init__(self, rid: int, prompt: int, shared: int = 0, n: int = 1):
        self.rid, self.n, self.num_generated = rid, n, 0
        self.prompt_tokens = prompt
        self.blocks: list[int] = []
        self.handoff_blocks: list[int] = []
        self.hashes: list[int] = []
        self.segments = (((PREFIX, 7, shared),) if shared else ()) + ((USER, rid, prompt - shared),)
        self.num_registered = 0
        self.shareable = bool(shared)
        self.num_computed = 0
        self.num_preemptions = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.num_generated


def test_allocate_slots_takes_blocks_and_caches_full_ones_when_scheduled():
    kv = KVCacheManager(BlockAllocator(10, 4, enable_caching=True))
    a = Seq(0, 10, shared=8)
    assert kv.blocks_to_allocate(a, 10) == 3 and kv.can_allocate(3)
    kv.allocate_slots(a, 10)
    assert len(a.blocks) == 3 and kv.num_used_blocks == 3 and a.num_registered == 2
    b = Seq(1, 12, shared=8)
    hit = kv.get_computed_blocks(b)
    assert hit == a.blocks[:2] and kv.num_free_among(hit) == 0
    kv.take_computed(b, hit)
    kv.allocate_slots(b, 12)
    assert b.blocks[:2] == a.blocks[:2] and kv.num_used_blocks == 4
    assert kv.num_table_entries([a, b]) == 6


def test_delayed_caching_registers_only_when_asked():
    kv = KVCacheManager(BlockAllocator(10, 4, enable_caching=True), cache_when_scheduled=False)
    a = Seq(0, 10, shared=8)
    kv.allocate_slots(a, 10)
    assert a.num_registered == 0 and kv.get_computed_blocks(Seq(1, 12, shared=8)) == []
    kv.cache_blocks(a, 8)
    assert a.num_registered == 2 and kv.get_computed_blocks(Seq(1, 12, shared=8)) == a.blocks[:2]


def test_the_last_token_is_never_a_hit_and_a_private_prompt_does_not_look():
    kv = KVCacheManager(BlockAllocator(10, 4, enable_caching=True))
    a = Seq(0, 8, shared=8)
    kv.allocate_slots(a, 8)
    assert kv.get_computed_blocks(Seq(1, 8, shared=8)) == a.blocks[:1]    # (8 − 1) // 4
    assert kv.get_computed_blocks(Seq(2, 8)) == []


def test_free_returns_blocks_tail_first_and_cached_ones_stay_findable():
    alloc = BlockAllocator(4, 4, enable_caching=True)
    kv = KVCacheManager(alloc)
    a = Seq(0, 9, shared=8)
    kv.allocate_slots(a, 9)
    blocks = list(a.blocks)
    kv.free(a)
    assert a.blocks == [] and kv.num_free_blocks == 4
    assert list(alloc._free)[-3:] == blocks[::-1]
    assert kv.get_computed_blocks(Seq(1, 12, shared=8)) == blocks[:2]
    b = Seq(2, 9, shared=8)
    kv.allocate_slots(b, 9)
    kv.free_to_recompute(b)
    assert b.num_registered == 0


def test_fork_shares_and_copy_on_write_copies_a_shared_last_block():
    alloc = BlockAllocator(8, 4)
    kv = KVCacheManager(alloc)
    a, f = Seq(0, 6), Seq(-1, 6)
    kv.allocate_slots(a, 6)
    kv.fork(a, f)
    assert f.blocks == a.blocks and alloc.refcount(a.blocks[-1]) == 2
    kv.copy_on_write(f)
    assert f.blocks[-1] != a.blocks[-1] and alloc.refcount(a.blocks[-1]) == 1
    kv.copy_on_write(a)                         # the last owner writes in place
    assert alloc.num_cow_copies == 1


def test_reservation_gives_each_sibling_its_own_tail():
    alloc = BlockAllocator(16, 4)
    kv = KVCacheManager(alloc)
    a = Seq(0, 8, n=3)
    kv.reserve(a, 4, 4 + 2 * 2, siblings=True)          # prompt's 2 blocks shared
    assert len(a.blocks) == 4 and kv.num_used_blocks == 8
    sibs = [Seq(-1, 8), Seq(-2, 8)]
    for s in sibs:
        kv.fork(a, s)
    kv.fork_reserved(a, sibs, 2)
    assert all(s.blocks[:2] == a.blocks[:2] and len(s.blocks) == 4 for s in sibs)
    assert len({b for s in [a, *sibs] for b in s.blocks[2:]}) == 6 and kv.num_used_blocks == 8


def test_handoff_holds_the_blocks_until_released():
    kv = KVCacheManager(BlockAllocator(4, 4))
    a = Seq(0, 8)
    kv.allocate_slots(a, 8)
    kv.hand_off(a)
    assert a.blocks == [] and len(a.handoff_blocks) == 2 and kv.num_used_blocks == 2
    kv.release_handoff(a)
    assert a.handoff_blocks == [] and kv.num_used_blocks == 0


def test_append_blocks_gives_one_block_per_entry_in_order():
    kv = KVCacheManager(BlockAllocator(8, 4))
    a, b = Seq(0, 4), Seq(1, 4)
    kv.append_blocks([a, b, a], shareable=False)
    assert a.blocks == [0, 2] and b.blocks == [1]
    kv.append_cycles([a, b], 3, shareable=False)
    assert a.blocks == [0, 2, 3, 5] and b.blocks == [1, 4]


def test_contiguous_facade_reserves_one_range_per_request():
    kv = ContiguousKV(ContiguousAllocator(64, 16))
    a, b = Seq(0, 10), Seq(1, 10)
    assert kv.reserve_range(a, 40) and not kv.reserve_range(b, 40)
    assert kv.free_tokens == 24 and kv.biggest_hole == 24 and kv.num_used_blocks == 3
    kv.free(a)
    assert kv.num_used_blocks == 0 and kv.num_table_entries([a]) == 0
    with pytest.raises(KeyError):
        kv.free(a)
