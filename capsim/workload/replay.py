"""Trace replay and empirical length files: CSVs read into numpy columns.

CSVs are read with pandas as text, then converted column by column so that a
bad cell is reported with its **line number in the file** (1-based, the header
is line 1; blank lines are skipped but counted) and its value. Line numbers
assume no quoted field spans several lines, which holds for numeric traces.

All user-caused problems raise :class:`~capsim.common.errors.ScenarioError` with
``path`` set to the YAML field (``workload.trace.path``,
``workload.classes.0.prompt_tokens.path``) and ``file`` set to the CSV.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.common.schema import MAX_TOKENS
from capsim.scenario.paths import scenario_relative
from capsim.scenario.workload import EmpiricalDist, TraceConfig
from capsim.workload.mooncake import read_mooncake
from capsim.workload.rate import schedule_pieces, warp
from capsim.workload.trace import MAX_SPAN_S, RequestTrace

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: (file, kind) already warned about in this process: a sweep or a sizing search reads
#: one trace many times (once per rate), the user needs to hear it once.
_WARNED: set[tuple[str, str]] = set()


def _warn_once(path: Path, kind: str, message: str) -> None:
    """Log ``message`` at WARNING (the CLI prints it as ``warning: …``), once per file and kind."""
    if (str(path), kind) not in _WARNED:
        _WARNED.add((str(path), kind))
        log.warning(message)

def load_empirical(dist: EmpiricalDist, base_dir: Path, *, yaml_path: str = "") -> np.ndarray:
    """The numeric values of column ``dist.column`` of ``dist.path``, float64, shape ``(M,)``.

    Raises:
        ScenarioError: file not found, column missing, non-numeric cell or one above
            :data:`~capsim.common.schema.MAX_TOKENS` (line number and value), or no rows.
    """
    path = _resolve(dist.path, base_dir)
    table = _read_csv(path, [dist.column], what="empirical length file", yaml_path=yaml_path,
                      written=dist.path, base_dir=base_dir)
    values = _parse_numbers(table, dist.column, path, yaml_path)
    big = values > MAX_TOKENS                    # rounded to int64 when sampled
    if big.any():
        raise _bad_cell(table, dist.column, big, f"must be at most {MAX_TOKENS:,} tokens", path,
                        yaml_path)
    return values


@dataclass(frozen=True)
class _Table:
    """CSV cells as strings plus the 1-based file line of each row."""

    frame: pd.DataFrame
    lines: np.ndarray


def _resolve(path: str, base_dir: Path) -> Path:
    return scenario_relative(path, base_dir)


def _read_csv(path: Path, needed: list[str], *, what: str, yaml_path: str, hint: str = "",
              written: str = "", base_dir: Path | None = None) -> _Table:
    """Read ``path`` as text cells; check that the ``needed`` columns exist. ``written``
    and ``base_dir``: the path as the scenario gives it and the scenario's directory, named
    when the file is missing."""
    if not path.is_file():
        raise _missing_file(path, what, yaml_path, written, base_dir)
    frame = _read_cells(path, yaml_path)
    frame.columns = [str(c).strip() for c in frame.columns]
    _check_no_repeated_column(path, needed, yaml_path)
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ScenarioError(
            f"missing column(s) {', '.join(repr(c) for c in missing)}; expected "
            f"{', '.join(repr(c) for c in needed)}; found {', '.join(repr(c) for c in frame.columns)}"
            f"{hint}",
            file=str(path),
            path=yaml_path,
        )
    table = _without_blank_rows(frame)
    if len(table.frame) == 0:
        raise ScenarioError("no data rows after the header", file=str(path), path=yaml_path)
    return table


def _missing_file(path: Path, what: str, yaml_path: str, written: str,
                  base_dir: Path | None) -> ScenarioError:
    """The error for a ``path`` that is not a file; a relative path names the directory it
    was searched from."""
    kind = "is a directory" if path.is_dir() else "not found"
    searched = ""
    if base_dir is not None and not Path(written).expanduser().is_absolute():
        searched = (f" (paths in a scenario are relative to the scenario's directory, "
                    f"{Path(base_dir).resolve()})")
    return ScenarioError(f"{what} {kind}: {path}{searched}", path=yaml_path)


def _read_cells(path: Path, yaml_path: str) -> pd.DataFrame:
    """Every cell of the CSV at ``path`` as a string, blank lines kept as all-empty rows.

    Raises:
        ScenarioError: the file is empty or not a readable CSV.
    """
    import pandas as pd     # here, not at the top: synthetic workloads never load it (~0.2 s)

    try:
        return pd.read_csv(
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


def _without_blank_rows(frame: pd.DataFrame) -> _Table:
    """``frame`` (as read by :func:`_read_cells`) without its blank lines, each row with its
    file line."""
    # Row i of the frame is line i + 2 (header = line 1); blank lines were kept
    # as all-empty rows so this holds, and are dropped now.
    lines = np.arange(2, len(frame) + 2, dtype=np.int64)
    blank = (frame == "").all(axis=1).to_numpy()
    if blank.any():
        frame = frame.loc[~blank].reset_index(drop=True)
        lines = lines[~blank]
    return _Table(frame, lines)


def _check_no_repeated_column(path: Path, needed: list[str], yaml_path: str) -> None:
    """A column the reader needs must be named once in the header: pandas would read the
    first and rename the others (``ContextTokens.1``), silently picking one."""
    import csv

    with open(path, encoding="utf-8-sig", newline="") as f:
        header = [c.strip() for c in next(csv.reader(f, skipinitialspace=True), [])]
    for name in needed:
        at = [i + 1 for i, c in enumerate(header) if c == name]
        if len(at) > 1:
            raise ScenarioError(
                f"line 1: column {name!r} is named {len(at)} times in the header (columns "
                f"{', '.join(map(str, at))}); keep one", file=str(path), path=yaml_path)


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
    import pandas as pd

    values = pd.to_numeric(table.frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise _bad_cell(table, column, bad, "must be a number", path, yaml_path)
    return values


def _parse_counts(table: _Table, column: str, path: Path, yaml_path: str) -> np.ndarray:
    """Column as whole token counts, int64 (any sign; callers check the range)."""
    import pandas as pd

    values = pd.to_numeric(table.frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        raise _bad_cell(table, column, bad, "must be a whole number of tokens", path, yaml_path)
    big = np.abs(values) > MAX_TOKENS            # would overflow int64 or lose digits
    if big.any():
        raise _bad_cell(table, column, big, f"must be at most {MAX_TOKENS:,} tokens", path,
                        yaml_path)
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
    import pandas as pd

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


def _scheduled(arrival_s: np.ndarray, trace: TraceConfig) -> np.ndarray:
    """Trace times replayed at the time-varying rate ``rate_scale × schedule(t)``: the row
    at trace time τ arrives at ``t`` with ``rate_scale·∫₀ᵗ schedule = τ``
    (:mod:`capsim.workload.rate`). The mapping is increasing, so row order is kept."""
    u = arrival_s / trace.rate_scale
    last = float(u.max()) if len(u) else 0.0
    horizon = max(last, 1.0)
    while True:
        pieces = schedule_pieces(trace.schedule, horizon)
        if pieces.cumulative()[-1] >= last:
            return warp(u, pieces)
        horizon *= 2.0


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
    stably sorted by arrival if the file is not in order (with a warning naming the
    first line out of order: a trace that is not sorted may be a wrong column or a
    concatenation of files). Then ``duration_s``
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
            trace, no row before ``duration_s``, or rows arriving beyond
            :data:`~capsim.workload.trace.MAX_SPAN_S` (``path`` then
            ``workload.trace.rate_scale``).
    """
    yaml_path = "workload.trace.path"
    if trace.format == "mooncake":
        return _mooncake(trace, base_dir, num_requests, duration_s)
    cols = trace.resolved_columns
    table, path = _read_trace(trace, base_dir)
    prompt, output = _token_counts(table, cols.prompt_tokens, cols.output_tokens, path, yaml_path)
    arrival_s = _replay_times(_parse_arrivals(table, cols.arrival, path, yaml_path), trace)
    order = _arrival_order(arrival_s, table, cols.arrival, path)
    if order is not None:
        arrival_s, prompt, output = arrival_s[order], prompt[order], output[order]
    keep = _rows_kept(arrival_s, trace, path, num_requests=num_requests, duration_s=duration_s)
    return _one_class(arrival_s[:keep], prompt[:keep], output[:keep], trace.class_name)


def _mooncake(trace: TraceConfig, base_dir: Path, num_requests: int | None,
              duration_s: float | None) -> RequestTrace:
    """A Mooncake trace (:mod:`capsim.workload.mooncake`) kept as a CSV trace is: rows
    before ``duration_s``, then the first ``num_requests``; one class, its block ids kept."""
    path = _resolve(trace.path, base_dir)
    cols = read_mooncake(path)
    if "parent" in cols:
        return _conversations(cols, trace, path, num_requests, duration_s)
    arrival_s = _replay_times(cols["arrival_s"], trace)
    keep = _rows_kept(arrival_s, trace, path, num_requests=num_requests, duration_s=duration_s)
    base = _one_class(arrival_s[:keep], cols["prompt_tokens"][:keep],
                      cols["output_tokens"][:keep], trace.class_name)
    start = cols["block_start"][:keep + 1]
    return replace(base, block_ids=cols["block_ids"][:int(start[-1])], block_start=start)


def _conversations(cols: dict[str, np.ndarray], trace: TraceConfig, path: Path,
                   num_requests: int | None, duration_s: float | None) -> RequestTrace:
    """A trace with session ids: first turns replayed at ``rate_scale`` / ``schedule``,
    later turns sent ``think_s`` after their previous turn (not rescaled: it is the
    user's pause, not the arrival rate); kept as a CSV trace is, by the first turn's time
    (``duration_s``: whole conversations) and row (``num_requests``: the first N turns)."""
    parent = cols["parent"]
    roots = parent < 0
    arrival_s = cols["arrival_s"].copy()
    arrival_s[roots] = _replay_times(arrival_s[roots], trace)
    root_arrival = arrival_s[np.maximum.accumulate(np.where(roots, np.arange(len(roots)), 0))]
    keep = _rows_kept(root_arrival, trace, path, num_requests=num_requests,
                      duration_s=duration_s)
    start = cols["block_start"][:keep + 1]
    n = keep
    return RequestTrace(
        arrival_s=arrival_s[:n], prompt_tokens=cols["prompt_tokens"][:n],
        output_tokens=cols["output_tokens"][:n], class_id=np.zeros(n, dtype=np.int32),
        prefix_id=np.full(n, -1, dtype=np.int32), class_names=(trace.class_name,),
        parent=parent[:n], think_s=cols["think_s"][:n],
        block_ids=cols["block_ids"][:int(start[-1])], block_start=start)


def _read_trace(trace: TraceConfig, base_dir: Path) -> tuple[_Table, Path]:
    """The trace's cells and its resolved path; the three columns it maps must exist."""
    cols = trace.resolved_columns
    path = _resolve(trace.path, base_dir)
    needed = [cols.arrival, cols.prompt_tokens, cols.output_tokens]
    hint = " (map other names with format: columns and columns: {arrival, prompt_tokens, output_tokens})"
    table = _read_csv(path, needed, what="trace file", yaml_path="workload.trace.path", hint=hint,
                      written=trace.path, base_dir=base_dir)
    return table, path


def _one_class(arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray,
               class_name: str) -> RequestTrace:
    """The rows as a trace of one class named ``class_name``, no shared prefix."""
    n = len(arrival_s)
    return RequestTrace(
        arrival_s=arrival_s,
        prompt_tokens=prompt,
        output_tokens=output,
        class_id=np.zeros(n, dtype=np.int32),
        prefix_id=np.full(n, -1, dtype=np.int32),
        class_names=(class_name,),
    )


def _token_counts(table: _Table, prompt_column: str, output_column: str, path: Path,
                  yaml_path: str) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) token counts of every row, int64, shape ``(N,)`` each; an output of 0
    is replayed as 1 (warned once per file).

    Raises:
        ScenarioError: a count that is not a whole number, a prompt below 1 or an output
            below 0 (line number and value).
    """
    prompt = _parse_counts(table, prompt_column, path, yaml_path)
    output = _parse_counts(table, output_column, path, yaml_path)
    if (prompt < 1).any():
        raise _bad_cell(table, prompt_column, prompt < 1, "must be >= 1 prompt token", path, yaml_path)
    if (output < 0).any():
        raise _bad_cell(table, output_column, output < 0, "must be >= 0 output tokens", path, yaml_path)
    zero_out = output == 0
    if zero_out.any():
        _warn_once(path, "zero output",
                   f"{path}: {int(zero_out.sum()):,} rows with 0 output tokens replayed as 1 token")
        output = np.where(zero_out, 1, output)
    return prompt, output


def _replay_times(arrival_s: np.ndarray, trace: TraceConfig) -> np.ndarray:
    """Trace times (s since the earliest row) → replay times (s): divided by ``rate_scale``,
    or warped by the time-varying scale ``rate_scale × schedule`` (:func:`_scheduled`)."""
    if trace.schedule is None:
        return arrival_s / trace.rate_scale
    return _scheduled(arrival_s, trace)         # t = F⁻¹(τ), F = rate_scale·∫ schedule


def _arrival_order(arrival_s: np.ndarray, table: _Table, column: str,
                   path: Path) -> np.ndarray | None:
    """The stable order that sorts rows by arrival, or None when they already are; warns
    once per file naming the first line out of order (a trace that is not sorted may be a
    wrong column or a concatenation of files)."""
    back = np.diff(arrival_s) < 0
    if not back.any():
        return None
    i = int(np.argmax(back)) + 1
    _warn_once(path, "unsorted",
               f"{path}: {int(back.sum()):,} of {len(arrival_s):,} rows arrive earlier than "
               f"the row above them (first at line {table.lines[i]}, "
               f"{table.frame[column].iloc[i]!r}); replayed in arrival order")
    return np.argsort(arrival_s, kind="stable")


def _rows_kept(arrival_s: np.ndarray, trace: TraceConfig, path: Path, *,
               num_requests: int | None, duration_s: float | None) -> int:
    """How many of the sorted rows ``arrival_s`` (s) are replayed: those before
    ``duration_s``, then the first ``num_requests``.

    Raises:
        ScenarioError: no row before ``duration_s``; the kept rows span more than
            :data:`~capsim.workload.trace.MAX_SPAN_S`; ``num_requests`` more than the rows
            kept.
    """
    keep = len(arrival_s)
    if duration_s is not None:
        keep = int(np.searchsorted(arrival_s, duration_s, side="left"))
        if keep == 0:
            raise ScenarioError(
                f"no trace row arrives before duration_s={duration_s:g}",
                file=str(path), path="workload.duration_s",
            )
    if keep and float(np.max(arrival_s[:keep])) > MAX_SPAN_S:
        raise ScenarioError(
            f"the rows arrive over {float(np.max(arrival_s[:keep])):.3g} s at rate_scale "
            f"{trace.rate_scale:g}, beyond {MAX_SPAN_S:.0e} s (about 32 years) where the clock "
            "cannot resolve an engine step; raise rate_scale",
            file=str(path), path="workload.trace.rate_scale")
    if num_requests is not None:
        if num_requests > keep:
            raise ScenarioError(
                f"num_requests={num_requests} but the trace has only {keep} rows",
                file=str(path), path="workload.num_requests",
            )
        keep = num_requests
    return keep
