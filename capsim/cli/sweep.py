"""``capsim sweep``: run a scenario's ``sweep:`` grid × variants (× seeds) in parallel,
print the tables and write the sweep report.

Everything is validated first (a bad scenario, sweep or option raises
:class:`~capsim.common.errors.ScenarioError` before any run starts and before anything
is written); the runs go to the chosen executor with a progress bar over runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from capsim import __version__
from capsim.cli.common import (executor_options, executor_spec, make_console,
                               percentiles_option, scenario_arg, set_option, progress_bar)

if TYPE_CHECKING:
    from rich.console import Console

    from capsim.studies.parallel import ExecutorSpec


@click.command(help="Run SCENARIO's sweep: grid × variants (× seeds) in parallel; write the "
                    "sweep report (latency–load curves, cost vs tail latency, every run).")
@scenario_arg
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/<scenario name>-sweep].")
@click.option("--seed", type=click.IntRange(min=0), help="Override the scenario's seed (replication 0).")
@executor_options
@percentiles_option
@set_option
def sweep(scenario: Path, out_dir: Path | None, seed: int | None, num_seeds: int | None,
          workers: int | None, executor: str, scheduler: str | None,
          percentiles: tuple[float, ...] | None, overrides: tuple[str, ...]) -> None:
    spec = executor_spec(executor, workers, scheduler)
    run_sweep(make_console(), scenario, out_dir, seed, 1 if num_seeds is None else num_seeds, spec,
              list(overrides), percentiles or ())


#: Columns of the configuration table left out of the terminal (they stay in the report).
_BRIEF_DROP = ("$/h", "out tok/s", "goodput", "ITL p50 ms", "stalls")


def run_sweep(console: Console, scenario: Path, out_dir: Path | None, seed: int | None,
              num_seeds: int, executor: ExecutorSpec, overrides: list[str],
              percentiles: tuple[float, ...] = ()) -> Path:
    """``capsim sweep``: plan, run every point × variant × seed, print, write the report
    (``percentiles``: ``--percentiles`` columns in summary.csv, points.csv and the tables)."""
    from capsim.report import check_out_dir
    from capsim.scenario.load import dump_resolved, load
    from capsim.scenario.sweep import check_num_seeds
    from capsim.workload import TraceCache
    from capsim.studies import sweep
    from capsim.studies.parallel import open_runner
    from capsim.report.sweep.page import display_labels, sweep_trust_lines, write_sweep
    from capsim.report.terminal import Prose
    from capsim.report.sweep.console import rich_table
    from capsim.report.sweep.tables import cheapest_table, points_table

    check_num_seeds(num_seeds)           # before the grid's points are resolved
    sweep.check_run_count(load(scenario, overrides, seed), num_seeds)
    plan = sweep.plan(scenario, overrides, seed)
    seeds = sweep.replication_seeds(plan.base.spec.seed, num_seeds)
    traces = TraceCache(plan.base.base_dir, str(plan.base.path))
    unique, _ = sweep.dedupe(sweep.tasks(plan, seeds, traces))  # fails before running
    sweep.check_work(plan, seeds, traces)     # a fleet's work, as capsim run refuses it
    spec = plan.base.spec
    total = plan.num_runs_per_seed * len(seeds)
    same = f" ({total - len(unique)} identical to another, run once)" if len(unique) < total else ""
    out = out_dir or Path("reports") / f"{spec.name}-sweep"
    check_out_dir(out)                  # before any run: a bad -o wastes no simulation
    console.print(f"[bold]{spec.name}[/]: {len(plan.points)} sweep points × "
                  f"{len(plan.base.runs)} variant(s) × {len(seeds)} seed(s) = {total} runs{same} "
                  f"on {executor.describe()}")
    with open_runner(executor) as runner, progress_bar(console, "sweep") as progress:
        result = sweep.run(plan, seeds, runner, progress, percentiles)
    index = write_sweep(out, result, resolved_yaml=dump_resolved(plan.base, __version__, spec.seed),
                        executor=executor.describe())
    labels = display_labels(result)
    console.print(rich_table(points_table(result.points, labels, spec.slo),
                             "every configuration (mean ± 95 % CI over seeds; latencies in ms)",
                             drop=_BRIEF_DROP))
    cheapest = cheapest_table(result.points, labels, spec.slo)
    if cheapest is not None:
        console.print(rich_table(cheapest, "cheapest configuration meeting every SLO target, "
                                           "per load level"))
    for line in sweep_trust_lines(result):
        console.print(Prose(line[0].lower() + line[1:]))
    console.print(f"report: {index}")
    return index
