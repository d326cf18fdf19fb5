"""GuideLLM benchmark reports (``guidellm benchmark --output-path x.json``).

A report is one JSON object ``{"metadata", "config"/"args", "benchmarks": [...]}``;
each benchmark (one load level of a sweep) holds its requests grouped by status in
``requests.successful`` / ``requests.incomplete`` / ``requests.errored``. Two layouts:

- **v0.4 and later** — schema: ``GenerativeBenchmarksReport``
  (``src/guidellm/benchmark/schemas/report.py``), ``GenerativeBenchmark``
  (``.../schemas/benchmark.py``), ``GenerativeRequestStats``
  (``src/guidellm/schemas/request_stats.py``) and ``RequestTimings``
  (``src/guidellm/schemas/info.py``) of vllm-project/guidellm at commit
  ee7a77457ba668b4b5ccb40f110518829893b36a (v0.7.3 = 39383552962841086d05e25c37b58a83ef06c758
  has the same fields). Per request: ``info.timings.request_start`` (send, unix s),
  ``first_token_iteration``, ``last_token_iteration``, ``request_end``, and the
  serialised computed fields ``prompt_tokens`` / ``output_tokens`` (else
  ``input_metrics.total_tokens`` / ``output_metrics.total_tokens``). Run level:
  ``config.strategy`` (``type_``: synchronous | concurrent (``streams``) | throughput |
  constant / poisson (``rate``), ``max_concurrency``), ``config.backend.model``,
  ``duration``, ``metrics.request_totals``.
- **v0.3** — schema: ``GenerativeTextResponseStats`` / ``GenerativeBenchmark`` in
  ``src/guidellm/benchmark/benchmark.py`` at tag v0.3.1
  (121dcdc454e57c98ae26f86db2ed984f3c6d14a7): per request ``start_time``,
  ``first_token_time``, ``last_token_time``, ``end_time``, ``prompt_tokens``,
  ``output_tokens``; run level ``args.strategy``, ``worker.backend_model``,
  ``request_totals``, ``request_samples``.

GuideLLM saves no per-chunk gaps (only each request's mean), so a GuideLLM run has no
ITL distribution (``itl_gaps_s`` None). TTFT = first token − request start, E2E =
request end − request start. A report whose request lists were sampled
(``--sample-requests`` / ``sample_size``) holds only some of the requests the server
saw and is refused: replaying a sample would under-load the simulated server.
Incomplete and errored requests are kept (``success`` False) so their tokens still
load the replay.

Public API:
    GUIDELLM (the format), is_guidellm
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from capsim.calibrate.measured import (MeasuredRun, as_float, missing_fields, opt_float, opt_int,
                                       token_counts)
from capsim.calibrate.readers.base import ResultFormat
from capsim.common.errors import ScenarioError

STATUSES = ("successful", "incomplete", "errored")


def is_guidellm(doc: Any) -> bool:
    """A GuideLLM report: a JSON object with a ``benchmarks`` list."""
    return isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list)


def _strategy(bench: dict) -> dict:
    holder = bench.get("config") if isinstance(bench.get("config"), dict) else bench.get("args")
    strategy = holder.get("strategy") if isinstance(holder, dict) else None
    return strategy if isinstance(strategy, dict) else {}


def _describe(bench: Any) -> str:
    if not isinstance(bench, dict):
        return "not a JSON object"
    s = _strategy(bench)
    kind = s.get("type_", "?")
    for key, unit in (("rate", "req/s"), ("streams", "streams")):
        if s.get(key) is not None:
            return f"{kind} {s[key]:g} {unit}" if isinstance(s[key], (int, float)) else kind
    return str(kind)


def _requests(bench: dict, path: str, where: str) -> list[tuple[str, dict]]:
    groups = bench.get("requests")
    if not isinstance(groups, dict) or not isinstance(groups.get("successful"), list):
        raise missing_fields(path, GUIDELLM.label, ["requests.successful"], GUIDELLM.hint, where)
    out = [(status, r) for status in STATUSES for r in (groups.get(status) or [])
           if isinstance(r, dict)]
    totals = bench.get("request_totals") or (bench.get("metrics") or {}).get("request_totals")
    if bench.get("request_samples") is not None or isinstance(totals, dict) and any(
            isinstance(totals.get(s), int) and totals[s] > len(groups.get(s) or [])
            for s in STATUSES):
        kept = len(out)
        made = sum(int(totals.get(s) or 0) for s in STATUSES) if isinstance(totals, dict) \
            else None
        how = ("sampled: request_samples" if bench.get("request_samples") is not None else
               "request_totals counts more than the request lists hold: sampled or trimmed")
        raise ScenarioError(
            f"{GUIDELLM.label} result{where}: holds {kept:,} of {made or 'more'} requests "
            f"({how}); a replay needs every request the server saw: give the report as "
            "guidellm benchmark wrote it, run without --sample-requests", file=path)
    return out


def _timing(r: dict) -> tuple[float, float, float, float, float]:
    """(send, first token, end, prompt tokens, output tokens) of one request, either layout."""
    info = r.get("info")
    if isinstance(info, dict):                                  # v0.4+
        t = info.get("timings") if isinstance(info.get("timings"), dict) else {}
        start = as_float(t.get("request_start"))
        start = start if not math.isnan(start) else as_float(r.get("request_start_time"))
        end = as_float(t.get("request_end"))
        end = end if not math.isnan(end) else as_float(t.get("resolve_end"))
        prompt = as_float(r.get("prompt_tokens"))
        if math.isnan(prompt):
            prompt = as_float((r.get("input_metrics") or {}).get("total_tokens"))
        output = as_float(r.get("output_tokens"))
        if math.isnan(output):
            output = as_float((r.get("output_metrics") or {}).get("total_tokens"))
        return start, as_float(t.get("first_token_iteration")), end, prompt, output
    return (as_float(r.get("start_time")), as_float(r.get("first_token_time")),   # v0.3
            as_float(r.get("end_time")), as_float(r.get("prompt_tokens")),
            as_float(r.get("output_tokens")))


def _model(bench: dict) -> str | None:
    config = bench.get("config") if isinstance(bench.get("config"), dict) else {}
    backend = config.get("backend") if isinstance(config.get("backend"), dict) else {}
    worker = bench.get("worker") if isinstance(bench.get("worker"), dict) else {}
    model = backend.get("model") or worker.get("backend_model")
    return model if isinstance(model, str) else None


def _read(bench: Any, path: str, run_label: str) -> MeasuredRun:
    where = f" ({run_label})" if run_label else ""
    if not isinstance(bench, dict):
        raise missing_fields(path, GUIDELLM.label, ["benchmark object"], GUIDELLM.hint, where)
    rows = _requests(bench, path, where)
    table = np.array([_timing(r) for _, r in rows], np.float64).reshape(-1, 5)
    start, first, end, prompt, output = table.T
    ok = np.array([s == "successful" for s, _ in rows]) & np.isfinite(start) & (prompt > 0) \
        & (output > 0) & np.isfinite(first) & np.isfinite(end)
    if rows and not ok.any():
        need = ("info.timings.request_start, first_token_iteration, request_end, prompt_tokens,"
                " output_tokens" if isinstance(rows[0][1].get("info"), dict) else
                "start_time, first_token_time, end_time, prompt_tokens, output_tokens")
        raise missing_fields(path, GUIDELLM.label, [f"per-request {need}"], GUIDELLM.hint,
                             where)
    s = _strategy(bench)
    kind = s.get("type_")
    rate = {"throughput": math.inf}.get(kind, opt_float(s.get("rate")))
    concurrency = {"synchronous": 1}.get(kind, opt_int(s.get("streams")) or opt_int(
        s.get("max_concurrency")))
    duration = opt_float(bench.get("duration"))
    if duration is None and opt_float(bench.get("end_time")) is not None:
        duration = opt_float(bench.get("end_time")) - (opt_float(bench.get("start_time")) or 0.0)
    t0 = np.nanmin(start) if np.isfinite(start).any() else 0.0
    return MeasuredRun(
        path=path, format=GUIDELLM.key, label=GUIDELLM.label, source=GUIDELLM.source,
        run_label=run_label, send_s=start - t0,
        prompt_tokens=token_counts(prompt, "prompt_tokens", GUIDELLM.label, path, where),
        output_tokens=token_counts(output, "output_tokens", GUIDELLM.label, path, where),
        ttft_s=np.where(ok, first - start, np.nan), e2e_s=np.where(ok, end - start, np.nan),
        success=ok, request_rate_per_s=rate, max_concurrency=concurrency, model=_model(bench),
        duration_s=duration,
        notes=("GuideLLM saves no per-chunk gaps: no measured ITL distribution",))


GUIDELLM = ResultFormat(
    key="guidellm", label="GuideLLM",
    source="vllm-project/guidellm src/guidellm/benchmark/schemas/benchmark.py, "
           "src/guidellm/schemas/request_stats.py @ ee7a77457ba668b4b5ccb40f110518829893b36a; "
           "v0.3 layout: src/guidellm/benchmark/benchmark.py @ v0.3.1 "
           "121dcdc454e57c98ae26f86db2ed984f3c6d14a7",
    hint="write it with guidellm benchmark --output-path FILE.json",
    runs=lambda docs: list(docs[0]["benchmarks"]), describe=_describe, read=_read)
