"""The report of ``capsim size`` on pooled fleets (:mod:`capsim.studies.mix`): per variant, a
section per pool of the cheapest mix and the fleet total with its binding SLO; every mix
the search ran."""

from __future__ import annotations

from pathlib import Path

from capsim.common.labels import parallel_label
from capsim.report.cells import fmt
from capsim.report.pages import slo_lines
from capsim.report.sweep.page import Page, _meta, _write
from capsim.report.sweep.tables import Cell, Table, points_table
from capsim.studies.confidence import aggregate
from capsim.studies.mix import MixResult, answers_frame
from capsim.studies.sweep import METRICS


def mix_table(result: MixResult) -> Table:
    """Per pooled variant: one row per pool of its answer (GPU and TP × PP, model, replicas, GPUs,
    its TTFT / ITL p99 and $/M out tok on the first seed, $/h), then its total ($/h, $/M out
    tok, binding SLO with its value one replica fewer in the pool named, margin at the
    answer) and the status."""
    t = Table(columns=["variant", "pool", "GPU, parallel", "model", "replicas", "GPUs",
                       "TTFT p99 ms", "ITL p99 ms", "$/h", "$/M out tok", "binding SLO",
                       "one fewer in", "value there", "margin", "status"], left=2)
    for a in result.answers:
        for p in a.pools:
            shape = parallel_label(p.tensor_parallel_size, p.pipeline_parallel_size)
            t.rows.append([Cell(a.variant), Cell(p.name), Cell(f"{p.hardware} {shape}"),
                           Cell(p.model),
                           Cell(fmt(p.num_replicas, "int")), Cell(fmt(p.num_gpus, "int")),
                           Cell(fmt(p.ttft_p99_ms, "ms")), Cell(fmt(p.itl_p99_ms, "ms")),
                           Cell(fmt(p.price_per_hour_usd, "usd")),
                           Cell(fmt(p.cost_per_million_output_tokens_usd, "usd3")), Cell(""),
                           Cell(""), Cell(""), Cell(""), Cell("")])
        met = a.status == "met"
        t.rows.append([Cell(a.variant), Cell("total"), Cell(""), Cell(""),
                       Cell(fmt(sum(p.num_replicas for p in a.pools), "int")),
                       Cell(fmt(a.num_gpus, "int")), Cell("—"), Cell("—"),
                       Cell(fmt(a.cost_per_hour_usd, "usd")),
                       Cell(fmt(a.cost_per_million_output_tokens_usd, "usd3")),
                       Cell(a.binding or "—"), Cell(a.binding_pool or "—"),
                       Cell(fmt(a.binding_failed_value, "num") if a.binding else "—"),
                       Cell(fmt(a.margin_frac, "frac") if a.binding else "—"),
                       Cell(a.status, "pass" if met else "fail")])
    return t


def mix_headline(result: MixResult) -> str:
    """One sentence: the question and each variant's cheapest mix."""
    p = result.plan
    reps = f" in all {len(p.seeds)} replications" if len(p.seeds) > 1 else ""
    parts = []
    for a in result.answers:
        if a.status == "met":
            bind = (f", binding {a.binding} (one {a.binding_pool} fewer: "
                    f"{a.binding_failed_value:.4g} vs {a.binding_bound:g})" if a.binding else "")
            parts.append(f"{a.variant}: {a.label}, {a.num_gpus} GPUs, "
                         f"${a.cost_per_hour_usd:,.2f}/h{bind}")
        else:
            parts.append(f"{a.variant}: not met")
    return (f"Cheapest mix of pool replicas meeting every SLO target{reps} at "
            f"{p.rate_per_s:.4g} requests/s (at most {p.max_gpus} GPUs): " + "; ".join(parts) + ".")


def write_mix(out_dir: Path, result: MixResult, *, resolved_yaml: str, executor: str) -> Path:
    """Write the mix-sizing report into ``out_dir`` (replaced whole); returns its index.html."""
    base = result.plan.base
    spec = base.spec
    runs = result.runs
    labels = ["variant", "mix"]
    counts = [c for c in runs.columns if c.startswith("replicas.")]   # in points.csv only
    points = aggregate(runs[runs["cls"] == "all"], labels + counts + ["offered_rate_per_s"],
                       list(METRICS)) if len(runs) else runs
    page = Page(title=f"{spec.name} — sizing a pooled fleet", kind="mix",
                description=spec.description, meta=_meta(result.plan.seeds, runs, executor),
                slo_lines=slo_lines(spec.slo, base.class_slos), notes=[a.note for a in
                                                                     result.answers if a.note],
                resolved_yaml=resolved_yaml, headline=mix_headline(result),
                sizing=mix_table(result), points=points_table(points, labels, spec.slo),
                files=["sizing.csv", "summary.csv", "points.csv", "scenario.resolved.yaml"])
    tables = {"sizing.csv": answers_frame(result.answers), "summary.csv": runs,
              "points.csv": points}
    return _write(out_dir, page, tables, lambda d: None)
