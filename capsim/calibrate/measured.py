"""One measured load-test run, whatever client wrote it: the structure every reader returns.

A benchmark client (``vllm bench serve``, ``sglang.bench_serving``, GuideLLM, AIPerf,
genai-perf) sends requests to a server and records, per request, when it was sent,
how many tokens went in and came out, and when tokens came back.
:class:`MeasuredRun` holds exactly that, column-wise (numpy arrays of shape ``(N,)``,
one row per request in the order the file lists them), plus what the file says about
the run: request rate or concurrency, model, duration.

Metric definitions are vLLM's (``vllm/benchmarks/serve.py`` ``calculate_metrics``), as
:mod:`capsim.metrics.summary` uses them:

- TTFT = first token − send; E2E = last token − send;
- TPOT = (E2E − TTFT) ÷ (output tokens − 1), only for replies of two or more tokens;
- ITL = every gap between consecutive streamed chunks, pooled over requests.

Also here: the helpers every reader shares — reading a JSON / JSON-lines file
(:func:`load_documents`), the one-line errors (:func:`missing_fields`), ragged
per-request ITL lists (:func:`ragged`).

Public API:
    MeasuredRun, load_documents, missing_fields, ragged, as_float, opt_float, opt_int, to_seconds
"""

from __future__ import annotations

import codecs
import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import yaml

from capsim.common.errors import ScenarioError
from capsim.common.schema import MAX_TOKENS
from capsim.common.yamlio import describe_yaml_error, load_yaml

log = logging.getLogger(__name__)

#: Suffixes of a result written as YAML (GuideLLM's ``benchmarks.yaml``), read as YAML;
#: every other file is JSON or JSON lines.
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class MeasuredRun:
    """The requests of one measured run and what the file says about the run.

    Per-request columns, shape ``(N,)``, in file order:

    Attributes:
        send_s: float64 seconds since the first send, when the request was sent; None
            when the tool saves no send times (then :mod:`capsim.calibrate.replay`
            derives arrivals from the rate / concurrency); NaN for a request without one.
        prompt_tokens: int64 prompt length, tokens; 0 where unknown.
        output_tokens: int64 tokens received; 0 where none or unknown.
        ttft_s: float64 time to first token, s; NaN where unknown.
        e2e_s: float64 send → last token, s; NaN where unknown.
        success: bool, the request completed without error.
        itl_gaps_s: float64 every inter-chunk gap of every request, concatenated in
            request order (shape ``(itl_counts.sum(),)``), s; None when the tool saves none.
        itl_counts: int64 ``(N,)`` gaps per request, or None with ``itl_gaps_s``.

    Run level:

    Attributes:
        path: the file read.
        format: the reader's key (``vllm-bench``, ``sglang-bench``, ``guidellm``,
            ``aiperf``, ``genai-perf``).
        label: the tool, for people ("vllm bench serve").
        source: where the reader's schema comes from (repository, file, commit).
        run_label: which run of the file this is ("benchmark 2 of 5: constant 4 req/s").
        request_rate_per_s: configured request rate; ``math.inf`` = everything at once;
            None when unknown or not rate-driven (closed loop).
        max_concurrency: the client's in-flight cap, None when there is none / unknown.
        burstiness: gamma shape of the configured inter-arrival gaps (vLLM's
            ``--burstiness``; 1 = Poisson); None when unknown.
        model: the model name the client sent, None when not saved.
        duration_s: the run's measured duration, s, None when not saved.
        notes: what the reader had to derive or could not read, one sentence each.
    """

    path: str
    format: str
    label: str
    source: str
    run_label: str
    send_s: np.ndarray | None
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    success: np.ndarray
    itl_gaps_s: np.ndarray | None = None
    itl_counts: np.ndarray | None = None
    request_rate_per_s: float | None = None
    max_concurrency: int | None = None
    burstiness: float | None = None
    model: str | None = None
    duration_s: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @property
    def tpot_s(self) -> np.ndarray:
        """(E2E − TTFT) ÷ (output tokens − 1) per request, s; NaN below two tokens."""
        out = self.output_tokens.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(out > 1, (self.e2e_s - self.ttft_s) / (out - 1), np.nan)

    def itl_of(self, rows: np.ndarray) -> np.ndarray | None:
        """The pooled inter-chunk gaps (s) of the requests ``rows`` (indices), or None
        when the file has no per-request gaps."""
        if self.itl_gaps_s is None or self.itl_counts is None:
            return None
        owner = np.repeat(np.arange(len(self)), self.itl_counts)
        keep = np.zeros(len(self), bool)
        keep[rows] = True
        return self.itl_gaps_s[keep[owner]]


def load_documents(path: str | Path) -> list[Any]:
    """The JSON values in ``path``: one for a JSON file, one per non-empty line for JSON lines,
    one for a ``.yaml`` / ``.yml`` file (GuideLLM writes its report as either).

    Every reader of a result (``capsim compare``, ``capsim calibrate --from``) reads it
    here, so a file one accepts the other accepts. Text that is not UTF-8 where it should
    be is read, not refused, each bad byte as U+FFFD (a model name in Latin-1 in a file
    otherwise JSON), with a warning; so is a JSON escape of half a surrogate pair
    (``"\\udcff"``, what Python writes for a byte it could not decode), which cannot
    be written back as UTF-8: ``capsim compare`` failed writing its report with a
    UnicodeEncodeError after ``calibrate --from`` had read the same file.

    Raises:
        ScenarioError: unreadable file, bytes that are not JSON text at all, text
            that is neither JSON nor JSON lines (naming the first bad line), or malformed
            YAML in a ``.yaml`` file.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ScenarioError(f"cannot read file: {exc.strerror or exc}", file=str(path)) from None
    # A UTF-8 byte-order mark (Windows PowerShell 5's Out-File -Encoding utf8 writes one) is
    # not text: json refused the file at its first byte.
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    data = data[bom:]
    try:
        text, bad = data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, bad = data.decode("utf-8", errors="replace"), exc
    docs = (_parse_yaml(text, path) if Path(path).suffix.lower() in YAML_SUFFIXES
            else _parse_documents(text, path, binary=bad is not None))
    if bad is not None:
        log.warning(f"{path}: bytes that are not UTF-8 (the first, 0x{data[bad.start]:02x}, "
                    f"at offset {bom + bad.start}) read as U+FFFD")
    return _without_lone_surrogates(docs) if "\\ud" in text.lower() else docs


def _parse_yaml(text: str, path: str | Path) -> list[Any]:
    """A YAML report (GuideLLM's ``--output-path F.yaml``) as one document; none when empty.

    Raises:
        ScenarioError: malformed YAML, with its line and column.
    """
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"malformed YAML {describe_yaml_error(exc)}",
                            file=str(path)) from None
    return [] if doc is None else [doc]


def _parse_documents(text: str, path: str | Path, binary: bool) -> list[Any]:
    """:func:`load_documents` of decoded text; ``binary``: it was not UTF-8, so a parse
    error says the file is not JSON text at all."""
    not_text = ScenarioError("not a text file (expected JSON or JSON lines)", file=str(path))
    try:
        return [json.loads(text)]
    except json.JSONDecodeError as exc:
        if binary and exc.msg != "Extra data":
            raise not_text from None
        if exc.msg != "Extra data":
            raise ScenarioError(f"malformed JSON: {exc}", file=str(path)) from None
    except RecursionError:       # json's decoder recurses once per nesting level
        raise ScenarioError("malformed JSON: nested too deep to read", file=str(path)) from None
    docs = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if binary:
                    raise not_text from None
                raise ScenarioError(f"line {number}: malformed JSON line: {exc}",
                                    file=str(path)) from None
            except RecursionError:
                raise ScenarioError(f"line {number}: malformed JSON line: nested too deep to "
                                    "read", file=str(path)) from None
    return docs


_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every surrogate code point in its strings (keys too) as U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v)
                for k, v in value.items()}
    return value


def missing_fields(path: str | Path, label: str, fields: Iterable[str], hint: str,
                   where: str = "") -> ScenarioError:
    """The one-line error for a file of a known format that lacks needed fields:
    ``FILE: <label> result<where>: missing <fields>; <hint>``."""
    return ScenarioError(f"{label} result{where}: missing {', '.join(fields)}; {hint}",
                         file=str(path))


def token_counts(values: np.ndarray, what: str, label: str, path: str | Path,
                 where: str = "") -> np.ndarray:
    """Per-request token counts read as floats (NaN: unknown or failed) → int64, NaN as 0.

    Raises:
        ScenarioError: a count beyond :data:`~capsim.common.schema.MAX_TOKENS` (e.g.
            ``1e20``), which int64 would wrap into a negative count, a negative or a
            fractional one (``-10``: the request was dropped as failed without a word;
            ``10.5`` truncated), naming the request.
    """
    values = np.asarray(values, np.float64)
    known = np.nan_to_num(values)
    bad = (np.abs(known) > MAX_TOKENS) | (known < 0) | (known != np.floor(known))
    if bad.any():
        i = int(np.argmax(bad))
        raise ScenarioError(f"{label} result{where}: request {i}'s {what} is {values[i]:g}, "
                            f"not a token count (a whole number from 0 to {MAX_TOKENS:,})",
                            file=str(path))
    return known.astype(np.int64)


def as_float(value: Any) -> float:
    """A JSON number as float; NaN for null, strings or anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def opt_float(value: Any) -> float | None:
    """A JSON number as float; None for null, NaN or a non-number."""
    v = as_float(value)
    return None if math.isnan(v) else v


def opt_int(value: Any) -> int | None:
    """A JSON number as int; None for null, NaN or a non-number."""
    v = opt_float(value)
    return None if v is None or math.isinf(v) else int(v)


def to_seconds(value: float, unit: str | None) -> float:
    """``value`` in ``unit`` ("ns", "us", "ms", "s"; AIPerf's unit strings) as seconds; NaN
    for an unknown unit."""
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
    return value * scale.get((unit or "").lower(), math.nan)


def ragged(per_request: Sequence[Sequence[float] | None]) -> tuple[np.ndarray, np.ndarray]:
    """Per-request gap lists (s) as ``(all gaps concatenated, gaps per request)``;
    a missing list counts as empty."""
    counts = np.fromiter((len(g) if g else 0 for g in per_request), np.int64,
                         count=len(per_request))
    gaps = np.fromiter((as_float(x) for g in per_request if g for x in g), np.float64,
                       count=int(counts.sum()))
    return gaps, counts
