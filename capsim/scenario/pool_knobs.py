"""A pool's engine knobs, and where the user gave each one.

A pool of a disaggregated variant (:mod:`capsim.scenario.resolve_disagg`) or of a pooled
fleet (:mod:`capsim.scenario.resolve_pools`) is resolved as a co-located variant with the
pool's knobs merged into its engine; these are the one rule for merging them and for
pointing an error back at the field the user wrote.

Public API:
    pool_engine(variant_engine, engine, tp, path, at) -> dict
    engine_knob_path(rest, pool_engine, pool_at, variant_engine, variant_at) -> str
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capsim.common.errors import ScenarioError


def pool_engine(variant_engine: dict[str, Any], engine: dict[str, Any], tp: int | None,
                path: Path, at: str) -> dict[str, Any]:
    """A pool's engine knobs: the variant's, the pool's ``engine`` on top, and the pool's
    ``tensor_parallel_size`` (given once: here or in its engine).

    Raises:
        ScenarioError: tensor_parallel_size given both ways (names ``at``.engine...).
    """
    out = {**variant_engine, **engine}
    if tp is not None:
        if "tensor_parallel_size" in engine:
            raise ScenarioError("give tensor_parallel_size once (pool or pool engine)",
                                file=str(path), path=f"{at}.engine.tensor_parallel_size")
        out["tensor_parallel_size"] = tp
    return out


def engine_knob_path(rest: str, pool_engine: dict[str, Any], pool_at: str,
                     variant_engine: dict[str, Any], variant_at: str | None) -> str:
    """The YAML path of a pool's engine knob ``rest`` (``key`` or ``key.sub...``) where the
    user gave it: the pool's ``engine`` (``<pool_at>.engine.rest``), else the variant's
    (``<variant_at>.engine.rest``; None: the file has no variants), else the scenario's
    (``engine.rest``). A pool is resolved as a variant with the pool's knobs merged into its
    engine; this is the one rule that points its errors back (disaggregated pools here,
    pooled fleets in :mod:`capsim.scenario.resolve_pools`)."""
    key = rest.partition(".")[0]
    if key in pool_engine:
        return f"{pool_at}.engine.{rest}"
    if key in variant_engine and variant_at:
        return f"{variant_at}.engine.{rest}"
    return f"engine.{rest}"
