"""index.html: a jinja2 template (autoescaped) filled from summary rows and run results.

The page is self-contained (inline CSS, no scripts, no external resources);
figures are referenced by relative file name, so the report directory can be
zipped, mailed or opened offline.
"""

from __future__ import annotations

import datetime as _dt

import capsim
from capsim.metrics.summary import rejection_kinds
from capsim.profiles import trust
from capsim.report.cells import fmt, target_status
from capsim.report.pages import FigureRef, environment, slo_lines
from capsim.report.run.pools import trust_pairs
from capsim.metrics.summary import HELD_TEXT
from capsim.report.run.table import (Column, blocks, failed_list, header_groups, held_cell,
                                     held_variants, kv_columns, latency_first, target_text,
                                     verdict_columns)
from capsim.results.model import RunResult, SummaryRow
from capsim.scenario.slo import RequestSlo, SloConfig
from capsim.sim.simulate import group_reasons


def config_line(r: RunResult) -> str:
    """One line describing a variant's fleet, e.g.
    "2 × H100-SXM (TP 1) · 2 GPUs · $7.00/h · model llama-3.1-8b · scheduler continuous"."""
    tps = sorted({s.tensor_parallel_size for s in r.replicas})
    tp = f" (TP {'/'.join(map(str, tps))})" if tps else ""
    pools = sorted({s.pool for s in r.replicas} - {"colocated"})
    pool = f", pools: {', '.join(pools)}" if pools else ""
    gpus = f"{r.num_gpus} GPU" + ("" if r.num_gpus == 1 else "s")
    engine = f" · engine {r.engine}" if r.engine else ""
    return (f"{r.num_replicas} × {r.hardware}{tp} · {gpus} · ${r.price_per_hour_usd:,.2f}/h"
            f" · model {r.model}{engine} · scheduler {r.scheduler}{pool}")


def _cells(row: SummaryRow, cols: list[Column], slo: SloConfig,
           held: frozenset[str] = frozenset()) -> list[dict]:
    cells = []
    for c in cols:
        value = row.value(c.key)
        status = target_status(c.key, value, slo)
        title = f"{c.key} {target_text(c.key, slo, c.kind)}".strip()
        if held_cell(row, c.key, held):      # no gap seen: failed where a target bounds it
            cells.append({"text": HELD_TEXT, "css": f"{'fail' if status else 'na'} held",
                          "title": title})
            continue
        css = status or ""
        if c.key == "itl_stalls" and status is None and value > 0:
            css = "warn"
        if c.key in ("itl_max_ms", "itl_stalls"):
            css += " em"
        cells.append({"text": fmt(value, c.kind), "css": css.strip(), "title": title})
    return cells


def _verdict(row: SummaryRow, slo: SloConfig) -> dict:
    if not slo.targets:
        return {"status": "n/a", "css": "na", "failed": []}
    return {"status": "PASS" if row.slo_pass else "FAIL", "css": "pass" if row.slo_pass else "fail",
            "failed": failed_list(row)}


def table(rows: list[SummaryRow], slo: SloConfig, colours: dict[str, str],
          percentiles: tuple[float, ...] | None = None,
          held: frozenset[str] = frozenset()) -> dict:
    """Header groups, columns (with target bounds) and formatted rows for the template; the
    latency columns first (at ``percentiles`` when given: ``--percentiles``). ``blocks``
    cut the columns into the stacked tables that fit the page
    (:func:`capsim.report.run.table.blocks`); the verdict sits in the first. The ITL
    cells of a variant in ``held`` read "n/a (held replies)"."""
    cols = latency_first(verdict_columns(slo, percentiles))
    return {
        "blocks": blocks(cols, breaks=("Fleet",)),
        "groups": header_groups(cols),
        "columns": [{"label": c.label, "key": c.key, "target": target_text(c.key, slo, c.kind)}
                    for c in cols],
        "has_targets": any(c.key in slo.targets for c in cols),
        "rows": [{"variant": r.variant, "cls": r.cls, "colour": colours.get(r.variant, "#777"),
                  "cells": _cells(r, cols, slo, held), "verdict": _verdict(r, slo)}
                 for r in rows],
    }


def kv_table(rows: list[SummaryRow], colours: dict[str, str]) -> dict:
    """The KV-memory table (no targets, no verdict): same shape as the disaggregation table."""
    cols = kv_columns()
    return {
        "blocks": blocks(cols),
        "groups": header_groups(cols),
        "columns": [c.label for c in cols],
        "rows": [{"variant": r.variant, "colour": colours.get(r.variant, "#777"),
                  "cells": [fmt(getattr(r, c.key), c.kind) for c in cols]} for r in rows],
    }


def tail_alerts(rows: list[SummaryRow], slo: SloConfig) -> list[str]:
    """One sentence per variant with stalls, saying whether p99 ITL would hide them (seed 002 Q10)."""
    out = []
    thr = slo.stall_threshold_ms
    for r in rows:
        if r.itl_stalls <= 0:
            continue
        hidden = r.itl_p99_ms <= thr
        out.append(
            f"{r.variant}: {r.itl_stalls:,} token gaps longer than {thr:g} ms, worst "
            f"{fmt(r.itl_max_ms, 'ms')} ms, while p99 ITL is {fmt(r.itl_p99_ms, 'ms')} ms"
            + (" — p99 does not show these stalls." if hidden else "."))
    return out


def held_reply_notes(results: list[RunResult]) -> list[str]:
    """One sentence per static-batching variant: its replies arrive in one piece when the
    batch ends (seed 002 Q1), so its TTFT equals E2EL, no gap between tokens reaches the
    client (ITL n/a, as ``vllm bench serve`` records no ITL for a one-chunk reply) and its
    TPOT is 0 by vLLM's formula."""
    return [f"{v}: static batching returns every reply in one piece when its batch ends, "
            "so TTFT = E2EL (the wait for the batch), its ITL is n/a (no gap between tokens "
            "reaches the client, as vllm bench serve records none for a reply in one chunk) "
            "and its TPOT 0 ((E2EL − TTFT) ÷ (tokens − 1), vLLM's formula)."
            for v in held_variants(results)]


def skipped_failure_notes(results: list[RunResult]) -> list[str]:
    """One sentence per variant (or pool) whose ``cluster.failures.at`` entries did not all
    happen: the replica was not up at ``at_s`` (an autoscaled fleet that never grew to it,
    a replica already down) or every request had ended before it. Nothing else shows a
    failure that was asked for and never came."""
    out = []
    for r in results:
        fleets = [(r.variant, r.fleet)] + [(f"{r.variant} (pool {p.name})", p.fleet)
                                           for p in (r.pools or [])]
        for who, f in fleets:
            if f is not None and f.skipped_failures:
                out.append(f"{who}: {len(f.skipped_failures)} of the failures in "
                           f"cluster.failures.at did not happen: "
                           f"{'; '.join(f.skipped_failures)}.")
    return out


def rejection_alerts(results: list[RunResult], rows: list[SummaryRow]) -> list[str]:
    """One sentence per variant that rejected requests (its measured ``cls == "all"`` row's
    counts, by kind, and the most common reason); a variant that finished none is said to
    have no figures at all."""
    by_variant = {r.variant: r for r in rows if r.cls == "all"}
    out = []
    for result in results:
        row = by_variant.get(result.variant)
        if row is None:
            continue
        reasons = group_reasons(list(result.requests.reject_reason))
        example = f", e.g. {reasons[0][1]}" if reasons else ""
        kinds = f" By kind: {rejection_kinds(row)}." if row.num_rejected else ""
        if row.num_finished == 0:
            what = (f"every request was rejected ({row.num_rejected:,} of {row.num_requests:,})"
                    f"{example}" if row.num_requests else "no measured request (all are warm-up)")
            out.append(f"{result.variant}: {what} — it completed no request, so it has no "
                       f"latency, throughput or cost figure.{kinds}")
        elif row.num_rejected:
            out.append(f"{result.variant}: {row.num_rejected:,} of {row.num_requests:,} requests "
                       f"rejected{example}; its latencies cover the {row.num_finished:,} that "
                       f"finished.{kinds}")
    return out


def render(*, scenario_name: str, description: str, resolved_yaml: str,
           results: list[RunResult], rows: list[SummaryRow], slo: SloConfig,
           class_slos: dict[str, RequestSlo], colours: dict[str, str],
           figures: list[FigureRef], timelines: list[FigureRef], notes: list[str],
           disagg: dict | None = None, day: dict | None = None,
           pools: dict | None = None, percentiles: tuple[float, ...] | None = None,
           files: list[str] | None = None) -> str:
    """The full index.html text. All strings are autoescaped by jinja2.

    ``percentiles``: the latency percentiles of the verdict tables (``--percentiles``; None:
    the default columns); ``files``: extra files of the report to link (results.json, the
    step traces).

    ``disagg``: the prefill/decode table (:func:`capsim.report.run.split_table.table`), or None;
    ``day``: the fleet table of the day view (:func:`capsim.report.run.day.table`), or None;
    ``pools``: the pooled fleets' table (:func:`capsim.report.run.pools.table`), or None.
    """
    all_rows = [r for r in rows if r.cls == "all"]
    class_rows = [r for r in rows if r.cls != "all"]
    seeds = sorted({r.seed for r in results})
    return environment().get_template("report.html").render(
        scenario_name=scenario_name,
        description=description,
        version=capsim.__version__,
        seeds=", ".join(map(str, seeds)) or "—",
        generated=_dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        variants=[{"name": r.variant, "colour": colours[r.variant], "config": config_line(r),
                   "log": "\n".join(r.log), "sim_end_s": f"{r.sim_end_s:,.1f}",
                   "wall_s": f"{r.wall_s:,.1f}"} for r in results],
        slo_lines=slo_lines(slo, class_slos),
        trust=trust.lines(trust_pairs(results)),
        verdict=table(all_rows, slo, colours, percentiles, held_variants(results)),
        by_class=(table(class_rows, slo, colours, percentiles, held_variants(results))
                  if class_rows else None),
        alerts=tail_alerts(all_rows, slo),
        rejections=rejection_alerts(results, rows),
        kv=kv_table(all_rows, colours),
        figures=figures,
        timelines=timelines,
        notes=list(notes) + held_reply_notes(results) + skipped_failure_notes(results),
        disagg=disagg,
        day=day,
        pools=pools,
        resolved_yaml=resolved_yaml,
        files=files or [],
    )
