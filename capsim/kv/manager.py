"""The KV facade a scheduler holds: a sequence's blocks are taken, cached, shared and freed
here, so a scheduling policy never touches a block list or the block pool.

The shape follows vLLM v1's ``KVCacheManager`` (``vllm/v1/core/kv_cache_manager.py`` at
003df2961dd8830c317a61f9745ccd557da9fa06): :meth:`KVCacheManager.get_computed_blocks`
finds a waiting request's longest cached prefix (never its last token), the scheduler
checks room with :meth:`~KVCacheManager.can_allocate` and preempts as its policy says,
:meth:`~KVCacheManager.allocate_slots` takes the blocks of the tokens scheduled (and caches
the newly full ones at scheduling time, unless the policy caches them itself after the
step: vLLM's ``delay_cache_blocks``, :meth:`~KVCacheManager.cache_blocks`), and
:meth:`~KVCacheManager.free` returns them tail first. What vLLM's manager does not have,
capsim's policies need: forks sharing blocks (parallel sampling), copy-on-write,
whole-sequence reservations taken at admission, the prefill side's handoff, and one block
per decoder at a block boundary (:meth:`~KVCacheManager.append_blocks`, the decode loop's
hot path).

A sequence is anything with the :class:`KVSequence` attributes (the engine's ``Request``).
Its block table is kept on it (``blocks``, ``handoff_blocks``) for speed, but only this
module reads or writes it. Pure Python, no SimPy.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from capsim.kv.allocator import BlockAllocator
from capsim.kv.prefix import Segments, extend_hashes


class KVSequence(Protocol):
    """What the facade reads and writes on a sequence (``capsim.engine.request.Request``)."""

    rid: int
    n: int                      # parallel samples (the group's future siblings reserve with it)
    blocks: list[int]           # its block table: logical block i → physical block id
    handoff_blocks: list[int]   # prefill role: blocks held while its KV crosses the link
    hashes: list[int]           # content hashes of its full blocks, extended lazily
    segments: Segments          # token identity (capsim.kv.prefix)
    num_registered: int         # leading blocks registered in the prefix cache
    shareable: bool             # whether its blocks can be shared (worth caching)
    num_computed: int           # tokens whose KV is written
    num_preemptions: int

    @property
    def num_tokens(self) -> int: ...


class PoolCapacity:
    """The pool's block counts, read through a facade (its ``allocator``): what the
    paged :class:`KVCacheManager` and the contiguous
    :class:`~capsim.kv.contiguous.ContiguousKV` both answer."""

    __slots__ = ()

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free_blocks(self) -> int:
        """Blocks free now (paged: cached ones included, taking them evicts)."""
        return self.allocator.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.allocator.num_used_blocks


class KVCacheManager(PoolCapacity):
    """One replica's paged KV cache as its scheduler sees it.

    Args:
        allocator: the replica's block pool (``enable_caching``: prefix caching on).
        cache_when_scheduled: full blocks enter the prefix cache when they are allocated
            (vLLM v1: ``allocate_slots`` → ``cache_blocks``); False: the policy caches them
            itself after their step (:meth:`cache_blocks`; SGLang, TensorRT-LLM).

    Attributes:
        block_size: tokens per block.
        enable_caching: whether the pool caches prefixes.
        cache_on_allocate: ``enable_caching and cache_when_scheduled``.
        can_allocate: ``n`` → whether ``n`` fresh blocks are free now (the pool's bound
            method: the step loop's check, no indirection).
    """

    __slots__ = ("allocator", "block_size", "enable_caching", "cache_on_allocate",
                 "can_allocate", "_spare")

    def __init__(self, allocator: BlockAllocator, cache_when_scheduled: bool = True):
        self.allocator = allocator
        self.block_size = allocator.block_size
        self.enable_caching = allocator.enable_caching
        self.cache_on_allocate = allocator.enable_caching and cache_when_scheduled
        self.can_allocate = allocator.can_allocate
        self._spare: dict[int, list[int]] = {}   # rid → blocks reserved for its future samples

    # ------------------------------------------------------------ capacity
    def blocks_to_allocate(self, seq: KVSequence, upto_tokens: int) -> int:
        """Fresh blocks ``seq`` needs to hold ``upto_tokens`` tokens (≤ 0: none)."""
        return -(-upto_tokens // self.block_size) - len(seq.blocks)

    def num_table_entries(self, seqs: Iterable[KVSequence]) -> int:
        """Σ block-table entries of ``seqs`` (a shared block counts once per sequence)."""
        return sum(len(s.blocks) for s in seqs)

    # ------------------------------------------------------------ prefix cache
    def get_computed_blocks(self, seq: KVSequence) -> list[int]:
        """The cached blocks of ``seq``'s longest cached prefix, for a request not yet
        holding KV (the last token is always recomputed, as vLLM's ``max_cache_hit_length
        = num_tokens − 1``). Only a sequence that can share (or that computed its tokens
        before, a preempted one) looks; empty without caching. No side effects: pass the
        result to :meth:`take_computed`. A list the caller only measures and hands back."""
        if not self.enable_caching or seq.num_computed or not (seq.shareable
                                                               or seq.num_preemptions):
            return []
        cacheable = (seq.num_tokens - 1) // self.block_size
        extend_hashes(seq.hashes, seq.segments, self.block_size, cacheable)
        return self.allocator.lookup(seq.hashes[:cacheable])

    def host_hits(self, seq: KVSequence, gpu_hit: int) -> int:
        """Blocks of ``seq``'s cacheable prefix found in the host tier right after its
        ``gpu_hit`` GPU-cached blocks (0 without a tier); call after
        :meth:`get_computed_blocks` (its hashes are computed). No side effects."""
        host = self.allocator.host
        if host is None or seq.num_computed or not (seq.shareable or seq.num_preemptions):
            return 0
        cacheable = (seq.num_tokens - 1) // self.block_size
        return host.match(seq.hashes[gpu_hit:cacheable])

    def num_free_among(self, hit: list[int]) -> int:
        """How many of a hit's blocks sit on the free queue (taking them uses free room)."""
        return self.allocator.num_free_among(hit) if hit else 0

    def take_computed(self, seq: KVSequence, hit: list[int]) -> None:
        """``seq`` (holding no blocks) takes a reference to the hit blocks of
        :meth:`get_computed_blocks`: they start its block table, already cached."""
        self.allocator.touch(hit)
        seq.blocks = list(hit)
        seq.num_registered = len(hit)

    def cache_blocks(self, seq: KVSequence, upto_tokens: int) -> None:
        """Register ``seq``'s newly full blocks up to ``upto_tokens`` in the prefix cache
        (vLLM v1 ``cache_blocks``: a request admitted later can hit them at once)."""
        bs = self.block_size
        full = upto_tokens // bs
        if full <= seq.num_registered:
            return
        extend_hashes(seq.hashes, seq.segments, bs, full)
        register, blocks, hashes = self.allocator.register, seq.blocks, seq.hashes
        for k in range(seq.num_registered, full):
            register(blocks[k], hashes[k])
        seq.num_registered = full

    def first_uncached_hash(self, seq: KVSequence) -> int | None:
        """The content hash of ``seq``'s first full block not in the cache (None: every
        full block is): the block its computation will store next (TensorRT-LLM's
        ``findNewContextBlock``)."""
        full = seq.num_tokens // self.block_size
        extend_hashes(seq.hashes, seq.segments, self.block_size, full)
        k = len(self.allocator.lookup(seq.hashes[:full]))
        return seq.hashes[k] if k < full else None

    # ------------------------------------------------------------ allocation
    def allocate_slots(self, seq: KVSequence, upto_tokens: int) -> None:
        """Blocks for ``seq``'s tokens up to ``upto_tokens`` (the caller checked
        :meth:`can_allocate` of :meth:`blocks_to_allocate`); with ``cache_on_allocate`` a
        shareable sequence's full blocks are cached now.

        Raises:
            OutOfBlocks: fewer blocks are free than needed (a caller's bug).
        """
        need = -(-upto_tokens // self.block_size) - len(seq.blocks)
        if need > 0:
            seq.blocks += self.allocator.allocate(need)
        if self.cache_on_allocate and seq.shareable:
            self.cache_blocks(seq, upto_tokens)

    def grow(self, seq: KVSequence, upto_tokens: int) -> None:
        """Blocks for ``seq``'s tokens up to ``upto_tokens``, caching nothing (a transferred,
        swapped-in, reserved or speculating sequence; the caller checked the room)."""
        need = -(-upto_tokens // self.block_size) - len(seq.blocks)
        if need > 0:
            seq.blocks += self.allocator.allocate(need)

    def append_blocks(self, seqs: list[KVSequence], shareable: bool) -> None:
        """One new block for each entry of ``seqs`` (a sequence listed k times gets k), in
        that order: decoders whose next token starts a block. With ``cache_on_allocate``
        and ``shareable`` (some decoder can share), shareable ones cache their newly full
        block."""
        for seq, block in zip(seqs, self.allocator.allocate(len(seqs))):
            seq.blocks.append(block)
        if shareable and self.cache_on_allocate:
            self._cache_last(seqs)

    def append_cycles(self, cycle: list[KVSequence], count: int, shareable: bool) -> None:
        """:meth:`append_blocks` of ``cycle`` repeated, cut after ``count`` entries (each
        sequence is in ``cycle`` once): sequence p gets blocks p, p + len(cycle), … of one
        allocation, as the step loop hands them out, one slice per sequence."""
        out, c = self.allocator.allocate(count), len(cycle)
        for p, seq in enumerate(cycle):
            seq.blocks.extend(out[p::c])
        if shareable and self.cache_on_allocate:
            self._cache_last(cycle[:count])       # once per sequence that got a block

    def _cache_last(self, seqs: list[KVSequence]) -> None:
        """Shareable ones among ``seqs`` cache their last (newly full) block; one listed
        twice caches the same block twice, a no-op."""
        bs = self.block_size
        for seq in seqs:
            if seq.shareable:
                self.cache_blocks(seq, (len(seq.blocks) - 1) * bs)

    def reserve(self, seq: KVSequence, per_seq: int, group: int, siblings: bool) -> None:
        """Take a whole-request reservation at admission: ``group`` blocks in all, of
        which ``seq``'s own table holds ``per_seq`` (blocks it already holds, a reused
        prefix, count once); with ``siblings`` (parallel samples forked later) the rest
        wait for them (:meth:`fork_reserved`)."""
        have = len(seq.blocks)
        got = self.allocator.allocate(group - have)
        seq.blocks += got[:per_seq - have]
        if siblings:
            self._spare[seq.rid] = got[per_seq - have:]

    # ------------------------------------------------------------ sharing
    def fork(self, parent: KVSequence, child: KVSequence) -> None:
        """``child`` shares every block of ``parent`` (one more reference each)."""
        child.blocks = list(parent.blocks)
        self.allocator.share(child.blocks)

    def fork_reserved(self, parent: KVSequence, siblings: list[KVSequence],
                      shared_blocks: int) -> None:
        """Forked ``siblings`` keep sharing ``parent``'s first ``shared_blocks`` blocks and
        take the rest of their tables from ``parent``'s reservation (:meth:`reserve`)."""
        spare = self._spare.pop(parent.rid)
        per = len(spare) // (parent.n - 1)
        for k, sib in enumerate(siblings):
            self.allocator.free(sib.blocks[shared_blocks:][::-1])
            sib.blocks = sib.blocks[:shared_blocks] + spare[k * per:(k + 1) * per]

    def copy_on_write(self, seq: KVSequence) -> None:
        """Before ``seq`` writes into its last block: a private copy if others share it."""
        alloc, last = self.allocator, seq.blocks[-1]
        if alloc.refcount(last) > 1:
            seq.blocks[-1] = alloc.cow(last)

    # ------------------------------------------------------------ release
    def free(self, seq: KVSequence) -> None:
        """Drop ``seq``'s blocks, tail first as vLLM frees (the last blocks are evicted
        first); cached ones stay findable until evicted."""
        self.allocator.free(seq.blocks[::-1])
        seq.blocks = []

    def free_to_recompute(self, seq: KVSequence) -> None:
        """:meth:`free` for a recompute preemption: ``seq`` starts its cache bookkeeping
        over (what it cached stays cached)."""
        self.allocator.free(seq.blocks[::-1])
        seq.blocks = []
        seq.num_registered = 0

    def hand_off(self, seq: KVSequence) -> None:
        """Prefill role: ``seq``'s blocks are held for its KV transfer, not by it."""
        seq.handoff_blocks, seq.blocks = seq.blocks, []

    def release_handoff(self, seq: KVSequence) -> None:
        """Prefill role: ``seq``'s KV has left; free the blocks :meth:`hand_off` held."""
        self.allocator.free(seq.handoff_blocks[::-1])
        seq.handoff_blocks = []
