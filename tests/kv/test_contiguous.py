"""The contiguous KV baseline: first-fit reservations in one token range (capsim.kv.contiguous)."""

from __future__ import annotations

import pytest

from capsim.kv.allocator import KVInvariantError
from capsim.kv.contiguous import ContiguousAllocator


def test_first_fit_places_in_the_first_hole_and_merges_on_release():
    a = ContiguousAllocator(100, 1)
    x, y, z = a.reserve(30), a.reserve(30), a.reserve(30)
    assert (x, y, z) == (0, 30, 60) and a.free_tokens == 10
    a.release(x, 30)
    a.release(z, 30)
    # 70 tokens free, but in holes of 30 and 40: a 50-token request does not fit.
    assert a.free_tokens == 70 and a.biggest_hole == 40 and a.reserve(50) is None
    assert a.reserve(25) == 0                   # first fit: the hole at 0
    a.release(0, 25)
    a.release(y, 30)                            # everything merges back into one hole
    a.check_all_free()
    with pytest.raises(KVInvariantError):
        a.release(0, 10)
