"""KV offload to host memory: a CPU-DRAM tier behind one replica's GPU prefix cache.

vLLM's ``kv_offloading_size`` (GiB, the whole replica's buffer summed over its TP ranks)
and ``kv_offloading_backend`` (``native`` | ``lmcache``), ``vllm/config/cache.py`` at
c1d86421174a87056edc90a41dc9942391509e84; the native backend's host blocks are
``cpu_bytes_to_use // bytes per offloaded block`` and its eviction policy is LRU
(``vllm/v1/kv_offload/cpu/spec.py``, ``cpu/policies/lru.py`` at
0c2bbc477d0d615ee4d2581bbdfa966054db20f0).

capsim's tier holds content hashes (:mod:`capsim.kv.prefix`), not blocks: a block the GPU
cache evicts (its content reused for other tokens) is stored here, least recently used
dropped first when the tier is full. At admission, after the GPU prefix hit, the
request's next blocks are looked up here; those found are loaded over the GPU's host link
(PCIe) instead of recomputed, the rest recomputed. vLLM's connector also writes blocks to
the host as they are computed (asynchronously, off the critical path); storing them at
eviction instead keeps the same blocks findable while holding each block once. Pure
Python, no SimPy.
"""

from __future__ import annotations

from collections import OrderedDict

from capsim.kv.prefix import leading_held

GIB = 2**30


def host_blocks(offloading_gib: float, kv_bytes_per_token: int, block_size: int) -> int:
    """Blocks of ``block_size`` tokens an ``offloading_gib`` GiB host buffer holds, at
    ``kv_bytes_per_token`` bytes per token of the whole replica (vLLM's
    ``cpu_bytes_to_use // kv_bytes_per_offloaded_block``)."""
    return int(offloading_gib * GIB) // (kv_bytes_per_token * block_size)


class HostTier:
    """An LRU of block content hashes, at most ``num_blocks`` of them.

    Counters: ``stored_blocks`` (GPU evictions written here), ``dropped_blocks`` (evicted
    from here), ``loaded_blocks`` (hits loaded back to the GPU).
    """

    __slots__ = ("num_blocks", "_lru", "stored_blocks", "dropped_blocks", "loaded_blocks")

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"a host tier needs >= 1 block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.stored_blocks = self.dropped_blocks = self.loaded_blocks = 0

    def __len__(self) -> int:
        return len(self._lru)

    def store(self, content_hash: int) -> None:
        """A block the GPU evicted: kept as the most recently used, the least recently
        used dropped when full."""
        lru = self._lru
        if content_hash in lru:
            lru.move_to_end(content_hash)
            return
        lru[content_hash] = None
        self.stored_blocks += 1
        if len(lru) > self.num_blocks:
            lru.popitem(last=False)
            self.dropped_blocks += 1

    def match(self, hashes: list[int]) -> int:
        """How many leading ``hashes`` the tier holds (no side effects)."""
        return leading_held(hashes, self._lru)

    def load(self, hashes: list[int]) -> None:
        """``hashes`` (found by :meth:`match`) are loaded to the GPU: they stay here too,
        as the most recently used (vLLM's LRU policy ``touch``, last block first)."""
        lru = self._lru
        for h in reversed(hashes):
            lru.move_to_end(h)
        self.loaded_blocks += len(hashes)
