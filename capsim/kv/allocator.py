"""Paged KV block allocator: a FIFO free list plus a reference count per block.

The model is vLLM v1's block pool (``vllm/v1/core/block_pool.py`` with the
free queue of ``vllm/v1/core/kv_cache_utils.py``): blocks start on the free
queue in id order, allocation pops from the front, a freed block is appended
at the back, and a block returns to the queue only when its last reference
goes. Sharing (``fork`` for parallel sampling) just bumps the count.

Prefix caching (``enable_caching``, vLLM v1's ``cached_block_hash_to_block``):
a full block can be registered under the hash of its content (a hash chain:
parent block's hash + this block's token identity, see
:mod:`capsim.kv.prefix`). A freed cached block keeps its hash while it sits
on the free queue, so a later request can take it back (:meth:`touch`); it
loses the hash only when the queue hands it out again (eviction), least
recently freed first, which is LRU.

This sits in the per-step hot loop, so blocks are plain ``int`` ids, the
counts live in one ``list[int]`` and the free queue is a ``deque`` with lazy
deletion: a cached block taken back from the middle of the queue (a hit) is
not searched for; its entry goes stale and is skipped when it reaches the
front (``_stale`` counts stale entries per block). Every operation costs
O(blocks touched); popping and appending a ``deque`` is several times cheaper
than an ``OrderedDict`` entry. No SimPy here (DESIGN.md: the allocator is
pure, deterministic).
"""

from __future__ import annotations

from collections import deque
from itertools import repeat

from capsim.kv.offload import HostTier
from capsim.kv.prefix import leading_held

_POPLEFT = deque.popleft


class OutOfBlocks(Exception):
    """An allocation asked for more blocks than are free.

    A programming-error guard: callers (schedulers) must check
    :meth:`BlockAllocator.can_allocate` first and preempt or wait instead.
    """


class KVInvariantError(AssertionError):
    """A KV bookkeeping invariant broke: double free, leak, or free-list drift."""


class BlockAllocator:
    """Free list + per-block refcount over ``num_blocks`` physical KV blocks.

    Args:
        num_blocks: physical blocks in the pool (``num_gpu_blocks``), >= 1.
        block_size: tokens per block (vLLM ``--block-size``, default 16), >= 1.

    Invariants (checked by :meth:`check_consistency`): ``num_free_blocks +
    num_used_blocks == num_blocks``; a block is on the free list iff its
    refcount is 0; no refcount is negative.

    Counters: ``peak_used_blocks`` (max blocks in use at once) and
    ``num_cow_copies`` (copy-on-write copies made through :meth:`cow`).
    """

    __slots__ = ("num_blocks", "block_size", "_refcount", "_free", "_num_free", "_stale",
                 "peak_used_blocks", "num_cow_copies", "enable_caching", "_hash_of",
                 "_cached", "num_evictions", "host")

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False,
                 host: HostTier | None = None):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, "
                             f"got {num_blocks} and {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._refcount = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))   # front = next handed out
        self._num_free = num_blocks
        # block → entries of it in _free that are stale (taken back by touch); the
        # block's first entries are the stale ones, since a later free appends behind.
        self._stale: dict[int, int] = {}
        self.peak_used_blocks = 0
        self.num_cow_copies = 0
        self.enable_caching = enable_caching
        self._hash_of: list[int | None] = [None] * num_blocks if enable_caching else []
        self._cached: dict[int, int] = {}        # content hash → resident block
        self.num_evictions = 0
        # KV offload (capsim.kv.offload): evicted cached blocks are stored in the host tier.
        self.host = host

    @property
    def num_free_blocks(self) -> int:
        """Blocks on the free list (refcount 0)."""
        return self._num_free

    @property
    def num_used_blocks(self) -> int:
        """Blocks with refcount >= 1 (a shared block counts once)."""
        return self.num_blocks - self._num_free

    def can_allocate(self, n: int) -> bool:
        """True if ``n`` fresh blocks can be allocated now."""
        return n <= self._num_free

    def allocate(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the front of the free list, refcount 1 each.

        Returns:
            the block ids, in allocation order (length ``n``).
        Raises:
            OutOfBlocks: fewer than ``n`` blocks are free (nothing is taken).
        """
        if n > self._num_free:
            raise OutOfBlocks(f"asked for {n} blocks, {self._num_free} free "
                              f"of {self.num_blocks}")
        refcount = self._refcount
        if self._stale:
            out = self._pop_skipping_stale(n)
        else:
            out = list(map(_POPLEFT, repeat(self._free, n)))   # the loop runs in C
        for b in out:
            refcount[b] = 1
        self._num_free -= n
        if self._cached:
            self._evict(out)
        used = self.num_blocks - self._num_free
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used
        return out

    def _pop_skipping_stale(self, n: int) -> list[int]:
        pop, stale, out = self._free.popleft, self._stale, []
        while len(out) < n:
            b = pop()
            k = stale.get(b)
            if k is None:
                out.append(b)
            elif k == 1:
                del stale[b]
            else:
                stale[b] = k - 1
        return out

    def share(self, blocks: list[int]) -> None:
        """Add one reference to each block (a fork shares its parent's blocks).

        Raises:
            KVInvariantError: a block is free (refcount 0); sharing it would
                make a block both free and in use.
        """
        refcount = self._refcount
        for b in blocks:
            if refcount[b] == 0:
                raise KVInvariantError(f"share of free block {b}")
            refcount[b] += 1

    def free(self, blocks: list[int]) -> int:
        """Drop one reference from each block; a block whose count reaches 0
        goes to the back of the free list.

        Returns:
            how many blocks actually returned to the free list.
        Raises:
            KVInvariantError: a block's refcount would go below 0 (double
                free). Blocks earlier in ``blocks`` have already been released
                by then; the error means the caller's bookkeeping is broken.
        """
        refcount = self._refcount
        for b in blocks:                    # the common case, unshared blocks: one pass
            if refcount[b] != 1:
                break
            refcount[b] = 0
        else:
            self._free.extend(blocks)
            self._num_free += len(blocks)
            return len(blocks)
        done = blocks.index(b)              # blocks are distinct: b's first place
        free = self._free
        free.extend(blocks[:done])
        returned = done
        for b in blocks[done:]:
            c = refcount[b] - 1
            if c < 0:
                raise KVInvariantError(f"double free of block {b}")
            refcount[b] = c
            if c == 0:
                free.append(b)
                returned += 1
        self._num_free += returned
        return returned

    # ------------------------------------------------------------ prefix caching
    def _evict(self, blocks: list[int]) -> None:
        hash_of, cached, host = self._hash_of, self._cached, self.host
        for b in blocks:
            h = hash_of[b]
            if h is not None:
                hash_of[b] = None
                if cached.get(h) == b:
                    del cached[h]
                self.num_evictions += 1
                if host is not None:
                    host.store(h)

    def lookup(self, hashes: list[int]) -> list[int]:
        """The resident blocks of the longest cached prefix of ``hashes`` (no side effects)."""
        cached = self._cached
        out = []
        for h in hashes:
            b = cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def match_length(self, hashes: list[int]) -> int:
        """How many leading ``hashes`` are cached now (:meth:`lookup`'s length, no list)."""
        return leading_held(hashes, self._cached)

    def num_free_among(self, blocks: list[int]) -> int:
        """How many of ``blocks`` sit on the free queue (taking them uses free capacity)."""
        refcount = self._refcount
        return sum(1 for b in blocks if refcount[b] == 0)

    def touch(self, blocks: list[int]) -> None:
        """Take a reference to cached blocks found by :meth:`lookup` (a prefix-cache hit)."""
        refcount, stale = self._refcount, self._stale
        for b in blocks:
            if refcount[b] == 0:            # leaves the free queue: its entry goes stale
                stale[b] = stale.get(b, 0) + 1
                self._num_free -= 1
            refcount[b] += 1
        used = self.num_blocks - self._num_free
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used

    def register(self, block: int, content_hash: int) -> None:
        """Make a full, in-use block findable by its content hash.

        If another resident block already holds that content, the first one
        stays the cached copy (as vLLM keeps the existing entry).
        """
        if content_hash not in self._cached and self._hash_of[block] is None:
            self._cached[content_hash] = block
            self._hash_of[block] = content_hash

    def cached_hash(self, block: int) -> int | None:
        """The content hash ``block`` is cached under, or None."""
        return self._hash_of[block] if self.enable_caching else None

    def cow(self, block: int) -> int:
        """Copy-on-write: give the caller a private copy of a shared block.

        Takes one fresh block, drops the caller's reference to ``block`` and
        counts the copy in ``num_cow_copies``. (The simulator moves no bytes;
        the copy's cost is accounted elsewhere.)

        Returns:
            the new block id (refcount 1).
        Raises:
            OutOfBlocks: no free block for the copy (nothing changes).
        """
        (new,) = self.allocate(1)
        self.free((block,))
        self.num_cow_copies += 1
        return new

    def refcount(self, block: int) -> int:
        """Current reference count of ``block`` (0 = on the free list)."""
        return self._refcount[block]

    def check_all_free(self) -> None:
        """End-of-run invariant: every block is back on the free list.

        Raises:
            KVInvariantError: naming up to 20 leaked blocks and their counts.
        """
        if self._num_free == self.num_blocks:
            return
        leaked = [(b, c) for b, c in enumerate(self._refcount) if c]
        if not leaked:
            raise KVInvariantError(f"the free list counts {self._num_free} of "
                                   f"{self.num_blocks} blocks: a block was freed twice")
        shown = ", ".join(f"{b} (refcount {c})" for b, c in leaked[:20])
        more = f" and {len(leaked) - 20} more" if len(leaked) > 20 else ""
        raise KVInvariantError(f"{len(leaked)} KV blocks leaked: {shown}{more}")

    def check_consistency(self) -> None:
        """O(num_blocks) audit for tests: free list has no duplicates, holds
        exactly the blocks with refcount 0, and no refcount is negative.

        Raises:
            KVInvariantError: describing the first violation found.
        """
        entries: dict[int, int] = {}
        for b in self._free:
            entries[b] = entries.get(b, 0) + 1
        for b, k in entries.items():
            if k - self._stale.get(b, 0) not in (0, 1):
                raise KVInvariantError(f"block {b} is on the free list {k} times, "
                                       f"{self._stale.get(b, 0)} of them stale")
        free = {b for b, k in entries.items() if k > self._stale.get(b, 0)}
        if len(free) != self._num_free:
            raise KVInvariantError(f"{len(free)} blocks on the free list, "
                                   f"counted {self._num_free}")
        for b, c in enumerate(self._refcount):
            if c < 0:
                raise KVInvariantError(f"block {b} has refcount {c}")
            if (c == 0) != (b in free):
                raise KVInvariantError(
                    f"block {b} refcount {c} but on free list: {b in free}")
