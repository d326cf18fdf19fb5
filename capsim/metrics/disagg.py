"""Summary columns of a disaggregated (prefill/decode) run.

Added to every :class:`~capsim.results.model.SummaryRow` of a run whose
``RunResult.disagg`` is set (co-located rows keep their NaN / "" defaults).
Definitions, all over the run's span (first arrival → last completion, as
every throughput figure):

- ``prefill_busy_frac`` / ``decode_busy_frac``: Σ busy seconds × TP of the
  pool's replicas ÷ (pool GPUs × span). A decode GPU running small batches is
  busy, and its MBU stays high too (every step reads all the weights), so
  ``decode_slot_occupancy`` (sequences per decode step ÷ ``max_num_seqs``)
  says how full its batches were; ``prefill_mfu`` is the prefill pool's
  FLOP/s ÷ its peak.
- ``kv_transfer_*_ms``: a transfer's time on the link, decode slot reserved →
  last byte landed (latency + shared-bandwidth time).
- ``kv_backpressure_p99_ms``: token 1 → decode slot reserved (waiting for a
  decode replica with room; 0 when none waits).
- ``second_token_*_ms``: token 1 → token 2 as the client sees it (back-pressure
  + transfer + waiting for the decode replica's next step + that step). The
  same gaps are in ITL; these columns isolate them.
- ``kv_transfer_gib``: bytes moved ÷ 2^30.
- ``kv_link_util_frac``: the busiest port's bytes ÷ (its capacity × span).
- ``stranded_*_frac``: stranded GPU-seconds (see
  :class:`~capsim.results.model.DisaggResult`) ÷ (the pool's GPUs × span).

Per-class rows filter the per-transfer columns by class; the pool and link
columns are the variant's on every row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from capsim.results.model import RunResult

_NAN = float("nan")
GIB = 2**30


def disagg_columns(result: RunResult, cls: str, span_s: float) -> dict[str, float | str]:
    """The disaggregation columns of one summary row (``cls`` = "all" or a class name)."""
    d = result.disagg
    span = span_s if span_s and span_s > 0 else _NAN
    t = d.transfers
    keep = np.ones(len(t.request_id), bool) if cls == "all" else \
        np.asarray(t.class_id, np.int64) == result.class_names.index(cls)
    handoff = np.asarray(t.handoff_s, np.float64)[keep]
    reserved = np.asarray(t.reserved_s, np.float64)[keep]
    arrived = np.asarray(t.arrived_s, np.float64)[keep]
    second = np.asarray(t.second_token_s, np.float64)[keep]
    transfer_ms = (arrived - reserved) * 1e3
    second_ms = (second - handoff) * 1e3
    return {
        "disagg": d.label,
        "prefill_busy_frac": _pool_busy(result, "prefill", d.prefill_gpus) / span,
        "decode_busy_frac": _pool_busy(result, "decode", d.decode_gpus) / span,
        "prefill_mfu": _pool_sum(result, "prefill", "flops")
        / (d.prefill_gpus * d.prefill_peak_flops_per_gpu * span),
        "decode_mbu": _pool_sum(result, "decode", "hbm_bytes")
        / (d.decode_gpus * d.decode_hbm_bandwidth_per_gpu_bytes_per_s * span),
        "decode_slot_occupancy": _pool_sum(result, "decode", "slot_steps_useful")
        / _pool_sum(result, "decode", "slot_capacity"),
        "kv_transfer_p50_ms": _pct(transfer_ms, 50),
        "kv_transfer_p99_ms": _pct(transfer_ms, 99),
        "kv_transfer_max_ms": _pct(transfer_ms, 100),
        "kv_backpressure_p99_ms": _pct((reserved - handoff) * 1e3, 99),
        "second_token_p50_ms": _pct(second_ms, 50),
        "second_token_p99_ms": _pct(second_ms, 99),
        "kv_transfer_gib": float(np.asarray(t.bytes, np.float64)[keep].sum()) / GIB,
        "kv_link_util_frac": max((p.bytes / (p.capacity_bytes_per_s * span) for p in d.ports),
                                 default=_NAN),
        "stranded_prefill_frac": d.stranded_prefill_gpu_s / (d.prefill_gpus * span),
        "stranded_decode_frac": d.stranded_decode_gpu_s / (d.decode_gpus * span),
    }


def _pool_busy(result: RunResult, pool: str, gpus: int) -> float:
    """Busy GPU-seconds of one pool ÷ its GPUs (seconds)."""
    busy = sum(r.busy_s * r.tensor_parallel_size for r in result.replicas if r.pool == pool)
    return busy / gpus if gpus else _NAN


def _pool_sum(result: RunResult, pool: str, field: str) -> float:
    """Σ ``field`` of ReplicaStats (flops / hbm_bytes are already summed over TP GPUs) over one pool."""
    return sum(getattr(r, field) for r in result.replicas if r.pool == pool)


def _pct(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else _NAN


def transfer_frame(result: RunResult) -> pd.DataFrame:
    """Per request of a disaggregated run, its KV transfer (one row per transfer, keyed by
    ``request_id``; requests without one, e.g. one-token replies, have none): the decode
    replica it went to, KV bytes, ``kv_backpressure_ms`` (token 1 → decode slot reserved),
    ``kv_transfer_ms`` (reserved → last byte landed) and ``second_token_ms`` (token 1 →
    token 2), with the definitions of the summary columns above."""
    t = result.disagg.transfers
    handoff = np.asarray(t.handoff_s, np.float64)
    reserved = np.asarray(t.reserved_s, np.float64)
    return pd.DataFrame({
        "request_id": t.request_id,
        "decode_replica": pd.array(t.decode_replica, dtype="Int64"),   # stays whole next to
        "kv_bytes": pd.array(np.asarray(t.bytes, np.int64), dtype="Int64"),  # co-located NaN
        "kv_backpressure_ms": (reserved - handoff) * 1e3,
        "kv_transfer_ms": (np.asarray(t.arrived_s, np.float64) - reserved) * 1e3,
        "second_token_ms": (np.asarray(t.second_token_s, np.float64) - handoff) * 1e3,
    })
