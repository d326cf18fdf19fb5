"""The K-loop floor of a layer matmul an engine runs on an untuned tile config: one output
tile per workgroup, the whole K dimension walked in ``block_k`` steps one after another
(:class:`~capsim.profiles.engines.UntunedFp8Gemm`). At decode sizes the grid is a few
dozen workgroups on a GPU of hundreds of compute units, so the kernel's time is the
length of that serial chain, not its bytes or FLOPs.

Public API:
    k_loop_floors, k_loop_floor_s
"""

from __future__ import annotations

import math

from capsim.cost.operators import Matmul
from capsim.profiles.engines import UntunedFp8Gemm


def k_loop_floors(matmuls: tuple[Matmul, ...], rule: UntunedFp8Gemm | None
                  ) -> tuple[tuple[float, float] | None, ...]:
    """Per matmul (in ``matmuls`` order): (seconds of one wave over its ``count`` layers,
    output-column tiles per row tile), or None where the rule does not price it (not in
    ``rule.matmuls``, no shape, or no rule)."""
    if rule is None:
        return tuple(None for _ in matmuls)
    names = set(rule.matmuls)
    return tuple(
        (op.count * math.ceil(op.k_in / rule.block_k) * rule.k_step_s,
         float(math.ceil(op.n_out / rule.block_n)))
        if op.name in names and op.k_in > 0 and op.n_out > 0 else None
        for op in matmuls)


def k_loop_floor_s(floor: tuple[float, float], rows: int, block_m: int,
                   compute_units: int) -> float:
    """Seconds a matmul of ``rows`` rows takes at least: one wave's K chain
    (``floor[0]``) times the waves of its ceil(rows / block_m) x ``floor[1]`` tiles over
    ``compute_units`` (one workgroup per unit: decode sizes fill one wave). 0.0 for no rows.

    >>> k_loop_floor_s((1e-4, 17.0), 1, 128, 304)
    0.0001
    >>> k_loop_floor_s((1e-4, 17.0), 8192, 128, 304)   # 64 x 17 tiles: 4 waves
    0.0004
    """
    if rows <= 0:
        return 0.0
    tiles = math.ceil(rows / block_m) * floor[1]
    return floor[0] * math.ceil(tiles / compute_units)
