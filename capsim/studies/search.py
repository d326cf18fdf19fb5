"""Monotone searches as generators: they yield a candidate, receive pass/fail, return the answer.

:func:`fewest_split_passing` searches the two pool sizes of a disaggregated fleet.

Written as generators so that a driver can advance many searches in
lock-step and run all their pending candidates in one parallel batch
(:mod:`capsim.studies.sizing`). Both assume monotonicity — more GPUs never turn a
pass into a fail; more traffic never turns a fail into a pass — and test
each candidate at most once.

Use::

    gen = fewest_passing(max_count=64)
    candidate = next(gen)
    try:
        while True:
            candidate = gen.send(passes(candidate))
    except StopIteration as stop:
        answer = stop.value
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field


@dataclass
class CountSearch:
    """Result of :func:`fewest_passing`.

    Attributes:
        best: the smallest passing count, or None when ``max_count`` fails too.
        tested: every candidate tried → whether it passed, in test order.
    """

    best: int | None = None
    tested: dict[int, bool] = field(default_factory=dict)


def fewest_passing(max_count: int, start: int = 1) -> Generator[int, bool, CountSearch]:
    """Smallest integer in ``[start, max_count]`` that passes: doubling, then bisection.

    Doubling tries start, 2·start, 4·start, ... (the last step clamped to
    ``max_count``) until one passes; bisection then narrows the gap between
    the last failing and the first passing count. ``O(log max_count)`` tests.

    Raises:
        ValueError: ``start < 1`` or ``max_count < start``.
    """
    if start < 1 or max_count < start:
        raise ValueError(f"need 1 <= start <= max_count, got start={start}, max_count={max_count}")
    out = CountSearch()
    fail, n = start - 1, start
    while True:
        out.tested[n] = ok = yield n
        if ok:
            break
        fail = n
        if n >= max_count:
            return out
        n = min(2 * n, max_count)
    passing = n
    while passing - fail > 1:
        mid = (fail + passing) // 2
        out.tested[mid] = ok = yield mid
        if ok:
            passing = mid
        else:
            fail = mid
    out.best = passing
    return out


@dataclass
class RateSearch:
    """Result of :func:`highest_passing`.

    Attributes:
        best: the highest passing value found (within the tolerance), or None
            when even ``floor`` fails.
        capped: True when ``cap`` itself passed (the answer is at least ``cap``).
        tested: every value tried → whether it passed, in test order.
    """

    best: float | None = None
    capped: bool = False
    tested: dict[float, bool] = field(default_factory=dict)


def highest_passing(start: float, rel_tol: float, floor: float,
                    cap: float) -> Generator[float, bool, RateSearch]:
    """Highest value in ``[floor, cap]`` that passes, to a relative tolerance.

    From ``start``: double while passing (or halve while failing) to bracket
    the boundary, then bisect geometrically until ``hi / lo - 1 <= rel_tol``
    and return ``lo``, the highest value known to pass.

    Raises:
        ValueError: ``not 0 < floor <= start <= cap`` or ``rel_tol <= 0``.
    """
    if not (0 < floor <= start <= cap) or rel_tol <= 0:
        raise ValueError(f"need 0 < floor <= start <= cap and rel_tol > 0, got floor={floor}, "
                         f"start={start}, cap={cap}, rel_tol={rel_tol}")
    out = RateSearch()
    x = start
    out.tested[x] = ok = yield x
    lo, hi = (x, None) if ok else (None, x)
    while lo is None or hi is None:
        if lo is not None:                      # passing: grow towards the cap
            if lo >= cap:
                out.best, out.capped = lo, True
                return out
            x = min(2 * lo, cap)
        else:                                   # failing: shrink towards the floor
            if hi <= floor:
                return out
            x = max(hi / 2, floor)
        out.tested[x] = ok = yield x
        if ok:
            lo = x
        else:
            hi = x
    while hi / lo - 1 > rel_tol:
        x = math.sqrt(lo * hi)
        out.tested[x] = ok = yield x
        if ok:
            lo = x
        else:
            hi = x
    out.best = lo
    return out


@dataclass
class SplitSearch:
    """Result of :func:`fewest_split_passing`.

    Attributes:
        best: a passing (prefill, decode) replica pair from which neither pool can lose a
            replica and still pass, or None when ``max_steps`` along the ratio fails too.
        tested: every pair tried → whether it passed, in test order.
        bracket: the passing pair the per-pool bisections started from (None: none passed).
    """

    best: tuple[int, int] | None = None
    tested: dict[tuple[int, int], bool] = field(default_factory=dict)
    bracket: tuple[int, int] | None = None

    def known(self, pair: tuple[int, int]) -> bool | None:
        """Whether ``pair`` passes, as monotonicity already tells (None: unknown): it has at
        least the replicas of a passing pair in both pools, or at most those of a failing
        one."""
        for (p, d), ok in self.tested.items():
            if ok and pair[0] >= p and pair[1] >= d:
                return True
            if not ok and pair[0] <= p and pair[1] <= d:
                return False
        return None


def fewest_split_passing(ratio: tuple[int, int],
                         max_steps: int) -> Generator[tuple[int, int], bool, SplitSearch]:
    """A minimal passing (prefill, decode) split of a disaggregated fleet, ``O(log)`` per pool.

    1. Along the ratio (x, y): k·x prefill and k·y decode replicas for k = 1, 2, 4, ...
       (the last clamped to ``max_steps``) until one passes, (P_hi, D_hi).
    2. The prefill pool: bisect P in [1, P_hi] with D_hi decode replicas → P*.
    3. The decode pool: bisect D in [1, D_hi] with P* prefill replicas → D*.

    Assumes a pass is monotone in each pool's size (a replica more in either pool never
    turns a pass into a fail); a pair monotonicity already decides is not run again. The
    answer is minimal — (P* − 1, D_hi) and (P*, D* − 1) fail — but where the pools are
    coupled (the decode pool's back-pressure holding prefill KV, so the prefill pool's
    size P* depends on D) another minimal pair with fewer prefill and more decode replicas
    may cost less; a second ratio in ``sizing.disaggregation.ratios`` explores it.

    Raises:
        ValueError: a ratio component or ``max_steps`` below 1.
    """
    x, y = ratio
    if x < 1 or y < 1 or max_steps < 1:
        raise ValueError(f"need ratio >= (1, 1) and max_steps >= 1, got {ratio}, {max_steps}")
    out = SplitSearch()
    k = 1
    while True:
        out.tested[(k * x, k * y)] = ok = yield (k * x, k * y)
        if ok:
            break
        if k >= max_steps:
            return out
        k = min(2 * k, max_steps)
    out.bracket = p_hi, d_hi = k * x, k * y
    p_best = yield from _bisect(out, p_hi, lambda p: (p, d_hi))
    d_best = yield from _bisect(out, d_hi, lambda d: (p_best, d))
    out.best = (p_best, d_best)
    return out


def _bisect(out: SplitSearch, passing: int, pair) -> Generator[tuple[int, int], bool, int]:
    """Fewest n in [1, ``passing``] with ``pair(n)`` passing (``pair(passing)`` passes)."""
    fail = 0
    while passing - fail > 1:
        mid = (fail + passing) // 2
        ok = out.known(pair(mid))
        if ok is None:
            out.tested[pair(mid)] = ok = yield pair(mid)
        if ok:
            passing = mid
        else:
            fail = mid
    return passing


def drive(gen: Generator, passes) -> object:
    """Run one search to the end with a ``passes(candidate) -> bool`` function (serial)."""
    candidate = next(gen)
    try:
        while True:
            candidate = gen.send(passes(candidate))
    except StopIteration as stop:
        return stop.value
