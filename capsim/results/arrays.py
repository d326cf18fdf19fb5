"""Numpy columns as pydantic fields: the result model's per-request and per-run tables.

A column is a 1-D ``np.ndarray``. Validation accepts a list, a tuple or an
array (an array of the right kind is kept as it is, no copy); serialisation
writes a plain list, so ``model_dump_json`` / ``model_validate_json`` round-trip
(NaN and infinities as JSON constants, the models' ``ser_json_inf_nan``).
:class:`ColumnModel` compares its columns by value (NaN equal to NaN), so two
results can still be compared with ``==``.

Column kinds (dtype after validating a list):

- :data:`FloatColumn` — float64 (seconds, bytes);
- :data:`IntColumn` — any integer dtype kept, lists become int64 (ids, tokens,
  counts; the simulator hands over narrower arrays where values are small,
  e.g. ITL counts as uint32, class ids as uint8);
- :data:`StrColumn` — fixed-width unicode (short labels such as a status);
- :data:`TextColumn` — object array of Python ``str`` (free text that is
  mostly empty: one shared ``""`` costs a pointer per row).

Add integer columns up with ``.sum()`` (numpy widens the accumulator): Python's
``sum()`` keeps a narrow column's scalar type, which can wrap around.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable

import numpy as np
from pydantic import BaseModel, PlainSerializer, PlainValidator, WithJsonSchema


def _to_list(arr: Any) -> list:
    return arr.tolist() if isinstance(arr, np.ndarray) else list(arr)


def _one_d(arr: np.ndarray) -> np.ndarray:
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-D column, got shape {arr.shape}")
    return arr


def _floats(value: Any) -> np.ndarray:
    return _one_d(np.asarray(value, dtype=np.float64))


def _ints(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        return _one_d(value)
    arr = np.asarray(value)
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"expected integers, got {arr.dtype}")
    return _one_d(arr.astype(np.int64, copy=False))


def _strs(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype.kind == "U":
        return _one_d(value)
    arr = np.asarray(value, dtype=np.str_)
    return _one_d(arr)


def _texts(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype == object:
        return _one_d(value)
    arr = np.empty(len(value), dtype=object)
    arr[:] = [str(v) for v in value]
    return arr


def _column(validate: Callable[[Any], np.ndarray], item: str) -> Any:
    return Annotated[np.ndarray, PlainValidator(validate),
                     PlainSerializer(_to_list, return_type=list),
                     WithJsonSchema({"type": "array", "items": {"type": item}})]


FloatColumn = _column(_floats, "number")
IntColumn = _column(_ints, "integer")
StrColumn = _column(_strs, "string")
TextColumn = _column(_texts, "string")


def empty_ints() -> np.ndarray:
    """A zero-length int64 column (default factory)."""
    return np.empty(0, dtype=np.int64)


def same_values(a: Any, b: Any) -> bool:
    """True if two columns (arrays or lists) hold equal values, NaN equal to NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


class ColumnModel(BaseModel):
    """Mixin: ``==`` compares every field, columns by value (:func:`same_values`)."""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in type(self).model_fields:
            x, y = getattr(self, name), getattr(other, name)
            if isinstance(x, (np.ndarray, list)) or isinstance(y, (np.ndarray, list)):
                if not same_values(x, y):
                    return False
            elif x != y:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]
