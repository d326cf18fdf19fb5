"""The prefill/decode split's table and its figures' names and captions, without matplotlib:
a run report's main process builds the page from these while the chart process draws the
figures (:mod:`capsim.report.run.disagg`), so a scenario with a split no longer imports
matplotlib in the process that simulates.

Public API: RATIO_FIG, TRANSFER_FIG, CAPTIONS, has_disagg, ordered, table.
"""

from __future__ import annotations

from capsim.report.cells import fmt
from capsim.report.run.table import DISAGG_COLUMNS, blocks, header_groups
from capsim.results.model import RunResult, SummaryRow

RATIO_FIG = "disagg_ratio.png"
TRANSFER_FIG = "kv_transfer.png"
CAPTIONS = {
    RATIO_FIG: (
        "Prefill : decode split",
        "One group per variant: disaggregated splits (named P prefill replicas, D decode "
        "replicas) from the most decode-heavy to the most prefill-heavy, co-located variants "
        "hatched for reference. Top: goodput (requests per second meeting every per-request "
        "SLO). Middle: p99 TTFT, p99 and max ITL and, for splits, p99 of the token 1 → 2 gap "
        "(KV transfer included; log ms). Bottom: how busy each pool's GPUs were and how much of "
        "a pool sat idle while the other was saturated (stranded). Diamonds: the prefill pool's "
        "MFU, and the decode pool's batch fill (sequences per step ÷ max_num_seqs; a busy decode "
        "pool can still be running small batches). The split that wins keeps both pools working "
        "without stranding either or filling the decode batch to its cap."),
    TRANSFER_FIG: (
        "KV-cache transfers",
        "Left: time each prompt's KV spent on the link (decode slot reserved → last byte; "
        "latency plus the bandwidth shared with concurrent transfers). Right: the gap between "
        "token 1 (prefill pool) and token 2 (decode pool) as a client sees it: waiting for "
        "decode room (back-pressure), the transfer, and the decode replica's next step. The "
        "legend gives the back-pressure p99 and the GiB moved."),
}


def has_disagg(results: list[RunResult]) -> bool:
    return any(r.disagg is not None for r in results)


def ordered(rows: list[SummaryRow], results: list[RunResult]) -> list[SummaryRow]:
    """Co-located rows first (scenario order), then splits by prefill share of GPUs."""
    by_name = {r.variant: r for r in results}

    def key(row: SummaryRow) -> tuple:
        d = by_name[row.variant].disagg
        if d is None:
            return (0, 0.0, 0)
        return (1, d.prefill_gpus / (d.prefill_gpus + d.decode_gpus), d.prefill_gpus)
    return sorted(rows, key=key)


def table(rows: list[SummaryRow], results: list[RunResult], colours: dict[str, str]) -> dict:
    """Header groups, columns and formatted cells of the disaggregation table (splits only)."""
    links = {r.variant: r.disagg for r in results if r.disagg is not None}
    body = []
    for row in ordered([r for r in rows if r.variant in links], results):
        d = links[row.variant]
        cells = [getattr(row, c.key) if c.kind == "text" else fmt(getattr(row, c.key), c.kind)
                 for c in DISAGG_COLUMNS]
        body.append({"variant": row.variant, "colour": colours.get(row.variant, "#777"),
                     "cells": cells, "link": _link_text(d)})
    return {"groups": header_groups(DISAGG_COLUMNS), "columns": [c.label for c in DISAGG_COLUMNS],
            "rows": body, "blocks": blocks(DISAGG_COLUMNS)}


def _link_text(d) -> str:
    hw = d.prefill_hardware if d.prefill_hardware == d.decode_hardware else \
        f"{d.prefill_hardware} → {d.decode_hardware}"
    return (f"{d.prefill_replicas} × prefill ({d.prefill_gpus} GPU) + {d.decode_replicas} × "
            f"decode ({d.decode_gpus} GPU), {hw}; KV over {d.link} "
            f"({d.link_bandwidth_bytes_per_s / 1e9:,.0f} GB/s per GPU and direction, "
            f"{d.link_latency_s * 1e6:,.0f} µs per transfer), decode router {d.router}"
            + (", layer-wise overlap" if d.layerwise_overlap else ""))
