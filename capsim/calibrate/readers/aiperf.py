"""AIPerf per-request records (``artifacts/<run>/profile_export.jsonl``).

Schema: ``MetricRecordInfo`` / ``MetricRecordMetadata`` / ``MetricValue`` in
``aiperf/common/models/record_models.py``, written one JSON object per line by
``RecordExportResultsProcessor`` (``aiperf/post_processors/record_export_results_processor.py``),
documented in ``docs/tutorials/working-with-profile-exports.md``; ai-dynamo/aiperf at
commit db4f6397d11ee2d4cfbb41f70b2327315163dcf0. Each line::

    {"metadata": {"request_start_ns": <unix ns>, "request_end_ns": ...,
                  "benchmark_phase": "profiling", "was_cancelled": false, ...},
     "metrics": {"input_sequence_length": {"value": 550, "unit": "tokens"},
                 "output_sequence_length": {...},
                 "time_to_first_token": {"value": ..., "unit": "ms"}, "request_latency": {...},
                 "inter_chunk_latency": {"value": [...], "unit": "ms"}, ...},
     "error": null | {"code", "type", "message"}}

Earlier builds (ai-dynamo/aiperf 7c31f57933ad8a452db7737d05dba2b29cd6bf8c, 2025-10-03,
before "Add per-record metrics export" #325) wrote the same records under other names,
read as their successors: ``metadata.timestamp_ns`` ("wall clock timestamp of the
request start time") for ``request_start_ns``, ``metadata.credit_phase`` for
``benchmark_phase``, the metric ``ttft`` for ``time_to_first_token``; they save no
``request_end_ns`` (the end is start + ``request_latency``) and no ``was_cancelled`` (a
cancelled request carries an ``error``).

Metric values are in their display unit (the ``unit`` string; ms for times). A failed
record carries only ``error_isl``. ``time_to_first_token`` and ``inter_chunk_latency``
exist for streaming runs only. Records of another ``benchmark_phase`` than
``profiling`` (warm-up) are skipped. The per-record file says nothing of the run; the
model, request rate and concurrency come from the summary ``profile_export_aiperf.json``
next to it (``input_config.endpoint.model_names``, ``input_config.loadgen.request_rate`` /
``concurrency``; ``aiperf/exporters/json_exporter.py``) when it is there.

Public API:
    AIPERF (the format), is_aiperf_record
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from capsim.calibrate.measured import (MeasuredRun, as_float, missing_fields, opt_float, opt_int,
                                       ragged, to_seconds, token_counts)
from capsim.calibrate.readers.base import ResultFormat

NEEDED = ("input_sequence_length", "output_sequence_length", "time_to_first_token",
          "request_latency")
SUMMARY = "profile_export_aiperf.json"


#: Names of earlier builds (7c31f579, module docstring) → today's.
ALIASES = {"timestamp_ns": "request_start_ns", "credit_phase": "benchmark_phase",
           "ttft": "time_to_first_token"}


def is_aiperf_record(doc: Any) -> bool:
    """One line of an AIPerf ``profile_export.jsonl`` (either layout)."""
    return isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and "metrics" in doc \
        and any(k in doc["metadata"] for k in ("request_start_ns", "timestamp_ns"))


def _renamed(record: dict) -> dict:
    """``record`` with an earlier build's metadata and metric names as today's."""
    meta, metrics = record["metadata"], record.get("metrics")
    if "request_start_ns" in meta and not (isinstance(metrics, dict) and "ttft" in metrics):
        return record
    meta = {ALIASES.get(k, k): v for k, v in meta.items()}
    if isinstance(metrics, dict):
        metrics = {ALIASES.get(k, k): v for k, v in metrics.items()}
    return {**record, "metadata": meta, "metrics": metrics}


def _value_s(metrics: dict, tag: str) -> float:
    m = metrics.get(tag)
    return to_seconds(as_float(m.get("value")), m.get("unit")) if isinstance(m, dict) else math.nan


def _gaps_s(metrics: dict) -> list[float] | None:
    m = metrics.get("inter_chunk_latency")
    if not isinstance(m, dict) or not isinstance(m.get("value"), list):
        return None
    return [to_seconds(as_float(v), m.get("unit")) for v in m["value"]]


def _tokens(metrics: dict, *tags: str) -> float:
    for tag in tags:
        m = metrics.get(tag)
        if isinstance(m, dict) and not math.isnan(as_float(m.get("value"))):
            return as_float(m["value"])
    return 0.0


def _summary(path: str) -> dict:
    """The ``input_config`` of the summary next to the records, {} when absent/unreadable."""
    try:
        data = json.loads((Path(path).parent / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    config = data.get("input_config") if isinstance(data, dict) else None
    return config if isinstance(config, dict) else {}


def _read(records: list[Any], path: str, run_label: str) -> MeasuredRun:
    records = [_renamed(r) for r in records if is_aiperf_record(r)]
    records = [r for r in records if r["metadata"].get("benchmark_phase", "profiling")
               == "profiling"]
    ok_records = [r for r in records if not r.get("error")
                  and not r["metadata"].get("was_cancelled")]
    metrics = [r.get("metrics") if isinstance(r.get("metrics"), dict) else {} for r in records]
    absent = [tag for tag in NEEDED
              if ok_records and not any(tag in (r.get("metrics") or {}) for r in ok_records)]
    if not ok_records or absent:
        raise missing_fields(path, AIPERF.label, [f"metrics.{t}" for t in absent or NEEDED],
                             AIPERF.hint + (" (time_to_first_token exists for streaming runs "
                                            "only: --streaming)" if absent else ""))
    success = np.array([not r.get("error") and not r["metadata"].get("was_cancelled")
                        for r in records])
    start_ns = np.array([as_float(r["metadata"].get("request_start_ns")) for r in records])
    ttft = np.array([_value_s(m, "time_to_first_token") for m in metrics])
    e2e = np.array([_value_s(m, "request_latency") for m in metrics])
    prompt = np.array([_tokens(m, "input_sequence_length", "error_isl") for m in metrics])
    output = np.array([_tokens(m, "output_sequence_length") for m in metrics])
    success &= np.isfinite(ttft) & np.isfinite(e2e) & (prompt > 0) & (output > 0)
    per_request = [_gaps_s(m) for m in metrics]
    gaps, counts = ragged(per_request) if any(g is not None for g in per_request) else (None, None)
    config = _summary(path)
    endpoint, loadgen = config.get("endpoint") or {}, config.get("loadgen") or {}
    names = endpoint.get("model_names") if isinstance(endpoint, dict) else None
    ends = np.array([as_float(r["metadata"].get("request_end_ns")) for r in records])
    ends = np.where(np.isnan(ends), start_ns + e2e * 1e9, ends)     # earlier builds: no end
    t0 = np.nanmin(start_ns)
    return MeasuredRun(
        path=path, format=AIPERF.key, label=AIPERF.label, source=AIPERF.source,
        run_label=run_label, send_s=(start_ns - t0) * 1e-9,
        prompt_tokens=token_counts(prompt, "input_sequence_length", AIPERF.label, path),
        output_tokens=token_counts(output, "output_sequence_length", AIPERF.label, path),
        ttft_s=np.where(success, ttft, np.nan), e2e_s=np.where(success, e2e, np.nan),
        success=success, itl_gaps_s=gaps, itl_counts=counts,
        request_rate_per_s=opt_float(loadgen.get("request_rate")) if isinstance(
            loadgen, dict) else None,
        max_concurrency=opt_int(loadgen.get("concurrency")) if isinstance(loadgen, dict) else None,
        model=names[0] if isinstance(names, list) and names and isinstance(names[0], str)
        else None,
        duration_s=float((np.nanmax(ends) - t0) * 1e-9) if np.isfinite(ends).any() else None,
        notes=() if config else ((f"no {SUMMARY} next to the records: model, request rate and "
                                  "concurrency unknown"),))


AIPERF = ResultFormat(
    key="aiperf", label="AIPerf",
    source="ai-dynamo/aiperf aiperf/common/models/record_models.py, "
           "aiperf/post_processors/record_export_results_processor.py @ "
           "db4f6397d11ee2d4cfbb41f70b2327315163dcf0",
    hint="give the per-request profile_export.jsonl of an aiperf profile run",
    runs=lambda docs: [docs], describe=lambda docs: f"{len(docs):,} records", read=_read)
