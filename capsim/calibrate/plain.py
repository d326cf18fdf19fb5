"""Read the plain measurement CSV: one measured operator per row.

Columns (a header row is required; extra columns are ignored):

==========================  ===============================================
column                      meaning
==========================  ===============================================
``operator``                ``qkv_proj``, ``o_proj``, ``gate_up_proj``,
                            ``down_proj``, ``lm_head``, ``attention_prefill``,
                            ``attention_decode``, ``elementwise``, ``all_reduce``
``tokens``                  GEMM / elementwise rows; prefill chunk length
                            per sequence; all_reduce: tokens × hidden × 2 bytes
``context``                 KV tokens already cached per sequence (attention)
``batch``                   sequences (attention); 1 otherwise
``tensor_parallel_size``    TP degree the operator was sharded for (GPUs
                            in the all_reduce)
``time_s``                  measured seconds of ONE execution on one GPU
                            (one layer for per-layer operators)
==========================  ===============================================

The shapes come from ``--model``. Example rows::

    operator,tokens,context,batch,tensor_parallel_size,time_s
    gate_up_proj,512,0,1,1,0.000516
    attention_decode,1,2048,32,1,0.000210

Public API:
    read_plain_csv(path, model) -> Observations
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from capsim.calibrate.observations import OPERATOR_CLASS, Observations, from_model_rows
from capsim.common.errors import ScenarioError
from capsim.profiles.models import ModelShape

COLUMNS = ("operator", "tokens", "context", "batch", "tensor_parallel_size", "time_s")


def read_plain_csv(path: Path, model: ModelShape) -> Observations:
    """Observations from a plain CSV (see the module docstring for its columns).

    Raises:
        ScenarioError: unreadable file, a missing column, an unknown operator,
            a non-numeric / negative count, a time <= 0, or a TP degree that
            does not shard ``model`` — naming the file, line and column.
    """
    path = Path(path)
    try:
        frame = pd.read_csv(path, dtype=str, skip_blank_lines=False).fillna("")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read CSV: {exc}", file=str(path)) from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ScenarioError(f"missing column(s) {', '.join(missing)}; expected "
                            f"{', '.join(COLUMNS)}", file=str(path))
    frame = frame[(frame[list(COLUMNS)] != "").any(axis=1)]
    ops = frame.operator.str.strip().to_numpy()
    bad = [i for i, op in enumerate(ops) if op not in OPERATOR_CLASS]
    if bad:
        raise ScenarioError(_where(frame, bad[0], "operator") + f"unknown operator "
                            f"{ops[bad[0]]!r}; valid: {', '.join(OPERATOR_CLASS)}", file=str(path))
    counts = {c: _numbers(frame, c, path, minimum=0, integer=True)
              for c in ("tokens", "context", "batch", "tensor_parallel_size")}
    time_s = _numbers(frame, "time_s", path, minimum=0, integer=False, strict=True)
    try:
        return from_model_rows(model, ops, counts["tokens"], counts["context"], counts["batch"],
                               counts["tensor_parallel_size"].astype(int), time_s,
                               group=path.stem, source=str(path))
    except ScenarioError as exc:
        raise exc.with_context(file=str(path), path="tensor_parallel_size") from None


def _where(frame: pd.DataFrame, i: int, column: str) -> str:
    return f"line {int(frame.index[i]) + 2}, column {column}: "


def _numbers(frame: pd.DataFrame, column: str, path: Path, *, minimum: float, integer: bool,
             strict: bool = False) -> np.ndarray:
    values = pd.to_numeric(frame[column].str.strip(), errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values <= minimum if strict else values < minimum)
    if integer:
        bad |= values != np.round(values)
    if bad.any():
        i = int(np.argmax(bad))
        need = "a number > 0" if strict else ("a whole number >= 0" if integer else "a number")
        raise ScenarioError(_where(frame, i, column) + f"expected {need}, got "
                            f"{frame[column].iloc[i]!r}", file=str(path))
    if column in ("batch", "tensor_parallel_size") and (values < 1).any():
        i = int(np.argmax(values < 1))
        raise ScenarioError(_where(frame, i, column) + f"expected >= 1, got "
                            f"{frame[column].iloc[i]!r}", file=str(path))
    return values
