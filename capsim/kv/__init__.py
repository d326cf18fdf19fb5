"""KV memory: paged block allocator, prefix hashing, start-up memory as engines profile it,
capacity sizing.

See DESIGN.md, "KV memory". Pure Python, no SimPy.
"""

from capsim.kv.allocator import BlockAllocator, KVInvariantError, OutOfBlocks
from capsim.kv.blocks import blocks_needed
from capsim.kv.capacity import KVCapacity, kv_capacity, pool_from_terms
from capsim.kv.memory import MemoryTerms, memory_terms

__all__ = [
    "BlockAllocator",
    "KVCapacity",
    "KVInvariantError",
    "MemoryTerms",
    "OutOfBlocks",
    "blocks_needed",
    "kv_capacity",
    "memory_terms",
    "pool_from_terms",
]
