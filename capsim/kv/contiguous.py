"""Contiguous KV reservation with first-fit placement: the pre-PagedAttention baseline.

Each request reserves one contiguous range of the token address space at
admission — ``max_model_len`` tokens, or its own prompt + ``max_tokens`` — and
keeps it until it finishes (seed 000's allocator demo; Kwon et al. 2023 §3).
Free space is a sorted list of holes; placement is first fit; a release merges
with its neighbours. The two wastes this shows: internal (reserved but never
written) and external (enough free tokens in total, but no hole big enough).
"""

from __future__ import annotations

from bisect import bisect_left

from capsim.kv.allocator import KVInvariantError
from capsim.kv.manager import PoolCapacity


class ContiguousAllocator:
    """First-fit reservations over ``num_tokens`` KV token slots.

    ``num_blocks`` / ``num_used_blocks`` report the same space in
    ``block_size`` units so timelines read like the paged allocator's.
    """

    def __init__(self, num_tokens: int, block_size: int):
        self.num_tokens = num_tokens
        self.block_size = block_size
        self.num_blocks = num_tokens // block_size
        self._starts: list[int] = [0]          # holes, sorted by start
        self._sizes: list[int] = [num_tokens]
        self.used_tokens = 0
        self.peak_used_blocks = 0
        self.enable_caching = False
        self.num_evictions = 0

    @property
    def free_tokens(self) -> int:
        return self.num_tokens - self.used_tokens

    @property
    def biggest_hole(self) -> int:
        return max(self._sizes, default=0)

    @property
    def num_used_blocks(self) -> int:
        return -(-self.used_tokens // self.block_size)

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self.num_used_blocks

    def reserve(self, n: int) -> int | None:
        """Place ``n`` tokens in the first hole that fits; its start, or None if none does."""
        for i, size in enumerate(self._sizes):
            if size >= n:
                start = self._starts[i]
                if size == n:
                    del self._starts[i], self._sizes[i]
                else:
                    self._starts[i] += n
                    self._sizes[i] -= n
                self.used_tokens += n
                self.peak_used_blocks = max(self.peak_used_blocks, self.num_used_blocks)
                return start
        return None

    def release(self, start: int, n: int) -> None:
        """Return ``[start, start + n)``, merging with adjacent holes.

        Raises:
            KVInvariantError: the range overlaps a hole (double release).
        """
        i = bisect_left(self._starts, start)
        if (i < len(self._starts) and self._starts[i] < start + n) or (
                i > 0 and self._starts[i - 1] + self._sizes[i - 1] > start):
            raise KVInvariantError(f"release of [{start}, {start + n}) overlaps free space")
        self._starts.insert(i, start)
        self._sizes.insert(i, n)
        self.used_tokens -= n
        if i + 1 < len(self._starts) and start + n == self._starts[i + 1]:
            self._sizes[i] += self._sizes.pop(i + 1)
            self._starts.pop(i + 1)
        if i > 0 and self._starts[i - 1] + self._sizes[i - 1] == start:
            self._sizes[i - 1] += self._sizes.pop(i)
            self._starts.pop(i)

    def check_all_free(self) -> None:
        if self._starts != [0] or self._sizes != [self.num_tokens]:
            raise KVInvariantError(f"{self.used_tokens} KV tokens still reserved "
                                   f"({len(self._starts)} holes)")


class ContiguousKV(PoolCapacity):
    """The contiguous layout as a scheduler sees it (the paged pool's facade is
    :class:`capsim.kv.manager.KVCacheManager`): one reserved range per request, kept here
    by request id, released when it finishes.

    Args:
        allocator: the replica's first-fit token space.
    """

    enable_caching = False
    cache_on_allocate = False

    def __init__(self, allocator: ContiguousAllocator):
        self.allocator = allocator
        self.block_size = allocator.block_size
        self._ranges: dict[int, tuple[int, int]] = {}     # rid → (start, tokens)

    @property
    def free_tokens(self) -> int:
        return self.allocator.free_tokens

    @property
    def biggest_hole(self) -> int:
        """The largest contiguous free range, tokens."""
        return self.allocator.biggest_hole

    def reserve_range(self, seq, num_tokens: int) -> bool:
        """Reserve ``num_tokens`` contiguous slots for ``seq`` (first fit); False when no
        hole is big enough (nothing taken)."""
        start = self.allocator.reserve(num_tokens)
        if start is None:
            return False
        self._ranges[seq.rid] = (start, num_tokens)
        return True

    def free(self, seq) -> None:
        """Release ``seq``'s range."""
        self.allocator.release(*self._ranges.pop(seq.rid))

    def num_table_entries(self, seqs) -> int:
        """No block tables in a contiguous layout."""
        return 0
