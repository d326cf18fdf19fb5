"""The fidelity page of ``capsim calibrate``: predicted vs measured, per operator class.

``write_calibration_page(out_dir, ...)`` writes ``index.html`` (autoescaped
jinja2, inline CSS, no network) and one ``fidelity_<class>.png`` per
operator class: a log-log scatter of measured (x) against predicted (y)
seconds, before calibration in grey and after in colour, with the y = x line
and a ±25 % band, so a reader sees where the roofline is good and where not.
Figures use the helpers of :mod:`capsim.report.plotting` (object API, Agg canvas).

Public API:
    write_calibration_page(out_dir, *, title, profile_name, date, data, errors, table) -> Path
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import matplotlib
import numpy as np
import pandas as pd

from capsim.report.plotting import PLAIN, figure, log_axis, save
from capsim.report.style import RC

#: At most this many points per class and series are drawn (every k-th row, deterministic).
MAX_POINTS = 20_000

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0 1.5em; }
code { background: #f4f4f4; padding: 0 3px; }
.better { color: #0a7d32; } .worse { color: #b3261e; }
</style></head><body>
<h1>{{ title }}</h1>
<p>Profile <code>{{ profile_name }}</code>, calibrated {{ date }}.
Error = |predicted − measured| ÷ measured per measurement; median and 90th percentile
per operator class, with the input profile (before) and the calibrated one (after).</p>
<table>
<tr><th>class</th><th>rows</th><th>before median %</th><th>before p90 %</th>
<th>after median %</th><th>after p90 %</th></tr>
{% for row in rows %}
<tr><td>{{ row.name }}</td><td>{{ row.n }}</td><td>{{ row.before_median }}</td>
<td>{{ row.before_p90 }}</td><td class="{{ row.tone }}">{{ row.after_median }}</td>
<td class="{{ row.tone }}">{{ row.after_p90 }}</td></tr>
{% endfor %}
</table>
<h2>Data</h2>
<ul>{% for item in data %}<li>{{ item }}</li>{% endfor %}</ul>
<h2>Predicted vs measured</h2>
{% for row in rows %}
<h3>{{ row.name }}</h3>
<img src="{{ row.png }}" alt="predicted vs measured time, {{ row.name }}">
{% endfor %}
</body></html>
"""


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.DictLoader({"page.html": _TEMPLATE}),
                              autoescape=True, undefined=jinja2.StrictUndefined)


def _thin(values: np.ndarray) -> np.ndarray:
    step = max(1, int(np.ceil(len(values) / MAX_POINTS)))
    return values[::step]


def scatter_png(rows: pd.DataFrame, op_class: str, path: Path) -> None:
    """One class's predicted-vs-measured scatter (ms, log-log) written to ``path``."""
    measured_ms = _thin(rows.time_s.to_numpy() * 1e3)
    before_ms = _thin(rows.predicted_before.to_numpy() * 1e3)
    after_ms = _thin(rows.predicted_after.to_numpy() * 1e3)
    with matplotlib.rc_context(RC):
        fig = figure(6.4, 5.2)
        ax = fig.add_subplot()
        ax.scatter(measured_ms, before_ms, s=4, c="#9a9a9a", alpha=0.35, label="before",
                   rasterized=True, linewidths=0)
        ax.scatter(measured_ms, after_ms, s=4, c="#0072B2", alpha=0.5, label="after",
                   rasterized=True, linewidths=0)
        values = np.concatenate([measured_ms, before_ms, after_ms])
        values = values[np.isfinite(values) & (values > 0)]
        lo, hi = values.min() / 1.5, values.max() * 1.5
        line = np.array([lo, hi])
        ax.plot(line, line, color="#222", lw=1, label="predicted = measured")
        ax.fill_between(line, line / 1.25, line * 1.25, color="#222", alpha=0.08,
                        label="±25 %")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel="measured (ms)", ylabel="predicted (ms)", title=op_class)
        for axis in (ax.xaxis, ax.yaxis):   # style.RC turns mathtext off: plain labels
            log_axis(axis, PLAIN)
        ax.legend(loc="upper left", markerscale=3)
        save(fig, path)


def _row(op_class: str, figures: Any) -> dict[str, Any]:
    before, after = figures.before, figures.after
    tone = "better" if after.median_pct <= before.median_pct else "worse"
    return {"name": op_class, "n": f"{after.n:,}", "png": f"fidelity_{op_class}.png",
            "before_median": f"{before.median_pct:.1f}", "before_p90": f"{before.p90_pct:.1f}",
            "after_median": f"{after.median_pct:.1f}", "after_p90": f"{after.p90_pct:.1f}",
            "tone": tone}


def write_calibration_page(out_dir: Path, *, title: str, profile_name: str, date: str,
                           data: list[str], errors: dict[str, Any],
                           table: pd.DataFrame) -> Path:
    """Write ``index.html`` and the per-class PNGs into ``out_dir``; return the HTML path.

    Args:
        errors: op class → object with ``before`` / ``after`` error figures
            (``n``, ``median_pct``, ``p90_pct``), e.g. :class:`capsim.profiles.hardware.ClassError`.
        table: one row per measurement with ``op_class``, ``time_s``,
            ``predicted_before`` and ``predicted_after`` (seconds).

    Raises:
        OSError: the folder cannot be written (the CLI turns it into a ScenarioError).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for op_class, figures in errors.items():
        scatter_png(table[table.op_class == op_class], op_class,
                    out_dir / f"fidelity_{op_class}.png")
        rows.append(_row(op_class, figures))
    html = _env().get_template("page.html").render(title=title, profile_name=profile_name,
                                                   date=date, data=data, rows=rows)
    index = out_dir / "index.html"
    index.write_text(html, encoding="utf-8")
    return index
