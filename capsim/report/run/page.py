"""The run report (``capsim run``): a self-contained directory a sizing meeting can open offline.

:func:`write` renders ``index.html`` (verdict table, figures, logs), the PNG
figures, ``summary.csv``, ``requests.csv`` and ``scenario.resolved.yaml`` (and
``day.csv`` when a variant's load or fleet changes over time, ``pools.csv`` for a pooled
fleet).
The terminal summary lives in :mod:`capsim.report.run.console`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from capsim.metrics.summary import PERCENTILES, request_frame, summary_frame
from capsim.report.charts import ChartJob, ChartProcess, InProcess, NoCharts
from capsim.report.outdir import write_atomically
from capsim.report.pages import FigureRef
from capsim.report.run import day, pools, results_json, split_table, step_trace
from capsim.report.run.cdf import itl_distribution
from capsim.report.run.html import render
from capsim.report.run.table import held_variants
from capsim.report.style import unique_slugs, variant_colours
from capsim.results.model import RunResult, SummaryRow
from capsim.scenario.slo import RequestSlo, SloConfig
from capsim.scenario.workload import WorkloadConfig

_CAPTIONS = {
    "itl_cdf.png": (
        "Inter-token latency distribution",
        "Left: share of all token gaps at or below x (log ms), one gap per streamed chunk as "
        "vllm bench serve records ITL (a chunk is one token, except speculative decoding's "
        "accepted drafts and a multi-step window's tokens, which arrive together). Right: the "
        "tail, share of gaps at or "
        "above x on a log scale; the dash-dot lines at 1 % and 0.1 % are where p99 and p99.9 stop "
        "looking. Markers: ○ p50, △ p99, ◇ p99.9, ★ max. p99 can hide rare long stalls (e.g. a "
        "long prefill freezing every decode) — compare the ★ max and the stall counts in the "
        "legend against the stall threshold."),
    "itl_bars.png": (
        "ITL percentiles and maximum",
        "One group per statistic, one bar per variant (log ms). A small gap between p99 and max "
        "means a smooth stream; a max far above p99 means rare stalls p99 does not show. "
        "Goodput cannot show them either: it judges each request by its TTFT and its mean TPOT "
        "(as vllm bench serve --goodput does), so a variant whose stream stalls can still "
        "meet every per-request limit — read smoothness here, not in goodput."),
    "ttft_cdf.png": (
        "Time to first token",
        "Share of finished requests whose first token arrived within x ms (log scale). Curves "
        "further left are better; the dashed line is the per-request TTFT limit. Rejected "
        "requests are not in the curve (see the legend and the rejected column)."),
    "throughput_cost.png": (
        "Throughput, goodput and cost",
        "Output tokens per second, goodput (requests per second meeting every per-request SLO, "
        "with the share of all requests) and dollars per million output tokens at the fleet's "
        "hourly price."),
}
_TIMELINE_CAPTION = (
    "First: mean tokens per engine step, split into prefill and decode (tall prefill bands are "
    "long prompts sharing, or monopolising, steps). Second: engine step time, the longest step "
    "(solid) and the mean (dotted) in each bin; a longest step far above the mean is a "
    "head-of-line stall (a prompt prefilled whole while every running decode waits) that the "
    "mean tokens per step do not show. Third: KV-cache blocks in use as % of capacity; flat at "
    "100 % means admission is memory-bound and preemptions are likely. Last: waiting requests "
    "per replica over the running batch; a queue that grows without draining means the fleet is "
    "under-sized for the offered load.")


#: The page's note when no chart was drawn (``capsim run --no-charts``).
NO_CHARTS_NOTE = ("Charts not drawn (capsim run --no-charts): the tables, summary.csv, "
                  "requests.csv and results.json are complete; run without --no-charts for "
                  "the figures.")


def write(out_dir: Path, *, scenario_name: str, description: str, resolved_yaml: str,
          results: list[RunResult], rows: list[SummaryRow], slo: SloConfig,
          class_slos: dict[str, RequestSlo], notes: list[str] | None = None,
          day_frames: dict[str, pd.DataFrame] | None = None,
          percentiles: tuple[float, ...] | None = None,
          workloads: dict[str, WorkloadConfig] | None = None, version: str = "",
          charts: InProcess | ChartProcess | NoCharts | None = None) -> Path:
    """Write index.html + PNGs + summary.csv + requests.csv + results.json +
    scenario.resolved.yaml into out_dir (and trace_<variant>.json for each result with a
    step trace: ``--trace-events``).

    Args:
        out_dir: report directory; replaced as a whole (a previous report there is
            removed only once the new one is complete).
        scenario_name, description: shown in the header (HTML-escaped).
        resolved_yaml: the fully resolved scenario, written verbatim.
        results: one RunResult per variant (their order sets the variant colours).
        rows: summary rows (``metrics.summarize``) of every variant, all classes.
        slo, class_slos: the scenario's SLOs (targets mark table cells; limits draw lines).
        notes: extra lines shown under the header (warnings, assumptions).
        day_frames: the day windows of the variants with day samples
            (:func:`capsim.report.run.day.windows`), when the caller has them already.
        percentiles: ``--percentiles``: results.json's percentiles and the tables'
            latency columns (None: results.json at :data:`~capsim.metrics.summary.PERCENTILES`,
            the tables' default columns).
        workloads: each variant's workload (results.json's ``request_rate``,
            ``burstiness``, ``max_concurrency``).
        version: capsim's version, written in results.json.
        charts: who draws the PNGs (:mod:`capsim.report.charts`): a started
            ``ChartProcess`` while this process writes the rest, None here (the same files
            either way), ``NoCharts`` none (``--no-charts``: the page says so).

    Returns:
        Path of ``out_dir / "index.html"``.

    Everything is built in a hidden sibling temporary directory first; on any
    exception it is removed (after ``charts`` is closed: nothing writes into it any more),
    the previous ``out_dir`` is left untouched and the exception propagates.
    """
    notes = list(notes or [])
    charts = charts if charts is not None else InProcess()
    if not charts.draws:
        notes.append(NO_CHARTS_NOTE)
    out_dir = write_atomically(out_dir, lambda d: _build(
        d, scenario_name=scenario_name, description=description, resolved_yaml=resolved_yaml,
        results=results, rows=rows, slo=slo, class_slos=class_slos, notes=notes,
        day_frames=day_frames, percentiles=percentiles, workloads=workloads or {},
        version=version, charts=charts))
    return out_dir / "index.html"


def _build(d: Path, *, scenario_name: str, description: str, resolved_yaml: str,
           results: list[RunResult], rows: list[SummaryRow], slo: SloConfig,
           class_slos: dict[str, RequestSlo], notes: list[str],
           day_frames: dict[str, pd.DataFrame] | None, percentiles: tuple[float, ...] | None,
           workloads: dict[str, WorkloadConfig], version: str,
           charts: InProcess | ChartProcess | NoCharts) -> None:
    """Write every file of the report into the (empty) directory ``d``: the charts are
    submitted to ``charts`` first, drawn while the tables and pages are written, and
    waited for last; on any error ``charts`` is closed before the error propagates."""
    try:
        colours = variant_colours([r.variant for r in results] + [r.variant for r in rows])
        frames = {r.variant: request_frame(r, slo, class_slos) for r in results}
        all_rows = [r for r in rows if r.cls == "all"]
        if not day.has_day(results):
            day_frames = None
        elif day_frames is None:
            day_frames = day.windows(results, slo)
        figs: list[FigureRef] = []
        timelines: list[FigureRef] = []
        if charts.draws:
            figs, timelines, jobs = _figures(d, results, all_rows, frames, colours, slo,
                                             class_slos, day_frames)
            charts.submit(jobs, [_CHART_COST.get(target, 1.0) for target, *_ in jobs])
        _write_tables(d, results, rows, frames, slo, class_slos, resolved_yaml, scenario_name,
                      version, percentiles, workloads)
        files = [results_json.FILE, *step_trace.write_all(d, results)]
        pool_table = _pool_view(d, results, slo, class_slos, colours)
        day_table = _day_view(d, results, day_frames, colours)
        html = render(scenario_name=scenario_name, description=description,
                      resolved_yaml=resolved_yaml, results=results, rows=rows, slo=slo,
                      class_slos=class_slos, colours=colours, figures=figs, timelines=timelines,
                      notes=notes, disagg=_split_table(results, all_rows, colours),
                      day=day_table, pools=pool_table, percentiles=percentiles, files=files)
        (d / "index.html").write_text(html, encoding="utf-8")
        charts.wait()
    except BaseException:
        charts.close()
        raise


def _write_tables(d: Path, results: list[RunResult], rows: list[SummaryRow],
                  frames: dict[str, pd.DataFrame], slo: SloConfig,
                  class_slos: dict[str, RequestSlo], resolved_yaml: str, scenario_name: str,
                  version: str, percentiles: tuple[float, ...] | None,
                  workloads: dict[str, WorkloadConfig]) -> None:
    """summary.csv, requests.csv, scenario.resolved.yaml and results.json."""
    summary_frame(rows).to_csv(d / "summary.csv", index=False)
    requests = pd.concat(frames.values(), ignore_index=True) if frames else pd.DataFrame()
    requests.to_csv(d / "requests.csv", index=False)
    (d / "scenario.resolved.yaml").write_text(resolved_yaml, encoding="utf-8")
    results_json.write(d / results_json.FILE, results_json.document(
        scenario_name=scenario_name, version=version, results=results, rows=rows,
        frames=frames, slo=slo, class_slos=class_slos,
        percentiles=PERCENTILES if percentiles is None else percentiles, workloads=workloads))


_FIGURES = "capsim.report.run.figures:"
_DISAGG = "capsim.report.run.disagg:"
_TIMELINE = "capsim.report.run.timeline:plot_timeline_among"
_DAY = "capsim.report.run.day:plot"
#: Relative CPU cost of each chart, by which the chart process shares them with its helper
#: (capsim.report.charts); any other 1. Tenths of a CPU-second drawing azure_conv_replay's
#: report at 3b553dd (one timeline; the split's and the day's charts: estimates).
_CHART_COST = {_FIGURES + "plot_itl_cdf": 4.5, _FIGURES + "plot_itl_bars": 1.3,
               _FIGURES + "plot_ttft_cdf": 1.6, _FIGURES + "plot_throughput_cost": 1.3,
               _TIMELINE: 5.3, _DAY: 3.0, _DISAGG + "plot_ratio": 2.0,
               _DISAGG + "plot_transfers": 2.0}


def _figures(d: Path, results: list[RunResult], all_rows: list[SummaryRow],
             frames: dict[str, pd.DataFrame], colours: dict[str, str], slo: SloConfig,
             class_slos: dict[str, RequestSlo], day_frames: dict[str, pd.DataFrame] | None
             ) -> tuple[list[FigureRef], list[FigureRef], list[ChartJob]]:
    """The report's figures (the day figure first, then the comparison charts, then the
    split's), its timelines, and the chart jobs that draw all of them into ``d``."""
    ttft_frames = {v: f[["ttft_ms", "status"]] for v, f in frames.items()}
    jobs: list[ChartJob] = [
        (_FIGURES + "plot_itl_cdf", (results, colours, slo, d / "itl_cdf.png"),
         {"dists": [itl_distribution(r) for r in results]}),     # sorted ITL runs: here
        (_FIGURES + "plot_itl_bars", (all_rows, colours, slo, d / "itl_bars.png",
                                      held_variants(results)), {}),
        (_FIGURES + "plot_ttft_cdf", (results, ttft_frames, colours, slo, class_slos,
                                      d / "ttft_cdf.png"), {}),
        (_FIGURES + "plot_throughput_cost", (all_rows, colours, d / "throughput_cost.png"), {})]
    figs = [FigureRef(name, *_CAPTIONS[name]) for name in _CAPTIONS]
    if any(r.disagg is not None for r in results):
        jobs += [(_DISAGG + "plot_ratio", (all_rows, results, colours,
                                           d / split_table.RATIO_FIG), {}),
                 (_DISAGG + "plot_transfers", (results, all_rows, colours,
                                               d / split_table.TRANSFER_FIG), {})]
        figs += [FigureRef(name, *split_table.CAPTIONS[name]) for name in split_table.CAPTIONS]
    if day_frames is not None:
        jobs.append((_DAY, (day_frames, colours, slo, d / day.FIG), {}))
        figs.insert(0, FigureRef(day.FIG, *day.caption(day_frames)))
    slugs = unique_slugs(r.variant for r in results)
    names = [f"timeline_{slugs[r.variant]}.png" for r in results]
    jobs += [(_TIMELINE, (results, i, colours, d / name, slo.stall_threshold_ms), {})
             for i, name in enumerate(names)]
    timelines = [FigureRef(name, f"Timeline — {r.variant}", _TIMELINE_CAPTION)
                 for r, name in zip(results, names)]
    return figs, timelines, jobs


def _split_table(results: list[RunResult], all_rows: list[SummaryRow],
                 colours: dict[str, str]) -> dict | None:
    """Prefill/decode pools: the split table; None without a disaggregated variant."""
    if not any(r.disagg is not None for r in results):
        return None
    return split_table.table(all_rows, results, colours)


def _pool_view(d: Path, results: list[RunResult], slo: SloConfig,
               class_slos: dict[str, RequestSlo], colours: dict[str, str]) -> dict | None:
    """Pooled fleets: ``pools.csv`` (per pool and fleet total) and its table; None without
    a pooled variant."""
    if not pools.has_pools(results):
        return None
    by_pool = pools.frame(results, slo, class_slos)
    pools.write_csv(by_pool, d / pools.CSV)
    return pools.table(by_pool, results, colours)


def _day_view(d: Path, results: list[RunResult], day_frames: dict[str, pd.DataFrame] | None,
              colours: dict[str, str]) -> dict | None:
    """Time-varying load or fleet: ``day.csv`` and the fleet table; None when no variant
    has day samples (``day_frames`` None)."""
    if day_frames is None:
        return None
    day.write_csv(day_frames, d / day.CSV)
    return day.table(results, day_frames, colours)
