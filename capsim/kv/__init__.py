"""KV memory: paged block allocator, prefix hashing, capacity sizing.

See DESIGN.md, "KV memory". Pure Python, no SimPy.
"""

from capsim.kv.allocator import BlockAllocator, KVInvariantError, OutOfBlocks
from capsim.kv.blocks import blocks_needed
from capsim.kv.capacity import KVCapacity, activation_reserve_bytes, kv_capacity

__all__ = [
    "BlockAllocator",
    "KVCapacity",
    "KVInvariantError",
    "OutOfBlocks",
    "activation_reserve_bytes",
    "blocks_needed",
    "kv_capacity",
]
