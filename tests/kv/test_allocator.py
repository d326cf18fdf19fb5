"""BlockAllocator and BlockTable: seed figures, edge cases, and a stateful
property test of the refcount / free-list invariants.

Seeds cited below: "seed 000" is ../shared/seeds/000_24f44efa48c62f69.txt
(block table, copy-on-write and refcount-guard demos); "seed 002" is
../shared/seeds/002_be97687ecafaf8fa.txt (Q6-Q8).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant,
                                 precondition, rule)

from capsim.kv import BlockAllocator, KVInvariantError, OutOfBlocks, blocks_needed
from support.block_table import BlockTable

def shuffled_allocator(order: list[int], block_size: int) -> BlockAllocator:
    """An allocator whose free list is in ``order`` (earlier traffic)."""
    alloc = BlockAllocator(len(order), block_size)
    alloc.allocate(len(order))
    alloc.free(order)
    return alloc


# --- seed 000: the block table printed small -------------------------------

def test_seed000_ten_tokens_block_size_4():
    """Seed 000: 10 tokens at B=4 -> 3 non-adjacent blocks, 2 tokens of waste;
    decoding tokens 11 and 12 writes into block 9, token 13 appends block 0."""
    alloc = shuffled_allocator([5, 2, 9, 0, 1, 3, 4, 6, 7, 8], block_size=4)
    seq = BlockTable(alloc)
    seq.append_tokens(10)
    assert seq.blocks == [5, 2, 9]
    assert seq.internal_waste_tokens == 2
    assert seq.physical_slot(5) == 2 * 4 + 1   # table[5 // 4] * B + 5 % 4
    for n_tokens, table in ((11, [5, 2, 9]), (12, [5, 2, 9]), (13, [5, 2, 9, 0])):
        assert seq.slots_needed(1) == len(table) - len(seq.blocks)
        seq.append_tokens(1)
        assert (seq.num_tokens, seq.blocks) == (n_tokens, table)
    assert seq.internal_waste_tokens == 3
    seq.release()
    alloc.check_all_free()


def test_blocks_needed_is_ceil():
    assert [blocks_needed(t, 4) for t in (0, 1, 4, 5, 12, 13)] == [0, 1, 1, 2, 3, 4]
    assert blocks_needed(1000, 16) == 63


def test_physical_slot_out_of_range():
    seq = BlockTable(BlockAllocator(4, 4))
    seq.append_tokens(3)
    with pytest.raises(IndexError):
        seq.physical_slot(3)
    with pytest.raises(IndexError):
        seq.physical_slot(-1)


# --- seed 000: copy-on-write for parallel sampling ---------------------------

def fork_four_from_90_token_prompt():
    alloc = BlockAllocator(64, 16)
    prompt = BlockTable(alloc)
    prompt.append_tokens(90)
    samples = [prompt.fork() for _ in range(4)]
    return alloc, prompt, samples


def test_seed000_fork_four_samples_share_six_blocks():
    """Seed 000: a 90-token prompt is 6 blocks; forking 4 samples keeps 6
    blocks in use with refcount 5 each (the prompt sequence + 4 samples);
    a naive copy would need 30, saving 24 blocks = 192 MiB at 512 KiB/token."""
    alloc, prompt, samples = fork_four_from_90_token_prompt()
    assert prompt.blocks == [0, 1, 2, 3, 4, 5]
    assert alloc.num_used_blocks == 6
    assert [alloc.refcount(b) for b in prompt.blocks] == [5] * 6
    saved_blocks = 5 * 6 - alloc.num_used_blocks
    assert saved_blocks * 16 * 512 * 2**10 == 192 * 2**20


def test_seed000_each_sample_copies_on_first_write():
    """Seed 000: each sample's first token copies the partly filled block 5
    (90 = 5 * 16 + 10), giving tables [0..4, 6], [0..4, 7], ... and 10 blocks.

    All four copy, unlike seed 002 Q7: the original prompt sequence is still
    alive and keeps its reference to block 5, so even the fourth sample sees
    refcount 2 and must copy. 6 + 4 = 10 blocks; blocks 0-4 stay shared at
    refcount 5 and block 5 is left to the prompt alone."""
    alloc, prompt, samples = fork_four_from_90_token_prompt()
    for i, s in enumerate(samples):
        copies = alloc.num_cow_copies
        assert s.slots_needed(1) == 1          # the copy, nothing else
        s.append_tokens(1)
        assert s.blocks == [0, 1, 2, 3, 4, 6 + i]
        assert alloc.num_cow_copies == copies + 1
    assert alloc.num_used_blocks == 10
    assert [alloc.refcount(b) for b in range(6)] == [5] * 5 + [1]


def test_seed000_refcount_guard_on_release():
    """Seed 000: releasing sample 0 drops block 0 to refcount 4 and leaves it
    off the free list; only releasing everyone frees it."""
    alloc, prompt, samples = fork_four_from_90_token_prompt()
    for s in samples:
        s.append_tokens(1)
    samples[0].release()
    assert alloc.refcount(0) == 4
    assert 0 not in alloc._free
    assert alloc.refcount(6) == 0 and 6 in alloc._free   # its private copy
    for t in samples[1:] + [prompt]:
        t.release()
    assert 0 in alloc._free
    alloc.check_all_free()


# --- seed 002 Q7: n samples where the last writer owns the block -------------

def test_seed002_q7_four_samples_of_1000_token_prompt():
    """Seed 002 Q7: n = 4 samples of a 1,000-token prompt at B=16 share
    ceil(1000/16) = 63 blocks; the last block holds 1000 - 62*16 = 8 tokens.
    Here the four samples ARE the sequences (sample 0 holds the prompt, 3
    forks), so the first three writers copy and the last writer, now the sole
    owner, writes in place: 63 + 3 = 66 blocks, n - 1 = 3 copies."""
    alloc = BlockAllocator(300, 16)
    first = BlockTable(alloc)
    first.append_tokens(1000)
    samples = [first] + [first.fork() for _ in range(3)]
    assert alloc.num_used_blocks == 63
    assert alloc.refcount(first.blocks[-1]) == 4
    last_prompt_block = first.blocks[-1]
    for s in samples:
        s.append_tokens(1)
    assert alloc.num_used_blocks == 63 + 3 == 66
    assert alloc.num_cow_copies == 3
    assert samples[-1].blocks[-1] == last_prompt_block   # wrote in place
    assert alloc.refcount(last_prompt_block) == 1
    naive = 4 * 63
    assert naive == 252


# --- preemption, errors, FIFO ----------------------------------------------

def test_preemption_frees_every_block_of_the_victim():
    """Seed 002 Q8: evict the victim whole (recompute) -- all its blocks go."""
    alloc = BlockAllocator(20, 16)
    keep, victim = BlockTable(alloc), BlockTable(alloc)
    keep.append_tokens(40)
    victim.append_tokens(100)
    victim_blocks = list(victim.blocks)
    free_before = alloc.num_free_blocks
    victim.release()
    assert (victim.blocks, victim.num_tokens) == ([], 0)
    assert alloc.num_free_blocks == free_before + len(victim_blocks) == free_before + 7
    assert all(alloc.refcount(b) == 0 for b in victim_blocks)
    assert keep.blocks == [0, 1, 2]
    keep.release()
    alloc.check_all_free()


def test_free_list_is_fifo():
    alloc = BlockAllocator(4, 1)
    a = alloc.allocate(3)
    assert a == [0, 1, 2]
    alloc.free([1])
    assert alloc.allocate(2) == [3, 1]


def test_prefix_hit_takes_a_block_out_of_the_middle_of_the_queue():
    # vLLM v1's free queue: a touched (hit) block leaves the queue; freed again it
    # goes to the back, so the queue stays least-recently-freed first.
    alloc = BlockAllocator(5, 1, enable_caching=True)
    alloc.free(alloc.allocate(5)[::-1])          # queue: 4 3 2 1 0
    alloc.touch([2])                             # hit: queue 4 3 1 0
    assert alloc.num_free_blocks == 4
    alloc.touch([2])                             # second reference, still in use
    alloc.free([2])
    assert alloc.allocate(2) == [4, 3]
    alloc.free([2])                              # last reference: queue 1 0 2
    alloc.check_consistency()
    assert alloc.allocate(3) == [1, 0, 2]
    alloc.check_consistency()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("aft"), st.integers(0, 10**6)), max_size=80))
def test_free_queue_order_matches_an_ordered_dict_model(ops):
    """The lazily-deleted deque hands out exactly the blocks an ``OrderedDict`` free
    queue (O(1) removal from the middle) would, whatever the allocate / free / hit mix."""
    from collections import OrderedDict
    n = 12
    alloc = BlockAllocator(n, 1, enable_caching=True)
    model: OrderedDict[int, None] = OrderedDict.fromkeys(range(n))
    held: list[int] = []                         # one entry per reference
    for op, x in ops:
        if op == "a" and model:
            k = 1 + x % len(model)
            expect = [model.popitem(last=False)[0] for _ in range(k)]
            assert alloc.allocate(k) == expect
            held.extend(expect)
        elif op == "f" and held:
            b = held.pop(x % len(held))
            alloc.free([b])
            if b not in held:
                model[b] = None
        elif op == "t":
            b = x % n                            # a hit on a free or an in-use block
            if b in model:
                del model[b]
            alloc.touch([b])
            held.append(b)
        assert alloc.num_free_blocks == len(model)
    alloc.check_consistency()


def test_allocate_out_of_blocks_takes_nothing():
    alloc = BlockAllocator(3, 4)
    alloc.allocate(2)
    assert not alloc.can_allocate(2)
    with pytest.raises(OutOfBlocks):
        alloc.allocate(2)
    assert alloc.num_free_blocks == 1


def test_append_out_of_blocks_leaves_table_unchanged():
    alloc = BlockAllocator(3, 4)
    parent = BlockTable(alloc)
    parent.append_tokens(6)            # 2 blocks, last one shared after fork
    child = parent.fork()
    assert child.slots_needed(3) == 2  # copy + 1 new block, only 1 free
    with pytest.raises(OutOfBlocks):
        child.append_tokens(3)
    assert (child.blocks, child.num_tokens) == ([0, 1], 6)
    assert alloc.refcount(1) == 2 and alloc.num_cow_copies == 0


def test_double_free_raises():
    alloc = BlockAllocator(2, 4)
    blocks = alloc.allocate(1)
    assert alloc.free(blocks) == 1
    with pytest.raises(KVInvariantError, match="double free of block 0"):
        alloc.free(blocks)


def test_double_free_within_one_call_raises():
    """The one-pass path for unshared blocks must not hide a block listed twice."""
    alloc = BlockAllocator(4, 4)
    a, b = alloc.allocate(2)
    with pytest.raises(KVInvariantError, match=f"double free of block {a}"):
        alloc.free([a, b, a])


def test_free_returns_only_blocks_reaching_zero():
    alloc = BlockAllocator(4, 4)
    blocks = alloc.allocate(2)
    alloc.share(blocks[:1])
    assert alloc.free(blocks) == 1
    assert alloc.num_used_blocks == 1


def test_check_all_free_names_leaked_blocks():
    alloc = BlockAllocator(8, 4)
    alloc.allocate(2)
    leak = alloc.allocate(1)
    alloc.share(leak)
    with pytest.raises(KVInvariantError, match=r"3 KV blocks leaked: 0 \(refcount 1\), "
                                               r"1 \(refcount 1\), 2 \(refcount 2\)"):
        alloc.check_all_free()


def test_peak_used_blocks():
    alloc = BlockAllocator(10, 4)
    a = alloc.allocate(4)
    alloc.free(a)
    alloc.allocate(2)
    assert alloc.peak_used_blocks == 4


def test_full_last_block_shared_needs_no_copy():
    """Writing past a full shared block allocates a new block; no CoW."""
    alloc = BlockAllocator(8, 4)
    parent = BlockTable(alloc)
    parent.append_tokens(8)
    child = parent.fork()
    assert child.slots_needed(1) == 1
    child.append_tokens(1)
    assert child.blocks[:2] == parent.blocks and alloc.num_cow_copies == 0


# --- property test -----------------------------------------------------------

class KVMachine(RuleBasedStateMachine):
    """Random admit / fork / append / finish / preempt traffic.

    Checked after every step: free + used == total; the free list holds
    exactly the refcount-0 blocks, once each; no refcount is negative; each
    block's refcount equals the number of live tables pointing at it (so a
    double free or a leak cannot hide); every table has exactly
    ceil(num_tokens / B) distinct blocks; and reading each table's tokens back
    through physical_slot() gives what it wrote (so a missing copy-on-write,
    where one fork overwrites a sibling's slot, cannot hide either). At the
    end, releasing every table must leave check_all_free() passing.
    """

    @initialize(num_blocks=st.integers(1, 40), block_size=st.integers(1, 8))
    def setup(self, num_blocks, block_size):
        self.alloc = BlockAllocator(num_blocks, block_size)
        self.tables: list[BlockTable] = []   # admission order
        self.written: dict[int, list[int]] = {}   # id(table) -> its tokens
        self.memory: dict[int, int] = {}          # pool slot -> token
        self.next_token = 0

    def _write(self, table: BlockTable, n: int) -> None:
        """Append n fresh tokens, doing the KV copy the engine does on CoW."""
        old_last = table.blocks[-1] if table.blocks else None
        table.append_tokens(n)
        b = self.alloc.block_size
        start = table.num_tokens - n
        if old_last is not None and start % b and table.blocks[start // b] != old_last:
            new_last = table.blocks[start // b]
            for off in range(start % b):
                self.memory[new_last * b + off] = self.memory[old_last * b + off]
        tokens = self.written.setdefault(id(table), [])
        for i in range(start, table.num_tokens):
            self.memory[table.physical_slot(i)] = self.next_token
            tokens.append(self.next_token)
            self.next_token += 1

    def _try_append(self, table: BlockTable, n: int) -> bool:
        before = (list(table.blocks), table.num_tokens, self.alloc.num_free_blocks)
        if self.alloc.can_allocate(table.slots_needed(n)):
            self._write(table, n)
            return True
        with pytest.raises(OutOfBlocks):
            table.append_tokens(n)
        assert (table.blocks, table.num_tokens, self.alloc.num_free_blocks) == before
        return False

    def _drop(self, table: BlockTable) -> None:
        table.release()
        assert table.blocks == [] and table.num_tokens == 0
        self.written.pop(id(table), None)

    @rule(prompt=st.integers(1, 60))
    def admit(self, prompt):
        table = BlockTable(self.alloc)
        if self._try_append(table, prompt):
            self.tables.append(table)

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 10**6))
    def fork(self, i):
        parent = self.tables[i % len(self.tables)]
        child = parent.fork()
        self.written[id(child)] = list(self.written[id(parent)])
        self.tables.append(child)

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 10**6), n=st.integers(1, 20))
    def append(self, i, n):
        self._try_append(self.tables[i % len(self.tables)], n)

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 10**6))
    def finish(self, i):
        self._drop(self.tables.pop(i % len(self.tables)))

    @precondition(lambda self: self.tables)
    @rule()
    def preempt_newest(self):
        self._drop(self.tables.pop())       # vLLM: most recently admitted

    @invariant()
    def accounting(self):
        if not hasattr(self, "alloc"):
            return
        alloc = self.alloc
        assert alloc.num_free_blocks + alloc.num_used_blocks == alloc.num_blocks
        alloc.check_consistency()
        refs = [0] * alloc.num_blocks
        for t in self.tables:
            assert len(t.blocks) == blocks_needed(t.num_tokens, alloc.block_size)
            assert len(set(t.blocks)) == len(t.blocks)
            for b in t.blocks:
                refs[b] += 1
        assert refs == [alloc.refcount(b) for b in range(alloc.num_blocks)]
        assert alloc.peak_used_blocks >= alloc.num_used_blocks

    @invariant()
    def every_table_reads_back_its_own_tokens(self):
        for t in getattr(self, "tables", []):
            got = [self.memory[t.physical_slot(i)] for i in range(t.num_tokens)]
            assert got == self.written[id(t)]

    def teardown(self):
        if not hasattr(self, "alloc"):
            return
        for t in self.tables:
            t.release()
        self.alloc.check_all_free()


KVMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60,
                                       deadline=None)
TestKVMachine = KVMachine.TestCase
