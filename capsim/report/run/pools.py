"""The report's pooled-fleet section: per pool and for the whole fleet, what it is, what it
served, its latencies and what it cost (:mod:`capsim.metrics.pools`); ``pools.csv``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from capsim.common.labels import parallel_label
from capsim.metrics.pools import pools_frame
from capsim.report.cells import fmt
from capsim.results.model import RunResult
from capsim.scenario.slo import RequestSlo, SloConfig

CSV = "pools.csv"

#: (label, pools.csv column, cell kind); the first four describe the pool ("GPU, parallel":
#: ``h100-sxm TP2 × PP2``; its name is in the row's label, so every stacked part of the
#: table says which pool a row is).
COLUMNS = [("GPU, parallel", None, "text"), ("model", "model", "text"),
           ("replicas", "num_replicas", "int"), ("requests", "num_requests", "int"),
           ("TTFT p50", "ttft_p50_ms", "ms"), ("TTFT p99", "ttft_p99_ms", "ms"),
           ("TPOT p99", "tpot_p99_ms", "ms"), ("ITL p50", "itl_p50_ms", "ms"),
           ("ITL p99", "itl_p99_ms", "ms"), ("out tok/s", "output_throughput_tok_per_s", "num"),
           ("goodput", "goodput_fraction", "frac"), ("$/h", "cost_per_hour_usd", "usd"),
           ("$/M out tok", "cost_per_million_output_tokens_usd", "usd")]


def trust_pairs(results: list[RunResult]) -> list[tuple[str, str]]:
    """(engine preset, GPU) of every variant for the trust lines; a pooled fleet's per
    pool."""
    out = []
    for r in results:
        if r.pools:
            out += [(p.preset, p.hardware) for p in r.pools]
        else:
            out.append((r.preset, r.hardware))
    return out


def has_pools(results: list[RunResult]) -> bool:
    return any(r.pools for r in results)


def frame(results: list[RunResult], slo: SloConfig,
          class_slos: dict[str, RequestSlo]) -> pd.DataFrame:
    return pools_frame(results, slo, class_slos)


def write_csv(df: pd.DataFrame, path: Path) -> None:
    df.to_csv(path, index=False)


def table(df: pd.DataFrame, results: list[RunResult], colours: dict[str, str]) -> dict:
    """One row per pooled variant × pool (its ``cls == "all"`` figures), labelled
    ``variant · pool``, then the variant's fleet total (``variant · fleet``)."""
    tp = {(r.variant, p.name): f"{p.hardware} "
                               f"{parallel_label(p.tensor_parallel_size, p.pipeline_parallel_size)}"
          for r in results for p in r.pools or []}
    rows = []
    for _, row in df[df["cls"] == "all"].iterrows():
        cells = []
        for label, key, kind in COLUMNS:
            if key is None:
                cells.append(tp.get((row["variant"], row["pool"]), row["hardware"]))
            elif kind == "text":
                cells.append(str(row[key]).replace("+", " + "))     # the fleet's may wrap
            else:
                cells.append(fmt(row[key], kind))
        rows.append({"variant": f"{row['variant']} · {row['pool']}", "pool": row["pool"],
                     "colour": colours.get(row["variant"], "#777"), "cells": cells})
    groups = [{"name": "pool", "span": 4}, {"name": "latency ms", "span": 5},
              {"name": "served", "span": 2}, {"name": "cost", "span": 2}]
    # Two stacked tables: the page fits 1400 px without a scrollbar.
    return {"groups": groups, "columns": [c[0] for c in COLUMNS], "rows": rows,
            "blocks": [{"groups": groups[:2], "start": 0, "stop": 9},
                       {"groups": groups[2:], "start": 9, "stop": len(COLUMNS)}]}
