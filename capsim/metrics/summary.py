"""Summaries of a finished run: percentiles, throughput, goodput, utilisation.

Definitions follow ``vllm bench serve`` (vllm/benchmarks/serve.py) and
DESIGN.md "Metrics":

- TTFT = first token − arrival; E2EL = last token − arrival;
- TPOT per request = (E2EL − TTFT) / (output_tokens − 1), requests with one
  output token excluded;
- ITL = every gap between consecutive tokens of a request, pooled over all
  requests (recorded as weighted runs, see :class:`capsim.results.model.ItlRuns`); a
  reply held whole until its batch ends (static batching) reaches the client in one
  piece, so none of its gaps is seen: as ``vllm bench serve`` adds no ITL for a reply in
  one chunk, its runs count in no ITL column, which are NaN ("n/a (held replies)") when
  every reply is held; its ``max_itl_ms`` is NaN too (TPOT stays (E2EL − TTFT) ÷
  (output − 1) = 0, vLLM's formula);
- throughput over first arrival → last completion;
- goodput = requests/s meeting every per-request SLO.

Warm-up requests (``workload.warmup_request_count``: status ``warmup``, their ITL
runs already left out by the simulation) count in no column: latencies, counts,
throughput and goodput are over the measured requests, throughput over the first
measured arrival → last measured completion. The run-level figures (GPU busy,
MFU / MBU, KV peak, preemptions, prefix hits, slot occupancy, a split's pool and
link columns) cover the whole run, warm-up included, over its own span (first
arrival of any request → last completion).

Percentiles use numpy's default linear interpolation, exactly, also over
weighted runs (:func:`weighted_percentile`).
"""

from __future__ import annotations

import bisect
import math
import weakref
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pandas as pd

from capsim.metrics.disagg import disagg_columns, transfer_frame
from capsim.profiles.policies import label_holds_replies
from capsim.results.model import FINISHED, REJECT_KINDS, RunResult, SummaryRow, reject_kind
from capsim.scenario.slo import RequestSlo, SloConfig, failed_targets
from capsim.sim.request_log import WARMUP

_NAN = float("nan")
PERCENTILES = (50.0, 90.0, 99.0, 99.9)
#: ``vllm bench serve``'s latency metrics (its ``--percentile-metrics`` names), in its order.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")


def percentile_key(q: float, metric: str) -> str:
    """vLLM's name of the q-th percentile of ``metric`` in ms: ``p99_itl_ms``,
    ``p99.9_itl_ms`` (``process_one_metric`` in vllm/benchmarks/serve.py at 009e6d4: a
    whole q without its ".0")."""
    word = str(int(q)) if int(q) == q else str(q)
    return f"p{word}_{metric}_ms"


def percentile_columns(done: pd.DataFrame, gaps_s: np.ndarray, counts: np.ndarray,
                       qs: tuple[float, ...]) -> dict[str, float]:
    """The ``--percentiles`` columns of a summary row: for each of
    :data:`LATENCY_METRICS`, each q of ``qs`` (0..100) under :func:`percentile_key`, ms.

    Args:
        done: :func:`request_frame` rows of the finished requests (``ttft_ms``,
            ``tpot_ms``, ``e2el_ms``; NaN TPOT of one-token replies left out).
        gaps_s, counts: the ITL runs, sorted by gap (:func:`sorted_runs`), counts > 0.
    Returns:
        {} when ``qs`` is empty; NaN where there is no value."""
    out: dict[str, float] = {}
    if not qs:
        return out
    for metric in LATENCY_METRICS:
        if metric == "itl":
            values = _sorted_percentiles(gaps_s, counts, qs, scale=1e3)
        else:
            x = done[f"{metric}_ms"].to_numpy(dtype=np.float64)
            x = x[~np.isnan(x)]
            values = np.percentile(x, qs).tolist() if len(x) else [_NAN] * len(qs)
        out.update((percentile_key(q, metric), float(v)) for q, v in zip(qs, values))
    return out


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """The q-th percentile (0..100) of ``values`` each repeated ``counts`` times.

    Equals ``np.percentile(np.repeat(values, counts), q)`` (linear
    interpolation) without materialising the repeats: O(R log R) for R runs.
    Returns NaN when the total count is 0.
    """
    return weighted_percentiles(values, counts, (q,))[0]


def weighted_percentiles(values: np.ndarray, counts: np.ndarray,
                         qs: tuple[float, ...]) -> list[float]:
    """:func:`weighted_percentile` at each of ``qs``, sorting the runs once (a day's ITL
    has tens of millions of runs: the sort is the cost)."""
    values, counts, _ = sorted_runs(*_nonempty(values, counts))
    return _sorted_percentiles(values, counts, qs)


def sorted_runs(values: np.ndarray, counts: np.ndarray, groups: np.ndarray | None = None,
                num_groups: int = 1, distinct: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Weighted runs sorted by value, runs of one value and group merged when that pays.

    Args:
        values: float64 run values, shape (R,).
        counts: int64 run counts > 0, shape (R,).
        groups: each run's group id in ``0 … num_groups − 1`` (e.g. a request class),
            shape (R,), or None (one group).
    Returns:
        ``(values, counts, groups)`` sorted by value (``groups`` None when given None):
        the same multiset of (value, group) samples, so every percentile, count and
        maximum per group is unchanged. When there are at least 8 runs per distinct
        value (a day's ITL: 31.7 M runs of 413 k distinct gaps, as the steps of equal
        batches repeat), the runs of each (value, group) are merged into one: one sort
        of the values (SIMD, an order of magnitude faster than an argsort) finds the
        distinct ones, a hash lookup in them the key of each run, and one
        ``np.bincount`` sums the counts (about 1 s against 5 s for an argsort and the
        reordered columns of those 31.7 M runs); otherwise (or with a NaN value) the
        runs are argsorted as they are (equal values in any order: they fill the same
        span of the cumulative counts), then, with ``distinct`` (one group only), equal
        neighbours merged: the values come back distinct.
    """
    return _sort_runs(values, counts, groups, num_groups, distinct)[:3]


def _sort_runs(values: np.ndarray, counts: np.ndarray, groups: np.ndarray | None,
               num_groups: int, distinct: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]:
    """:func:`sorted_runs`, and whether it merged the runs of each (value, group) (its
    hashed path) rather than argsorting them."""
    levels = _distinct(values)
    key = _level_of_each(values, levels)
    if key is None:
        return (*_argsorted(values, counts, groups, distinct), False)
    if groups is not None:
        key *= num_groups
        key += groups
    # Float weights: 6× faster than int64 ones, exact below 2**53.
    summed = np.bincount(key, weights=counts.astype(np.float64),
                         minlength=len(levels) * num_groups)
    key = np.flatnonzero(summed)
    merged = summed[key].astype(np.int64)    # exact: float64 holds every total below 2**53
    if groups is None:
        return levels[key], merged, None, True
    return levels[key // num_groups], merged, key % num_groups, True


@dataclass(frozen=True, eq=False)
class SortedItl:
    """A run's ITL runs as :func:`summarize` reads them (:func:`sorted_itl`).

    Attributes:
        gaps_s: gaps in seconds, ascending, shape (R,), read-only.
        counts: int64 counts > 0 (held replies' runs left out), shape (R,), read-only.
        run_cls: each run's class id, shape (R,), read-only.
        merged: the runs of each (gap, class) merged into one (:func:`sorted_runs`'s
            hashed path); else the runs argsorted as recorded.
        held: some runs were left out as held replies' gaps (:func:`held_runs`).
    """

    gaps_s: np.ndarray
    counts: np.ndarray
    run_cls: np.ndarray
    merged: bool
    held: bool


#: The last result :func:`sorted_itl` sorted: weak references to the objects it read, and
#: the answer (dropped with that result, so a sweep never holds two results' runs).
_LAST_ITL: list[tuple] = []


def sorted_itl(result: RunResult) -> SortedItl:
    """``result``'s ITL runs sorted by gap (:func:`sorted_runs` per class), held replies'
    left out: summary.csv's input, from which results.json (``bench_fields``) and the
    ITL CDF read theirs without sorting the runs again (a replay's ~930 k runs sorted
    three times took ~0.45 s).

    The last answer is kept while its result lives, for the same ``result`` object whose
    ``itl`` columns are the same objects (results are not changed in place once
    simulated)."""
    itl = result.itl
    source = (result, itl, itl.gap_s, itl.count, itl.class_id, itl.pool)
    for refs, answer in _LAST_ITL[:]:              # a copy: a finalizer may clear it
        if all(ref() is obj for ref, obj in zip(refs, source)):
            return answer
    held = held_runs(result)
    any_held = bool(held.any())
    counts = np.where(held, 0, np.asarray(itl.count)) if any_held else itl.count
    gaps, counts, run_cls, merged = _sort_runs(*_nonempty(itl.gap_s, counts, itl.class_id),
                                               max(len(result.class_names), 1), False)
    for column in (gaps, counts, run_cls):
        column.flags.writeable = False          # shared by every reader of this run
    answer = SortedItl(gaps, counts, run_cls, merged, any_held)
    entry = (tuple(weakref.ref(obj) for obj in source), answer)
    _LAST_ITL[:] = [entry]
    weakref.finalize(result, _forget, entry)
    return answer


def _forget(entry: tuple) -> None:
    """Drop ``entry`` from :data:`_LAST_ITL` if it is still there (its result is gone)."""
    last = _LAST_ITL[:]
    if last and last[0] is entry:
        _LAST_ITL.clear()


def merge_equal(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs sorted by value with equal neighbours merged (counts summed): the values come
    back distinct. Returns the inputs themselves when they already are."""
    if not len(values):
        return values, counts
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    if len(starts) == len(values):
        return values, counts
    return values[starts], np.add.reduceat(counts, starts)


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values``, ascending (NaN last), by one sort (no argsort)."""
    ordered = np.sort(values)
    first = np.ones(len(values), dtype=bool)        # the first run of each distinct value
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


def _level_of_each(values: np.ndarray, levels: np.ndarray) -> np.ndarray | None:
    """Each value's index in ``levels`` (int64, shape (R,)) when merging pays (at least 8
    runs per level, no NaN), else None."""
    n = len(values)
    if 8 * len(levels) > n or (n and np.isnan(levels[-1])):
        return None
    key = pd.Index(levels).get_indexer(values)       # hashed: 4× a binary search
    if n and key.min() < 0:                          # −0.0 beside 0.0: not merged
        return None
    return key


def _argsorted(values: np.ndarray, counts: np.ndarray, groups: np.ndarray | None,
               distinct: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`sorted_runs` without merging: the runs argsorted; with ``distinct`` (and no
    ``groups``) equal neighbours merged."""
    order = np.argsort(values)
    values, counts = values[order], counts[order]
    if groups is not None:
        return values, counts, groups[order]
    if distinct and len(values):
        starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
        values, counts = values[starts], np.add.reduceat(counts, starts)
    return values, counts, None


def _nonempty(values: np.ndarray, counts: np.ndarray, *others: np.ndarray) -> tuple:
    """``values`` as float64 and ``counts`` as int64 (and ``others``: per-run columns such
    as the class), runs with a count of 0 left out."""
    counts = np.asarray(counts, dtype=np.int64)
    columns = (np.asarray(values, dtype=np.float64), counts, *map(np.asarray, others))
    keep = counts > 0
    if keep.all():                     # a run recorder never writes empty runs: no copies
        return columns
    return tuple(c[keep] for c in columns)


def _sorted_percentiles(values: np.ndarray, counts: np.ndarray, qs: tuple[float, ...],
                        scale: float = 1.0, block: int = 1 << 16) -> list[float]:
    """:func:`weighted_percentiles` of ``values * scale`` for runs already sorted by value
    (``counts`` > 0).

    The running sum of the counts is taken per ``block`` of runs, and inside only the
    blocks that hold a percentile: the same positions as one cumulative sum of all runs,
    without an array of their size."""
    if not len(counts):
        return [_NAN] * len(qs)
    block_ends = np.cumsum(np.add.reduceat(counts, np.arange(0, len(counts), block),
                                           dtype=np.int64))
    total = int(block_ends[-1])
    if total == 0:
        return [_NAN] * len(qs)

    def at(position: int) -> float:
        """The value of the run covering 0-based ``position`` of the repeated values."""
        b = int(np.searchsorted(block_ends, position, side="right"))
        start = b * block
        ends = np.cumsum(counts[start:start + block], dtype=np.int64)
        before = int(block_ends[b - 1]) if b else 0
        return values[start + int(np.searchsorted(ends, position - before, side="right"))] \
            * scale

    out = []
    for q in qs:
        pos = q / 100.0 * (total - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, total - 1)
        v_lo, v_hi = at(lo), at(hi)
        out.append(float(v_lo + (pos - lo) * (v_hi - v_lo)))
    return out


def request_frame(result: RunResult, slo: SloConfig | None = None,
                  class_slos: dict[str, RequestSlo] | None = None) -> pd.DataFrame:
    """One row per measured request (warm-up requests left out) with derived latencies
    in milliseconds.

    Columns: variant, request_id, cls, replica, (pool: a pooled fleet's pool name, "" when
    rejected before routing), status, reject_reason,
    arrival_s, prompt_tokens, output_tokens, queue_ms, ttft_ms, tpot_ms,
    e2el_ms, max_itl_ms, num_preemptions, good (met every per-request SLO of
    its class; False when rejected); for a disaggregated run (where ``replica`` is
    the prefill replica) also the KV transfer's decode_replica, kv_bytes,
    kv_backpressure_ms, kv_transfer_ms and second_token_ms
    (:func:`capsim.metrics.disagg.transfer_frame`; NaN for requests without one).
    """
    r = result.requests
    df = pd.DataFrame({
        "variant": result.variant,
        "request_id": r.request_id,
        "cls": np.asarray(result.class_names, dtype=object)[np.asarray(r.class_id, dtype=np.int64)]
        if len(r.request_id) else [],
        "replica": r.replica,
        "status": r.status,
        "reject_reason": r.reject_reason,
        "arrival_s": r.arrival_s,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "n": r.n if len(r.n) else 1,
        "num_preemptions": r.num_preemptions,
    })
    if result.pools and len(r.pool):          # a pooled fleet: the pool that served it
        names = np.asarray([p.name for p in result.pools] + [""], dtype=object)
        df.insert(4, "pool", names[np.asarray(r.pool, dtype=np.int64)])   # -1: not routed
    arrival = np.asarray(r.arrival_s, dtype=np.float64)
    first = np.asarray(r.first_token_s, dtype=np.float64)
    finish = np.asarray(r.finish_s, dtype=np.float64)
    out = np.asarray(r.output_tokens, dtype=np.float64)
    df["queue_ms"] = (np.asarray(r.first_scheduled_s, dtype=np.float64) - arrival) * 1e3
    df["ttft_ms"] = (first - arrival) * 1e3
    df["e2el_ms"] = (finish - arrival) * 1e3
    with np.errstate(invalid="ignore", divide="ignore"):
        df["tpot_ms"] = np.where(out > 1, (finish - first) * 1e3 / (out - 1), _NAN)
    df["max_itl_ms"] = np.where(held_requests(result), _NAN,
                                np.asarray(r.max_itl_s, dtype=np.float64) * 1e3)
    df["good"] = _good_mask(df, slo, class_slos or {})
    warmup = _warmup_mask(result)
    if warmup is not None:
        df = df[~warmup].reset_index(drop=True)
    if result.disagg is not None:
        df = df.merge(transfer_frame(result), on="request_id", how="left")
    return df


#: What a target on an ITL column of replies held whole reads (no gap was seen).
HELD_TEXT = "n/a (held replies)"


def held_requests(result: RunResult) -> np.ndarray | bool:
    """Which requests were served by a pool that holds each reply whole until its batch
    ends (``PolicyCapabilities.holds_replies``): a bool per request for a pooled fleet
    (one not routed: False), else one bool for the run."""
    if result.pools:
        held = np.asarray([label_holds_replies(p.scheduler) for p in result.pools] + [False])
        return held[np.asarray(result.requests.pool, dtype=np.int64)]   # -1: not routed
    return label_holds_replies(result.scheduler)


def held_runs(result: RunResult) -> np.ndarray:
    """Which ITL runs are the gaps of held replies (bool, shape (R,)): none reaches the
    client as a gap (see the module docstring)."""
    itl = result.itl
    if result.pools and len(itl.pool):
        held = np.asarray([label_holds_replies(p.scheduler) for p in result.pools])
        return held[np.asarray(itl.pool, dtype=np.int64)]
    return np.full(len(itl.gap_s), label_holds_replies(result.scheduler))


def _warmup_mask(result: RunResult) -> np.ndarray | None:
    """Which requests are warm-up (None when none is)."""
    mask = np.asarray(result.requests.status) == WARMUP
    return mask if mask.any() else None


def _good_mask(df: pd.DataFrame, slo: RequestSlo | None,
               class_slos: dict[str, RequestSlo]) -> np.ndarray:
    good = (df["status"] == FINISHED).to_numpy().copy()
    for cls in df["cls"].unique():
        limits = class_slos.get(cls) or slo
        if limits is None:
            continue
        rows = (df["cls"] == cls).to_numpy()
        for col, bound in (("ttft_ms", limits.ttft_ms), ("tpot_ms", limits.tpot_ms),
                           ("e2el_ms", limits.e2el_ms)):
            if bound is not None:
                vals = df[col].to_numpy()
                # TPOT is undefined for one-token replies: no limit applies to them.
                ok = (vals <= bound) | (np.isnan(vals) & (col == "tpot_ms"))
                good[rows] &= ok[rows]
    return good


def summarize(result: RunResult, slo: SloConfig,
              class_slos: dict[str, RequestSlo] | None = None,
              percentiles: tuple[float, ...] = ()) -> list[SummaryRow]:
    """Summary rows for a run: one for all requests (cls "all"), then one per class.

    Run-level SLO targets are checked on every row; rows of classes with no
    requests are omitted. ``percentiles`` (``--percentiles``, each 0..100) fill each
    row's :attr:`SummaryRow.percentiles` (:func:`percentile_columns`).
    """
    df = request_frame(result, slo, class_slos)
    # Held replies' gaps never reach the client: left out. Sorted once for all rows: each
    # class's runs stay sorted (see _itl_stats).
    itl = sorted_itl(result)
    gaps, counts, run_cls = itl.gaps_s, itl.counts, itl.run_cls
    missing = dict.fromkeys(ITL_COLUMNS, HELD_TEXT) if itl.held else None
    span_s = _span_s(df)
    run_span_s = _run_span_s(result) if _warmup_mask(result) is not None else span_s
    shared = _shared_stats(result, run_span_s)
    rows = [_row(result, "all", df, gaps, counts, span_s, slo, shared, percentiles, missing)]
    for cid, name in enumerate(result.class_names):
        sub = df[df["cls"] == name]
        if len(sub) and len(result.class_names) > 1:
            mask = run_cls == cid
            rows.append(_row(result, name, sub, gaps[mask], counts[mask], span_s, slo, shared,
                             percentiles, missing))
    if result.disagg is not None:
        rows = [r.model_copy(update=disagg_columns(result, r.cls, run_span_s)) for r in rows]
    return rows


def _span_s(df: pd.DataFrame) -> float:
    """First arrival → last completion (vllm bench serve's benchmark duration)."""
    done = df["status"] == FINISHED
    if not done.any():
        return _NAN
    end = (df.loc[done, "arrival_s"] + df.loc[done, "e2el_ms"] / 1e3).max()
    return float(end - df["arrival_s"].min())


def _run_span_s(result: RunResult) -> float:
    """The whole run's span, warm-up included: first arrival → last completion."""
    r = result.requests
    finish = np.asarray(r.finish_s, dtype=np.float64)
    if np.isnan(finish).all():
        return _NAN
    return float(np.nanmax(finish) - np.nanmin(np.asarray(r.arrival_s, dtype=np.float64)))


def _shared_stats(result: RunResult, span_s: float) -> dict[str, float]:
    """Variant-level utilisation and cost figures, identical on every class row.

    GPU busy, MFU and MBU divide by GPU-seconds: a fixed fleet's ``num_gpus`` × the span;
    a fleet that changes (autoscaling, failures; ``num_gpus`` is then its peak) its
    GPU-hours paid (:attr:`FleetResult.gpu_hours`: each replica from request to stop), so
    they are time-averaged over the GPUs it had rather than read against the peak."""
    reps = result.replicas
    flops = sum(r.flops for r in reps)
    hbm = sum(r.hbm_bytes for r in reps)
    span = span_s if span_s and span_s > 0 else _NAN
    busy = sum(r.busy_s * r.tensor_parallel_size for r in reps)
    pools = result.pools or ()
    if result.fleet is None and not any(p.fleet is not None for p in pools):
        gpus = max(result.num_gpus, 1)
        util = {"gpu_busy_frac": busy / gpus / span,
                "mfu": flops / (gpus * result.peak_flops_per_gpu * span),
                "mbu": hbm / (gpus * result.hbm_bandwidth_per_gpu_bytes_per_s * span)}
    else:
        # A pooled fleet: each pool's GPU-hours, or its GPUs over the span when fixed.
        gpu_s = (result.fleet.gpu_hours * 3600.0 if result.fleet is not None else
                 sum(p.fleet.gpu_hours * 3600.0 if p.fleet is not None else p.num_gpus * span
                     for p in pools)) or _NAN
        util = {"gpu_busy_frac": busy / gpu_s,
                "mfu": flops / (result.peak_flops_per_gpu * gpu_s),
                "mbu": hbm / (result.hbm_bandwidth_per_gpu_bytes_per_s * gpu_s)}
    held = sum(r.slot_capacity for r in reps)
    kv_frac = max((r.peak_kv_used_blocks / r.num_gpu_blocks for r in reps if r.num_gpu_blocks),
                  default=_NAN)
    return {
        "num_gpus": result.num_gpus,
        **util,
        "kv_peak_frac": kv_frac,
        "preemptions": sum(r.preemptions for r in reps),
        "recomputed_tokens": sum(r.recomputed_tokens for r in reps),
        "swap_bytes": sum(r.swap_out_bytes + r.swap_in_bytes for r in reps),
        **_kv_layout_stats(reps),
        "prefix_hit_rate": _ratio(sum(r.prefix_hit_tokens for r in reps),
                                  sum(r.prefix_queried_tokens for r in reps)),
        "prefix_block_hit_rate": _ratio(sum(r.prefix_hit_blocks for r in reps),
                                        sum(r.prefix_queried_blocks for r in reps)),
        "prefill_tokens_saved": sum(r.prefix_hit_tokens for r in reps),
        **_offload_stats(reps),
        "slot_occupancy": sum(r.slot_steps_useful for r in reps) / held if held else _NAN,
        "cost_per_hour_usd": result.price_per_hour_usd,
    }


def _offload_stats(reps) -> dict[str, float]:
    """The host tier's hit rate (hit tokens ÷ the prefix cache's queried tokens, beside the
    GPU tier's ``prefix_hit_rate``) and tokens loaded; NaN and 0 without KV offload."""
    hits = sum(r.offload_hit_tokens for r in reps)
    if not any(r.offload_capacity_blocks for r in reps):
        return {"offload_hit_rate": _NAN, "offload_hit_tokens": 0}
    return {"offload_hit_rate": _ratio(hits, sum(r.prefix_queried_tokens for r in reps)),
            "offload_hit_tokens": hits}


def _kv_layout_stats(reps) -> dict[str, int]:
    """Seed 000's allocator figures, summed over replicas: waste and table size at peak,
    and the contiguous allocators' external fragmentation at the first refused admission."""
    blocked = [r.first_blocked for r in reps if r.first_blocked]
    return {
        "peak_running": max((r.peak_running for r in reps), default=0),
        "kv_internal_waste_tokens": sum(max(0, r.peak_kv_used_blocks * r.block_size
                                            - r.kv_written_tokens_at_peak) for r in reps),
        "block_table_entries_at_peak": sum(r.block_table_entries_at_peak for r in reps),
        "external_fragmentation_tokens": blocked[0][1] if blocked else 0,
        "biggest_hole_tokens": blocked[0][2] if blocked else 0,
    }


def _ratio(num: float, den: float) -> float:
    return num / den if den else _NAN


def _pct(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else _NAN


def _stats(prefix: str, values: np.ndarray, which: tuple[str, ...]) -> dict[str, float]:
    vals = values[~np.isnan(values)]
    out = {}
    for key in which:
        if key == "mean":
            out[f"{prefix}_mean_ms"] = float(vals.mean()) if len(vals) else _NAN
        elif key == "max":
            out[f"{prefix}_max_ms"] = float(vals.max()) if len(vals) else _NAN
        else:
            q = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}[key]
            out[f"{prefix}_{key}_ms"] = _pct(vals, q)
    return out


def _itl_stats(gaps_s: np.ndarray, counts: np.ndarray, stall_ms: float) -> dict[str, float]:
    """ITL columns of runs ``gaps_s`` (sorted ascending) × ``counts``.

    Each figure is the one of ``gaps_ms = gaps_s * 1e3``, read without making that array
    (a day has ~16 M runs: every array of that size costs more than the arithmetic):
    ``x * 1e3`` rounds monotonically, so ``gaps_ms`` is sorted like ``gaps_s``."""
    gaps_s, counts = _nonempty(gaps_s, counts)
    total = int(counts.sum())
    stall_from = bisect.bisect_right(gaps_s, stall_ms, key=lambda g: g * 1e3)
    out = {
        # fsum: exact, so the mean does not depend on the order the runs were recorded in.
        "itl_mean_ms": _exact_sum_ms(gaps_s, counts) / total if total else _NAN,
        "itl_max_ms": float(gaps_s[-1] * 1e3) if total else _NAN,
        "itl_stalls": int(counts[stall_from:].sum()),
    }
    keys = ("p50", "p90", "p99", "p999")
    for key, value in zip(keys, _sorted_percentiles(gaps_s, counts, (50.0, 90.0, 99.0, 99.9),
                                                    scale=1e3)):
        out[f"itl_{key}_ms"] = value
    return out


def _exact_sum_ms(gaps_s: np.ndarray, counts: np.ndarray, chunk: int = 1 << 16) -> float:
    """``math.fsum((gaps_s * 1e3 * counts).tolist())`` (exact, so independent of order), a
    chunk at a time: a day's tens of millions of ITL runs as Python floats took over a
    gigabyte."""
    return math.fsum(chain.from_iterable((gaps_s[i:i + chunk] * 1e3 * counts[i:i + chunk]).tolist()
                                         for i in range(0, len(gaps_s), chunk)))


#: The summary's ITL columns (NaN for a run whose every reply is held whole).
ITL_COLUMNS = ("itl_mean_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "itl_p999_ms",
               "itl_max_ms")


def _row(result: RunResult, cls: str, df: pd.DataFrame, gaps: np.ndarray, counts: np.ndarray,
         span_s: float, slo: SloConfig, shared: dict[str, float],
         percentiles: tuple[float, ...] = (),
         missing: dict[str, str] | None = None) -> SummaryRow:
    """One summary row; ``percentiles``: the extra ``--percentiles`` columns; ``missing``:
    what a failed target on a NaN column reads, by column (held replies' ITL), else
    "no data"."""
    done = df[df["status"] == FINISHED]
    out_tokens = float((done["output_tokens"] * done["n"]).sum())   # every sample's tokens
    total_tokens = out_tokens + float(done["prompt_tokens"].sum())
    span = span_s if span_s and span_s > 0 else _NAN
    values: dict[str, float] = {
        "num_requests": len(df),
        "num_finished": len(done),
        "num_rejected": len(df) - len(done),
        **_rejected_by_kind(df),
        **_stats("ttft", done["ttft_ms"].to_numpy(), ("mean", "p50", "p90", "p99", "p999", "max")),
        **_stats("tpot", done["tpot_ms"].to_numpy(), ("mean", "p50", "p90", "p99")),
        **_itl_stats(gaps, counts, slo.stall_threshold_ms),
        **_stats("e2el", done["e2el_ms"].to_numpy(), ("mean", "p50", "p90", "p99")),
        **_stats("queue", done["queue_ms"].to_numpy(), ("mean", "p99")),
        "request_throughput_per_s": len(done) / span,
        "output_throughput_tok_per_s": out_tokens / span,
        "total_throughput_tok_per_s": total_tokens / span,
        "goodput_req_per_s": float(df["good"].sum()) / span,
        "goodput_fraction": float(df["good"].mean()) if len(df) else _NAN,
        **shared,
    }
    per_hour = shared["cost_per_hour_usd"]
    tok_per_hour = values["output_throughput_tok_per_s"] * 3600.0
    # The fleet's price is shared by all classes: per-token cost only for the total.
    values["cost_per_million_output_tokens_usd"] = (
        per_hour / tok_per_hour * 1e6 if cls == "all" and tok_per_hour > 0 else _NAN)
    failed = failed_targets(values, slo.targets, missing)
    return SummaryRow(variant=result.variant, cls=cls, slo_pass=not failed,
                      slo_failed="; ".join(failed), **values,
                      percentiles=percentile_columns(done, *_nonempty(gaps, counts), percentiles)
                      if percentiles else {})


def _rejected_by_kind(df: pd.DataFrame) -> dict[str, int]:
    """``rejected_<kind>``: the requests of ``df`` rejected for each kind of reason
    (:func:`~capsim.results.model.reject_kind`)."""
    counts = dict.fromkeys(REJECT_KINDS, 0)
    for reason in df.loc[df["status"] != FINISHED, "reject_reason"]:
        counts[reject_kind(reason)] += 1
    return {f"rejected_{kind}": n for kind, n in counts.items()}


#: SummaryRow's per-kind rejection columns (``rejected_never_fits``, ...).
REJECT_COLUMNS = tuple(f"rejected_{kind}" for kind in REJECT_KINDS)


def rejection_kinds(row: SummaryRow) -> str:
    """The row's rejections by kind, commonest first (ties in :data:`REJECT_KINDS`'
    order), e.g. ``queue_full 310, never_fits 2``; "" when it rejected none."""
    counts = [(getattr(row, f"rejected_{kind}"), kind) for kind in REJECT_KINDS]
    ranked = sorted((c for c in counts if c[0]), key=lambda c: -c[0])
    return ", ".join(f"{kind} {n:,}" for n, kind in ranked)


def without_unused_reject_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the :data:`REJECT_COLUMNS` that are 0 (or empty) in every row, nor
    their ``_ci95`` companions (a sweep's points): a table shows the kinds of rejection its
    runs had, and a run that rejected nothing keeps the columns it always had."""
    unused = [c for c in REJECT_COLUMNS if c in frame.columns
              and not (frame[c].fillna(0) != 0).any()]
    unused += [f"{c}_ci95" for c in unused if f"{c}_ci95" in frame.columns]
    return frame.drop(columns=unused)


def summary_frame(rows: list[SummaryRow]) -> pd.DataFrame:
    """summary.csv's table: one row per variant × class (the ``rejected_<kind>`` columns of
    the kinds that occurred only); the ``--percentiles`` columns (:attr:`SummaryRow.percentiles`)
    last, when asked for."""
    df = without_unused_reject_columns(pd.DataFrame([r.model_dump() for r in rows]))
    extra = pd.DataFrame([r.percentiles for r in rows])
    return pd.concat([df, extra], axis=1) if len(extra.columns) else df
