"""Per-pool figures of a pooled fleet (``cluster.pools``): each pool summarised as if it
were a run of its own — its requests, its inter-token gaps, its replicas, GPUs, peaks
and price — next to the fleet total (:func:`capsim.metrics.summary.summarize` of the whole
run). A pool's span is its own first arrival → last completion, so its throughput and
$/M tokens are the pool's; the fleet's $/h is the sum of the pools'.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from capsim.metrics.summary import summarize, without_unused_reject_columns
from capsim.results.model import ItlRuns, RunResult, SummaryRow
from capsim.scenario.slo import RequestSlo, SloConfig


def pool_run(result: RunResult, k: int) -> RunResult:
    """Pool ``k`` of a pooled ``result`` as a result of its own (requests routed to it,
    its ITL runs and replicas, its GPUs, peaks and price).

    Raises:
        ValueError: ``result`` has no pools.
    """
    if not result.pools:
        raise ValueError(f"variant {result.variant} is not a pooled fleet")
    p = result.pools[k]
    req = result.requests
    mask = np.asarray(req.pool) == k if len(req.pool) else np.ones(len(req.request_id), bool)
    columns = {name: (getattr(req, name)[mask] if len(getattr(req, name)) else getattr(req, name))
               for name in type(req).model_fields}
    itl = result.itl
    keep = np.asarray(itl.pool) == k if len(itl.pool) else np.ones(len(itl.gap_s), bool)
    return result.model_copy(update={
        "requests": req.model_copy(update=columns),
        "itl": ItlRuns(gap_s=np.asarray(itl.gap_s)[keep], count=np.asarray(itl.count)[keep],
                       class_id=np.asarray(itl.class_id)[keep]),
        "replicas": [s for s in result.replicas if s.pool == p.name],
        "timelines": [t for t in result.timelines if t.pool == p.name],
        "num_replicas": p.num_replicas, "num_gpus": p.num_gpus, "hardware": p.hardware,
        "model": p.model, "scheduler": p.scheduler, "engine": p.engine,
        "price_per_hour_usd": p.price_per_hour_usd, "peak_flops_per_gpu": p.peak_flops_per_gpu,
        "hbm_bandwidth_per_gpu_bytes_per_s": p.hbm_bandwidth_per_gpu_bytes_per_s,
        "fleet": p.fleet, "day": None, "pools": None})


def pool_rows(result: RunResult, slo: SloConfig,
              class_slos: dict[str, RequestSlo] | None = None) -> list[tuple[str, SummaryRow]]:
    """(pool name, summary row) per pool and class of a pooled result (``cls == "all"``
    first per pool); [] for a result without pools. A pool that served no request has
    no row."""
    out = []
    for k, p in enumerate(result.pools or []):
        sub = pool_run(result, k)
        if len(sub.requests.request_id):
            out += [(p.name, row) for row in summarize(sub, slo, class_slos)]
    return out


def pools_frame(results: list[RunResult], slo: SloConfig,
                class_slos: dict[str, RequestSlo] | None = None) -> pd.DataFrame:
    """pools.csv: one row per variant × pool × class (the summary columns, after ``pool``,
    ``hardware``, ``model``, ``tensor_parallel_size``, ``pipeline_parallel_size``,
    ``num_replicas``; a pool that served no request: one row with its GPUs and $/h only),
    then each pooled variant's fleet total as pool ``fleet`` (no TP or PP: its pools may
    differ); empty when no variant is pooled. Integer columns stay integers where a row
    leaves them empty (pandas' nullable ``Int64``), so the CSV reads ``2``, not ``2.0``."""
    rows = []
    for r in results:
        if not r.pools:
            continue
        by_pool = {}
        for name, row in pool_rows(r, slo, class_slos):
            by_pool.setdefault(name, []).append(row.model_dump())
        for p in r.pools:                   # a pool the router left idle: its cost only
            head = {"pool": p.name, "hardware": p.hardware, "model": p.model,
                    "tensor_parallel_size": p.tensor_parallel_size,
                    "pipeline_parallel_size": p.pipeline_parallel_size,
                    "num_replicas": p.num_replicas}
            idle = [{"variant": r.variant, "cls": "all", "num_requests": 0,
                     "num_gpus": p.num_gpus, "cost_per_hour_usd": p.price_per_hour_usd}]
            rows += [{**head, **row} for row in by_pool.get(p.name, idle)]
        for row in summarize(r, slo, class_slos):
            rows.append({"pool": "fleet", "hardware": r.hardware, "model": r.model,
                         "tensor_parallel_size": None, "pipeline_parallel_size": None,
                         "num_replicas": r.num_replicas, **row.model_dump()})
    df = without_unused_reject_columns(pd.DataFrame(rows))
    ints = [c for c in df.columns if c in _INT_COLUMNS]
    return df.astype({c: "Int64" for c in ints})


#: pools.csv's integer columns: the pool's shape and SummaryRow's int fields.
_INT_COLUMNS = frozenset(["tensor_parallel_size", "pipeline_parallel_size", "num_replicas",
                          *(name for name, f in SummaryRow.model_fields.items()
                            if f.annotation is int)])
