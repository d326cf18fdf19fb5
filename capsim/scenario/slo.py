"""Service-level objectives: per-request limits (goodput) and run-level targets.

Per-request limits follow ``vllm bench serve --goodput ttft:MS tpot:MS e2el:MS``
(vllm/benchmarks/serve.py): a request counts towards goodput only if it meets
every limit given. Run-level targets bound a summary column (``itl_p99_ms``,
``ttft_p99_ms``, ``goodput_fraction``, ...) and decide a variant's pass/fail.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from capsim.common.schema import StrictModel

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

    stall_threshold_ms: float = Field(default=200.0, gt=0)
    targets: dict[str, float] = Field(default_factory=dict)

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


def failed_targets(values: dict[str, float], targets: dict[str, float]) -> list[str]:
    """Describe every target that ``values`` (a summary row) misses.

    Returns e.g. ``["itl_p99_ms 120.3 > 100"]``; empty when all are met. A NaN
    value (no data, e.g. no request finished) fails its target.
    """
    failed = []
    for name, bound in targets.items():
        value = values[name]
        upper = name in UPPER_BOUND_TARGETS
        ok = value <= bound if upper else value >= bound   # NaN compares False → fails
        if not ok:
            failed.append(f"{name} {value:.4g} {'>' if upper else '<'} {bound:g}")
    return failed
