"""``capsim run``: simulate every variant of a scenario, print the tables, write the report."""

from __future__ import annotations

import math
import os
from contextlib import nullcontext
from pathlib import Path

import click

from capsim import __version__
from capsim.common.errors import ScenarioError
from capsim.cli.common import (build_traces, make_console, percentiles_option, scenario_arg,
                               set_option)


class TraceWindow(click.ParamType):
    """``--trace-events START:END``: a window of simulated seconds, 0 <= START < END."""

    name = "START:END"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        valid = "give START:END in simulated seconds with 0 <= START < END, e.g. 0:30"
        start, sep, end = text.partition(":")
        try:
            window = (float(start), float(end)) if sep else None
        except ValueError:
            window = None
        if window is None or not all(map(math.isfinite, window)):
            self.fail(f"{text!r} is not a window; {valid}", param, ctx)
        if window[0] < 0 or window[1] <= window[0]:
            self.fail(f"{text}: {valid}", param, ctx)
        return window


@click.command(help="Simulate every variant of SCENARIO and write the HTML report.")
@scenario_arg
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory [default: reports/<scenario name>].")
@click.option("--seed", type=click.IntRange(min=0), help="Override the scenario's seed.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Variants simulated at once, one worker process each [default: one per "
                   "CPU, at most one per variant]; 1 runs them one after the other in this "
                   "process and draws the report's charts here too (otherwise a process "
                   "forked at the start draws them while this one writes the tables). The "
                   "report is the same either way.")
@percentiles_option
@click.option("--trace-events", "trace_window", type=TraceWindow(), default=None,
              help="Write trace_<variant>.json beside the report: every replica's engine "
                   "steps between START and END simulated seconds (kind, batch, prefill and "
                   "decode tokens, KV use, preemptions, KV transfers) as a Chrome / Perfetto "
                   "trace for ui.perfetto.dev. The replicas run step by step until END.")
@click.option("--no-charts", "no_charts", is_flag=True,
              help="Draw no PNG figure: the report's tables, summary.csv, requests.csv and "
                   "results.json are written in full, faster when only the numbers are read.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also print each variant's vLLM-style start-up lines (KV cache size, "
                   "memory) before simulating; the report keeps them either way.")
@set_option
def run(scenario: Path, out_dir: Path | None, seed: int | None, workers: int | None,
        percentiles: tuple[float, ...] | None, trace_window: tuple[float, float] | None,
        no_charts: bool, verbose: bool, overrides: tuple[str, ...]) -> None:
    from capsim import report
    from capsim.report.charts import ChartError, NoCharts
    from capsim.report.run import day
    from capsim.scenario.load import dump_resolved, load

    loaded = load(scenario, list(overrides), seed)
    spec = loaded.spec
    traces = build_traces(loaded)
    out = out_dir or Path("reports") / spec.name
    report.check_out_dir(out)
    console = make_console()
    sizes = sorted({len(t) for t in traces.traces.values()})
    console.print(f"[bold]{spec.name}[/]: {'/'.join(f'{n:,}' for n in sizes)} requests, "
                  f"{len(loaded.runs)} variant(s), seed {spec.seed}")
    charts = NoCharts() if no_charts else _chart_drawer(workers)
    workers = min(workers or os.cpu_count() or 1, len(loaded.runs))
    extra = {"percentiles": percentiles or (), "trace_window": trace_window}
    with charts or nullcontext():
        results, rows = _simulate(loaded, traces, workers, console, extra, verbose)
        frames = day.windows(results, spec.slo) if day.has_day(results) else None
        try:
            index = report.write(out, scenario_name=spec.name, description=spec.description,
                                 resolved_yaml=dump_resolved(loaded, __version__, spec.seed),
                                 results=results, rows=rows, slo=spec.slo,
                                 class_slos=loaded.class_slos, day_frames=frames,
                                 percentiles=percentiles,
                                 workloads={rc.variant: rc.workload for rc in loaded.runs},
                                 version=__version__, charts=charts)
        except ChartError as exc:          # one line, exit 1 (not bad input: exit 2)
            raise click.ClickException(str(exc)) from None
    _print_outcome(console, loaded, results, rows, frames, percentiles)
    if not verbose:
        console.print("[dim]engine start-up lines: capsim run -v, or the report's "
                      "\"Engine start-up logs\"[/]")
    console.print(f"report: {index}")
    _refuse_empty_variants(loaded, rows, index)


def _chart_drawer(workers: int | None):
    """A chart process forked now, to import matplotlib while this process simulates and
    to draw the report's PNGs while it writes the rest (:mod:`capsim.report.charts`);
    None — the charts drawn here — with ``--workers 1`` ("in this process"), one CPU or
    not on Linux."""
    from capsim.report.charts import ChartProcess

    return None if workers == 1 else ChartProcess.start()


def _simulate(loaded, traces, workers: int, console, extra: dict,
              verbose: bool) -> tuple[list, list]:
    """Every variant simulated under a progress display, after its start-up lines when
    ``verbose`` (the first screen is the results, not ~10 log lines per variant): (the
    results, their summary rows), in the scenario's order. ``extra``: ``percentiles`` and
    ``trace_window`` (:class:`~capsim.studies.task.RunTask`'s)."""
    from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn,
                               TimeElapsedColumn)

    from capsim.scenario.describe import kv_log_lines

    # No percentage while a bar has no total (variants on worker processes: it pulses).
    with Progress(TextColumn("{task.description:<28}"), BarColumn(),
                  TaskProgressColumn("{task.percentage:>5.1f}%", " " * 6), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        for rc in loaded.runs if verbose else ():
            for line in kv_log_lines(rc):
                bar.console.print(f"  [dim]{rc.variant}: {line}[/]")
        if workers > 1:
            return _simulate_in_processes(bar, loaded, traces, workers, extra)
        return _simulate_here(bar, loaded, traces, extra)


def _simulate_in_processes(bar, loaded, traces, workers: int, extra: dict) -> tuple[list, list]:
    """The variants on ``workers`` processes, under one pulsing bar (no total until every
    variant is done)."""
    from capsim.studies.task import RunTask
    from capsim.studies.variants import simulate_variants

    spec = loaded.spec
    results, rows = [], []
    label = f"{len(loaded.runs)} variants, {workers} processes"
    task = bar.add_task(f"{label}: 0 done", total=None)
    tasks = [RunTask({"variant": rc.variant}, rc, traces.get(rc.workload, rc.seed),
                     spec.slo, loaded.class_slos, **extra) for rc in loaded.runs]
    for outcome in simulate_variants(tasks, workers, lambda d, t: bar.update(
            task, description=f"{label}: {d} done", total=t if d == t else None,
            completed=d)):
        results.append(outcome.result)
        rows.extend(outcome.rows)
    return results, rows


def _simulate_here(bar, loaded, traces, extra: dict) -> tuple[list, list]:
    """The variants one after the other in this process, one bar each: requests done."""
    from capsim.metrics.summary import summarize
    from capsim.sim.simulate import simulate

    spec = loaded.spec
    results, rows = [], []
    for rc in loaded.runs:
        trace = traces.get(rc.workload, rc.seed)
        task = bar.add_task(rc.variant, total=len(trace))
        result = simulate(rc, trace, progress=lambda d, t, task=task:
                          bar.update(task, completed=d), trace_window=extra["trace_window"])
        results.append(result)
        rows.extend(summarize(result, spec.slo, loaded.class_slos, extra["percentiles"]))
    return results, rows


def _print_outcome(console, loaded, results: list, rows: list, frames,
                   percentiles: tuple[float, ...] | None = None) -> None:
    """The tables and lines after a run: summary, the day view, engines, how far to trust
    it, rejections and skipped failures, the disaggregated split, the pools."""
    from capsim.profiles import trust
    from capsim.report.run.console import (day_table, day_verdict_lines, disagg_table,
                                           held_reply_lines, pools_table, summary_table)
    from capsim.report.run.html import skipped_failure_notes
    from capsim.report.run.pools import trust_pairs
    from capsim.report.run.table import held_variants
    from capsim.report.terminal import Prose
    from capsim.scenario.preset_rules import engine_rule_lines

    spec = loaded.spec
    held = held_variants(results)
    console.print(summary_table(rows, spec.slo, percentiles, held))
    for line in held_reply_lines(rows, held):
        console.print(Prose(f"note: {line}"))
    if frames:
        console.print(day_table(results, frames))
        for line in day_verdict_lines(rows, frames, spec.slo):
            console.print(f"[yellow]warning[/]: {line}")
    for label, names in _by_engine(results).items():
        console.print(f"engine {label}: {', '.join(names)}")
        for line in engine_rule_lines(loaded.runs, names):     # the preset's rules applied
            console.print(Prose(f"preset rule: {line}"))
    for line in trust.lines(trust_pairs(results)):
        console.print(Prose(f"how far to trust it: {line}"))
    for line in [*_rejection_lines(results, rows), *skipped_failure_notes(results)]:
        console.print(f"[yellow]warning[/]: {line}")
    split = disagg_table(rows)
    if split is not None:
        console.print(split)
    by_pool = pools_table(results, spec.slo, loaded.class_slos)
    if by_pool is not None:
        console.print(by_pool)


def _rejection_lines(results: list, rows: list) -> list[str]:
    """Per variant that rejected requests: how many, by kind, and the commonest reason."""
    from capsim.metrics.summary import rejection_kinds
    from capsim.sim.simulate import group_reasons

    kinds = {row.variant: rejection_kinds(row) for row in rows if row.cls == "all"}
    out = []
    for r in results:
        for count, example in group_reasons(r.requests.reject_reason.tolist())[:1]:
            total = len(r.requests.reject_reason)
            what = (f"every request rejected ({count:,} of {total:,})" if count == total
                    else f"{count:,} of {total:,} requests rejected")
            by_kind = f"; by kind: {kinds[r.variant]}" if kinds.get(r.variant) else ""
            out.append(f"{r.variant}: {what}, e.g. {example}{by_kind}")
    return out


def _refuse_empty_variants(loaded, rows, index: Path) -> None:
    """A variant that completed no request has no figure to compare: after the report is
    written (it shows why), end with one error line naming each such variant and exit 2,
    as for bad input — its configuration cannot serve this workload.

    Raises:
        ScenarioError: naming the variants (and their YAML paths) that finished nothing.
    """
    empty = [(i, r) for i, rc in enumerate(loaded.runs) for r in rows
             if r.cls == "all" and r.variant == rc.variant and r.num_finished == 0]
    if not empty:
        return
    what = "; ".join(f"{r.variant}: " + (f"all {r.num_requests:,} requests rejected"
                                         if r.num_requests else "no measured request")
                     for _, r in empty)
    path = (f"variants.{empty[0][0]}" if loaded.spec.variants and len(empty) == 1 else None)
    raise ScenarioError(f"{len(empty)} of {len(loaded.runs)} variant(s) completed no request "
                        f"({what}); the report says why: {index}", file=str(loaded.path),
                        path=path)


def _by_engine(results) -> dict[str, list[str]]:
    """Variant names by the engine preset they ran."""
    out: dict[str, list[str]] = {}
    for r in results:
        out.setdefault(r.engine, []).append(r.variant)
    return out
