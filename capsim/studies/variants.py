"""A scenario's variants simulated side by side, one worker process each (``capsim run``).

The variants of a scenario are independent runs: each is simulated and summarised in a
worker of a local process pool (:mod:`capsim.studies.parallel`), and its full
:class:`~capsim.results.model.RunResult` comes back for the report (unlike a sweep's tasks,
which return summary rows only). Results come back in the scenario's order whatever order
the workers finish in, and a run is deterministic, so the CSVs and figures are the same,
byte for byte, as when the variants run one after the other in this process (the page
differs only in the wall times it reports). The warnings a worker's
simulation logs on the ``capsim`` logger are collected there and logged again here, in
the variants' order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from capsim.metrics.summary import summarize
from capsim.results.model import RunResult, SummaryRow
from capsim.sim.simulate import simulate
from capsim.studies.parallel import ExecutorSpec, open_runner
from capsim.studies.task import RunTask

LOGGER = "capsim"


@dataclass(frozen=True)
class VariantOutcome:
    """A simulated variant: its result, its summary rows (``cls == "all"`` first) and the
    warnings its simulation logged (messages, in order)."""

    result: RunResult
    rows: list[SummaryRow]
    warnings: list[str]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def simulate_variant(task: RunTask) -> VariantOutcome:
    """Simulate and summarise one variant (in a worker process), collecting its warnings
    (``task.labels`` is not read)."""
    logger, collect = logging.getLogger(LOGGER), _Collect()
    logger.addHandler(collect)
    try:
        result = simulate(task.run, task.trace, trace_window=task.trace_window)
        rows = summarize(result, task.slo, task.class_slos, task.percentiles)
    finally:
        logger.removeHandler(collect)
    return VariantOutcome(result, rows, collect.messages)


def simulate_variants(tasks: list[RunTask], workers: int,
                      progress: Callable[[int, int], None] | None = None
                      ) -> list[VariantOutcome]:
    """Every task on a pool of ``workers`` processes, the longest traces first; outcomes
    in the tasks' order, their warnings logged again on the ``capsim`` logger here.

    Raises:
        whatever a task raised (the first; the others are cancelled where they can be).
    """
    with open_runner(ExecutorSpec(backend="process", workers=workers)) as runner:
        outcomes = runner.map(simulate_variant, tasks, progress=progress,
                              weights=[len(t.trace) for t in tasks])
    logger = logging.getLogger(LOGGER)
    for outcome in outcomes:
        for message in outcome.warnings:
            logger.warning(message)
    return outcomes
