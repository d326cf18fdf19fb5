"""Shared look of the report: one colour per variant, file-name slugs, figure defaults.

Every chart colours a variant the same way (its position in the results list
picks a colour from a colour-blind-friendly qualitative palette), so a reader
can follow one variant across the CDFs, bars and timelines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

DPI = 120
#: zlib level of the PNG figures (lossless: the pixels are the same at any level). 1 rather
#: than Pillow's default 6: on the azure_conv_replay report's figures it encodes about twice
#: as fast for files about 15 % larger (timeline 0.06 s / 220 kB against 0.11 s / 193 kB).
PNG_COMPRESS_LEVEL = 1

# Okabe–Ito-like qualitative palette (colour-blind safe), then tab10 extras.
_PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
            "#000000", "#F0E442", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF")

# Applied with ``matplotlib.rc_context`` around every figure (never globally).
RC = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "savefig.dpi": DPI,
    "text.parse_math": False,      # "$" in variant names and cost labels is literal text
}

# Prefill and decode wherever the report shows both (batch composition, pools).
PREFILL, DECODE = "#E69F00", "#56B4E9"

# Marker per statistic, shared by the CDF panels and their legend.
STAT_MARKERS = {"p50": "o", "p99": "^", "p99.9": "D", "max": "*"}


def variant_colours(variants: Iterable[str]) -> dict[str, str]:
    """Map each distinct variant name (in first-seen order) to a hex colour."""
    colours: dict[str, str] = {}
    for name in variants:
        if name not in colours:
            colours[name] = _PALETTE[len(colours) % len(_PALETTE)]
    return colours


def shades(colour: str, n: int) -> list[tuple[float, float, float]]:
    """``n`` shades of ``colour`` from darker to lighter (one per replica line)."""
    from matplotlib.colors import to_rgb    # here: the tables use this module without it

    rgb = to_rgb(colour)
    if n <= 1:
        return [rgb]
    out = []
    for i in range(n):
        t = -0.45 + 0.9 * i / (n - 1)         # −0.45 (towards black) … +0.45 (towards white)
        target = 0.0 if t < 0 else 1.0
        out.append(tuple(c + abs(t) * (target - c) for c in rgb))
    return out


def slug(name: str) -> str:
    """File-name slug: lowercase ASCII, runs of other characters → "-", trimmed."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return s or "variant"


def unique_slugs(names: Iterable[str]) -> dict[str, str]:
    """Slug per distinct name, suffixed "-2", "-3", ... where two names collide."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        if name in out:
            continue
        base = candidate = slug(name)
        k = 2
        while candidate in used:
            candidate = f"{base}-{k}"
            k += 1
        used.add(candidate)
        out[name] = candidate
    return out
