"""Content hashes of KV blocks, without token text.

A request's token sequence is described as segments ``(kind, id, length)``:
a shared system prompt ``(PREFIX, template_id, n)``, the user's own tokens
``(USER, request_id, n)``, a previous turn's reply ``(OUTPUT, request_id, n)``, a
question several requests repeat after their shared prompt ``(QUESTION, question_id, n)``
(its blocks chain the prompt's, so equal ids after different prompts never match), a
replayed trace's named block ``(BLOCK, hash_id, n)`` (the Mooncake trace's ``hash_ids``).
Two requests hold identical tokens exactly where their segments coincide, so
the identity of block ``k`` is the tuple of segment pieces it covers, and its
hash chains its parent's (vLLM v1 ``kv_cache_utils.hash_block_tokens``: the
hash of (parent block hash, this block's token ids)). A block that straddles a
shared prefix and a user's own tokens is therefore never shared, as in vLLM.

Hashes are Python's ``hash`` of tuples of ints: deterministic across runs
(``PYTHONHASHSEED`` only affects str/bytes) and 64-bit, as vLLM's default
builtin-hash mode; a collision would need ~2^32 resident blocks.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

PREFIX, USER, OUTPUT, QUESTION, BLOCK = 1, 2, 3, 4, 5
ROOT_HASH = 0x5EED                      # parent hash of block 0 (vLLM's NONE_HASH)

Segments = tuple[tuple[int, int, int], ...]


def extend_hashes(hashes: list[int], segments: Segments, block_size: int, num_blocks: int) -> None:
    """Append hashes to ``hashes`` until it covers ``num_blocks`` full blocks.

    Args:
        hashes: hashes of blocks 0..len-1 already computed (extended in place).
        segments: the sequence's segments, in order; must cover
            ``num_blocks × block_size`` tokens.
        block_size: tokens per block.
        num_blocks: full blocks to cover.
    """
    k = len(hashes)
    if k >= num_blocks:
        return
    starts = list(accumulate((seg[2] for seg in segments), initial=0))
    parent = hashes[-1] if hashes else ROOT_HASH
    for k in range(k, num_blocks):
        lo, hi = k * block_size, (k + 1) * block_size
        i = bisect_right(starts, lo) - 1
        pieces = []
        while lo < hi:
            kind, sid, _ = segments[i]
            end = min(hi, starts[i + 1])
            pieces.append((kind, sid, lo - starts[i], end - starts[i]))
            lo = end
            i += 1
        parent = hash((parent, tuple(pieces)))
        hashes.append(parent)


def leading_held(hashes: list[int], held) -> int:
    """How many leading ``hashes`` are keys of ``held`` (a cache's content hash → entry
    map): the longest cached prefix's length in blocks, as a prefix cache matches."""
    k = 0
    for h in hashes:
        if h not in held:
            break
        k += 1
    return k
