"""Block arithmetic shared by the allocator, the capacity sizing and the schedulers."""

from __future__ import annotations


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks holding ``num_tokens`` tokens: ``ceil(num_tokens / block_size)``."""
    return -(-num_tokens // block_size)
