"""Tables of a sweep or sizing report, as plain cells shared by the HTML page and the terminal.

A :class:`Table` is a header plus rows of :class:`Cell` (text and a status:
"pass", "fail", "warn" or ""). Metric cells show the mean over replications
and, with more than one seed, ``± half-width`` of its 95 % confidence interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from capsim.studies.cheapest import COST_TIE_FRAC, Choice, cheapest
from capsim.studies.confidence import CI_SUFFIX
from capsim.report.cells import fmt, target_status
from capsim.studies.sizing import SizingResult, SizingRow
from capsim.studies.sweep import PERCENTILE_COLUMN
from capsim.scenario.slo import UPPER_BOUND_TARGETS, SloConfig


@dataclass(frozen=True)
class Cell:
    text: str
    status: str = ""


@dataclass
class Table:
    """Column titles and rows of cells (left-aligned columns listed in ``left``)."""

    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    left: int = 1


#: (column, title, format kind) of the configuration table's metric columns.
POINT_METRICS = (
    ("request_throughput_per_s", "req/s", "rate"),
    ("output_throughput_tok_per_s", "out tok/s", "tok"),
    ("goodput_fraction", "goodput", "frac"),
    ("ttft_p99_ms", "TTFT p99 ms", "ms"),
    ("itl_p50_ms", "ITL p50 ms", "ms"),
    ("itl_p99_ms", "ITL p99 ms", "ms"),
    ("itl_max_ms", "ITL max ms", "ms"),
    ("itl_stalls", "stalls", "num"),
    ("cost_per_million_output_tokens_usd", "$/M out tok", "usd3"),
)


def with_ci(row: pd.Series, column: str, kind: str) -> str:
    """``mean ± half-width`` (just the mean with one replication or no spread data)."""
    mean = row.get(column, math.nan)
    half = row.get(column + CI_SUFFIX, math.nan)
    text = fmt(mean, kind)
    if half is not None and not (isinstance(half, float) and math.isnan(half)):
        text += f" ± {fmt(half, 'frac' if kind == 'frac' else kind if kind != 'usd3' else 'num')}"
    return text


def _verdict(row: pd.Series, slo: SloConfig) -> Cell:
    if not slo.targets:
        return Cell("n/a")
    k, n = int(row["slo_pass_runs"]), int(row["replications"])
    text = ("PASS" if k == n else "FAIL") + (f" {k}/{n}" if n > 1 else "")
    return Cell(text, "pass" if k == n else "fail")


def points_table(points: pd.DataFrame, label_columns: list[str], slo: SloConfig) -> Table:
    """One row per configuration: its labels, GPUs, $/h, the metrics (± CI) and the verdict.
    With ``--percentiles`` columns in ``points`` (``p99.9_itl_ms``), TTFT and ITL are shown at
    those percentiles instead of TTFT p99 and ITL p50 / p99."""
    metrics = _point_metrics(points)
    metrics += [(k, k, "num") for k in slo.targets if k not in {m for m, _, _ in metrics}]
    t = Table(columns=[*label_columns, "GPUs", "$/h", *[m[1] for m in metrics], "SLO"],
              left=len(label_columns))
    for _, row in points.iterrows():
        cells = [Cell(_label(row[c])) for c in label_columns]
        cells += [Cell(fmt(row["num_gpus"], "int")), Cell(fmt(row["cost_per_hour_usd"], "usd"))]
        cells += [Cell(with_ci(row, m, kind), target_status(m, row[m], slo) or "")
                  for m, _, kind in metrics]
        cells.append(_verdict(row, slo))
        t.rows.append(cells)
    return t


def _point_metrics(points: pd.DataFrame) -> list[tuple[str, str, str]]:
    """:data:`POINT_METRICS`, its TTFT and ITL percentiles replaced by the ``--percentiles``
    columns of ``points`` when it has any (in their order)."""
    asked = [c for c in points.columns if PERCENTILE_COLUMN.fullmatch(c)]
    if not asked:
        return list(POINT_METRICS)
    latency = [(c, f"{c.split('_')[1].upper()} {c.split('_')[0]} ms", "ms") for metric in
               ("ttft", "itl") for c in asked if c.split("_")[1] == metric]
    out = [m for m in POINT_METRICS if m[0] not in ("ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")]
    at = next(i for i, m in enumerate(out) if m[0] == "itl_max_ms")
    return out[:at] + latency + out[at:]


def _label(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def cheapest_table(points: pd.DataFrame, label_columns: list[str], slo: SloConfig,
                   load_column: str = "offered_rate_per_s") -> Table | None:
    """Per load level, the cheapest configuration meeting every target in every replication.

    Cheapest = lowest $/h, then lowest $ per million output tokens unless the
    difference is within noise (:data:`capsim.studies.cheapest.COST_TIE_FRAC`): a tie,
    broken by the widest SLO margin and said in the "note" column. None when the
    scenario has no SLO targets.
    """
    if not slo.targets:
        return None
    t = Table(columns=["offered req/s", "cheapest passing configuration", "GPUs", "$/h",
                       "$/M out tok", "ITL p99 ms", "TTFT p99 ms", "passing", "note"], left=2)
    for rate, grp in points.groupby(load_column, sort=True):
        ok = grp[grp["slo_pass_all"]]
        passing = f"{len(ok)}/{len(grp)}"
        if ok.empty:
            t.rows.append([Cell(_label(rate)), Cell("none meets every target", "fail"),
                           *[Cell("—")] * 5, Cell(passing), Cell("")])
            continue
        choice = cheapest(ok, slo)
        best = ok.loc[choice.index]
        t.rows.append([Cell(_label(rate)), Cell(_name(best, label_columns, load_column), "pass"),
                       Cell(fmt(best["num_gpus"], "int")),
                       Cell(fmt(best["cost_per_hour_usd"], "usd")),
                       Cell(with_ci(best, "cost_per_million_output_tokens_usd", "usd3")),
                       Cell(with_ci(best, "itl_p99_ms", "ms")),
                       Cell(with_ci(best, "ttft_p99_ms", "ms")), Cell(passing),
                       Cell(_tie_note(ok, choice, label_columns, load_column),
                            "warn" if choice.tied else "")])
    return t


def _name(row: pd.Series, label_columns: list[str], load_column: str) -> str:
    return " · ".join(_label(row[c]) if c == "variant" else
                      f"{c.rsplit('.', 1)[-1]}={_label(row[c])}"
                      for c in label_columns if c != load_column)


def _tie_note(ok: pd.DataFrame, choice: Choice, label_columns: list[str],
              load_column: str) -> str:
    """"" when the cheapest won on cost; else the tie and how it was broken."""
    if not choice.tied:
        return ""
    others = ", ".join(_name(ok.loc[i], label_columns, load_column) for i in choice.tied)
    note = (f"tie on cost with {others} (same $/h, $/M out tok within {COST_TIE_FRAC:.0%}: "
            "run-to-run noise)")
    if choice.decided_by is None:
        return note + "; equal SLO margins, the lowest $/M out tok chosen"
    target, margin, other_target, other_margin, runner = choice.decided_by
    vs = "" if other_target == target else f" {other_target}"
    return (f"{note}; chosen for the wider SLO margin: {target} {margin * 100:.0f} % inside its "
            f"bound vs{vs} {other_margin * 100:.0f} % for "
            f"{_name(ok.loc[runner], label_columns, load_column)}")


def _noise(r: SizingRow) -> Cell:
    if r.within_noise is None:
        return Cell("—" if r.status != "met" else "n/a (1 seed)")
    return Cell("yes", "warn") if r.within_noise else Cell("no")


def _binding(r: SizingRow, mode: str) -> str:
    """E.g. ``itl_p99_ms 48.2 (≤ 60); 72.1 at 3 GPUs``: the target, its worst value at
    the answer, the bound, and its worst value where it failed."""
    if not r.binding:
        return "—"
    sign = "≤" if r.binding in UPPER_BOUND_TARGETS else "≥"
    kind = _kind(r.binding)
    text = f"{r.binding} {_value(r.binding_value, kind)} ({sign} {_value(r.binding_bound, kind)})"
    if not math.isnan(r.binding_failed_at):
        gpus = r.binding_failed_at
        where = (f"{gpus:,.0f} GPU{'' if gpus == 1 else 's'}" if mode == "gpus"
                 else f"{fmt(r.binding_failed_at, 'rate')} req/s")
        text += f"; {_value(r.binding_failed_value, kind)} at {where}"
    return text


def _kind(target: str) -> str:
    return "frac" if target.endswith(("_frac", "_fraction")) else "num"


def _value(v: float, kind: str) -> str:
    """A target's value: a fraction as a percentage, else 4 significant digits with
    thousands separators (53,840 rather than 5.384e+04)."""
    if math.isnan(v):              # no data (none finished; static batching's ITL)
        return "no data"
    if kind == "frac":
        return fmt(v, "frac")
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def sizing_table(result: SizingResult) -> Table:
    """The ranked answer of ``capsim size``: one row per fleet option."""
    rate_col = "max req/s" if result.mode == "rate" else "req/s"
    t = Table(columns=["#", "configuration", "status", "replicas", "GPUs", rate_col, "$/h",
                       "$/M out tok", "out tok/s", "binding SLO (worst run)", "margin",
                       "within noise", "note"], left=3)
    for r in result.rows:
        status = {"met": "pass", "not met": "fail", "infeasible": "fail"}[r.status]
        t.rows.append([
            Cell(str(r.rank) if r.rank else "—"), Cell(r.label), Cell(r.status, status),
            Cell(r.split or fmt(r.num_replicas, "int")), Cell(fmt(r.num_gpus, "int")),
            Cell(fmt(r.rate_per_s, "rate")), Cell(fmt(r.cost_per_hour_usd, "usd")),
            Cell(fmt(r.cost_per_million_output_tokens_usd, "usd3")),
            Cell(fmt(r.output_throughput_tok_per_s, "tok")), Cell(_binding(r, result.mode)),
            Cell(_margin(r), "pass" if r.margin_frac >= 0 else "fail"
                 if not math.isnan(r.margin_frac) else ""),
            _noise(r), Cell(r.note)])
    return t


def _margin(r: SizingRow) -> str:
    """Headroom of the binding target: relative to the bound (``+12.0 %``), or for a
    fraction (goodput_fraction, kv_peak_frac) in percentage points (``+2.0 pts``): a
    fraction cannot exceed 1, so "5.3 % above 0.95" would only restate 100 %."""
    frac = r.margin_frac
    if frac is None or math.isnan(frac):
        return "—"
    if math.isinf(frac):
        return "no data"
    if _kind(r.binding) == "frac":
        return f"{frac * r.binding_bound * 100:+.1f} pts"
    return f"{frac * 100:+.1f} %"
