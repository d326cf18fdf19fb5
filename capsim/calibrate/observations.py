"""Measured operator timings as one table, whatever file they came from.

Every reader (Vidur CSVs, the plain CSV, ...) turns its rows into an
:class:`Observations` table: one row per measured kernel (or group of
kernels) with the work the roofline prices — FLOPs and HBM bytes per GPU —
and the measured time. The fitter and the error figures only see this table.

Columns (a pandas DataFrame, one row per measurement):

- ``op_class``: ``gemm``, ``attention_prefill``, ``attention_decode``,
  ``elementwise`` or ``all_reduce`` (:data:`OP_CLASSES`).
- ``operator``: finer name (``qkv_proj``, ``mlp_up_proj``, ...), for the report.
- ``flops``: floating-point operations per GPU.
- ``bytes``: HBM bytes per GPU; for ``all_reduce`` the message size.
- ``tokens``: the GEMM's row count (tokens in the step); new tokens otherwise.
- ``context``: KV tokens already cached per sequence (attention), else 0.
- ``batch``: sequences (attention), else 1.
- ``keys_per_query``: ``⌊Σ query-key pairs ÷ new tokens⌋`` (attention_prefill), else 0.
- ``kernels``: how many launch times the measurement contains (layers).
- ``workers``: GPUs in the collective (``all_reduce``), else the TP degree.
- ``time_s``: measured seconds (> 0).
- ``group``: what a held-out split is made on (model name, file).
- ``source``: the file the row came from.

Public API:
    OP_CLASSES, COLUMNS, Observations, from_model_rows
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from capsim.profiles.models import ModelShape
from capsim.cost.operators import (
    attention_work,
    attn_pairs,
    check_tensor_parallel,
    elementwise_bytes_per_token,
    layer_matmuls,
    lm_head,
)

#: The operator classes whose efficiencies capsim fits, in report order.
OP_CLASSES = ("gemm", "attention_prefill", "attention_decode", "elementwise", "all_reduce")

COLUMNS = ("op_class", "operator", "flops", "bytes", "tokens", "context", "batch",
           "keys_per_query", "kernels", "workers", "time_s", "group", "source")

#: Operators of the plain CSV / model-based rows, and the class each belongs to.
OPERATOR_CLASS = {
    "qkv_proj": "gemm", "o_proj": "gemm", "gate_up_proj": "gemm", "down_proj": "gemm",
    "lm_head": "gemm", "attention_prefill": "attention_prefill",
    "attention_decode": "attention_decode", "elementwise": "elementwise",
    "all_reduce": "all_reduce",
}

Observations = pd.DataFrame
"""A table with :data:`COLUMNS` (type alias: a plain DataFrame)."""


def empty() -> Observations:
    """An observation table with no rows."""
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("op_class", "operator", "group",
                                                              "source") else float)
                         for c in COLUMNS})


def concat(tables: Iterable[Observations]) -> Observations:
    """Stack observation tables (an empty table if there are none)."""
    tables = [t for t in tables if len(t)]
    return pd.concat(tables, ignore_index=True) if tables else empty()


def one_layer(model: ModelShape) -> ModelShape:
    """The same shape with one layer: measurements are per layer."""
    return model.model_copy(update={"num_hidden_layers": 1})


def from_model_rows(model: ModelShape, operator: np.ndarray, tokens: np.ndarray,
                    context: np.ndarray, batch: np.ndarray, tp: np.ndarray,
                    time_s: np.ndarray, *, group: str, source: str,
                    weight_bytes: int = 2, kv_cache_dtype_bytes: int = 2) -> Observations:
    """Observations for per-layer measurements of ``model``'s operators.

    Args:
        model: the shape measured (its layer count is ignored: rows are one layer).
        operator: names from :data:`OPERATOR_CLASS`, shape (N,).
        tokens, context, batch, tp, time_s: per-row integers / seconds, shape (N,).
            GEMMs and elementwise: ``tokens`` rows. attention_prefill: ``batch``
            sequences each computing a chunk of ``tokens`` on ``context`` cached
            tokens. attention_decode: ``batch`` sequences each decoding one token
            over ``context`` tokens. all_reduce: ``tokens × hidden × 2`` bytes
            over ``tp`` GPUs.
        group, source: copied into every row.

    Raises:
        KeyError: an operator name not in :data:`OPERATOR_CLASS` (callers
            validate names first and raise ScenarioError).
        ScenarioError: ``tp`` does not shard the model's heads.
    """
    layer = one_layer(model)
    frame = pd.DataFrame({"operator": np.asarray(operator, dtype=object),
                          "tokens": np.asarray(tokens, dtype=float),
                          "context": np.asarray(context, dtype=float),
                          "batch": np.asarray(batch, dtype=float),
                          "workers": np.asarray(tp, dtype=int),
                          "time_s": np.asarray(time_s, dtype=float)})
    parts = []
    for (op, t), rows in frame.groupby(["operator", "workers"], sort=False):
        if op != "all_reduce":
            check_tensor_parallel(layer, int(t))
        n, p = rows.tokens.to_numpy(), rows.context.to_numpy()
        flops, nbytes, new = _work(layer, op, int(t), n, p, rows.batch.to_numpy(),
                                   weight_bytes, kv_cache_dtype_bytes)
        keys = np.floor(attn_pairs(n, p) / np.maximum(n, 1)) if op == "attention_prefill" else 0.0
        parts.append(rows.assign(op_class=OPERATOR_CLASS[op], flops=flops, bytes=nbytes,
                                 tokens=new, keys_per_query=keys, kernels=1.0, group=group,
                                 source=source))
    return concat(part[list(COLUMNS)] for part in parts)


def _work(layer: ModelShape, op: str, tp: int, n: np.ndarray, p: np.ndarray, b: np.ndarray,
          weight_bytes: int, kv_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flops, bytes, new tokens) of one operator of one layer per GPU, over arrays of rows."""
    if op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"):
        mm = (lm_head(layer, tp, weight_bytes) if op == "lm_head" else
              {m.name: m for m in layer_matmuls(layer, tp, weight_bytes)}[op])
        return mm.flops_per_row * n, mm.weight_bytes + mm.act_bytes_per_row * n, n
    if op == "elementwise":
        return 0.0 * n, elementwise_bytes_per_token(layer, tp) * n, n
    if op == "all_reduce":
        return 0.0 * n, n * layer.hidden_size * 2.0, n
    work = attention_work(layer, tp, kv_bytes)
    if op == "attention_prefill":
        pairs, kv_read, new = b * attn_pairs(n, p), b * (p + n), b * n
    else:
        pairs, kv_read, new = b * p, b * p, b
    return (work.flops_per_pair * pairs,
            work.kv_bytes_per_token * kv_read + work.new_bytes_per_token * new, new)
