"""results.json: every variant's figures under ``vllm bench serve``'s key names.

One JSON object (strict JSON: ``null`` where a figure has no value, never NaN)::

    {"capsim_results": 1, "capsim_version": "…", "scenario": "rag_mix",
     "percentiles": [50, 90, 99, 99.9],
     "variants": [{<vllm bench serve keys>, "capsim": {<capsim's own>}}, …]}

Each variant's object carries the keys a ``vllm bench serve --save-result`` file has
(:func:`capsim.metrics.bench.bench_fields`: ``request_throughput``, ``mean_ttft_ms``,
``p99.9_itl_ms``, …, with vLLM's units and definitions) and, under ``capsim``, what only
capsim knows: the variant, seed, engine, hardware and fleet; ``rejected`` with the
reasons (``reject_reasons``: count and one example per kind); ``summary``, the variant's
summary.csv row (KV use, preemptions, utilisation, cost, the SLO verdict, under
summary.csv's names); and, with several request classes, ``classes``: each class's vLLM
keys. The file is deterministic for a seed (no date, no wall time).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.metrics.bench import bench_fields, goodput_or_none
from capsim.results.model import RunResult, SummaryRow
from capsim.scenario.slo import RequestSlo, SloConfig
from capsim.scenario.workload import WorkloadConfig
from capsim.sim.simulate import group_reasons

FILE = "results.json"
#: The layout's version: raised when a key changes meaning or moves.
LAYOUT = 1
#: vLLM's setup keys, left out of a class's entry (the variant's are the same).
_SETUP = ("backend", "label", "model_id", "request_rate", "burstiness", "max_concurrency")


def document(*, scenario_name: str, version: str, results: list[RunResult],
             rows: list[SummaryRow], frames: dict[str, pd.DataFrame], slo: SloConfig,
             class_slos: dict[str, RequestSlo], percentiles: tuple[float, ...],
             workloads: dict[str, WorkloadConfig]) -> dict[str, Any]:
    """The results.json object (see the module docstring).

    Args:
        frames: each variant's request frame (:func:`~capsim.metrics.summary.request_frame`).
        percentiles: written as ``p{q}_<metric>_ms`` (0..100).
        workloads: each variant's workload (``request_rate``, ``burstiness``,
            ``max_concurrency``); a variant missing here has none of those keys.
    """
    by_key = {(r.variant, r.cls): r for r in rows}
    return {"capsim_results": LAYOUT, "capsim_version": version, "scenario": scenario_name,
            "percentiles": [_number(q) for q in percentiles],
            "variants": [_variant(r, frames[r.variant], by_key, slo, class_slos, percentiles,
                                  workloads.get(r.variant)) for r in results]}


def write(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as indented strict JSON (``allow_nan=False``: a NaN left in is a bug)."""
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def _variant(result: RunResult, frame: pd.DataFrame, by_key: dict, slo: SloConfig,
             class_slos: dict[str, RequestSlo], qs: tuple[float, ...],
             workload: WorkloadConfig | None) -> dict[str, Any]:
    total = by_key.get((result.variant, "all"))
    goodput = goodput_or_none(total, slo, class_slos) if total is not None else None
    out = bench_fields(result, frame, qs, _plain(goodput), workload)
    reasons = group_reasons(frame["reject_reason"].tolist()) if len(frame) else []
    capsim: dict[str, Any] = {
        "variant": result.variant, "seed": result.seed, "engine": result.engine,
        "preset": result.preset, "scheduler": result.scheduler, "hardware": result.hardware,
        "num_replicas": result.num_replicas, "num_gpus": result.num_gpus,
        "rejected": out["failed"],
        "reject_reasons": [{"count": n, "example": e} for n, e in reasons],
        "summary": _row(total) if total is not None else None,
    }
    if len(result.class_names) > 1:
        capsim["classes"] = {}
        for name in result.class_names:
            row = by_key.get((result.variant, name))
            if row is None:                     # a class with no measured request
                continue
            fields = bench_fields(result, frame, qs, _plain(goodput_or_none(row, slo, class_slos)),
                                  cls=name)
            capsim["classes"][name] = {k: v for k, v in fields.items() if k not in _SETUP}
    out["capsim"] = capsim
    return out


def _row(row: SummaryRow) -> dict[str, Any]:
    """A summary.csv row (its ``--percentiles`` columns last) with NaN as None."""
    return {k: _plain(v) for k, v in {**row.model_dump(exclude={"variant"}),
                                       **row.percentiles}.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _number(q: float) -> int | float:
    """A percentile as vLLM spells it: 99 not 99.0."""
    return int(q) if int(q) == q else q
