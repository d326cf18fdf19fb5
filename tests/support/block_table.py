"""A reference model of one sequence's block table, for driving the allocator in tests.

(The engine keeps block ids in ``Request.blocks`` lists and copies-on-write in the
scheduler; this class states PagedAttention's table on its own so the allocator's
tests can exercise forks, copy-on-write and frees without a scheduler.)

One sequence's block table: logical block i -> physical block id.

PagedAttention's one indirection (Kwon et al., SOSP 2023): token ``i`` of a
sequence lives at ``table[i // B] * B + i % B`` in the block pool, so a
sequence grows one block at a time and its blocks need not be adjacent.
Forking shares every block (parallel sampling); the first write into a shared,
partly filled last block copies it (copy-on-write), except for the last owner,
who writes in place.
"""

from __future__ import annotations

from capsim.kv.allocator import BlockAllocator, OutOfBlocks
from capsim.kv.blocks import blocks_needed


class BlockTable:
    """Logical -> physical block map of one sequence, backed by ``allocator``.

    Attributes:
        blocks: physical block ids, ``len == blocks_needed(num_tokens, B)``.
        num_tokens: tokens whose KV the table holds.
    """

    __slots__ = ("allocator", "block_size", "blocks", "num_tokens")

    def __init__(self, allocator: BlockAllocator):
        self.allocator = allocator
        self.block_size = allocator.block_size
        self.blocks: list[int] = []
        self.num_tokens = 0

    def _needs_cow(self) -> bool:
        """True if the next token lands in a shared, partly filled last block."""
        return (self.num_tokens % self.block_size != 0
                and self.allocator.refcount(self.blocks[-1]) > 1)

    def slots_needed(self, num_new_tokens: int) -> int:
        """Fresh blocks :meth:`append_tokens` would take for ``num_new_tokens``.

        Counts the blocks to grow from ``num_tokens`` to ``num_tokens +
        num_new_tokens``, plus 1 if the first new token triggers copy-on-write.
        Check ``allocator.can_allocate(slots_needed(n))`` before appending.
        """
        if num_new_tokens <= 0:
            return 0
        grow = blocks_needed(self.num_tokens + num_new_tokens,
                             self.block_size) - len(self.blocks)
        return grow + 1 if self._needs_cow() else grow

    def append_tokens(self, n: int) -> None:
        """Grow by ``n`` tokens (prefill chunk or one decode token).

        Copies the last block first if it is shared (refcount > 1) and partly
        filled, then allocates the new blocks the tokens spill into.

        Raises:
            OutOfBlocks: not enough free blocks; the table is unchanged.
        """
        if n <= 0:
            return
        alloc, b, t, blocks = self.allocator, self.block_size, self.num_tokens, self.blocks
        cow = t % b != 0 and alloc.refcount(blocks[-1]) > 1
        grow = (t + n + b - 1) // b - len(blocks)
        if not alloc.can_allocate(grow + cow):
            raise OutOfBlocks(f"append of {n} tokens needs {grow + cow} blocks, "
                              f"{alloc.num_free_blocks} free")
        if cow:
            blocks[-1] = alloc.cow(blocks[-1])
        self.num_tokens = t + n
        if grow:
            blocks.extend(alloc.allocate(grow))

    def fork(self) -> "BlockTable":
        """A new table sharing every block (refcount + 1 each), same length."""
        child = BlockTable(self.allocator)
        self.allocator.share(self.blocks)
        child.blocks = self.blocks.copy()
        child.num_tokens = self.num_tokens
        return child

    def release(self) -> None:
        """Drop this table's reference to every block (finish, abort or
        preemption by recompute) and empty it.

        Blocks are freed tail first, as vLLM v1 does
        (``vllm/v1/core/single_type_kv_cache_manager.py``, ``free``), so
        the blocks a later prefix cache is least likely to reuse go out first.
        """
        self.allocator.free(self.blocks[::-1])
        self.blocks = []
        self.num_tokens = 0

    def physical_slot(self, i: int) -> int:
        """Pool slot of logical token ``i``: ``blocks[i // B] * B + i % B``.

        Raises:
            IndexError: ``i`` is not in ``[0, num_tokens)``.
        """
        if not 0 <= i < self.num_tokens:
            raise IndexError(f"token {i} not in [0, {self.num_tokens})")
        b = self.block_size
        return self.blocks[i // b] * b + i % b

    @property
    def internal_waste_tokens(self) -> int:
        """Allocated but unwritten slots, all in the last block (< B)."""
        return len(self.blocks) * self.block_size - self.num_tokens
