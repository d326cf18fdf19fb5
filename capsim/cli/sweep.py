"""The work behind ``capsim sweep`` and ``capsim size`` (the click commands live in cli.py).

Each function validates everything first (a bad scenario, sweep or option
raises :class:`~capsim.common.errors.ScenarioError` before any run starts and
before anything is written), runs the simulations on the chosen executor
with a progress bar over runs, prints the tables and writes the report.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from capsim import __version__
from capsim.scenario.load import dump_resolved, load
from capsim.common.errors import ScenarioError
from capsim.studies.parallel import ExecutorSpec, open_runner
from capsim.report import check_out_dir


#: Columns of the configuration table left out of the terminal (they stay in the report).
_BRIEF_DROP = ("$/h", "out tok/s", "goodput", "ITL p50 ms", "stalls")


@contextmanager
def _progress_bar(console: Console, label: str):
    """Yields ``progress(done, total)`` drawing one bar over runs."""
    with Progress(TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("runs"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def run_sweep(console: Console, scenario: Path, out_dir: Path | None, seed: int | None,
              num_seeds: int, executor: ExecutorSpec, overrides: list[str]) -> Path:
    """``capsim sweep``: plan, run every point × variant × seed, print, write the report."""
    from capsim.studies import sweep
    from capsim.report.sweep.page import display_labels, sweep_trust_lines, write_sweep
    from capsim.report.sweep.console import rich_table
    from capsim.report.sweep.tables import cheapest_table, points_table

    plan = sweep.plan(scenario, overrides, seed)
    seeds = sweep.replication_seeds(plan.base.spec.seed, num_seeds)
    unique, _ = sweep.dedupe(sweep.tasks(plan, seeds))  # builds the traces: fails before running
    spec = plan.base.spec
    total = plan.num_runs_per_seed * len(seeds)
    same = f" ({total - len(unique)} identical to another, run once)" if len(unique) < total else ""
    out = out_dir or Path("reports") / f"{spec.name}-sweep"
    check_out_dir(out)                  # before any run: a bad -o wastes no simulation
    console.print(f"[bold]{spec.name}[/]: {len(plan.points)} sweep points × "
                  f"{len(plan.base.runs)} variant(s) × {len(seeds)} seed(s) = {total} runs{same} "
                  f"on {executor.describe()}")
    with open_runner(executor) as runner, _progress_bar(console, "sweep") as progress:
        result = sweep.run(plan, seeds, runner, progress)
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
        console.print(line[0].lower() + line[1:])
    console.print(f"report: {index}")
    return index


def run_size(console: Console, scenario: Path, out_dir: Path | None, seed: int | None, *,
             rate_per_s: float | None, gpus: int | None, num_seeds: int | None,
             max_gpus: int | None, executor: ExecutorSpec, overrides: list[str],
             trust_edge: str = "none", headroom: int = 0) -> Path:
    """``capsim size``: search every fleet option, print the ranked table, write the report.

    Raises:
        ScenarioError: bad input (before running), or — after the report is
            written — no configuration meets the SLO targets within the bounds.
    """
    from capsim.studies import sizing
    from capsim.report.sweep.page import sizing_headline, trust_notes, write_sizing
    from capsim.report.sweep.console import rich_table
    from capsim.report.sweep.tables import sizing_table

    base = load(scenario, overrides, seed)
    if any(rc.fleet is not None for rc in base.runs):
        return _run_mix(console, base, scenario, out_dir, rate_per_s=rate_per_s, gpus=gpus,
                        num_seeds=num_seeds, max_gpus=max_gpus, executor=executor,
                        trust_edge=trust_edge, headroom=headroom)
    plan = sizing.plan(base, overrides, rate_per_s=rate_per_s, gpus=gpus, num_seeds=num_seeds,
                       max_gpus=max_gpus, trust_edge=trust_edge, headroom=headroom)
    out = out_dir or Path("reports") / f"{base.spec.name}-size"
    check_out_dir(out)                  # before any run: a bad -o wastes no simulation
    live = sum(o.run is not None for o in plan.options)
    console.print(f"[bold]{base.spec.name}[/]: sizing {live} configuration(s) × "
                  f"{len(plan.seeds)} seed(s) on {executor.describe()}")
    with open_runner(executor) as runner, _progress_bar(console, "search") as progress:
        result = sizing.run(plan, runner, progress)
    index = write_sizing(out, result, resolved_yaml=dump_resolved(base, __version__,
                                                                   base.spec.seed),
                         executor=executor.describe())
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
             headroom: int) -> Path:
    """``capsim size`` on pooled fleets: the cheapest mix of pool replicas per variant
    (:mod:`capsim.studies.mix`).

    Raises:
        ScenarioError: an option mixes do not take (``--gpus``, ``--headroom``,
            ``--trust-edge``), bad input, or — after the report is written — no mix meets
            the SLO targets within ``max_gpus``.
    """
    from capsim.report.sweep.console import rich_table
    from capsim.report.sweep.mix import mix_headline, mix_table, write_mix
    from capsim.studies import mix

    for flag, given in (("--gpus", gpus is not None), ("--headroom", headroom != 0),
                        ("--trust-edge", trust_edge != "none")):
        if given:
            raise ScenarioError(f"{flag} is not modelled for pooled fleets (cluster.pools); "
                                "capsim size finds the cheapest mix at a rate (--rate)",
                                file=str(scenario))
    plan = mix.plan_mix(base, rate_per_s=rate_per_s, max_gpus=max_gpus, num_seeds=num_seeds)
    out = out_dir or Path("reports") / f"{base.spec.name}-size"
    check_out_dir(out)
    console.print(f"[bold]{base.spec.name}[/]: cheapest mix of {len(plan.runs)} pooled "
                  f"variant(s) × {len(plan.seeds)} seed(s) at {plan.rate_per_s:.4g} req/s on "
                  f"{executor.describe()}")
    with open_runner(executor) as runner, _progress_bar(console, "search") as progress:
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
