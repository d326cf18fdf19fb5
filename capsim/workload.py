"""Workload generation: arrival processes, length distributions, trace replay.

:func:`build` turns a validated :class:`~capsim.scenario.workload.WorkloadConfig`
into one :class:`RequestTrace` — a column store of numpy arrays that every
variant of a scenario replays (common random numbers across variants).

Randomness. ``build(workload, seed, ...)`` derives independent child streams
from ``np.random.SeedSequence(seed)`` (the seed sequence behind
``np.random.default_rng(seed)``) with ``SeedSequence.spawn``:

- stream 0: inter-arrival times,
- stream 1: class choice of each request,
- stream 2: token lengths, split again into one stream per class and, inside
  it, one for prompt lengths and one for output lengths.

So editing class ``i``'s output-length distribution changes neither the
arrival times, nor the class of any request, nor the lengths of other classes
or of class ``i``'s prompts. Everything is vectorised numpy (no per-request
Python loop): a million requests take a few tens of milliseconds.

Trace files. CSVs are read with pandas as text, then converted column by
column so that a bad cell is reported with its **line number in the file**
(1-based, the header is line 1; blank lines are skipped but counted) and its
value. Line numbers assume no quoted field spans several lines, which holds
for numeric traces.

All user-caused problems raise :class:`~capsim.common.errors.ScenarioError` with
``path`` set to the YAML field (``workload.trace.path``,
``workload.classes.0.prompt_tokens.path``) and ``file`` set to the CSV.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.scenario.workload import (
    ArrivalConfig,
    EmpiricalDist,
    FixedDist,
    LognormalDist,
    NormalDist,
    TraceConfig,
    UniformDist,
    WorkloadConfig,
)
from capsim.common.errors import ScenarioError

log = logging.getLogger(__name__)

MAX_REQUESTS = 50_000_000
"""Upper bound on generated requests: a typo in ``duration_s`` must not eat all RAM."""


# --------------------------------------------------------------------------
# The trace
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def build(workload: WorkloadConfig, seed: int, base_dir: Path) -> RequestTrace:
    """Generate (or replay) the requests described by ``workload``.

    Args:
        workload: the validated ``workload:`` section.
        seed: non-negative integer; same seed and config give identical arrays.
        base_dir: directory of the scenario file; relative CSV paths
            (``trace.path``, ``empirical.path``) resolve against it.

    Returns:
        A :class:`RequestTrace` in arrival order. Synthetic workloads have
        ``class_names`` = the configured class names; a replayed trace has one
        class, ``trace.class_name``.

    Raises:
        ScenarioError: unreadable or malformed CSV (with file, line number and
            value), a workload that yields no request, or more than
            :data:`MAX_REQUESTS` requests.
    """
    base_dir = Path(base_dir)
    if workload.trace is not None:
        return load_trace(
            workload.trace,
            base_dir,
            num_requests=workload.num_requests,
            duration_s=workload.duration_s,
        )

    arrival_ss, class_ss, length_ss = np.random.SeedSequence(seed).spawn(3)
    arrival_s = sample_arrivals(
        workload.arrival,
        np.random.default_rng(arrival_ss),
        num_requests=workload.num_requests,
        duration_s=workload.duration_s,
    )
    n = len(arrival_s)
    if n == 0:
        raise ScenarioError(
            f"no request arrives before duration_s={workload.duration_s:g} "
            f"at rate_per_s={workload.arrival.rate_per_s:g}; increase duration_s or the rate",
            path="workload.duration_s",
        )

    classes = workload.classes
    weights = np.array([c.weight for c in classes], dtype=np.float64)
    class_id = choose_classes(weights, n, np.random.default_rng(class_ss))

    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    prefix_id = np.full(n, -1, dtype=np.int32)
    prefix_tokens = np.zeros(n, dtype=np.int64)
    turns: list[_Turns] = []
    for i, (cls, cls_ss) in enumerate(zip(classes, length_ss.spawn(len(classes)))):
        # Streams 0/1 are the original ones, so adding prefixes or turns never
        # changes the first turns' lengths (common random numbers).
        prompt_ss, output_ss, prefix_ss, conv_ss = cls_ss.spawn(4)
        rows = np.flatnonzero(class_id == i)
        where = f"workload.classes.{i}"
        prompt_rng = np.random.default_rng(prompt_ss)
        output_rng = np.random.default_rng(output_ss)
        prompt[rows] = sample_lengths(cls.prompt_tokens, len(rows), prompt_rng,
                                      base_dir=base_dir, yaml_path=f"{where}.prompt_tokens")
        output[rows] = sample_lengths(cls.output_tokens, len(rows), output_rng,
                                      base_dir=base_dir, yaml_path=f"{where}.output_tokens")
        if cls.shared_prefix is not None:
            _apply_prefix(cls.shared_prefix, i, rows, np.random.default_rng(prefix_ss),
                          prompt, prefix_id, prefix_tokens)
        if cls.conversation is not None:
            turns.append(_Turns(cls, i, rows, np.random.default_rng(conv_ss), prompt_rng,
                                output_rng, base_dir, where))

    samples = np.array([c.n for c in classes], dtype=np.int32)[class_id]
    trace = dict(arrival_s=arrival_s, prompt_tokens=prompt, output_tokens=output,
                 class_id=class_id, prefix_id=prefix_id, prefix_tokens=prefix_tokens,
                 parent=np.full(n, -1, dtype=np.int32), think_s=np.zeros(n), n=samples)
    for t in turns:
        trace = t.append_to(trace)
    return RequestTrace(class_names=tuple(c.name for c in classes), **trace)


def _apply_prefix(spec, class_index: int, rows: np.ndarray, rng: np.random.Generator,
                  prompt: np.ndarray, prefix_id: np.ndarray, prefix_tokens: np.ndarray) -> None:
    """Prepend a system prompt of ``spec.tokens`` to every request of the class;
    a ``fraction`` of them share one of the templates, the rest get a private one
    (say, a timestamp at the front), so sharing changes hits, not prompt lengths
    (seed 000's prefix-caching rows: 17,000 prompt tokens in every row).

    Template ids are ``class_index * 1_000_000 + template`` so classes never share.
    """
    uses = rng.random(len(rows)) < spec.fraction
    template = rng.integers(spec.num_templates, size=len(rows))
    chosen = rows[uses]
    prefix_id[chosen] = class_index * 1_000_000 + template[uses]
    prefix_tokens[chosen] = spec.tokens
    prompt[rows] += spec.tokens


class _Turns:
    """Later turns of a class's conversations, appended as rows after all first turns."""

    def __init__(self, cls, class_index, rows, rng, prompt_rng, output_rng, base_dir, where):
        self.cls, self.class_index, self.rows = cls, class_index, rows
        self.rng, self.prompt_rng, self.output_rng = rng, prompt_rng, output_rng
        self.base_dir, self.where = base_dir, where

    def _lengths(self, dist, rng, k, what):
        return sample_lengths(dist, k, rng, base_dir=self.base_dir,
                              yaml_path=f"{self.where}.{what}")

    def append_to(self, trace: dict) -> dict:
        conv = self.cls.conversation
        left = self._lengths(conv.turns, self.rng, len(self.rows), "conversation.turns") - 1
        parents = self.rows[left > 0]
        left = left[left > 0]
        cols = {k: [v] for k, v in trace.items()}
        total = len(trace["arrival_s"])
        prompt_of = trace["prompt_tokens"].copy()
        output_of = trace["output_tokens"].copy()
        while len(parents):
            k = len(parents)
            new_user = self._lengths(self.cls.prompt_tokens, self.prompt_rng, k, "prompt_tokens")
            out = self._lengths(self.cls.output_tokens, self.output_rng, k, "output_tokens")
            prompt = prompt_of[parents] + output_of[parents] + new_user
            idx = np.arange(total, total + k)
            new = dict(arrival_s=np.full(k, np.nan), prompt_tokens=prompt, output_tokens=out,
                       class_id=np.full(k, self.class_index, dtype=np.int32),
                       prefix_id=_take(cols["prefix_id"], parents),
                       prefix_tokens=_take(cols["prefix_tokens"], parents),
                       parent=parents.astype(np.int32),
                       think_s=self.rng.exponential(conv.think_time_s, k) if conv.think_time_s
                       else np.zeros(k),
                       n=np.full(k, self.cls.n, dtype=np.int32))
            for key, value in new.items():
                cols[key].append(value)
            prompt_of = np.concatenate([prompt_of, prompt])
            output_of = np.concatenate([output_of, out])
            total += k
            left = left - 1
            parents, left = idx[left > 0], left[left > 0]
        return {k: np.concatenate(v) for k, v in cols.items()}


def _take(chunks: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
    return np.concatenate(chunks)[rows]


# --------------------------------------------------------------------------
# Arrivals
# --------------------------------------------------------------------------


def _check_count(n: float, yaml_path: str) -> None:
    if n > MAX_REQUESTS:
        raise ScenarioError(
            f"workload would generate about {n:.3g} requests, more than the limit of "
            f"{MAX_REQUESTS:,}; lower num_requests, duration_s or rate_per_s",
            path=yaml_path,
        )


def _interarrivals(arrival: ArrivalConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` inter-arrival times, seconds (poisson or gamma)."""
    rate = arrival.rate_per_s
    if arrival.process == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    # Gamma(k, theta): mean k*theta, variance k*theta**2, so CV = 1/sqrt(k).
    # k = 1/cv**2 and theta = 1/(rate*k) give mean 1/rate and CV = cv; this
    # is vLLM's benchmark_serving "burstiness" (shape = burstiness = 1/cv**2).
    k = 1.0 / arrival.cv**2
    return rng.gamma(shape=k, scale=1.0 / (rate * k), size=n)


def sample_arrivals(
    arrival: ArrivalConfig,
    rng: np.random.Generator,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Arrival times of a synthetic workload, seconds, shape ``(N,)``, non-decreasing.

    Exactly one of ``num_requests`` (N = num_requests) or ``duration_s``
    (every arrival in ``[0, duration_s)``, none at or beyond it) must be given.

    - poisson: i.i.d. exponential gaps with mean ``1/rate_per_s``; the first
      request arrives after the first gap (not at 0).
    - gamma: i.i.d. Gamma gaps, shape ``k = 1/cv**2``, scale ``1/(rate_per_s*k)``
      (mean ``1/rate_per_s``, coefficient of variation ``cv``); first request
      after the first gap.
    - constant: ``t_i = i / rate_per_s``, starting at 0.

    With ``duration_s`` the gaps are drawn in chunks from the same stream, so
    the result is a prefix of the ``num_requests`` sequence for the same rng
    (``np.cumsum`` adds sequentially, so even the floats agree).

    Raises:
        ScenarioError: more than :data:`MAX_REQUESTS` requests would be generated.
        ValueError: both or neither of ``num_requests`` / ``duration_s``.
    """
    if (num_requests is None) == (duration_s is None):
        raise ValueError("give exactly one of num_requests or duration_s")
    rate = arrival.rate_per_s
    if num_requests is not None:
        _check_count(num_requests, "workload.num_requests")
        if arrival.process == "constant":
            return np.arange(num_requests, dtype=np.float64) / rate
        return np.cumsum(_interarrivals(arrival, rng, num_requests))

    expected = rate * duration_s
    _check_count(expected, "workload.duration_s")
    if arrival.process == "constant":
        t = np.arange(int(math.ceil(expected)) + 1, dtype=np.float64) / rate
        return t[t < duration_s]

    # Draw a few standard deviations more gaps than expected; top up if short.
    cv = arrival.cv if arrival.cv is not None else 1.0
    chunk = int(expected + 6.0 * cv * math.sqrt(expected) + 16)
    gaps = [_interarrivals(arrival, rng, chunk)]
    while True:
        t = np.cumsum(np.concatenate(gaps)) if len(gaps) > 1 else np.cumsum(gaps[0])
        if t[-1] >= duration_s:
            break
        gaps.append(_interarrivals(arrival, rng, max(chunk // 4, 16)))
    return t[: np.searchsorted(t, duration_s, side="left")]


def choose_classes(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Class index of each of ``n`` requests, i.i.d. with probability ∝ ``weights``.

    Inverse-CDF sampling: one uniform per request, ``searchsorted`` into the
    normalised cumulative weights. Returns int32, shape ``(n,)``.
    """
    cdf = np.cumsum(np.asarray(weights, dtype=np.float64))
    cdf /= cdf[-1]
    cdf[-1] = 1.0  # uniforms are < 1, so every draw lands on a valid class
    return np.searchsorted(cdf, rng.random(n), side="right").astype(np.int32)


# --------------------------------------------------------------------------
# Lengths
# --------------------------------------------------------------------------


def _round_clip(x: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
    """Round to the nearest integer (half to even) and clip to ``[lo, hi]``, int64."""
    x = np.clip(x, lo, hi if hi is not None else np.inf)
    return np.rint(x).astype(np.int64)


def sample_lengths(
    dist,
    n: int,
    rng: np.random.Generator,
    *,
    base_dir: Path = Path("."),
    yaml_path: str = "",
) -> np.ndarray:
    """``n`` token lengths from ``dist``, int64, shape ``(n,)``, each in ``[min, max]``.

    - fixed: ``value`` for every request.
    - uniform: integers in ``[min, max]``, both inclusive.
    - normal: ``Normal(mean, std)``, rounded, clipped to ``[min, max]``.
    - lognormal: ``exp(Normal(mu, sigma))`` with ``mu = ln(mean) - sigma**2/2``,
      so that the (unclipped) mean is ``mean`` tokens, because
      ``E[exp(N(mu, s^2))] = exp(mu + s^2/2)``; rounded, clipped.
    - empirical: draws with replacement from the CSV column ``column`` at
      ``path`` (relative to ``base_dir``); rounded, clipped to
      ``[min, max]`` (max unbounded if not set).

    Args:
        yaml_path: YAML path of ``dist`` for error messages.

    Raises:
        ScenarioError: empirical file missing, column missing, a non-numeric
            cell (with its line number) or no values.
    """
    if isinstance(dist, FixedDist):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformDist):
        return rng.integers(dist.min, dist.max, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, NormalDist):
        return _round_clip(rng.normal(dist.mean, dist.std, size=n), dist.min, dist.max)
    if isinstance(dist, LognormalDist):
        mu = math.log(dist.mean) - dist.sigma**2 / 2.0
        return _round_clip(rng.lognormal(mu, dist.sigma, size=n), dist.min, dist.max)
    if isinstance(dist, EmpiricalDist):
        values = load_empirical(dist, base_dir, yaml_path=f"{yaml_path}.path")
        return _round_clip(values[rng.integers(0, len(values), size=n)], dist.min, dist.max)
    raise TypeError(f"unknown length distribution {type(dist).__name__}")


def load_empirical(dist: EmpiricalDist, base_dir: Path, *, yaml_path: str = "") -> np.ndarray:
    """The numeric values of column ``dist.column`` of ``dist.path``, float64, shape ``(M,)``.

    Raises:
        ScenarioError: file not found, column missing, non-numeric cell
            (line number and value), or no rows.
    """
    path = _resolve(dist.path, base_dir)
    table = _read_csv(path, [dist.column], what="empirical length file", yaml_path=yaml_path)
    return _parse_numbers(table, dist.column, path, yaml_path)


# --------------------------------------------------------------------------
# CSV reading with line numbers
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    """CSV cells as strings plus the 1-based file line of each row."""

    frame: pd.DataFrame
    lines: np.ndarray


def _resolve(path: str, base_dir: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(os.path.normpath(Path(base_dir) / p))


def _read_csv(path: Path, needed: list[str], *, what: str, yaml_path: str, hint: str = "") -> _Table:
    """Read ``path`` as text cells; check that the ``needed`` columns exist."""
    if not path.is_file():
        kind = "is a directory" if path.is_dir() else "not found"
        raise ScenarioError(f"{what} {kind}: {path}", path=yaml_path)
    try:
        frame = pd.read_csv(
            path,
            dtype=str,
            na_filter=False,
            keep_default_na=False,
            skip_blank_lines=False,
            skipinitialspace=True,
            encoding="utf-8-sig",
        )
    except pd.errors.EmptyDataError:
        raise ScenarioError("file is empty (expected a CSV header line)", file=str(path), path=yaml_path) from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        msg = " ".join(str(exc).split())
        raise ScenarioError(f"not a readable CSV file: {msg}", file=str(path), path=yaml_path) from None

    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ScenarioError(
            f"missing column(s) {', '.join(repr(c) for c in missing)}; expected "
            f"{', '.join(repr(c) for c in needed)}; found {', '.join(repr(c) for c in frame.columns)}"
            f"{hint}",
            file=str(path),
            path=yaml_path,
        )
    # Row i of the frame is line i + 2 (header = line 1); blank lines were kept
    # as all-empty rows so this holds, and are dropped now.
    lines = np.arange(2, len(frame) + 2, dtype=np.int64)
    blank = (frame == "").all(axis=1).to_numpy()
    if blank.any():
        frame = frame.loc[~blank].reset_index(drop=True)
        lines = lines[~blank]
    if len(frame) == 0:
        raise ScenarioError("no data rows after the header", file=str(path), path=yaml_path)
    return _Table(frame, lines)


def _bad_cell(table: _Table, column: str, mask: np.ndarray, problem: str, path: Path, yaml_path: str):
    i = int(np.argmax(mask))
    value = table.frame[column].iloc[i]
    return ScenarioError(
        f"line {table.lines[i]}: column {column!r} {problem}, got {value!r}",
        file=str(path),
        path=yaml_path,
    )


def _parse_numbers(table: _Table, column: str, path: Path, yaml_path: str) -> np.ndarray:
    """Column as finite float64; error names the first non-numeric cell."""
    values = pd.to_numeric(table.frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise _bad_cell(table, column, bad, "must be a number", path, yaml_path)
    return values


def _parse_counts(table: _Table, column: str, path: Path, yaml_path: str) -> np.ndarray:
    """Column as whole token counts, int64 (any sign; callers check the range)."""
    values = pd.to_numeric(table.frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        raise _bad_cell(table, column, bad, "must be a whole number of tokens", path, yaml_path)
    return values.astype(np.int64)


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_arrivals(table: _Table, column: str, path: Path, yaml_path: str) -> np.ndarray:
    """Arrival column → seconds since the earliest row, float64.

    The first row decides the kind: a number means seconds; anything else is
    parsed as an ISO-8601 timestamp (``2023-11-16 18:15:46.6805900``; up to
    nanosecond precision; offsets are converted to UTC, naive times taken as UTC).
    """
    cells = table.frame[column]
    if _looks_numeric(cells.iloc[0]):
        seconds = _parse_numbers(table, column, path, yaml_path)
        return seconds - seconds.min()
    try:
        stamps = pd.to_datetime(cells, format="ISO8601", utc=True, errors="coerce")
    except (ValueError, TypeError, OverflowError) as exc:
        msg = " ".join(str(exc).split())
        raise ScenarioError(
            f"column {column!r}: cannot parse timestamps: {msg}", file=str(path), path=yaml_path
        ) from None
    bad = stamps.isna().to_numpy()
    if bad.any():
        raise _bad_cell(
            table, column, bad,
            "must be a timestamp like '2023-11-16 18:15:46.6805900' (as in the first data row)",
            path, yaml_path,
        )
    return (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)


# --------------------------------------------------------------------------
# Trace replay
# --------------------------------------------------------------------------


def load_trace(
    trace: TraceConfig,
    base_dir: Path,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> RequestTrace:
    """Replay a CSV request trace as a :class:`RequestTrace` with one class.

    Columns come from ``trace.resolved_columns`` (Azure 2023 by default:
    TIMESTAMP, ContextTokens, GeneratedTokens). The arrival column holds
    seconds (numbers, e.g. Vidur's ``splitwise_*.csv`` ``arrived_at``) or
    timestamps; ``arrival_s`` = (time − earliest time) / ``rate_scale``, so the
    first request arrives at 0 and ``rate_scale: 2`` halves every gap. Rows are
    stably sorted by arrival if the file is not in order. Then ``duration_s``
    keeps rows with ``arrival_s < duration_s``; ``num_requests`` keeps the
    first N rows.

    Token counts: prompt tokens must be >= 1. Output tokens must be >= 0, and
    **0 is replaced by 1** (a request always yields at least one token — the
    first token closes its prefill); the number of such rows is logged at
    WARNING level. (The Azure 2023 conv/code traces have no zero rows.)

    Raises:
        ScenarioError: with ``path='workload.trace.path'`` and ``file`` = the
            CSV — "trace file not found: <path>", missing columns (lists the
            expected and the found ones), a non-numeric / fractional / too small
            token count or an unparsable timestamp (1-based line number, header
            = line 1, and the bad value), ``num_requests`` larger than the
            trace, or no row before ``duration_s``.
    """
    yaml_path = "workload.trace.path"
    cols = trace.resolved_columns
    path = _resolve(trace.path, base_dir)
    needed = [cols.arrival, cols.prompt_tokens, cols.output_tokens]
    hint = " (map other names with format: columns and columns: {arrival, prompt_tokens, output_tokens})"
    table = _read_csv(path, needed, what="trace file", yaml_path=yaml_path, hint=hint)

    arrival_s = _parse_arrivals(table, cols.arrival, path, yaml_path)
    prompt = _parse_counts(table, cols.prompt_tokens, path, yaml_path)
    output = _parse_counts(table, cols.output_tokens, path, yaml_path)
    if (prompt < 1).any():
        raise _bad_cell(table, cols.prompt_tokens, prompt < 1, "must be >= 1 prompt token", path, yaml_path)
    if (output < 0).any():
        raise _bad_cell(table, cols.output_tokens, output < 0, "must be >= 0 output tokens", path, yaml_path)
    zero_out = output == 0
    if zero_out.any():
        log.warning("%s: %d rows with 0 output tokens replayed as 1 token", path, int(zero_out.sum()))
        output = np.where(zero_out, 1, output)

    arrival_s = arrival_s / trace.rate_scale
    if (np.diff(arrival_s) < 0).any():
        order = np.argsort(arrival_s, kind="stable")
        arrival_s, prompt, output = arrival_s[order], prompt[order], output[order]

    if duration_s is not None:
        keep = int(np.searchsorted(arrival_s, duration_s, side="left"))
        if keep == 0:
            raise ScenarioError(
                f"no trace row arrives before duration_s={duration_s:g}",
                file=str(path), path="workload.duration_s",
            )
        arrival_s, prompt, output = arrival_s[:keep], prompt[:keep], output[:keep]
    if num_requests is not None:
        if num_requests > len(arrival_s):
            raise ScenarioError(
                f"num_requests={num_requests} but the trace has only {len(arrival_s)} rows",
                file=str(path), path="workload.num_requests",
            )
        arrival_s, prompt, output = (
            arrival_s[:num_requests], prompt[:num_requests], output[:num_requests]
        )

    n = len(arrival_s)
    return RequestTrace(
        arrival_s=arrival_s,
        prompt_tokens=prompt,
        output_tokens=output,
        class_id=np.zeros(n, dtype=np.int32),
        prefix_id=np.full(n, -1, dtype=np.int32),
        class_names=(trace.class_name,),
    )
