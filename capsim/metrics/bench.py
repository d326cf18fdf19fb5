"""One variant's figures as ``vllm bench serve`` saves them (results.json).

Key names, units and definitions follow ``vllm/benchmarks/serve.py`` of vllm-project/vllm
at 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1: ``benchmark()``'s ``result`` dict and
``calculate_metrics`` (``completed``, ``failed``, ``total_input_tokens``,
``total_output_tokens``, ``request_throughput``, ``request_goodput``,
``output_throughput``, ``total_token_throughput``, ``max_concurrent_requests``), its
``process_one_metric`` (``mean_``/``median_``/``std_``/``p{q}_`` + ``ttft``/``tpot``/
``itl``/``e2el`` + ``_ms``) and ``main_async``'s setup block (``backend``, ``label``,
``model_id``, ``num_prompts``, ``request_rate``, ``burstiness``, ``max_concurrency``).
The latencies are :mod:`capsim.metrics.summary`'s, which are vLLM's: TTFT and E2EL per
finished request; TPOT per finished request with more than one output token, (E2EL −
TTFT) / (output tokens − 1); ITL every gap between two streamed chunks of a request,
pooled over requests; ``std`` the population standard deviation (numpy's ``np.std``);
percentiles numpy's linear interpolation.

Where capsim differs: ``duration`` is the first measured arrival → the last completion
(vLLM: the benchmark's wall time, which starts at the first send), the throughputs divide
by it; ``failed`` counts requests capsim rejected or lost (vLLM: requests that returned an
error); a statistic with no value (no finished request; no request of two or more tokens
for TPOT) is ``null`` (vLLM writes 0); ``request_goodput`` is ``null`` when the scenario
sets no per-request limit (vLLM: without ``--goodput``). vLLM keys capsim cannot compute
are left out: ``date`` (a run is deterministic), ``tokenizer_id``, ``max_output_tokens_per_s``
(needs every token's time), ``rtfx``, the speculative-decoding counters and the
per-request lists of ``--save-detailed`` (capsim keeps no per-request token gaps).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from capsim.metrics.summary import (LATENCY_METRICS, _exact_sum_ms, _nonempty,
                                    _sorted_percentiles, held_runs, merge_equal,
                                    percentile_key, sorted_itl, sorted_runs)
from capsim.results.model import FINISHED, RunResult, SummaryRow
from capsim.scenario.slo import RequestSlo, SloConfig
from capsim.scenario.workload import WorkloadConfig

#: ``backend`` of a capsim result: no client sent these requests.
BACKEND = "capsim"


def bench_fields(result: RunResult, frame: pd.DataFrame, qs: tuple[float, ...],
                 goodput_per_s: float | None, workload: WorkloadConfig | None = None,
                 cls: str | None = None) -> dict[str, Any]:
    """vllm bench serve's result keys for one variant (or one request class ``cls``).

    Args:
        result: the variant's run.
        frame: its :func:`~capsim.metrics.summary.request_frame` (measured requests).
        qs: percentiles (0..100) written as ``p{q}_<metric>_ms``.
        goodput_per_s: requests/s meeting every per-request SLO (the summary row's), or
            None when no limit is set.
        workload: the variant's workload, for ``request_rate``, ``burstiness`` and
            ``max_concurrency`` (left out when None).
        cls: a request class: its requests and ITL runs only.
    Returns:
        The keys in vLLM's order; floats are plain Python floats, NaN as None.
    """
    if cls is not None:
        frame = frame[frame["cls"] == cls]
    done = frame[frame["status"] == FINISHED]
    span = _duration_s(done, frame)
    inputs = int(done["prompt_tokens"].sum())
    outputs = int((done["output_tokens"] * done["n"]).sum())
    out: dict[str, Any] = {"backend": BACKEND, "label": result.variant, "model_id": result.model,
                           "num_prompts": len(frame)}
    if workload is not None:
        out.update(traffic_fields(workload))
    out.update({
        "duration": span,
        "completed": len(done),
        "failed": len(frame) - len(done),
        "total_input_tokens": inputs,
        "total_output_tokens": outputs,
        "request_throughput": _per(len(done), span),
        "request_goodput": goodput_per_s,
        "output_throughput": _per(outputs, span),
        "total_token_throughput": _per(inputs + outputs, span),
        "max_concurrent_requests": peak_concurrency(done),
    })
    gaps, counts = _itl_runs(result, cls)
    for metric in LATENCY_METRICS:
        mean, median, std, at = (_weighted_stats(gaps, counts, qs) if metric == "itl"
                                 else _stats(done[f"{metric}_ms"].to_numpy(dtype=np.float64), qs))
        out.update({f"mean_{metric}_ms": mean, f"median_{metric}_ms": median,
                    f"std_{metric}_ms": std})
        out.update((percentile_key(q, metric), v) for q, v in zip(qs, at))
    return {k: _plain(v) for k, v in out.items()}


def traffic_fields(workload: WorkloadConfig) -> dict[str, Any]:
    """``request_rate`` (requests/s; ``"inf"`` for every request at t = 0 or a closed
    loop, as vLLM saves ``--request-rate inf``), ``burstiness`` (vLLM's Gamma shape:
    1 for Poisson, 1 / cv² for ``process: gamma``) and ``max_concurrency`` (a closed
    loop's ``users``); None where the workload has no such setting (a trace, a rate
    schedule or bursts, constant gaps)."""
    a = workload.arrival
    plain = a is not None and workload.schedule is None and workload.bursts is None \
        and workload.trace is None
    rate: Any = None
    if a is not None and (a.closed_loop or a.all_at_once):
        rate = "inf"
    elif plain:
        rate = a.rate_per_s
    burst = None
    if plain and a.process == "poisson":
        burst = 1.0
    elif plain and a.process == "gamma":
        burst = 1.0 / (a.cv * a.cv)
    return {"request_rate": rate, "burstiness": burst,
            "max_concurrency": a.users if a is not None and a.closed_loop else None}


def goodput_or_none(row: SummaryRow, slo: SloConfig,
                    class_slos: dict[str, RequestSlo]) -> float | None:
    """The row's goodput (requests/s), or None when no per-request limit applies to it."""
    limits = [slo, *(class_slos.values() if row.cls == "all" else
                     [class_slos[row.cls]] if row.cls in class_slos else [])]
    if any(s.ttft_ms or s.tpot_ms or s.e2el_ms for s in limits):
        return row.goodput_req_per_s
    return None


def peak_concurrency(done: pd.DataFrame) -> int:
    """The most finished requests in flight at once, each over [arrival, completion)
    (``calculate_metrics``' sweep line: an end before a start at one instant)."""
    if not len(done):
        return 0
    start = done["arrival_s"].to_numpy(dtype=np.float64)
    end = start + done["e2el_ms"].to_numpy(dtype=np.float64) / 1e3
    times = np.concatenate((end, start))
    delta = np.concatenate((np.full(len(end), -1), np.ones(len(start), dtype=np.int64)))
    order = np.lexsort((delta, times))
    return int(np.cumsum(delta[order]).max())


def _duration_s(done: pd.DataFrame, frame: pd.DataFrame) -> float:
    """First measured arrival → last completion (NaN with no finished request)."""
    if not len(done):
        return math.nan
    end = (done["arrival_s"] + done["e2el_ms"] / 1e3).max()
    return float(end - frame["arrival_s"].min())


def _per(count: float, span_s: float) -> float:
    return count / span_s if span_s > 0 else math.nan


def _stats(values_ms: np.ndarray, qs: tuple[float, ...]
           ) -> tuple[float, float, float, list[float]]:
    """(mean, median, population std, each percentile of ``qs``) of the non-NaN values."""
    x = values_ms[~np.isnan(values_ms)]
    if not len(x):
        return math.nan, math.nan, math.nan, [math.nan] * len(qs)
    at = np.percentile(x, (50.0, *qs)).tolist()
    return float(x.mean()), at[0], float(x.std()), at[1:]


def _weighted_stats(gaps_s: np.ndarray, counts: np.ndarray, qs: tuple[float, ...]
                    ) -> tuple[float, float, float, list[float]]:
    """:func:`_stats` of the ITL runs (gaps sorted ascending, in seconds) in ms: each gap
    counted ``counts`` times."""
    total = int(counts.sum())
    if not total:
        return _stats(np.empty(0), qs)
    mean = _exact_sum_ms(gaps_s, counts) / total       # summary.csv's itl_mean_ms, exactly
    ms = gaps_s * 1e3
    w = counts.astype(np.float64)
    std = float(math.sqrt(np.dot((ms - mean) ** 2, w) / total))
    at = _sorted_percentiles(gaps_s, counts, (50.0, *qs), scale=1e3)
    return mean, at[0], std, at[1:]


def _itl_runs(result: RunResult, cls: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The run's ITL runs (of class ``cls``), sorted by gap, counts > 0.

    For all classes of a run with no held reply, read from the summary's sorted runs
    (:func:`~capsim.metrics.summary.sorted_itl`): the same arrays as sorting these runs
    again (merged per gap where that sort merges, else in the same argsort order). Held
    replies' runs are left out, as summary.csv leaves them out: a reply returned whole
    shows its client no gap (vLLM's bench adds no ITL for a one-chunk reply), so a run of
    held replies only has no ITL (``null``; it wrote 0 ms)."""
    if cls is None:
        shared = sorted_itl(result)
        if not shared.held:
            return (merge_equal(shared.gaps_s, shared.counts) if shared.merged
                    else (shared.gaps_s, shared.counts))
    itl = result.itl
    held = held_runs(result)
    counts = np.where(held, 0, np.asarray(itl.count)) if held.any() else itl.count
    gaps, counts, ids = _nonempty(itl.gap_s, counts, itl.class_id)
    if cls is not None:
        keep = np.asarray(ids) == result.class_names.index(cls)
        gaps, counts = gaps[keep], counts[keep]
    gaps, counts, _ = sorted_runs(gaps, counts)
    return gaps, counts


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers; NaN and ±inf as None (strict JSON)."""
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value
