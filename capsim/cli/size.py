"""``capsim size``: the fewest GPUs per variant / hardware / TP meeting every SLO target
at a rate (or, with ``--gpus N``, the highest rate N GPUs sustain); the cheapest mix of
pool replicas for a pooled fleet.

Everything is validated first (a bad scenario or option raises
:class:`~capsim.common.errors.ScenarioError` before any run starts and before anything
is written); the runs go to the chosen executor with a progress bar over runs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from capsim import __version__
from capsim.common.errors import ScenarioError
from capsim.cli.common import (build_traces, executor_options, executor_spec, make_console,
                               percentiles_option, scenario_arg, set_option, progress_bar)
from capsim.profiles.trust import EDGES
from capsim.studies.launch import ORCHESTRATORS

if TYPE_CHECKING:
    from rich.console import Console

    from capsim.studies.parallel import ExecutorSpec


@click.command(help="Fewest GPUs per variant / hardware / TP meeting every SLO target at --rate "
                    "(or the sizing: section); with --gpus N, the highest rate N GPUs sustain.")
@scenario_arg
@click.option("--rate", "rate_per_s", type=float, metavar="R",
              help="Requests/s to size for [default: sizing.rate_per_s, else the workload's].")
@click.option("--gpus", type=int, metavar="N",
              help="Answer the inverse: the highest request rate N GPUs sustain.")
@click.option("--max-gpus", type=int, metavar="M", help="Search bound [default: sizing.max_gpus "
                                                        "or 64].")
@click.option("--headroom", type=int, default=0, metavar="K",
              help="N+K: the SLOs must hold with K replicas down at the rate sized for.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/<scenario name>-size].")
@click.option("--seed", type=click.IntRange(min=0), help="Override the scenario's seed (replication 0).")
@click.option("--trust-edge", type=click.Choice(EDGES), default="none", show_default=True,
              help="Size against the pessimistic edge of capsim's measured error for each "
                   "option's engine preset and GPU: SLO bounds tightened by the median or max "
                   "|error| of the fidelity benchmark (docs/fidelity.md, 'How far to trust it').")
@click.option("--orchestrator", type=click.Choice(ORCHESTRATORS), default="dynamo",
              show_default=True,
              help="Deployment manifest written next to a disaggregated answer's launch "
                   "script (launch/rank-N-dynamo.yaml: an NVIDIA Dynamo "
                   "DynamoGraphDeployment; launch/rank-N-llm-d.yaml: an llm-d "
                   "DisaggregatedSet); none: the scripts only.")
@executor_options
@percentiles_option
@set_option
def size(scenario: Path, rate_per_s: float | None, gpus: int | None, max_gpus: int | None,
         headroom: int, out_dir: Path | None, seed: int | None, trust_edge: str,
         orchestrator: str, num_seeds: int | None,
         workers: int | None, executor: str, scheduler: str | None,
         percentiles: tuple[float, ...] | None, overrides: tuple[str, ...]) -> None:
    from capsim.scenario.sweep import check_num_seeds

    for name, value in (("--gpus", gpus), ("--max-gpus", max_gpus)):
        if value is not None and value < 1:
            raise ScenarioError(f"{name} must be >= 1, got {value}")
    if num_seeds is not None:
        check_num_seeds(num_seeds)
    if rate_per_s is not None and not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise ScenarioError(f"--rate must be a finite number > 0 requests/s, got "
                            f"{rate_per_s:g}")
    if rate_per_s is not None and gpus is not None:
        raise ScenarioError("give --rate (fewest GPUs for a rate) or --gpus (highest rate for "
                            "N GPUs), not both")
    if gpus is not None and max_gpus is not None:
        raise ScenarioError("--max-gpus bounds the search for the fewest GPUs; with --gpus N "
                            "the GPU count is fixed, so drop one of them")
    run_size(make_console(), scenario, out_dir, seed, rate_per_s=rate_per_s, gpus=gpus,
             num_seeds=num_seeds, max_gpus=max_gpus, headroom=headroom,
             executor=executor_spec(executor, workers, scheduler), overrides=list(overrides),
             trust_edge=trust_edge, percentiles=percentiles or (), orchestrator=orchestrator)


def run_size(console: Console, scenario: Path, out_dir: Path | None, seed: int | None, *,
             rate_per_s: float | None, gpus: int | None, num_seeds: int | None,
             max_gpus: int | None, executor: ExecutorSpec, overrides: list[str],
             trust_edge: str = "none", headroom: int = 0,
             percentiles: tuple[float, ...] = (), orchestrator: str = "dynamo") -> Path:
    """``capsim size``: search every fleet option, print the ranked table, write the report.

    Raises:
        ScenarioError: bad input (before running), or — after the report is
            written — no configuration meets the SLO targets within the bounds.
    """
    from capsim.report import check_out_dir
    from capsim.scenario.load import dump_resolved, load
    from capsim.studies import sizing
    from capsim.studies.launch import launch_files
    from capsim.studies.parallel import open_runner
    from capsim.report.sweep.page import sizing_headline, trust_notes, write_sizing
    from capsim.report.sweep.console import rich_table
    from capsim.report.sweep.tables import sizing_table

    base = load(scenario, overrides, seed)
    build_traces(base)           # a fleet's work checked, as capsim run and validate do
    if any(rc.fleet is not None for rc in base.runs):
        return _run_mix(console, base, scenario, out_dir, rate_per_s=rate_per_s, gpus=gpus,
                        num_seeds=num_seeds, max_gpus=max_gpus, executor=executor,
                        trust_edge=trust_edge, headroom=headroom, percentiles=percentiles)
    plan = sizing.plan(base, overrides, rate_per_s=rate_per_s, gpus=gpus, num_seeds=num_seeds,
                       max_gpus=max_gpus, trust_edge=trust_edge, headroom=headroom,
                       percentiles=percentiles)
    out = out_dir or Path("reports") / f"{base.spec.name}-size"
    check_out_dir(out)                  # before any run: a bad -o wastes no simulation
    live = sum(o.run is not None for o in plan.options)
    console.print(f"[bold]{base.spec.name}[/]: sizing {live} configuration(s) × "
                  f"{len(plan.seeds)} seed(s) on {executor.describe()}")
    with open_runner(executor) as runner, progress_bar(console, "search") as progress:
        result = sizing.run(plan, runner, progress)
    index = write_sizing(out, result, resolved_yaml=dump_resolved(base, __version__,
                                                                   base.spec.seed),
                         executor=executor.describe(),
                         launch=launch_files(result, plan.options, orchestrator))
    console.print(rich_table(sizing_table(result), sizing_headline(result)))
    for note in trust_notes(result):
        console.print(f"[dim]{note}[/]")
    console.print(f"report: {index}")
    if not result.any_met:
        where = "sizing.max_gpus" if result.mode == "gpus" else "slo.targets"
        why = result.rows[0].note or result.rows[0].status
        raise ScenarioError(f"no configuration meets every SLO target ({why}); the report "
                            f"shows the best found: {index}", file=str(scenario), path=where)
    return index


def _run_mix(console: Console, base, scenario: Path, out_dir: Path | None, *,
             rate_per_s: float | None, gpus: int | None, num_seeds: int | None,
             max_gpus: int | None, executor: ExecutorSpec, trust_edge: str,
             headroom: int, percentiles: tuple[float, ...] = ()) -> Path:
    """``capsim size`` on pooled fleets: the cheapest mix of pool replicas per variant
    (:mod:`capsim.studies.mix`).

    Raises:
        ScenarioError: an option mixes do not take (``--gpus``, ``--headroom``,
            ``--trust-edge``), bad input, or — after the report is written — no mix meets
            the SLO targets within ``max_gpus``.
    """
    from capsim.report import check_out_dir
    from capsim.report.sweep.console import rich_table
    from capsim.report.sweep.mix import mix_headline, mix_table, write_mix
    from capsim.scenario.load import dump_resolved
    from capsim.studies import mix
    from capsim.studies.parallel import open_runner

    for flag, given in (("--gpus", gpus is not None), ("--headroom", headroom != 0),
                        ("--trust-edge", trust_edge != "none")):
        if given:
            raise ScenarioError(f"{flag} is not modelled for pooled fleets (cluster.pools); "
                                "capsim size finds the cheapest mix at a rate (--rate)",
                                file=str(scenario))
    plan = mix.plan_mix(base, rate_per_s=rate_per_s, max_gpus=max_gpus, num_seeds=num_seeds)
    plan.percentiles = percentiles          # summary.csv's --percentiles columns
    out = out_dir or Path("reports") / f"{base.spec.name}-size"
    check_out_dir(out)
    console.print(f"[bold]{base.spec.name}[/]: cheapest mix of {len(plan.runs)} pooled "
                  f"variant(s) × {len(plan.seeds)} seed(s) at {plan.rate_per_s:.4g} req/s on "
                  f"{executor.describe()}")
    with open_runner(executor) as runner, progress_bar(console, "search") as progress:
        result = mix.run_mix(plan, runner, progress)
    index = write_mix(out, result, resolved_yaml=dump_resolved(base, __version__,
                                                                base.spec.seed),
                      executor=executor.describe())
    console.print(rich_table(mix_table(result), mix_headline(result)))
    console.print(f"report: {index}")
    if not result.any_met:
        raise ScenarioError(f"no mix meets every SLO target within max_gpus = "
                            f"{plan.max_gpus}; the report shows the best found: {index}",
                            file=str(scenario), path="sizing.max_gpus")
    return index
