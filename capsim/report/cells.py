"""Cell text shared by every report table (run report, sweep report, terminal).

:func:`fmt` formats one number by kind ("ms", "frac", "usd", ...);
:func:`target_status` says whether a value meets the scenario's SLO target
for its column (same rule as :func:`capsim.scenario.slo.failed_targets`: NaN fails).
"""

from __future__ import annotations

import math

from capsim.scenario.slo import UPPER_BOUND_TARGETS, SloConfig

NA = "—"


def fmt(value: float | int | None, kind: str) -> str:
    """Format one cell; NaN/None → "—".

    ms: ≥100 → "1,234"; ≥10 → one decimal; else three significant digits.
    frac: percent with one decimal; under 1 % two significant digits ("0.14%", a fraction
    that one decimal would show as "0.1%" or "0.0%"). rate: three significant digits.
    tok: thousands-separated integer. usd: "$12.34"; usd3: three significant digits.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    v = float(value)
    if kind == "int":
        return f"{int(round(v)):,}"
    if kind == "frac":
        return pct(v)
    if kind == "tok":
        return f"{v:,.0f}" if abs(v) >= 100 else _sig3(v)
    if kind == "usd":
        return f"${v:,.2f}"
    if kind == "usd3":
        return "$" + _sig3(v)
    # "ms", "rate", "num"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return _sig3(v)


def pct(v: float) -> str:
    """A fraction as a percentage: one decimal ("95.3%"), two significant digits under 1 %
    ("0.14%", "0.0072%"; one decimal would read "0.1%" and "0.0%")."""
    p = v * 100
    if p == 0 or abs(p) >= 0.995:
        return f"{p:.1f}%"
    digits = 1 - int(math.floor(math.log10(abs(p))))
    return f"{p:.{digits}f}%"


def _sig3(v: float) -> str:
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    v = float(f"{v:.3g}")       # rounded first: 0.99996 is "1.00", not "1.000"
    if v == 0:
        return "0"
    digits = max(0, 2 - int(math.floor(math.log10(abs(v)))))
    return f"{v:.{digits}f}"


def target_status(key: str, value: float, slo: SloConfig) -> str | None:
    """"pass" / "fail" when ``slo.targets`` bounds ``key``, else None."""
    if key not in slo.targets:
        return None
    bound = slo.targets[key]
    ok = value <= bound if key in UPPER_BOUND_TARGETS else value >= bound
    return "pass" if ok else "fail"
