"""Monotone searches as generators: they yield a candidate, receive pass/fail, return the answer.

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


def drive(gen: Generator, passes) -> object:
    """Run one search to the end with a ``passes(candidate) -> bool`` function (serial)."""
    candidate = next(gen)
    try:
        while True:
            candidate = gen.send(passes(candidate))
    except StopIteration as stop:
        return stop.value
