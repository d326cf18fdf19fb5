"""Table columns shared by the run report's HTML tables and the terminal summary.

A :class:`Column` names a :class:`~capsim.results.model.SummaryRow` field, how to
format it (a :func:`capsim.report.cells.fmt` kind) and which header group it sits
under: the verdict and KV-memory tables of index.html, the disaggregation table
(also printed by the terminal) and the terminal summary's shorter set.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

from capsim.metrics.summary import ITL_COLUMNS, percentile_key
from capsim.profiles.policies import label_holds_replies
from capsim.report.cells import fmt
from capsim.results.model import RunResult, SummaryRow
from capsim.scenario.slo import UPPER_BOUND_TARGETS, SloConfig


@dataclass(frozen=True)
class Column:
    """One table column.

    Attributes:
        key: SummaryRow field name (also the SLO target name, if one bounds it).
        label: short header text, e.g. "p99".
        group: header group, e.g. "ITL ms" (shown above the label in HTML).
        kind: formatter: "ms", "int", "frac", "rate", "tok", "usd", "usd3", "num".
    """

    key: str
    label: str
    group: str
    kind: str

    @property
    def title(self) -> str:
        """Header for one-row tables (terminal): the label, prefixed by the metric for latencies."""
        if self.group.endswith(" ms") and not self.key.endswith("_stalls"):
            return f"{self.group.removesuffix(' ms')} {self.label}"
        return self.label


def header_groups(cols: list[Column]) -> list[dict]:
    """Consecutive columns of one ``group`` as ``{"name", "span"}`` header cells."""
    groups: list[dict] = []
    for c in cols:
        if groups and groups[-1]["name"] == c.group:
            groups[-1]["span"] += 1
        else:
            groups.append({"name": c.group, "span": 1})
    return groups


#: At most this many value columns per HTML table: with header labels wrapping, 14 columns
#: and the variant name fit a 1400-px window and a landscape A4 page (issue 16 item 8;
#: checked in headless Chromium). A wider column set is drawn as stacked tables
#: (:func:`blocks`), never behind a scrollbar.
MAX_HTML_COLUMNS = 14

#: The verdict's latency groups, shown first (beside the verdict); the rest follows below.
LATENCY_GROUPS = ("TTFT ms", "TPOT ms", "ITL ms", "E2EL ms", "Other targets")


def split_columns(cols: list[Column], max_cols: int = MAX_HTML_COLUMNS) -> list[list[Column]]:
    """``cols`` in order as consecutive blocks of at most ``max_cols`` columns, cut between
    header groups (a group wider than ``max_cols`` is cut itself)."""
    blocks: list[list[Column]] = [[]]
    for g in header_groups(cols):
        start = sum(len(b) for b in blocks)
        group = cols[start:start + g["span"]]
        while group:
            room = max_cols - len(blocks[-1])
            if room < len(group) and blocks[-1]:
                blocks.append([])
                continue
            blocks[-1].extend(group[:max_cols])
            group = group[max_cols:]
    return [b for b in blocks if b]


def blocks(cols: list[Column], max_cols: int = MAX_HTML_COLUMNS,
           breaks: tuple[str, ...] = ()) -> list[dict]:
    """The HTML tables a column set is drawn as: ``{"groups", "start", "stop"}`` per block,
    ``start``:``stop`` slicing the columns (and every row's cells). A group named in
    ``breaks`` always starts a new table."""
    parts: list[list[Column]] = [[]]
    for c in cols:
        if c.group in breaks and parts[-1] and parts[-1][-1].group != c.group:
            parts.append([])
        parts[-1].append(c)
    out, start = [], 0
    for b in (blk for part in parts for blk in split_columns(part, max_cols)):
        out.append({"groups": header_groups(b), "start": start, "stop": start + len(b)})
        start += len(b)
    return out


def latency_first(cols: list[Column]) -> list[Column]:
    """The verdict columns with the latency groups (and extra targets) first; the rest starts
    at the "Fleet" group (``blocks(..., breaks=("Fleet",))`` puts it in a table of its own)."""
    return ([c for c in cols if c.group in LATENCY_GROUPS]
            + [c for c in cols if c.group not in LATENCY_GROUPS])


def verdict_columns(slo: SloConfig, percentiles: tuple[float, ...] | None = None) -> list[Column]:
    """Columns of the HTML verdict table, plus one column per SLO target not already shown.
    ``percentiles`` (``--percentiles``): the TTFT, TPOT, ITL and E2EL groups show those
    (:func:`latency_columns`) instead of their default ones."""
    stall = f"stalls >{fmt(slo.stall_threshold_ms, 'num')} ms"
    if percentiles is None:
        latency = [
            Column("ttft_p50_ms", "p50", "TTFT ms", "ms"),
            Column("ttft_p99_ms", "p99", "TTFT ms", "ms"),
            Column("tpot_p50_ms", "p50", "TPOT ms", "ms"),
            Column("tpot_p99_ms", "p99", "TPOT ms", "ms"),
            Column("itl_p50_ms", "p50", "ITL ms", "ms"),
            Column("itl_p99_ms", "p99", "ITL ms", "ms"),
            Column("itl_p999_ms", "p99.9", "ITL ms", "ms"),
        ]
        e2el = [Column("e2el_p99_ms", "p99", "E2EL ms", "ms")]
    else:
        latency = [c for m in ("ttft", "tpot", "itl") for c in latency_columns(m, percentiles)]
        e2el = latency_columns("e2el", percentiles)
    cols = [
        Column("num_gpus", "GPUs", "Fleet", "int"),
        Column("cost_per_hour_usd", "$/h", "Fleet", "usd"),
        Column("request_throughput_per_s", "req/s", "Throughput", "rate"),
        Column("output_throughput_tok_per_s", "out tok/s", "Throughput", "tok"),
        Column("goodput_req_per_s", "goodput req/s", "Throughput", "rate"),
        Column("goodput_fraction", "goodput", "Throughput", "frac"),
        *latency,
        Column("itl_max_ms", "max", "ITL ms", "ms"),
        Column("itl_stalls", stall, "ITL ms", "int"),
        *e2el,
        Column("preemptions", "preempt", "Engine", "int"),
        Column("num_rejected", "rejected", "Engine", "int"),
        Column("kv_peak_frac", "KV peak", "Utilisation", "frac"),
        Column("gpu_busy_frac", "busy", "Utilisation", "frac"),
        Column("slot_occupancy", "batch fill", "Utilisation", "frac"),
        Column("mfu", "MFU", "Utilisation", "frac"),
        Column("mbu", "MBU", "Utilisation", "frac"),
        Column("cost_per_million_output_tokens_usd", "$/M out tok", "Cost", "usd3"),
    ]
    shown = {c.key for c in cols}
    for key in slo.targets:
        if key not in shown:
            cols.append(Column(key, _auto_label(key), "Other targets", _auto_kind(key)))
    return cols


def latency_columns(metric: str, percentiles: tuple[float, ...]) -> list[Column]:
    """One column per percentile of ``metric`` (ttft, tpot, itl, e2el), labelled "p99.9":
    the summary's own column where it has one (``itl_p999_ms``: an SLO target bounds it
    and colours it), else the ``--percentiles`` column (``p99.9_tpot_ms``)."""
    group = f"{metric.upper()} ms"
    cols = []
    for q in percentiles:
        vllm = percentile_key(q, metric)                        # p99.9_itl_ms
        own = f"{metric}_{_OWN_SUFFIX[q]}_ms" if q in _OWN_SUFFIX else ""    # itl_p999_ms
        key = own if own in SummaryRow.model_fields else vllm
        cols.append(Column(key, vllm.split("_", 1)[0], group, "ms"))
    return cols


#: The percentiles summary.csv has columns of (``ttft_p999_ms``: 99.9).
_OWN_SUFFIX = {50.0: "p50", 90.0: "p90", 99.0: "p99", 99.9: "p999"}


def kv_columns() -> list[Column]:
    """Columns of the KV-memory table: batch size, cache use, preemption, prefix caching,
    and seed 000's allocator figures (waste and block-table entries at the KV peak;
    contiguous layouts: free tokens and biggest hole at the first refused admission)."""
    return [
        Column("peak_running", "peak batch", "Batch", "int"),
        Column("kv_peak_frac", "KV peak", "KV cache", "frac"),
        Column("kv_internal_waste_tokens", "waste at peak", "KV cache", "int"),
        Column("block_table_entries_at_peak", "table entries", "KV cache", "int"),
        Column("external_fragmentation_tokens", "free at 1st refusal", "Contiguous", "int"),
        Column("biggest_hole_tokens", "biggest hole", "Contiguous", "int"),
        Column("preemptions", "preemptions", "Preemption", "int"),
        Column("recomputed_tokens", "recomputed tok", "Preemption", "int"),
        Column("swap_bytes", "swap bytes", "Preemption", "int"),
        Column("prefix_hit_rate", "token hits", "Prefix cache", "frac"),
        Column("prefix_block_hit_rate", "block hits", "Prefix cache", "frac"),
        Column("prefill_tokens_saved", "prefill saved", "Prefix cache", "int"),
        Column("offload_hit_rate", "host hits", "KV offload", "frac"),
        Column("offload_hit_tokens", "loaded tok", "KV offload", "int"),
    ]


#: Columns of the disaggregation table (splits only; the terminal prints a subset).
DISAGG_COLUMNS = [
    Column("disagg", "split", "Pools", "text"),
    Column("num_gpus", "GPUs", "Pools", "int"),
    Column("prefill_busy_frac", "prefill busy", "Pools", "frac"),
    Column("decode_busy_frac", "decode busy", "Pools", "frac"),
    Column("prefill_mfu", "prefill MFU", "Pools", "frac"),
    Column("decode_slot_occupancy", "decode batch fill", "Pools", "frac"),
    Column("stranded_prefill_frac", "prefill stranded", "Pools", "frac"),
    Column("stranded_decode_frac", "decode stranded", "Pools", "frac"),
    Column("kv_transfer_p50_ms", "p50", "KV transfer ms", "ms"),
    Column("kv_transfer_p99_ms", "p99", "KV transfer ms", "ms"),
    Column("kv_transfer_max_ms", "max", "KV transfer ms", "ms"),
    Column("kv_backpressure_p99_ms", "wait p99", "KV transfer ms", "ms"),
    Column("kv_transfer_gib", "GiB moved", "Link", "num"),
    Column("kv_link_util_frac", "busiest port", "Link", "frac"),
    Column("second_token_p50_ms", "p50", "Token 1→2 ms", "ms"),
    Column("second_token_p99_ms", "p99", "Token 1→2 ms", "ms"),
    Column("ttft_p99_ms", "TTFT p99", "Outcome", "ms"),
    Column("itl_max_ms", "ITL max", "Outcome", "ms"),
    Column("goodput_fraction", "goodput", "Outcome", "frac"),
]


def console_columns(slo: SloConfig, percentiles: tuple[float, ...] | None = None
                    ) -> list[Column]:
    """The shorter column set of the terminal summary (brief: fits 160 characters); with
    ``percentiles`` (``--percentiles``) TTFT, TPOT and ITL at each of them."""
    head = ("num_gpus", "request_throughput_per_s", "output_throughput_tok_per_s",
            "goodput_fraction")
    tail = ("itl_max_ms", "itl_stalls", "preemptions", "num_rejected")
    by_key = {c.key: c for c in verdict_columns(slo, percentiles)}
    if percentiles is None:
        middle = ["ttft_p99_ms", "tpot_p50_ms", "itl_p50_ms", "itl_p99_ms"]
    else:
        middle = [c.key for m in ("ttft", "tpot", "itl") for c in latency_columns(m, percentiles)]
    return [by_key[k] for k in (*head, *middle, *tail)]


def _auto_label(key: str) -> str:
    return key.removesuffix("_ms").replace("_", " ")


def _auto_kind(key: str) -> str:
    if key.endswith("_ms"):
        return "ms"
    if key.endswith("_frac") or key.endswith("_fraction"):
        return "frac"
    if key.endswith("_usd"):
        return "usd3"
    if key in ("itl_stalls", "num_rejected", "preemptions"):
        return "int"
    return "num"


def target_text(key: str, slo: SloConfig, kind: str) -> str:
    """The bound as shown under a header, e.g. "≤ 100" or "≥ 95.0%"; "" when no target."""
    if key not in slo.targets:
        return ""
    sign = "≤" if key in UPPER_BOUND_TARGETS else "≥"
    bound = slo.targets[key]
    return f"{sign} {bound:,.10g}" if kind in ("ms", "int", "num") else f"{sign} {fmt(bound, kind)}"


def failed_list(row: SummaryRow) -> list[str]:
    """The row's failed targets, one string each (from ``SummaryRow.slo_failed``)."""
    return [s for s in row.slo_failed.split("; ") if s]


def held_variants(results: list[RunResult]) -> frozenset[str]:
    """The variants whose every reply is held whole until its batch ends (static
    batching): their ITL columns are NaN, shown "n/a (held replies)"."""
    return frozenset(r.variant for r in results if label_holds_replies(r.scheduler))


def held_cell(row: SummaryRow, key: str, held: frozenset[str]) -> bool:
    """Whether ``row``'s ``key`` cell is an ITL figure of held replies (NaN: no gap seen),
    to be shown as :data:`~capsim.metrics.summary.HELD_TEXT`, never coloured as passing."""
    is_itl = key in ITL_COLUMNS or key.endswith("_itl_ms")     # p99.9_itl_ms: --percentiles
    return row.variant in held and is_itl and math.isnan(row.value(key))
