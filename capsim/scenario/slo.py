"""Service-level objectives: per-request limits (goodput) and run-level targets.

Per-request limits follow ``vllm bench serve --goodput ttft:MS tpot:MS e2el:MS``
(vllm/benchmarks/serve.py): a request counts towards goodput only if it meets
every limit given. Run-level targets bound a summary column (``itl_p99_ms``,
``ttft_p99_ms``, ``goodput_fraction``, ...) and decide a variant's pass/fail.
"""

from __future__ import annotations

from typing import ClassVar

import math

from pydantic import Field, field_validator

from capsim.common.schema import Float, StrictModel

# Summary columns a target may bound, and in which direction.
UPPER_BOUND_TARGETS = frozenset(
    [f"{m}_{s}_ms" for m in ("ttft", "itl") for s in ("mean", "p50", "p90", "p99", "p999", "max")]
    + [f"tpot_{s}_ms" for s in ("mean", "p50", "p90", "p99")]
    + [f"e2el_{s}_ms" for s in ("mean", "p50", "p90", "p99")]
    + ["queue_mean_ms", "queue_p99_ms", "itl_stalls", "num_rejected", "preemptions",
       "cost_per_million_output_tokens_usd", "kv_peak_frac"]
)
LOWER_BOUND_TARGETS = frozenset(
    ["goodput_fraction", "goodput_req_per_s", "output_throughput_tok_per_s",
     "request_throughput_per_s"]
)
TARGET_METRICS = UPPER_BOUND_TARGETS | LOWER_BOUND_TARGETS


class RequestSlo(StrictModel):
    """Per-request latency limits in milliseconds (None = no limit)."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2el_ms: float | None = Field(default=None, gt=0)


class SloConfig(RequestSlo):
    """The scenario's ``slo:`` section.

    ``targets`` maps a summary column to its bound: an upper bound for
    latencies, stalls, rejections and cost; a lower bound for goodput and
    throughput (see ``UPPER_BOUND_TARGETS`` / ``LOWER_BOUND_TARGETS``).
    ``stall_threshold_ms`` sets which inter-token gaps count as stalls
    (seed 002 Q10: p99 is blind to rare stalls, so count them).
    """

    # in error messages
    yaml_example: ClassVar[str] = "{ttft_ms: 1500, tpot_ms: 60, targets: {ttft_p99_ms: 3000}}"

    stall_threshold_ms: float = Field(default=200.0, gt=0)
    targets: dict[str, Float] = Field(default_factory=dict)

    @field_validator("targets")
    @classmethod
    def _known_metrics(cls, targets: dict[str, float]) -> dict[str, float]:
        for name, bound in targets.items():
            if name not in TARGET_METRICS:
                raise ValueError(
                    f"unknown SLO metric '{name}'; valid: {', '.join(sorted(TARGET_METRICS))}")
            if not bound >= 0:
                raise ValueError(f"target {name} must be >= 0, got {bound:g}")
            if name.endswith("_fraction") and bound > 1:
                raise ValueError(f"target {name} is a fraction: 0..1, got {bound:g}")
        return targets


def failed_targets(values: dict[str, float], targets: dict[str, float],
                   missing: dict[str, str] | None = None) -> list[str]:
    """Describe every target that ``values`` (a summary row) misses, readably with units.

    Returns e.g. ``["TTFT p99 496.5 s > 3 s", "goodput 0.1 % < 90 %"]``; empty when all
    are met. A NaN value (no data, e.g. no request finished) fails its target: "TTFT p99
    no data > 3 s", or, for a column ``missing`` names, its reason instead ("ITL p99 n/a
    (held replies)": static batching's replies show no gap to bound).
    """
    failed = []
    for name, bound in targets.items():
        value = values[name]
        upper = name in UPPER_BOUND_TARGETS
        ok = value <= bound if upper else value >= bound   # NaN compares False → fails
        if ok:
            continue
        if value != value and missing and name in missing:
            failed.append(f"{target_label(name)} {missing[name]}")
            continue
        op = ">" if upper else "<"
        shown = "no data" if value != value else quantity_text(name, value)
        failed.append(f"{target_label(name)} {shown} {op} {quantity_text(name, bound)}")
    return failed


#: Targets that bound the wait for a reply: its TTFT or E2EL.
_WAIT_PREFIXES = ("ttft_", "e2el_")
_GOODPUT_TARGETS = ("goodput_fraction", "goodput_req_per_s")


def unbounded_wait_warning(slo: SloConfig, class_slos: dict[str, RequestSlo],
                           held: list[str]) -> str | None:
    """The warning for variants ``held`` (static batching: each reply held whole until its
    batch ends) under targets that bound neither TTFT nor E2EL, else None.

    Such a variant's ITL is n/a and its TPOT 0, so targets on them, on stalls, throughput or
    cost say nothing of the wait its users see (rag_mix's static variant: TTFT p99 54 s). A
    wait is bounded by a ``ttft_*`` / ``e2el_*`` target, or by a goodput target over
    per-request ``ttft_ms`` / ``e2el_ms`` limits (the scenario's or a class's). No targets:
    no verdict, no warning.
    """
    if not held or not slo.targets:
        return None
    if any(name.startswith(_WAIT_PREFIXES) for name in slo.targets):
        return None
    limits = [slo, *class_slos.values()]
    if any(t in slo.targets for t in _GOODPUT_TARGETS) and any(
            lim.ttft_ms is not None or lim.e2el_ms is not None for lim in limits):
        return None
    names = ", ".join(held)
    return (f"{'variants' if len(held) > 1 else 'variant'} {names}: static batching holds "
            "each reply whole until its batch ends (ITL n/a, TPOT 0), and slo.targets bound "
            "neither TTFT nor E2EL, so its verdict says nothing of the wait its users see; "
            "add a target such as slo.targets.ttft_p99_ms")


_LABELS = {"itl_stalls": "ITL stalls", "num_rejected": "rejected", "preemptions": "preemptions",
           "cost_per_million_output_tokens_usd": "$/M output tokens", "kv_peak_frac": "KV peak",
           "goodput_fraction": "goodput", "goodput_req_per_s": "goodput",
           "output_throughput_tok_per_s": "output throughput",
           "request_throughput_per_s": "request throughput"}


def target_label(name: str) -> str:
    """A target's short name for people: ``ttft_p99_ms`` → "TTFT p99", ``itl_p999_ms`` →
    "ITL p99.9", ``queue_mean_ms`` → "queue mean"; the others from a fixed table."""
    if name in _LABELS:
        return _LABELS[name]
    metric, stat = name.removesuffix("_ms").split("_", 1)
    metric = metric if metric == "queue" else metric.upper()
    return f"{metric} {'p99.9' if stat == 'p999' else stat}"


def quantity_text(name: str, value: float) -> str:
    """``value`` of the summary column ``name`` with its unit, without exponents:
    "59.07 ms", "496.5 s" (latencies of a second or more in seconds), "0.1 %", "$0.123",
    "6.84 req/s", "1,615 tok/s", "5,130"."""
    if name.endswith("_ms"):
        return f"{_sig4(value)} ms" if abs(value) < 1000 else f"{_sig4(value / 1000)} s"
    if name.endswith("_fraction") or name.endswith("_frac"):
        return f"{_sig4(value * 100)} %"
    if name.endswith("_usd"):
        return f"${_sig4(value)}"
    if name.endswith("_tok_per_s"):
        return f"{_sig4(value)} tok/s"
    if name.endswith("_per_s"):
        return f"{_sig4(value)} req/s"
    return f"{value:,.0f}" if float(value).is_integer() else _sig4(value)


def _sig4(v: float) -> str:
    """Four significant digits, thousands separated, no exponent, no trailing zeros:
    466,700 → "466,700"; 59.0712 → "59.07"; 0.000964 → "0.000964"."""
    if v == 0 or v != v or abs(v) == float("inf"):
        return f"{v:g}"
    digits = max(0, 3 - math.floor(math.log10(abs(v))))
    text = f"{v:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
