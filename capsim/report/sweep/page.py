"""The sweep / sizing report: one directory, opened offline like the run report.

:func:`write_sweep` and :func:`write_sizing` render ``index.html`` from
``templates/sweep.html`` with the sizing table (``capsim size``) or the
cheapest passing configuration per load level (``capsim sweep``), the
latency–load curves, the cost vs tail-latency Pareto front and a table of
every configuration (mean ± 95 % CI over replications), and write:

- ``summary.csv`` — every run (one row per run × request class) with its
  labels (variant, swept fields, replicas, offered rate, replication, seed);
- ``points.csv`` — one row per configuration, averaged over replications
  (``<metric>_ci95`` = half-width of the 95 % confidence interval);
- ``sizing.csv`` — the ranked sizing answer (``capsim size`` only);
- ``front.csv`` and ``front.png`` — every configuration a sizing search ran, output
  tokens/s per GPU against per user (:mod:`capsim.report.sweep.front`; ``capsim size`` only);
- ``scenario.resolved.yaml``.

Like the run report, everything is built in a temporary sibling directory and
swapped in at the end (:func:`capsim.report.outdir.write_atomically`); on error
nothing is left half-written.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import capsim
from capsim.metrics.summary import without_unused_reject_columns
from capsim.profiles import trust
from capsim.studies.confidence import aggregate
from capsim.report.outdir import write_atomically
from capsim.report.pages import FigureRef, environment, slo_lines
from capsim.report.style import variant_colours
from capsim.report.sweep.figures import (COST, CURVE_METRICS, Series, plot_latency_curves,
                                         plot_pareto)
from capsim.report.sweep.front import front_frame, plot_front
from capsim.report.sweep.tables import Table, cheapest_table, points_table, sizing_table
from capsim.studies.routing_savings import savings_lines
from capsim.studies.sizing import SizingResult, rows_frame
from capsim.studies.sweep import RATE_KEYS, SweepResult, config_columns, metric_columns
from capsim.scenario.slo import SloConfig

def curves_caption(x_label: str) -> str:
    """Caption of a latency-curves chart whose x axis is ``x_label`` ("offered load (requests
    / s)" for a sweep or a capacity search, "GPUs" for a GPU-count search)."""
    return (f"One line per configuration family; x is {x_label}. Points are means over the "
            "replications, shaded bands their 95 % confidence intervals (with --seeds K > 1). "
            "Filled markers meet every SLO target in every replication; hollow ones miss at least "
            "one. The dashed red line is the SLO target. ITL max and p99 part ways when rare "
            "stalls appear.")


_LOAD = "offered load (requests / s)"
_PARETO_CAPTION = (
    "Every configuration: cost per million output tokens (fleet $/h ÷ output tokens/h at the "
    "simulated load) against a tail latency. The grey step line is the Pareto front: no "
    "configuration is both cheaper and faster than a point on it. Hollow markers miss an SLO "
    "target.")


@dataclass
class Page:
    """Everything the template shows (all strings are autoescaped)."""

    title: str
    kind: str                                   # "sweep" or "sizing"
    description: str
    meta: str
    slo_lines: list[str]
    notes: list[str]
    resolved_yaml: str
    headline: str = ""
    capacity: bool = False                      # sizing answered --gpus N (highest rate)
    sizing: Table | None = None
    cheapest: Table | None = None
    points: Table | None = None
    figures: list[FigureRef] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def series_of(points: pd.DataFrame, group_columns: list[str], x_column: str) -> list[Series]:
    """Split configurations into lines: one per distinct ``group_columns`` value, sorted by x.

    The label names the variant and every other group column that varies.
    A variant whose lines are all identical (no swept field reaches it, e.g.
    an unchunked variant under a chunk-size sweep) is drawn once, labelled
    by its name alone.
    """
    varying = [c for c in group_columns if c in points and points[c].nunique(dropna=False) > 1]
    keys = varying or [c for c in group_columns if c in points][:1]
    groups = list(points.groupby(keys, sort=False, dropna=False)) if keys else [((), points)]
    named = [(_series_label(keys, k if isinstance(k, tuple) else (k,)), g.sort_values(x_column))
             for k, g in groups]
    named = _merge_identical(named, x_column) if "variant" in keys and len(keys) > 1 else named
    colours = variant_colours(lab for lab, _ in named)
    return [Series(lab, colours[lab], rows) for lab, rows in named]


def _merge_identical(named: list[tuple[str, pd.DataFrame]],
                     x_column: str) -> list[tuple[str, pd.DataFrame]]:
    cols = [x_column, *(m for m, _ in CURVE_METRICS), COST]
    by_variant: dict[str, list[tuple[str, pd.DataFrame]]] = {}
    for label, rows in named:
        by_variant.setdefault(str(rows["variant"].iloc[0]), []).append((label, rows))
    out = []
    for variant, lines in by_variant.items():
        first = lines[0][1][cols].to_numpy(np.float64)
        same = all(r[cols].to_numpy(np.float64).shape == first.shape and
                   np.array_equal(r[cols].to_numpy(np.float64), first, equal_nan=True)
                   for _, r in lines[1:])
        out.extend([(variant, lines[0][1])] if same and len(lines) > 1 else lines)
    return out


def _series_label(keys: list[str], values: tuple) -> str:
    parts = []
    for k, v in zip(keys, values):
        v = f"{v:.4g}" if isinstance(v, float) else str(v)
        parts.append(v if k == "variant" else f"{k.rsplit('.', 1)[-1]}={v}")
    return " · ".join(parts) or "all"


def _meta(seeds: list[int], runs: pd.DataFrame, executor: str) -> str:
    n_runs = runs[runs["cls"] == "all"].shape[0] if len(runs) else 0
    seeds_text = ", ".join(map(str, seeds)) if len(seeds) <= 6 else f"{seeds[0]}..{seeds[-1]}"
    stamp = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (f"capsim {capsim.__version__} · {len(seeds)} replication(s), seeds {seeds_text} · "
            f"{n_runs} runs · {executor} · generated {stamp}")


def display_labels(result: SweepResult) -> list[str]:
    """Columns naming a configuration in tables: the variant, then every label that varies.

    Swept rate fields are left out: ``offered_rate_per_s`` shows the load.
    """
    varying = [c for c in config_columns(result.swept) if c not in ("point", "variant", *RATE_KEYS)
               and result.points[c].nunique(dropna=False) > 1]
    return ["variant", *varying]


def write_sweep(out_dir: Path, result: SweepResult, *, resolved_yaml: str, executor: str,
                notes: list[str] | None = None) -> Path:
    """Write the sweep report into ``out_dir`` (replaced whole); returns its index.html."""
    base = result.plan.base
    spec = base.spec
    labels = display_labels(result)
    group = [c for c in labels if c != "offered_rate_per_s"]
    page = Page(title=f"{spec.name} — sweep", kind="sweep", description=spec.description,
                meta=_meta(result.seeds, result.runs, executor),
                slo_lines=slo_lines(spec.slo, base.class_slos),
                notes=list(notes or []) + sweep_trust_lines(result),
                resolved_yaml=resolved_yaml,
                headline=(f"{len(result.plan.points)} sweep points × "
                          f"{len(base.runs)} variant(s) over " + ", ".join(result.swept)),
                cheapest=cheapest_table(result.points, labels, spec.slo),
                points=points_table(result.points, labels, spec.slo),
                files=["summary.csv", "points.csv", "scenario.resolved.yaml"])
    series = series_of(result.points, group, "offered_rate_per_s")
    tables = {"summary.csv": result.runs, "points.csv": result.points}
    return _write(out_dir, page, tables, lambda d: _sweep_figures(d, page, series, spec.slo,
                                                                   result.points))


def sweep_trust_lines(result: SweepResult) -> list[str]:
    """How far to trust the sweep: one line per engine preset × GPU any point ran
    (:mod:`capsim.profiles.trust`)."""
    pairs = ((p.preset.name, p.hardware.name) if rc.fleet is not None else
             (rc.pool().preset.name if not rc.disaggregated else "disaggregated",
              rc.serving_pool.hardware.name)
             for _, loaded in result.plan.points for rc in loaded.runs
             for p in (rc.pools if rc.fleet is not None else rc.pools[:1]))
    return [f"How far to trust it: {line}" for line in trust.lines(pairs)]


def _sweep_figures(d: Path, page: Page, series: list[Series], slo: SloConfig,
                   points: pd.DataFrame) -> None:
    if points["offered_rate_per_s"].nunique() > 1:
        plot_latency_curves(series, "offered_rate_per_s", _LOAD, slo, d / "latency_vs_load.png")
        page.figures.append(FigureRef("latency_vs_load.png", "Latency against offered load",
                                      curves_caption(f"the {_LOAD}")))
    plot_pareto(series, slo, d / "cost_vs_tail.png")
    page.figures.append(FigureRef("cost_vs_tail.png", "Cost against tail latency",
                                  _PARETO_CAPTION))


#: Run labels of a disaggregated candidate (:func:`capsim.studies.sizing.split_labels`).
SPLIT_LABELS = ("pools", "prefill_tp", "decode_tp", "prefill_replicas", "decode_replicas")


_FRONT_CAPTION = ("Every configuration the search ran: output tokens/s per GPU (the fleet's "
                  "output throughput ÷ its GPUs) against output tokens/s per user (1000 ÷ mean "
                  "TPOT), the axes of aiconfigurator and InferenceX. Filled: meets every SLO "
                  "target in every replication; shaded: under the front of those; star: the "
                  "chosen answer (rank 1). front.csv has the numbers.")


def sizing_points(result: SizingResult) -> pd.DataFrame:
    """Every evaluated configuration of a sizing search, averaged over its replications."""
    totals = result.runs[result.runs["cls"] == "all"]
    return aggregate(totals, _point_labels(totals), metric_columns(totals))


def _point_labels(runs: pd.DataFrame) -> list[str]:
    """The columns naming one evaluated configuration: with disaggregated options, their
    pools and pool sizes too (two splits of one variant share its name and total)."""
    extra = [c for c in SPLIT_LABELS if c in runs.columns]
    return ["variant", "hardware", "tensor_parallel_size", *extra, "num_replicas",
            "offered_rate_per_s"]


def write_sizing(out_dir: Path, result: SizingResult, *, resolved_yaml: str, executor: str,
                 notes: list[str] | None = None,
                 launch: dict[str, str] | None = None) -> Path:
    """Write the sizing report into ``out_dir`` (replaced whole); returns its index.html.
    ``launch``: launch files, relative path → text (:func:`capsim.studies.launch.launch_files`)."""
    base = result.base
    spec = base.spec
    points = sizing_points(result)
    labels = _point_labels(result.runs)
    page = Page(title=f"{spec.name} — sizing", kind="sizing", description=spec.description,
                meta=_meta(result.seeds, result.runs, executor),
                slo_lines=slo_lines(spec.slo, base.class_slos),
                notes=list(notes or []) + trust_notes(result),
                resolved_yaml=resolved_yaml, headline=sizing_headline(result),
                capacity=result.mode == "rate",
                sizing=sizing_table(result), points=points_table(points, labels, spec.slo),
                files=["sizing.csv", "front.csv", "summary.csv", "points.csv",
                       "scenario.resolved.yaml", *sorted(launch or {})])
    group = ["variant", "hardware", "tensor_parallel_size",
             *(["pools"] if "pools" in points.columns else [])]
    x, x_label = (("num_gpus", "GPUs") if result.mode == "gpus"
                  else ("offered_rate_per_s", _LOAD))
    series = series_of(points, group, x) if len(points) else []
    front = front_frame(result, points) if len(points) else pd.DataFrame()
    tables = {"sizing.csv": rows_frame(result.rows), "front.csv": front,
              "summary.csv": result.runs, "points.csv": points}

    def figures(d: Path) -> None:
        if not series:
            return
        plot_latency_curves(series, x, x_label, spec.slo, d / "search.png")
        x_what = "the fleet's GPU count" if x == "num_gpus" else f"the {x_label}"
        page.figures.append(FigureRef("search.png", f"Latency against {x_label} (every "
                                      "configuration the search ran)", curves_caption(x_what)))
        plot_pareto(series, spec.slo, d / "cost_vs_tail.png")
        page.figures.append(FigureRef("cost_vs_tail.png", "Cost against tail latency",
                                      _PARETO_CAPTION))
        plot_front(front, d / "front.png")
        page.figures.append(FigureRef("front.png", "Throughput per GPU against speed per "
                                      "user", _FRONT_CAPTION))

    return _write(out_dir, page, tables, figures, launch)


def trust_notes(result: SizingResult) -> list[str]:
    """With ``--trust-edge``: which edge sized the fleet, and each option's moved bounds."""
    if result.trust_edge == "none":
        return []
    moved = [f"{r.label}: {r.trust}" for r in result.rows if r.trust]
    return [f"Sized against the pessimistic edge of capsim's measured error "
            f"(--trust-edge {result.trust_edge}): every SLO bound is moved by the "
            f"{result.trust_edge} |error| of the option's engine preset on its GPU "
            f"(docs/fidelity.md, 'How far to trust it')."] + moved


def sizing_headline(result: SizingResult) -> str:
    """One sentence: the question and the best answer (or that none meets the SLOs)."""
    k = len(result.seeds)
    reps = f" in all {k} replications" if k > 1 else ""
    if result.mode == "gpus":
        question = (f"Fewest GPUs meeting every SLO target{reps} at "
                    f"{result.rate_per_s:.4g} requests/s (search bound {result.max_gpus} GPUs)")
    else:
        question = f"Highest request rate {result.gpus} GPUs sustain within every SLO target{reps}"
    met = [r for r in result.rows if r.status == "met"]
    if not met:
        return f"{question}: no configuration meets the SLO targets."
    best = met[0]
    answer = (f"{best.num_gpus} × {best.hardware} ({best.label}), ${best.cost_per_hour_usd:,.2f}/h"
              if result.mode == "gpus" else f"{best.rate_per_s:.4g} req/s with {best.label}")
    noise = " — within noise" if best.within_noise else ""
    edge = (f" (at the {result.trust_edge} edge of capsim's measured error)"
            if result.trust_edge != "none" else "")
    saved = "".join(f" {line}" for line in savings_lines(result.rows))
    return f"{question}: {answer}{noise}{edge}.{saved}"


def _write(out_dir: Path, page: Page, tables: dict[str, pd.DataFrame], figures,
           texts: dict[str, str] | None = None) -> Path:
    def build(d: Path) -> None:
        for name, frame in tables.items():
            without_unused_reject_columns(frame).to_csv(d / name, index=False)
        for name, text in (texts or {}).items():
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_text(text, encoding="utf-8")
        (d / "scenario.resolved.yaml").write_text(page.resolved_yaml, encoding="utf-8")
        figures(d)
        html = environment().get_template("sweep.html").render(page=page)
        (d / "index.html").write_text(html, encoding="utf-8")

    return write_atomically(out_dir, build) / "index.html"
