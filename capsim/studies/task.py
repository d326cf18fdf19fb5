"""One simulation as a self-contained, picklable unit of work, and what it returns.

Sweeps and sizing searches build many :class:`RunTask` objects and hand them
to :mod:`capsim.studies.parallel`, which runs :func:`execute` serially, on a process
pool or on Dask workers. A task carries its trace (not a path), so a remote
worker needs no files; it returns summary rows (not the full
:class:`~capsim.results.model.RunResult`), so little crosses the wire.

A task is deterministic: the same task gives the same :class:`RunOutcome`
(all but ``wall_s``) wherever it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from capsim.scenario.run_config import RunConfig
from capsim.metrics.day import day_windows, violation_minutes
from capsim.metrics.summary import summarize
from capsim.studies.queueing import little_check
from capsim.results.model import FINISHED, RunResult, SummaryRow
from capsim.sim.simulate import simulate
from capsim.scenario.slo import RequestSlo, SloConfig
from capsim.workload import RequestTrace


@dataclass(frozen=True)
class RunTask:
    """Everything one run needs.

    Attributes:
        labels: what identifies the run in tables (variant, sweep values,
            replication, seed, offered rate, ...); copied to every output row.
        run: the resolved variant (its ``seed`` is the trace's seed).
        trace: the requests, shared by every task of the same load level and seed.
        slo, class_slos: the scenario's SLOs, for goodput and the target verdict.
        percentiles: ``--percentiles``: the summary rows' vLLM-named percentile columns
            (:attr:`SummaryRow.percentiles <capsim.results.model.SummaryRow.percentiles>`).
        trace_window: ``--trace-events``: the window of simulated seconds whose engine
            steps the result keeps (``capsim run`` only: a sweep returns no result).
    """

    labels: dict[str, Any]
    run: RunConfig
    trace: RequestTrace
    slo: SloConfig
    class_slos: dict[str, RequestSlo] = field(default_factory=dict)
    percentiles: tuple[float, ...] = ()
    trace_window: tuple[float, float] | None = None


@dataclass(frozen=True)
class RunOutcome:
    """What a run returns: its labels, summary rows and a few run-level figures.

    Attributes:
        labels: the task's labels.
        rows: ``metrics.summarize`` rows, ``cls == "all"`` first.
        sim_end_s: simulated time at the end of the run, seconds.
        wall_s: wall-clock seconds the simulation took (the only field that
            differs between two executions of the same task).
        mean_in_system, arrival_rate_per_s, mean_time_in_system_s: Little's
            law ``L = λ W`` measured on the finished requests
            (:func:`capsim.studies.queueing.little_check`).
        violation_minutes: minutes of day-view windows that broke a ``slo.targets``
            bound (:func:`capsim.metrics.day.violation_minutes`); NaN for a run without
            a day view (steady load, fixed fleet).
        day_minutes: the day view's length, every window's minutes (NaN without one).
    """

    labels: dict[str, Any]
    rows: list[SummaryRow]
    sim_end_s: float
    wall_s: float
    mean_in_system: float
    arrival_rate_per_s: float
    mean_time_in_system_s: float
    violation_minutes: float = float("nan")
    day_minutes: float = float("nan")

    @property
    def total(self) -> SummaryRow:
        """The ``cls == "all"`` row."""
        return self.rows[0]


def execute(task: RunTask) -> RunOutcome:
    """Simulate one task and summarise it (runs in a worker process or thread).

    Raises:
        capsim.sim.simulate.InvariantError: the run broke a conservation invariant (a bug).
    """
    result = simulate(task.run, task.trace)
    little = _little(result)
    windows = day_windows(result, task.slo) if result.day is not None else None
    return RunOutcome(labels=dict(task.labels),
                      rows=summarize(result, task.slo, task.class_slos, task.percentiles),
                      sim_end_s=result.sim_end_s, wall_s=result.wall_s,
                      mean_in_system=little.mean_in_system,
                      arrival_rate_per_s=little.arrival_rate_per_s,
                      mean_time_in_system_s=little.mean_time_in_system_s,
                      violation_minutes=float("nan") if windows is None
                      else violation_minutes(windows),
                      day_minutes=float("nan") if windows is None
                      else float(windows.window_s.sum()) / 60.0)


def _little(result: RunResult):
    r = result.requests
    done = np.asarray(r.status) == FINISHED
    return little_check(np.asarray(r.arrival_s, dtype=np.float64)[done],
                        np.asarray(r.finish_s, dtype=np.float64)[done])


RUN_COLUMNS = ("sim_end_s", "wall_s", "mean_in_system", "arrival_rate_per_s",
               "mean_time_in_system_s")
"""Run-level columns :func:`outcomes_frame` adds after the summary columns."""


def outcomes_frame(outcomes: list[RunOutcome], all_classes: bool = True) -> pd.DataFrame:
    """One row per outcome × class (only ``cls == "all"`` unless ``all_classes``).

    Columns: the label keys (in first-seen order), the
    :class:`~capsim.results.model.SummaryRow` fields (and its ``--percentiles`` columns),
    then :data:`RUN_COLUMNS`.
    """
    records = []
    for o in outcomes:
        extra = {k: getattr(o, k) for k in RUN_COLUMNS}
        for row in (o.rows if all_classes else o.rows[:1]):
            records.append({**o.labels, **row.model_dump(), **row.percentiles, **extra})
    return pd.DataFrame(records)
