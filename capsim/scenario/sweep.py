"""Schema of a scenario's ``sweep:`` and ``sizing:`` sections.

``sweep:`` is a grid: each key is a dotted path into the scenario document
(the same paths ``--set`` takes), each value the list of values to try::

    sweep:
      workload.arrival.rate_per_s: [2, 4, 8, 16]
      engine.max_num_batched_tokens: [256, 512, 1024, 2048]
      hardware: [a100-80gb, h100-sxm]

``capsim sweep`` runs the Cartesian product of the lists (in the order
written), crossed with the variants. ``sizing:`` holds the options of
``capsim size`` (the load to size for, hardware and TP choices, the search
bound and the number of replications).

The validators here only say what would be valid; the scenario loader
(:mod:`capsim.scenario.validation`) turns their errors into one line with the file and the
YAML path.
"""

from __future__ import annotations

import math
import re
from typing import ClassVar, Annotated, Any, Optional

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from capsim.common.errors import ScenarioError
from capsim.common.schema import Bool, Int, StrictModel
from capsim.scenario.fleet import MAX_REPLICAS

#: Most replications (``--seeds K``, ``sizing.seeds``): a 95 % confidence interval's
#: half-width shrinks as 1/√K, to 1/32 of one trace's spread at 1,000; far more only
#: multiplies the runs (``--seeds 1000000000`` built a list of a billion seeds and ended
#: in a MemoryError).
MAX_SEEDS = 1000

#: Most points a ``sweep:`` grid may hold (the product of its lists' lengths): every point
#: is loaded and resolved before the first run (about 0.1 s each), and each is run once per
#: variant and seed.
MAX_SWEEP_POINTS = 1000

#: Most simulations one ``capsim sweep`` may start (points × variants × seeds): a
#: one-minute scenario's 10,000 runs are about a week of one CPU.
MAX_RUNS = 10_000


def check_num_seeds(k: int) -> None:
    """``--seeds K`` within ``1..MAX_SEEDS``.

    Raises:
        ScenarioError: naming ``--seeds`` and the valid range.
    """
    if not 1 <= k <= MAX_SEEDS:
        raise ScenarioError(f"--seeds must be in 1..{MAX_SEEDS:,} (independent traces per "
                            f"configuration), got {k:,}")


#: Top-level keys a sweep may not vary: the sections that describe the sweep
#: itself, and the seed (replications come from ``--seeds K``).
SWEEP_RESERVED_ROOTS = ("sweep", "sizing", "name", "description", "seed")


def _as_value_list(value: Any) -> Any:
    """Reject a scalar where a list of values is expected, saying how to write it."""
    if not isinstance(value, list):
        raise ValueError(f"give a list of values to sweep, e.g. [{value!r}, ...]")
    return value


def _non_empty_distinct(values: list[Any]) -> list[Any]:
    if not values:
        raise ValueError("empty list: give at least one value to sweep")
    seen = []
    for v in values:
        if v in seen:
            raise ValueError(f"value {v!r} is listed twice")
        seen.append(v)
    return values


SweepValues = Annotated[list[Any], BeforeValidator(_as_value_list),
                        AfterValidator(_non_empty_distinct)]
"""The values one swept field takes: a non-empty list without repeats."""


def _check_grid(grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
    if not grid:
        raise ValueError("empty sweep: give at least one dotted field and its values, "
                         "e.g. workload.arrival.rate_per_s: [2, 4, 8]")
    points = math.prod(len(values) for values in grid.values())
    if points > MAX_SWEEP_POINTS:
        sizes = " × ".join(f"{len(v):,}" for v in grid.values())
        raise ValueError(f"the grid has {sizes} = {points:,} points, more than "
                         f"{MAX_SWEEP_POINTS:,} (each is resolved before the first run and "
                         "run once per variant and seed); sweep fewer values")
    for key in grid:
        parts = key.split(".")
        if any(not p.strip() for p in parts):
            raise ValueError(f"'{key}' is not a dotted field path (e.g. engine.max_num_seqs)")
        if parts[0] in SWEEP_RESERVED_ROOTS:
            hint = " (use --seeds K for replications)" if parts[0] == "seed" else ""
            raise ValueError(f"'{key}' cannot be swept{hint}; every field can except "
                             f"{', '.join(SWEEP_RESERVED_ROOTS)}")
    return grid


SweepGrid = Annotated[dict[str, SweepValues], AfterValidator(_check_grid)]
"""The ``sweep:`` section: dotted field path → list of values (Cartesian product)."""


class PoolShape(StrictModel):
    """One parallel shape of a pool to try: TP, and for a mixture-of-experts model expert
    parallelism and data-parallel attention (vLLM's ``--enable-expert-parallel``,
    SGLang's ``--enable-dp-attention``)."""

    # in error messages
    yaml_example: ClassVar[str] = "{tensor_parallel_size: 8, enable_expert_parallel: true}"

    tensor_parallel_size: Int = Field(gt=0)
    enable_expert_parallel: Bool = False
    enable_dp_attention: Bool = False

    @property
    def label(self) -> str:
        """``TP8``, ``TP8 EP``, ``TP8 EP DPA``."""
        return " ".join([f"TP{self.tensor_parallel_size}"]
                        + ["EP"] * self.enable_expert_parallel
                        + ["DPA"] * self.enable_dp_attention)


#: ``1P2D``: x prefill replicas for every y decode replicas, both >= 1.
RATIO_PATTERN = re.compile(r"^([0-9]+)P([0-9]+)D$")


def parse_ratio(text: str) -> tuple[int, int]:
    """``"1P2D"`` → ``(1, 2)``.

    Raises:
        ValueError: not ``<x>P<y>D`` with x, y >= 1 (a split with no prefill or no decode
            replica is not disaggregated), or x + y beyond the replicas one run simulates
            (:data:`~capsim.scenario.fleet.MAX_REPLICAS`).
    """
    m = RATIO_PATTERN.match(str(text))
    if m is None or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ValueError(f"ratio {text!r}: valid: <x>P<y>D with x, y >= 1 replicas, e.g. 1P2D "
                         "(a split with no prefill or no decode replica is not disaggregated)")
    prefill, decode = int(m.group(1)), int(m.group(2))
    if prefill + decode > MAX_REPLICAS:
        raise ValueError(f"ratio {text!r} starts the search at {prefill + decode:,} replicas, "
                         f"more than the {MAX_REPLICAS:,} one run simulates; valid: <x>P<y>D "
                         f"with x + y <= {MAX_REPLICAS:,}, e.g. 1P2D")
    return prefill, decode


class DisaggSizing(StrictModel):
    """``sizing.disaggregation``: how ``capsim size`` searches disaggregated variants.

    Attributes:
        prefill, decode: pool shapes to try (every prefill × decode pair; default: the
            variant's own).
        link: KV-transfer links to try (names; default: the variant's own).
        ratios: prefill:decode replica ratios (``1P2D``) the search starts along; the answer
            is refined per pool from there (default: ``1P1D``).
    """

    # in error messages
    yaml_example: ClassVar[str] = ("{prefill: [{tensor_parallel_size: 4}], decode: "
                                   "[{tensor_parallel_size: 8}], link: [nvlink-4], "
                                   "ratios: [1P1D, 1P2D]}")

    prefill: Optional[list[PoolShape]] = Field(default=None, min_length=1)
    decode: Optional[list[PoolShape]] = Field(default=None, min_length=1)
    link: Optional[list[str]] = Field(default=None, min_length=1)
    ratios: Optional[list[str]] = Field(default=None, min_length=1)

    @field_validator("ratios")
    @classmethod
    def _ratios(cls, value: Optional[list[str]]) -> Optional[list[str]]:
        for text in value or []:
            parse_ratio(text)
        return value


class SizingConfig(StrictModel):
    """The ``sizing:`` section: defaults of ``capsim size`` (its options override them).

    Attributes:
        rate_per_s: offered load to size for, requests/s (default: the
            workload's ``arrival.rate_per_s``; for a trace, its own rate).
            ``--gpus N`` starts its capacity search here.
        gpus: answer the inverse question instead: the highest request rate
            this many GPUs sustain within the SLO targets.
        hardware: GPU profiles to compare (default: each variant's own).
        tensor_parallel_size: TP degrees to compare (default: each variant's own).
        pipeline_parallel_size: PP degrees to compare (default: each variant's own); a
            replica is TP × PP GPUs, the search counts replicas of that many.
        max_gpus: search bound; a configuration that needs more GPUs is
            reported as unable to meet the SLOs within it.
        seeds: independent traces per evaluated configuration; a configuration
            passes only if it passes in every one.
        rate_tolerance: relative precision of the ``gpus`` capacity search.
        disaggregation: the pool shapes, links and ratios searched for variants with a
            ``disaggregation:`` section (:class:`DisaggSizing`).
    """

    # in error messages
    yaml_example: ClassVar[str] = "{rate_per_s: 40, hardware: [a100-80gb, h100-sxm], max_gpus: 32}"

    rate_per_s: Optional[float] = Field(default=None, gt=0)
    gpus: Optional[Int] = Field(default=None, gt=0)
    hardware: Optional[list[str]] = Field(default=None, min_length=1)
    tensor_parallel_size: Optional[list[Annotated[Int, Field(gt=0)]]] = Field(default=None,
                                                                            min_length=1)
    pipeline_parallel_size: Optional[list[Annotated[Int, Field(gt=0)]]] = Field(
        default=None, min_length=1)
    max_gpus: Int = Field(default=64, gt=0)
    seeds: Int = Field(default=1, ge=1, le=MAX_SEEDS)
    rate_tolerance: float = Field(default=0.02, gt=0, lt=1)
    disaggregation: Optional[DisaggSizing] = None
