"""Parameter sweeps: the ``sweep:`` grid crossed with the variants, on shared traces.

:func:`plan` expands the grid (Cartesian product of the value lists, in the
order written), validates every point up front — a bad value fails before
anything runs — and :func:`run` simulates every point × variant × replication
through a :class:`capsim.studies.parallel.Runner`.

Common random numbers: a trace depends only on the ``workload:`` section (a
variant's own, if it overrides it) and the seed, so every point with the
same workload and seed (one *load level*) replays the very same requests,
whatever engine, cluster or hardware it varies. Replication ``r`` of ``--seeds K`` uses seed ``scenario seed + r``
(replication 0 is the trace ``capsim run`` uses).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.scenario.load import LoadedScenario, load
from capsim.scenario.schema import Scenario
from capsim.scenario.sweep import MAX_RUNS, check_num_seeds
from capsim.sim import budget
from capsim.scenario.workload import WorkloadConfig
from capsim.studies.confidence import aggregate
from capsim.common.errors import ScenarioError
from capsim.studies.parallel import Progress, Runner
from capsim.results.model import SummaryRow
from capsim.studies.task import RUN_COLUMNS, RunTask, execute, outcomes_frame
from capsim.workload import RequestTrace, TraceCache

#: Label columns every run carries besides the swept fields.
RUN_LABELS = ("point", "variant", "hardware", "tensor_parallel_size", "num_replicas",
              "offered_rate_per_s", "replication", "seed")
#: Label columns that tell replications of one configuration apart.
REPLICATION_LABELS = ("replication", "seed")
#: Swept fields that set the offered load (the ``offered_rate_per_s`` label shows it).
RATE_KEYS = ("workload.arrival.rate_per_s", "workload.trace.rate_scale")
#: Numeric columns averaged over replications (SummaryRow numbers + run figures).
METRICS = tuple(name for name, f in SummaryRow.model_fields.items()
                if f.annotation in (int, float, "int", "float")) + RUN_COLUMNS


@dataclass(frozen=True)
class SweepPoint:
    """One combination of swept values.

    Attributes:
        index: position in the grid (0-based, first key varies slowest).
        values: dotted field path → value, in the grid's key order.
    """

    index: int
    values: dict[str, Any]

    @property
    def overrides(self) -> list[str]:
        """``--set`` strings for :func:`capsim.scenario.load.load` (values as JSON, which YAML reads)."""
        return [f"{k}={json.dumps(v)}" for k, v in self.values.items()]

    @property
    def label(self) -> str:
        """E.g. ``engine.max_num_batched_tokens=512, hardware=h100-sxm``."""
        return ", ".join(f"{k}={v}" for k, v in self.values.items())


def grid_points(grid: dict[str, list[Any]]) -> list[SweepPoint]:
    """Every combination of the grid's values (Cartesian product, last key fastest)."""
    keys = list(grid)
    return [SweepPoint(i, dict(zip(keys, combo)))
            for i, combo in enumerate(itertools.product(*(grid[k] for k in keys)))]


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: the base scenario and every point, loaded and resolved."""

    base: LoadedScenario
    grid: dict[str, list[Any]]
    points: tuple[tuple[SweepPoint, LoadedScenario], ...]

    @property
    def num_runs_per_seed(self) -> int:
        """Point × variant combinations (runs per replication)."""
        return sum(len(loaded.runs) for _, loaded in self.points)


def plan(path: str | Path, overrides: list[str] = (), seed: int | None = None) -> SweepPlan:
    """Load ``path``, expand its ``sweep:`` grid and validate every point.

    Raises:
        ScenarioError: the scenario has no ``sweep:`` section; a swept field
            that a variant also sets (the sweep would not reach it); any point
            whose values make the scenario invalid (the message names the point).
    """
    base = load(path, list(overrides), seed)
    grid = base.spec.sweep
    if not grid:
        raise ScenarioError("no sweep: section; add one, e.g. sweep: {workload.arrival."
                            "rate_per_s: [2, 4, 8]}", file=str(base.path), path="sweep")
    _check_variant_conflicts(base.spec, grid, base.path)
    points = tuple((p, _load_point(base, p, list(overrides), seed)) for p in grid_points(grid))
    return SweepPlan(base=base, grid=dict(grid), points=points)


def _check_variant_conflicts(spec: Scenario, grid: dict[str, list], path: Path) -> None:
    """A swept field must not be set by a variant too (its own value would win)."""
    for key in grid:
        parts = key.split(".")
        for i, v in enumerate(spec.variants):
            if key in v.set:
                clash = True
            elif parts[0] in ("hardware", "model") and len(parts) == 1:
                clash = getattr(v, parts[0]) is not None
            elif parts[0] in ("engine", "cluster") and len(parts) == 2:
                clash = parts[1] in getattr(v, parts[0])
            else:
                clash = False
            if clash:
                raise ScenarioError(
                    f"variant '{v.name}' (variants.{i}) sets {key} itself, so the sweep would "
                    "not apply to it; remove it from the variant, or sweep the variant's own "
                    f"field (e.g. variants.{i}.engine.<knob>)", file=str(path), path=f"sweep.{key}")


def _load_point(base: LoadedScenario, point: SweepPoint, overrides: list[str],
                seed: int | None) -> LoadedScenario:
    try:
        return load(base.path, overrides + point.overrides, seed)
    except ScenarioError as exc:
        raise _point_error(exc, point) from None


def _point_error(exc: ScenarioError, point: SweepPoint) -> ScenarioError:
    """``exc`` of one point: at ``sweep.<key>`` when a swept field caused it, with the
    point's values."""
    swept = next((k for k in point.values if exc.path and (exc.path == k or
                                                          exc.path.startswith(k + "."))), None)
    where = f"sweep.{swept}" if swept else exc.path
    return ScenarioError(f"{exc.message} (sweep point {point.label})", file=exc.file,
                         path=where)


def check_work(sweep: SweepPlan, seeds: list[int], cache: TraceCache) -> None:
    """Every point's fleets within the work a run may take, on each seed's trace
    (:func:`capsim.sim.budget.check_work`), as ``capsim run`` checks one.

    Raises:
        ScenarioError: the first point refused, at ``sweep.<key>`` when a swept value did it.
    """
    for point, loaded in sweep.points:
        try:
            budget.check_work(loaded, cache, seeds, together=False)
        except ScenarioError as exc:
            raise _point_error(exc, point) from None


def offered_rate_per_s(wl: WorkloadConfig, trace: RequestTrace) -> float:
    """The request rate a run is offered, requests/s.

    Synthetic: ``arrival.rate_per_s`` (``inf``: all at once). Trace: inter-arrival gaps ÷
    span, ``(N − 1) / (last − first arrival)`` (NaN for fewer than two requests). A closed
    loop (``process: concurrency``) offers none: NaN (its load is ``arrival.users``, the
    swept field's own column).
    """
    if wl.arrival is not None and wl.arrival.closed_loop:
        return float("nan")
    if wl.arrival is not None:
        return float(wl.arrival.rate_per_s)
    return (len(trace) - 1) / trace.duration_s if trace.duration_s > 0 else float("nan")


def replication_seeds(base_seed: int, num_seeds: int) -> list[int]:
    """Seeds of ``num_seeds`` independent replications: base, base + 1, ...

    Raises:
        ScenarioError: ``num_seeds`` outside 1..MAX_SEEDS.
    """
    check_num_seeds(num_seeds)
    return [base_seed + r for r in range(num_seeds)]


def check_run_count(base: LoadedScenario, num_seeds: int) -> None:
    """Refuse a sweep of more than :data:`~capsim.scenario.sweep.MAX_RUNS` simulations
    (grid points × variants × seeds) before its points are resolved, with the count.

    Raises:
        ScenarioError: naming ``sweep`` and the count.
    """
    points = math.prod(len(values) for values in (base.spec.sweep or {}).values())
    total = points * len(base.runs) * num_seeds
    if total > MAX_RUNS:
        raise ScenarioError(
            f"{points:,} point(s) × {len(base.runs):,} variant(s) × {num_seeds:,} seed(s) = "
            f"{total:,} runs, more than {MAX_RUNS:,} (a one-minute scenario's {MAX_RUNS:,} "
            "runs are a week of one CPU); sweep fewer values or seeds",
            file=str(base.path), path="sweep")


def tasks(sweep: SweepPlan, seeds: list[int], cache: TraceCache | None = None,
          percentiles: tuple[float, ...] = ()) -> list[RunTask]:
    """Every point × variant × replication as a task (point-major order); ``percentiles``:
    ``--percentiles`` (each task's summary rows get those columns).

    Raises:
        ScenarioError: a trace cannot be built (e.g. no request arrives).
    """
    cache = cache or TraceCache(sweep.base.base_dir, str(sweep.base.path))
    out = []
    for point, loaded in sweep.points:
        for rep, seed in enumerate(seeds):
            for rc in loaded.runs:
                trace = cache.get(rc.workload, seed)
                rate = offered_rate_per_s(rc.workload, trace)
                labels = {"point": point.index, **point.values, "variant": rc.variant,
                          "hardware": rc.serving_pool.hardware.name,
                          "tensor_parallel_size": rc.serving_pool.engine.tensor_parallel_size,
                          "num_replicas": rc.num_replicas, "offered_rate_per_s": rate,
                          "replication": rep, "seed": seed}
                out.append(RunTask(labels=labels, run=replace(rc, seed=seed), trace=trace,
                                   slo=loaded.spec.slo, class_slos=loaded.class_slos,
                                   percentiles=percentiles))
    return out


def dedupe(work: list[RunTask]) -> tuple[list[RunTask], list[int]]:
    """Identical simulations once: tasks whose run (all but its name) and trace agree.

    A variant that a swept field does not reach (e.g. an unchunked variant
    under a chunk-size sweep) would otherwise be simulated once per value.
    Returns the unique tasks and, for every task, the index of its unique twin.
    """
    first: dict[tuple[str, int], int] = {}
    unique, index = [], []
    for t in work:
        key = (repr(replace(t.run, variant="", description="")), id(t.trace))
        if key not in first:
            first[key] = len(unique)
            unique.append(t)
        index.append(first[key])
    return unique, index


def expected_cost(task: RunTask) -> float:
    """A run's relative cost for scheduling (only the order matters: heaviest first).

    Wall time grows with engine steps: with the output tokens (decode steps)
    plus the prompt chunks to prefill.
    """
    t = task.trace
    return t.total_output_tokens + t.total_prompt_tokens / 512


@dataclass(frozen=True)
class SweepResult:
    """Every run of a sweep and its per-configuration aggregate.

    Attributes:
        plan: the sweep that ran.
        seeds: the replications' seeds.
        runs: one row per run × request class (summary.csv): the label columns
            (:data:`RUN_LABELS` plus one per swept field), the SummaryRow
            columns and :data:`capsim.studies.task.RUN_COLUMNS`.
        points: one row per point × variant (``cls == "all"``), the metrics
            averaged over replications with ``<metric>_ci95`` half-widths
            (:func:`capsim.studies.confidence.aggregate`).
    """

    plan: SweepPlan
    seeds: list[int]
    runs: pd.DataFrame
    points: pd.DataFrame

    @property
    def swept(self) -> list[str]:
        """The swept field paths, in grid order."""
        return list(self.plan.grid)


def config_columns(swept: list[str]) -> list[str]:
    """Label columns that identify one configuration (no replication / seed)."""
    cols = ["point", *swept]
    cols += [c for c in RUN_LABELS if c not in cols and c not in REPLICATION_LABELS]
    return cols


def metric_columns(runs: pd.DataFrame) -> list[str]:
    """The columns averaged over replications: :data:`METRICS` and the runs'
    ``--percentiles`` columns (``p99.9_itl_ms``)."""
    return list(METRICS) + [c for c in runs.columns if PERCENTILE_COLUMN.fullmatch(c)]


#: A ``--percentiles`` column: vLLM's name of a latency percentile in ms.
PERCENTILE_COLUMN = re.compile(r"p[0-9.e+-]+_(ttft|tpot|itl|e2el)_ms")


def run(sweep: SweepPlan, seeds: list[int], runner: Runner,
        progress: Progress | None = None, percentiles: tuple[float, ...] = ()) -> SweepResult:
    """Simulate every point × variant × replication and aggregate over replications;
    ``percentiles``: ``--percentiles`` columns in the runs and points.

    Raises:
        ScenarioError: a trace cannot be built (before any run starts).
    """
    work = tasks(sweep, seeds, percentiles=percentiles)
    unique, index = dedupe(work)
    done = runner.map(execute, unique, progress, weights=[expected_cost(t) for t in unique])
    outcomes = [replace(done[i], labels=t.labels) for t, i in zip(work, index)]
    runs = outcomes_frame(outcomes)
    totals = runs[runs["cls"] == "all"]
    points = aggregate(totals, config_columns(list(sweep.grid)), metric_columns(totals))
    return SweepResult(plan=sweep, seeds=list(seeds), runs=runs, points=points)
