"""The request trace: one column store of numpy arrays shared by every variant.

:class:`RequestTrace` holds, per request in arrival order, its arrival time,
prompt and output tokens, class, shared-prefix id, conversation parent and think
time, and parallel samples. :func:`capsim.workload.build` makes one from a
scenario's ``workload:`` section; every variant of the scenario replays it
(common random numbers across variants).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_REQUESTS = 50_000_000
"""Upper bound on generated requests: a typo in ``duration_s`` must not eat all RAM."""


def _frozen_column(values: np.ndarray, dtype: type, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"RequestTrace.{name} must be 1-D, got shape {arr.shape}")
    view = arr.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """The requests of one workload, one numpy column per attribute (row = request).

    Rows are in arrival order. All arrays have shape ``(N,)`` and are
    read-only (the trace is shared by every variant of a scenario).

    Attributes:
        arrival_s: float64, arrival time in seconds; non-decreasing, first >= 0.
        prompt_tokens: int64, prompt length in tokens, >= 1.
        output_tokens: int64, tokens the request generates, >= 1.
        class_id: int32, index into ``class_names``.
        prefix_id: int32, shared system prompt (template) used, ``-1`` = none.
        class_names: name of each class, indexed by ``class_id``.
        prefix_tokens: int64, length of that shared prompt (0 = none); it is
            part of ``prompt_tokens``.
        parent: int32, row of the previous turn of the same conversation
            (always an earlier row), ``-1`` for a first turn. Such a request's
            prompt is its parent's prompt + reply + new user tokens.
        think_s: float64, for a later turn: seconds between the parent's last
            token and this request's arrival (its ``arrival_s`` is NaN: it is
            known only when the simulation gets there); 0 for first turns.
        n: int32, parallel samples per request (vLLM ``SamplingParams.n``), >= 1;
            each sample generates ``output_tokens``.

    Raises:
        ValueError: columns of different lengths or broken invariants (a bug
            in the caller, not a user error).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    class_id: np.ndarray
    prefix_id: np.ndarray
    class_names: tuple[str, ...]
    prefix_tokens: np.ndarray | None = None
    parent: np.ndarray | None = None
    think_s: np.ndarray | None = None
    n: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name, fill, dtype in (("prefix_tokens", 0, np.int64), ("parent", -1, np.int32),
                                  ("think_s", 0.0, np.float64), ("n", 1, np.int32)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.full(n, fill, dtype=dtype))
        cols = {
            "arrival_s": np.float64,
            "prompt_tokens": np.int64,
            "output_tokens": np.int64,
            "class_id": np.int32,
            "prefix_id": np.int32,
            "prefix_tokens": np.int64,
            "parent": np.int32,
            "think_s": np.float64,
            "n": np.int32,
        }
        for name, dtype in cols.items():
            object.__setattr__(self, name, _frozen_column(getattr(self, name), dtype, name))
        object.__setattr__(self, "class_names", tuple(self.class_names))
        n = len(self.arrival_s)
        bad_len = [k for k in cols if len(getattr(self, k)) != n]
        if bad_len:
            raise ValueError(f"RequestTrace columns {bad_len} do not have length {n}")
        self._check_invariants()

    def _check_invariants(self) -> None:
        if len(self) == 0:
            return
        roots = self.parent < 0
        a = self.arrival_s[roots]
        if not (np.isfinite(a).all() and a[0] >= 0 and (np.diff(a) >= 0).all()):
            raise ValueError("RequestTrace.arrival_s of first turns must be finite, >= 0 and "
                             "non-decreasing")
        if (self.parent >= np.arange(len(self))).any():
            raise ValueError("RequestTrace.parent must point to an earlier row")
        if self.prompt_tokens.min() < 1 or self.output_tokens.min() < 1:
            raise ValueError("RequestTrace token counts must be >= 1")
        if self.class_id.min() < 0 or self.class_id.max() >= len(self.class_names):
            raise ValueError("RequestTrace.class_id out of range of class_names")

    def __len__(self) -> int:
        """Number of requests N."""
        return len(self.arrival_s)

    @property
    def total_prompt_tokens(self) -> int:
        """Sum of prompt lengths, tokens."""
        return int(self.prompt_tokens.sum())

    @property
    def total_output_tokens(self) -> int:
        """Sum of output lengths, tokens."""
        return int(self.output_tokens.sum())

    @property
    def duration_s(self) -> float:
        """Last first-turn arrival minus the first arrival, seconds (0.0 for < 2 requests)."""
        a = self.arrival_s[self.parent < 0]
        if len(a) < 2:
            return 0.0
        return float(a[-1] - a[0])

