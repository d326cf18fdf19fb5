"""KV offload to host memory (capsim.kv.offload, vLLM's kv_offloading_size /
kv_offloading_backend): the host tier's capacity and LRU, the GPU cache's evictions going
there, and a vLLM scheduler loading a hit from it instead of recomputing."""

from __future__ import annotations

import pytest

from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.kv.offload import HostTier, host_blocks
from capsim.kv.prefix import PREFIX, USER
from support.steps import batch, step

#: Llama-3.1-8B's KV per token, bf16: 32 layers × 8 KV heads × 128 dims × (K, V) × 2 bytes.
LLAMA_8B_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2


def test_host_blocks_are_the_buffer_over_the_bytes_of_a_block():
    """16 GiB / (131,072 B/token × 16 tokens) = 8,192 blocks (vLLM: cpu_bytes_to_use //
    kv_bytes_per_offloaded_block)."""
    assert LLAMA_8B_KV_BYTES_PER_TOKEN == 131_072
    assert host_blocks(16, LLAMA_8B_KV_BYTES_PER_TOKEN, 16) == 8192
    assert host_blocks(0.5, LLAMA_8B_KV_BYTES_PER_TOKEN, 32) == 128


def test_the_tier_keeps_the_most_recently_used_blocks():
    tier = HostTier(3)
    for h in (1, 2, 3):
        tier.store(h)
    assert tier.match([1, 2, 3, 4]) == 3
    tier.load([1])                     # 1 used again: 2 is now the least recently used
    tier.store(4)
    assert len(tier) == 3 and tier.dropped_blocks == 1
    assert tier.match([2]) == 0 and tier.match([1]) == 1 and tier.match([3, 4]) == 2
    assert (tier.stored_blocks, tier.loaded_blocks) == (4, 1)
    with pytest.raises(ValueError):
        HostTier(0)


def test_gpu_evictions_of_cached_blocks_go_to_the_tier():
    tier = HostTier(10)
    alloc = BlockAllocator(4, 16, enable_caching=True, host=tier)
    blocks = alloc.allocate(2)
    alloc.register(blocks[0], 111)
    alloc.register(blocks[1], 222)
    alloc.free(blocks)                     # cached, on the free queue
    alloc.allocate(4)                      # takes every block: both cached ones are evicted
    assert alloc.num_evictions == 2 and tier.match([111, 222]) == 2


def _sched(num_blocks: int, host: HostTier | None):
    alloc = BlockAllocator(num_blocks, 16, enable_caching=True, host=host)
    return ContinuousScheduler(max_num_seqs=8, max_num_batched_tokens=4096, chunked=True,
                               allocator=alloc, num_classes=1, itl=ItlRecorder(),
                               kv_bytes_per_token=LLAMA_8B_KV_BYTES_PER_TOKEN), alloc


def _turns(sched, t: float):
    """Turn 1 of a conversation (320 shared + 32 own tokens), run to the end; then another
    conversation's long prompt that needs every block (evicting turn 1's); then turn 1's
    prompt again (a later turn holding the same 320-token prefix)."""
    def req(rid, template, prefix, own, out):
        r = Request(rid, 0, t, prefix + own, out, ((PREFIX, template, prefix), (USER, rid, own)))
        r.shareable = True
        sched.add(r)
        return r
    req(0, 7, 320, 32, 2)
    while sched.has_work():
        step(sched, t)
        t += 1
    req(1, 9, 400, 96, 2)                   # 496 + 1 tokens: 32 blocks, the whole GPU pool
    while sched.has_work():
        step(sched, t)
        t += 1
    again = req(2, 7, 320, 32, 2)
    return step(sched, t), again


def test_a_host_hit_is_loaded_not_recomputed_and_its_bytes_cross_pcie():
    """Turn 1's 20 full shared blocks (320 tokens) were evicted from the 32-block GPU pool.
    Without offload the request recomputes all 352 tokens; with it, the 20 blocks come back
    from the host and only 32 tokens are computed; 20 × 16 × 131,072 B = 41.9 MB cross
    the host link in that step."""
    plain, _ = _sched(32, None)
    s, _ = _turns(plain, 0.0)
    assert batch(s) == ([(2, 352)], 0) and s.swap_bytes == 0

    tier = HostTier(100)
    sched, alloc = _sched(32, tier)
    s, again = _turns(sched, 0.0)
    assert batch(s) == ([(2, 32)], 0)
    assert s.swap_bytes == 20 * 16 * LLAMA_8B_KV_BYTES_PER_TOKEN == 41_943_040
    assert sched.counters.offload_hit_tokens == 320
    assert sched.counters.prefix_hit_tokens == 0          # the GPU tier had none of it
    assert tier.loaded_blocks == 20 and again.num_computed == 352
    alloc.check_consistency()
