"""What the HTML pages of the run and sweep reports share.

Both pages are jinja2 templates under ``report/templates`` (autoescaped, inline
CSS, no scripts), show figures as :class:`FigureRef` (a PNG referenced by its
relative file name, so the directory can be zipped, mailed or opened offline)
and list the scenario's SLO settings with :func:`slo_lines`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from capsim.scenario.slo import UPPER_BOUND_TARGETS, RequestSlo, SloConfig

_TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class FigureRef:
    """A PNG in the report directory and the text shown with it."""

    file: str
    title: str
    caption: str


def environment() -> jinja2.Environment:
    """The jinja2 environment over ``report/templates`` (autoescaped, strict undefined)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def slo_lines(slo: SloConfig, class_slos: dict[str, RequestSlo]) -> list[str]:
    """Human-readable SLO settings: per-request limits, per-class limits, targets, stall threshold."""
    def limits(s: RequestSlo) -> str:
        parts = [f"{n} ≤ {v:g} ms" for n, v in (("TTFT", s.ttft_ms), ("TPOT", s.tpot_ms),
                                                  ("E2EL", s.e2el_ms)) if v is not None]
        return ", ".join(parts) or "none"

    lines = [f"Per-request limits (goodput): {limits(slo)}"]
    lines += [f"Class {name}: {limits(s)}" for name, s in sorted(class_slos.items())]
    if slo.targets:
        lines.append("Run targets (verdict): " + ", ".join(
            f"{k} {'≤' if k in UPPER_BOUND_TARGETS else '≥'} {v:g}"
            for k, v in slo.targets.items()))
    else:
        lines.append("Run targets (verdict): none — every variant is reported, none judged")
    lines.append(f"Stall threshold: inter-token gaps > {slo.stall_threshold_ms:g} ms count as stalls")
    return lines
