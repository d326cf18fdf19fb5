"""The request trace: one column store of numpy arrays shared by every variant.

:class:`RequestTrace` holds, per request in arrival order, its arrival time,
prompt and output tokens, class, shared-prefix id, conversation parent and think
time, and parallel samples; and how the requests are sent: at their arrival times
(open loop) or by a :class:`ClosedLoop` of a fixed number of users, and how many of
the first ones are warm-up. :func:`capsim.workload.build` makes one from a
scenario's ``workload:`` section; every variant of the scenario replays it
(common random numbers across variants).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from capsim.common.schema import MAX_SECONDS

MAX_REQUESTS = 50_000_000
"""Upper bound on generated requests: a typo in ``duration_s`` must not eat all RAM."""

MAX_SPAN_S = MAX_SECONDS
"""Latest arrival, seconds (about 32 years, the longest time a scenario may give): float64
seconds there still resolve 0.12 µs, far below an engine step; at ``rate_per_s: 1e-300``
(arrivals near 1e300 s) a step added to the clock vanished and every latency read 0."""


def _frozen_column(values: np.ndarray, dtype: type, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"RequestTrace.{name} must be 1-D, got shape {arr.shape}")
    view = arr.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class ClosedLoop:
    """How a closed loop sends a trace's rows: ``users`` requests in flight.

    The first ``users`` rows are sent at t = 0; each time a request ends (finished or
    rejected) the next row is sent ``think_time_s`` later, in row order, until the rows
    run out or the clock reaches ``stop_s`` (a request due at or after it is not sent).

    Attributes:
        users: requests in flight, >= 1.
        think_time_s: constant pause between a request's end and the next send, s, >= 0.
        stop_s: nothing is sent at or after this simulated time, s (``inf``: every row).
        more: ``more(n)`` → the same trace with at least ``n`` rows, its first rows
            unchanged (a synthetic workload bounded by ``duration_s`` draws rows as the
            loop needs them); None when the rows are all there is.
    """

    users: int
    think_time_s: float = 0.0
    stop_s: float = math.inf
    more: Callable[[int], "RequestTrace"] | None = None


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
        question_id: int32, the reused question after the shared prompt
            (``shared_prefix.questions_per_template``), ``-1`` = the request's own tokens;
            two requests with the same id hold the same tokens where their questions
            overlap.
        block_ids, block_start: a replayed trace's named prompt blocks (the Mooncake
            trace's ``hash_ids``, :mod:`capsim.workload.mooncake`): row i's are
            ``block_ids[block_start[i]:block_start[i + 1]]`` (int64; ``block_start`` has
            N + 1 entries); None for a trace without them.
        closed_loop: None (open loop: each first turn arrives at ``arrival_s``) or how a
            closed loop sends the rows; then ``arrival_s`` is NaN (a row's arrival is
            known when the loop sends it) and no row has a parent.
        warmup_requests: the first K requests sent are warm-up: simulated, left out of
            every metric (``workload.warmup_request_count``).

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
    question_id: np.ndarray | None = None
    block_ids: np.ndarray | None = None
    block_start: np.ndarray | None = None
    closed_loop: ClosedLoop | None = None
    warmup_requests: int = 0

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name, fill, dtype in (("prefix_tokens", 0, np.int64), ("parent", -1, np.int32),
                                  ("think_s", 0.0, np.float64), ("n", 1, np.int32),
                                  ("question_id", -1, np.int32)):
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
            "question_id": np.int32,
        }
        for name, dtype in cols.items():
            object.__setattr__(self, name, _frozen_column(getattr(self, name), dtype, name))
        object.__setattr__(self, "class_names", tuple(self.class_names))
        n = len(self.arrival_s)
        if (self.block_start is None) != (self.block_ids is None) or (
                self.block_start is not None and len(self.block_start) != n + 1):
            raise ValueError("RequestTrace.block_ids needs block_start of N + 1 offsets")
        bad_len = [k for k in cols if len(getattr(self, k)) != n]
        if bad_len:
            raise ValueError(f"RequestTrace columns {bad_len} do not have length {n}")
        self._check_invariants()

    def _check_invariants(self) -> None:
        if self.warmup_requests < 0:
            raise ValueError("RequestTrace.warmup_requests must be >= 0")
        if len(self) == 0:
            return
        roots = self.parent < 0
        a = self.arrival_s[roots]
        if self.closed_loop is not None:
            if not (np.isnan(self.arrival_s).all() and roots.all()):
                raise ValueError("a closed loop's RequestTrace has NaN arrival_s and no parents")
        elif not (np.isfinite(a).all() and a[0] >= 0 and (np.diff(a) >= 0).all()):
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

    def head(self, n: int) -> "RequestTrace":
        """The first ``n`` rows (views of these columns), the rest of the trace unchanged."""
        if n == len(self):
            return self
        cols = {k: getattr(self, k)[:n] for k in ("arrival_s", "prompt_tokens", "output_tokens",
                                                   "class_id", "prefix_id", "prefix_tokens",
                                                   "parent", "think_s", "n",
                                                   "question_id")}
        if self.block_start is not None:
            cols["block_start"] = self.block_start[:n + 1]
        return replace(self, **cols)

    @property
    def duration_s(self) -> float:
        """Last first-turn arrival minus the first arrival, seconds (0.0 for < 2 requests;
        NaN for a closed loop, whose arrivals the simulation decides)."""
        a = self.arrival_s[self.parent < 0]
        if len(a) < 2:
            return 0.0
        return float(a[-1] - a[0])

