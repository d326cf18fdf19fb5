"""``capsim size --trust-edge``: size against the pessimistic edge of capsim's measured error.

A target met by a predicted figure x is met by the engine if the engine's figure is within
x ± e (e the fidelity benchmark's |error| for the run's engine preset and GPU,
:mod:`capsim.profiles.trust`, at the ``median`` or ``max`` edge). The pessimistic edge is
x (1 + e) for latencies and x (1 − e) for throughputs, so instead of moving every figure
the bounds move by the inverse (the same test, one place):

- latency targets (``ttft_*``, ``queue_*`` in the TTFT family; ``tpot_*``, ``itl_*``;
  ``e2el_*``) and the per-request goodput limits (``ttft_ms``, ``tpot_ms``, ``e2el_ms``):
  bound ÷ (1 + e) of their family;
- throughput lower bounds (``*_throughput_*``, ``goodput_req_per_s``): bound ÷ (1 − e);
  the cost per million output tokens: bound × (1 − e_throughput) (cost ∝ 1 / throughput);
- ``kv_peak_frac``: bound × (1 − e_kv_capacity) (a smaller real pool is fuller);
- counts (``itl_stalls``, ``num_rejected``, ``preemptions``) and ``goodput_fraction``
  itself are unchanged (the fraction moves through the tightened per-request limits).

Public API:
    EdgedSlo, edged_slo(slo, class_slos, coverage, edge) -> EdgedSlo
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.profiles.trust import FAMILIES, Coverage, Edge
from capsim.scenario.slo import RequestSlo, SloConfig

#: Per-request limit → its family.
_LIMIT_FAMILY = {"ttft_ms": "ttft", "tpot_ms": "tpot_itl", "e2el_ms": "e2el"}


def target_family(name: str) -> str | None:
    """The trust family whose error moves target ``name`` (None: the target is not moved)."""
    prefix = name.split("_")[0]
    if prefix in ("ttft", "queue"):
        return "ttft"
    if prefix in ("tpot", "itl") and name != "itl_stalls":
        return "tpot_itl"
    if prefix == "e2el":
        return "e2el"
    if "throughput" in name or name in ("goodput_req_per_s", "cost_per_million_output_tokens_usd"):
        return "throughput"
    if name == "kv_peak_frac":
        return "kv_capacity"
    return None


@dataclass(frozen=True)
class EdgedSlo:
    """The SLOs one fleet option is judged by, and why.

    Attributes:
        slo, class_slos: the scenario's, with every bound moved to the edge.
        errors_pct: family → |error| % applied (families the targets use only).
        note: one sentence for the report ("" at edge "none").
    """

    slo: SloConfig
    class_slos: dict[str, RequestSlo]
    errors_pct: dict[str, float]
    note: str


def _moved(name: str, bound: float, e: float) -> float:
    if name == "cost_per_million_output_tokens_usd" or name == "kv_peak_frac":
        return bound * (1 - e)
    if target_family(name) == "throughput":
        return bound / (1 - e) if e < 1 else float("inf")
    return bound / (1 + e)


def _limits(req: RequestSlo, err: dict[str, float]) -> dict[str, float | None]:
    return {k: None if getattr(req, k) is None else getattr(req, k) / (1 + err[f] / 100)
            for k, f in _LIMIT_FAMILY.items()}


def edged_slo(slo: SloConfig, class_slos: dict[str, RequestSlo], coverage: Coverage,
              edge: Edge) -> EdgedSlo:
    """``slo`` and ``class_slos`` with their bounds at ``edge`` of ``coverage``'s error.

    Returns the unchanged SLOs (empty ``errors_pct``) at edge "none".
    """
    if edge == "none":
        return EdgedSlo(slo, class_slos, {}, "")
    err = {f: coverage.edge_pct(f, edge) for f in FAMILIES}
    targets = {n: b if target_family(n) is None else _moved(n, b, err[target_family(n)] / 100)
               for n, b in slo.targets.items()}
    used = {target_family(n) for n in slo.targets} | {
        f for r in (slo, *class_slos.values()) for k, f in _LIMIT_FAMILY.items()
        if getattr(r, k) is not None}
    used.discard(None)
    errors = {f: err[f] for f in FAMILIES if f in used}
    where = (f"{coverage.preset} on {coverage.hardware}" if coverage.measured else
             f"all measured cases ({coverage.preset} on {coverage.hardware} is uncalibrated)")
    note = (f"SLO bounds moved by the {edge} |error| of {where}: "
            + ", ".join(f"{FAMILIES[f]} {e:.1f} %" for f, e in errors.items()))
    return EdgedSlo(slo.model_copy(update={"targets": targets, **_limits(slo, err)}),
                    {c: r.model_copy(update=_limits(r, err)) for c, r in class_slos.items()},
                    errors, note)
