"""The result model: the only contract between the simulation and the report.

``sim.simulate`` returns a :class:`RunResult`; ``metrics.summarize`` turns it
into :class:`SummaryRow` objects; ``report`` renders both. Every model here
round-trips through JSON (``model_dump_json`` / ``model_validate_json``).

Units: seconds and bytes internally (``_s``, ``_bytes``); milliseconds only in
summary columns whose names end in ``_ms``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capsim.results.arrays import (ColumnModel, FloatColumn, IntColumn, StrColumn, TextColumn,
                            empty_ints)

FINISHED = "finished"
REJECTED = "rejected"
#: How a request's ``reject_reason`` begins when it failed after waiting
#: ``cluster.router_queue_timeout_s`` at the router while no replica served: it was sent and
#: never answered, a TTFT of infinity for the day view (not a request refused on arrival).
ROUTER_TIMEOUT_REASON = "timed out at the router"

#: How the reason of a request turned away by a limit begins: a waiting queue (or the
#: requests in flight) at its limit (``engine.max_waiting_requests``,
#: ``engine.max_inflight_requests``, ``cluster.router_max_queued_requests``), or the
#: router's token bucket empty (``cluster.router_rate_limit``). Such a request got an
#: immediate error (the gateway's HTTP 429, the engine's 503), not a slow reply.
QUEUE_FULL, RATE_LIMITED = "queue_full", "rate_limited"
#: How the reason of a sheddable request dropped while the pool was saturated begins
#: (``workload.classes.N.criticality: sheddable``, ``cluster.saturation``).
SHED = "shed"

#: Every kind of rejection, in the order summary.csv's ``rejected_<kind>`` columns follow
#: ``num_rejected``: ``never_fits`` (no replica could ever serve it: longer than
#: ``max_model_len``, more KV than the whole cache, ...), ``queue_full`` and
#: ``rate_limited`` (shed: :data:`QUEUE_FULL`, :data:`RATE_LIMITED`), ``lost`` (its replica
#: failed, ``cluster.failures``), ``timed_out`` (held at the router while no replica
#: served, :data:`ROUTER_TIMEOUT_REASON`), ``previous_turn`` (a later turn of a
#: conversation whose earlier turn was rejected), ``shed`` (a sheddable request dropped while
#: the pool was saturated, :data:`SHED`).
REJECT_KINDS = ("never_fits", QUEUE_FULL, RATE_LIMITED, "lost", "timed_out", "previous_turn",
                SHED)

# How the reasons of the kinds other than never_fits begin (engine/fleet.py's failure,
# sim/traffic.py's later turn); never_fits is every other reason.
_REASON_STARTS = ((QUEUE_FULL + ":", QUEUE_FULL), (RATE_LIMITED + ":", RATE_LIMITED),
                  ("its replica ", "lost"), (ROUTER_TIMEOUT_REASON, "timed_out"),
                  ("the previous turn of its conversation", "previous_turn"),
                  (SHED + ":", SHED))


def reject_kind(reason: str) -> str:
    """The kind (one of :data:`REJECT_KINDS`) of a rejected request's ``reject_reason``;
    "" for a request not rejected (an empty reason)."""
    if not reason:
        return ""
    for start, kind in _REASON_STARTS:
        if reason.startswith(start):
            return kind
    return "never_fits"


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class RequestRecords(ColumnModel, _Result):
    """One entry per request of the trace, column-wise: numpy arrays of length N,
    indexed by request id (``request_id[i] == i`` for a simulated run).

    Times are absolute simulated seconds (float64); NaN where a request never
    reached that point (e.g. ``first_token_s`` of a rejected request). Integer
    columns may be narrower than int64 (``replica``, ``num_preemptions`` int32;
    ``class_id``, ``n`` as the trace has them); lists given to the constructor
    or read from JSON become int64 / float64 / unicode arrays
    (:mod:`capsim.results.arrays`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    request_id: IntColumn
    class_id: IntColumn
    replica: IntColumn                 # replica that served it (-1 if rejected before routing)
    arrival_s: FloatColumn
    prompt_tokens: IntColumn
    output_tokens: IntColumn
    status: StrColumn                  # FINISHED or REJECTED (a "<U8" array)
    reject_reason: TextColumn          # object array of str; "" when finished
    first_scheduled_s: FloatColumn     # first step that computed any of its tokens
    first_token_s: FloatColumn         # client receives output token 1: end of the step that
    #                                    emitted it (static batching: end of its batch), + the
    #                                    engine's output delay (vLLM 0.6: the next step's host
    #                                    work, engine/first_token.py)
    finish_s: FloatColumn              # client receives its last token (same delay)
    num_preemptions: IntColumn
    max_itl_s: FloatColumn             # largest gap between two of its consecutive tokens
    n: IntColumn = Field(default_factory=empty_ints)   # parallel samples (each generates
    #                                    output_tokens); empty = all 1
    pool: IntColumn = Field(default_factory=empty_ints)  # pooled fleet: index into
    #                                    RunResult.pools (-1: rejected before routing);
    #                                    empty = one pool


class ItlRuns(ColumnModel, _Result):
    """Inter-token gaps recorded as weighted runs (DESIGN.md "Metrics").

    Run ``i`` says: ``count[i]`` gaps of ``gap_s[i]`` seconds, all by requests
    of class ``class_id[i]``. Percentiles over the runs are exact. Columns are
    numpy arrays of one length (one run per engine step and class): ``gap_s``
    float64; from a run, ``count`` uint32 and ``class_id`` uint8 (wider for more
    than 256 classes); read from JSON, int64. Add counts up with ``.sum()``
    (numpy widens the accumulator).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    gap_s: FloatColumn
    count: IntColumn
    class_id: IntColumn
    pool: IntColumn = Field(default_factory=empty_ints)   # pooled fleet: the pool of each
    #                                    run (index into RunResult.pools); empty = one pool


class ReplicaTimeline(_Result):
    """Per-replica activity in fixed-width time bins starting at t = 0.

    Bin ``k`` covers ``[k * bin_s, (k + 1) * bin_s)``. Lists have one value per bin.
    """

    replica: int
    pool: str                          # "colocated", "prefill" or "decode"
    bin_s: float
    steps: list[int]                   # engine steps that ended in the bin
    busy_s: list[float]                # GPU-busy seconds in the bin
    batch_tokens_mean: list[float]     # mean tokens per step (prefill + decode)
    prefill_tokens: list[int]          # prefill tokens computed in the bin
    decode_tokens: list[int]           # decode tokens computed in the bin
    kv_used_blocks_max: list[int]
    queue_len_max: list[int]           # waiting requests (not yet admitted)
    running_max: list[int]             # sequences in the running batch
    step_max_s: list[float] = []       # longest engine step that ended in the bin (a long
    #                                    prefill step is a stall for every running decode)


class ReplicaStats(_Result):
    """Whole-run totals for one replica (one tensor-parallel engine)."""

    replica: int
    pool: str
    hardware: str
    tensor_parallel_size: int
    num_gpu_blocks: int
    block_size: int
    kv_cache_tokens: int
    steps: int
    busy_s: float
    flops: float                       # summed over its GPUs
    hbm_bytes: float                   # summed over its GPUs
    compute_bound_steps: int
    prefill_tokens: int                # computed prefill tokens (recompute included)
    decode_tokens: int
    preemptions: int
    peak_kv_used_blocks: int
    slot_steps_held: int               # Σ over steps of sequences holding a batch slot
    slot_steps_useful: int             # Σ over steps of sequences that emitted a token
    slot_capacity: int                 # Σ over steps of max_num_seqs
    recomputed_tokens: int = 0         # KV tokens dropped by recompute preemption
    swap_out_bytes: int = 0            # KV bytes swapped to host memory (swap preemption)
    swap_in_bytes: int = 0
    prefix_queried_tokens: int = 0     # tokens looked up in the prefix cache at admission
    prefix_hit_tokens: int = 0         # of which found cached (prefill skipped)
    prefix_queried_blocks: int = 0     # full blocks looked up
    prefix_hit_blocks: int = 0
    prefix_evictions: int = 0          # cached blocks reused for other content (LRU)
    offload_hit_tokens: int = 0        # queried tokens found in host memory (KV offload), loaded
    offload_stored_blocks: int = 0     # GPU evictions written to the host tier
    offload_capacity_blocks: int = 0   # the host tier's blocks (0: no KV offload)
    kv_written_tokens_at_peak: int = 0       # Σ computed tokens held, when KV use peaked
    block_table_entries_at_peak: int = 0     # Σ block-table lengths then (paged)
    peak_running: int = 0                    # most sequences in the batch at once
    admission_blocked: int = 0               # contiguous: requests that waited for a hole
    first_blocked: list[int] = []            # contiguous: [wanted, free tokens, biggest hole]


class TransferRecords(_Result):
    """One entry per KV-cache transfer of a disaggregated run, column-wise (length T).

    Times are absolute simulated seconds. ``handoff_s`` is when the prefill
    replica emitted token 1 and its KV was ready to leave; ``reserved_s`` when a
    decode replica had a slot and KV blocks for it (``reserved_s − handoff_s``
    is back-pressure); ``arrived_s`` when the last byte landed;
    ``second_token_s`` when the decode replica emitted token 2 (NaN if the
    request was preempted on the decode side before its first decode step).
    """

    request_id: list[int]
    class_id: list[int]
    prefill_replica: list[int]
    decode_replica: list[int]
    tokens: list[int]                  # KV tokens moved (the prompt)
    bytes: list[float]                 # tokens × KV bytes per token (all layers, K and V)
    overlapped_bytes: list[float]      # sent during the final prefill step (layer-wise overlap)
    handoff_s: list[float]
    reserved_s: list[float]
    arrived_s: list[float]
    second_token_s: list[float]


class LinkPortStats(_Result):
    """Traffic through one replica's port (one direction) of the KV link."""

    replica: int
    pool: str                          # "prefill" (egress) or "decode" (ingress)
    capacity_bytes_per_s: float        # TP × link bandwidth per direction
    bytes: float                       # bytes that crossed it
    busy_s: float                      # time with at least one transfer on it


class DisaggResult(_Result):
    """What a disaggregated (prefill/decode) run adds to a RunResult.

    Stranded capacity (issue 3): GPU-seconds a pool sat idle while the other
    pool was saturated. The prefill pool is *saturated* while every prefill
    replica is running a step and some prompt is still waiting; the decode
    pool is saturated while some prefilled request waits for decode room
    (back-pressure).
    """

    label: str                         # "1P3D": prefill replicas P, decode replicas D
    link: str
    link_bandwidth_bytes_per_s: float  # per GPU, per direction
    link_latency_s: float
    router: str                        # decode-side routing: least_kv | round_robin
    layerwise_overlap: bool
    prefill_replicas: int
    decode_replicas: int
    prefill_gpus: int
    decode_gpus: int
    prefill_hardware: str
    decode_hardware: str
    prefill_peak_flops_per_gpu: float  # dense peak of the prefill pool's GPUs (its dtype)
    decode_hbm_bandwidth_per_gpu_bytes_per_s: float
    transfers: TransferRecords
    ports: list[LinkPortStats]
    prefill_saturated_s: float
    decode_saturated_s: float
    stranded_prefill_gpu_s: float      # idle prefill GPU-seconds while decode was saturated
    stranded_decode_gpu_s: float       # idle decode GPU-seconds while prefill was saturated


class FleetResult(_Result):
    """How an autoscaled or failing fleet changed over the run (:mod:`capsim.engine.fleet`).

    ``times_s`` … ``draining``: the fleet after each change (step functions, first entry
    at t = 0). Per replica, by index: when it was asked for (0 for the replicas serving at
    t = 0), when it began serving (``requested_s`` + the provisioning delay) and when it
    stopped (drained after a scale-down, or the run's end). GPU-hours count from request
    to stop: a replica is paid for while it starts and while it drains.
    """

    policy: str                         # "running 48/replica, 1-8 replicas, ..." for the report
    provisioning_delay_s: float
    gpus_per_replica: int
    price_per_gpu_hour_usd: float
    times_s: list[float]
    serving: list[int]
    provisioning: list[int]
    draining: list[int]
    down: list[int]                     # failed replicas awaiting repair
    requested_s: list[float]
    ready_s: list[float]
    stopped_s: list[float]
    scale_ups: int = 0
    scale_downs: int = 0
    failures: list[list[float]] = Field(default_factory=list)  # [replica, failed_s, repaired_s]
    retried_requests: int = 0           # requests sent again after a failure (once or more)
    retries: int = 0                    # Σ times they were sent again
    failed_requests: int = 0            # in-flight requests counted as failed (in_flight: fail)
    timed_out_requests: int = 0         # failed after cluster.router_queue_timeout_s at the
    #                                     router while no replica served
    skipped_failures: list[str] = Field(default_factory=list)   # cluster.failures.at
    #     entries that did not happen, each "replica K at S s: why" (not up then, or the run
    #     had ended)

    @property
    def gpu_hours(self) -> float:
        """Σ over replicas of (stopped − requested) × GPUs per replica, hours."""
        return sum(b - a for a, b in zip(self.requested_s, self.stopped_s)) \
            * self.gpus_per_replica / 3600.0

    @property
    def cost_usd(self) -> float:
        return self.gpu_hours * self.price_per_gpu_hour_usd


class PoolResult(_Result):
    """One pool of a pooled fleet (``cluster.pools``): what it is and what it cost.

    ``price_per_hour_usd``: the pool's GPUs at the profile price; for an autoscaled or
    failing pool its mean over the run (``fleet.cost_usd`` ÷ hours). ``num_replicas``: at
    t = 0, or the most that served at once when the pool's fleet changed.
    """

    name: str
    model: str
    hardware: str
    tensor_parallel_size: int
    pipeline_parallel_size: int = 1    # stages of tensor_parallel_size GPUs each
    gpus_per_replica: int
    engine: str                        # engine preset and version
    preset: str                        # engine preset name
    scheduler: str
    num_replicas: int
    num_gpus: int
    price_per_gpu_hour_usd: float
    price_per_hour_usd: float
    peak_flops_per_gpu: float
    hbm_bandwidth_per_gpu_bytes_per_s: float
    routed_requests: int               # requests the router sent to it
    fleet: FleetResult | None = None   # an autoscaled or failing pool only


class DaySamples(_Result):
    """The fleet sampled every ``sample_s`` (a run with time-varying load, autoscaling or
    failures), for the day view (:mod:`capsim.metrics.day`); less often once a run outlasts
    its arrivals (:func:`capsim.sim.day.sample_period_s`: ``times_s`` says when).

    ``itl_runs[i]``: ITL runs recorded by ``times_s[i]`` (the result's ITL runs in
    ``[itl_runs[i], itl_runs[i + 1])`` were recorded between two samples; a decode run's
    gaps are recorded when it is committed, at most one run's length late).
    ``queue[i]``: requests waiting on serving replicas (and held by the router);
    ``running[i]``: sequences running on them; ``serving[i]``: replicas serving.
    """

    sample_s: float
    times_s: list[float]
    itl_runs: list[int]
    queue: list[int]
    running: list[int]
    serving: list[int]


class TracedSteps(ColumnModel, _Result):
    """The engine steps of a ``--trace-events`` window, column-wise (length S, in the
    order the steps ended on each replica; :mod:`capsim.engine.step_trace`).

    Step ``i`` ran on ``StepTrace.replicas[replica[i]]`` from ``start_s`` to ``end_s``
    (absolute simulated seconds; a pipelined batch: launch to leaving the last stage), in
    batch slot ``lane`` (0 unless several batches of a pipeline-parallel replica are in
    flight), computing ``prefill_tokens`` prompt tokens and ``decode_tokens`` decode
    tokens (emitted tokens under speculative decoding) with ``kv_used_blocks`` KV blocks
    held; after it ``running`` sequences were running and ``queue`` requests waiting;
    ``preemptions``: preemptions its scheduling made.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    replica: IntColumn
    lane: IntColumn
    start_s: FloatColumn
    end_s: FloatColumn
    prefill_tokens: IntColumn
    decode_tokens: IntColumn
    running: IntColumn
    queue: IntColumn
    kv_used_blocks: IntColumn
    preemptions: IntColumn


class TracedReplica(_Result):
    """A replica of a step trace: its index in its pool's fleet, role and KV blocks."""

    replica: int
    pool: str                          # "colocated", "prefill" or "decode"
    pool_name: str = ""                # a pooled fleet's pool (cluster.pools), else ""
    num_gpu_blocks: int


class StepTrace(_Result):
    """``--trace-events START:END``: every replica's engine steps that overlap the window
    ``[start_s, end_s]`` of simulated seconds (a report writes them as a Chrome / Perfetto
    trace)."""

    start_s: float
    end_s: float
    replicas: list[TracedReplica]
    steps: TracedSteps


class RunResult(_Result):
    """Everything one variant's run produced."""

    variant: str
    seed: int
    scheduler: str
    num_replicas: int
    num_gpus: int
    hardware: str
    model: str
    price_per_hour_usd: float          # all GPUs of the variant
    peak_flops_per_gpu: float
    hbm_bandwidth_per_gpu_bytes_per_s: float
    class_names: list[str]
    sim_end_s: float
    wall_s: float
    requests: RequestRecords
    itl: ItlRuns
    replicas: list[ReplicaStats]
    timelines: list[ReplicaTimeline]
    log: list[str]                     # vLLM-style startup lines ("GPU KV cache size: ...")
    disagg: DisaggResult | None = None # prefill/decode disaggregation only
    engine: str = ""                   # engine preset and version, e.g. "vllm-v1 (vLLM 0.19.0)"
    preset: str = ""                   # engine preset name; "disaggregated" for a P/D split
    fleet: FleetResult | None = None   # an autoscaled or failing fleet only
    day: DaySamples | None = None      # time-varying load, autoscaling or failures only
    pools: list[PoolResult] | None = None   # a pooled fleet (cluster.pools) only
    step_trace: StepTrace | None = None     # --trace-events only


class SummaryRow(_Result):
    """One row of summary.csv: a variant × request class (``cls == "all"`` for the total).

    Latency columns are milliseconds. Percentiles follow numpy's default
    (linear interpolation), as ``vllm bench serve`` reports them.
    """

    variant: str
    cls: str
    num_requests: int
    num_finished: int
    num_rejected: int
    # num_rejected by kind (REJECT_KINDS); summary.csv keeps the columns of the kinds that
    # occurred (metrics.summary.without_unused_reject_columns)
    rejected_never_fits: int = 0
    rejected_queue_full: int = 0
    rejected_rate_limited: int = 0
    rejected_lost: int = 0
    rejected_timed_out: int = 0
    rejected_previous_turn: int = 0
    rejected_shed: int = 0
    ttft_mean_ms: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    ttft_p999_ms: float
    ttft_max_ms: float
    tpot_mean_ms: float
    tpot_p50_ms: float
    tpot_p90_ms: float
    tpot_p99_ms: float
    itl_mean_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    itl_p99_ms: float
    itl_p999_ms: float
    itl_max_ms: float
    itl_stalls: int                    # gaps above slo.stall_threshold_ms
    e2el_mean_ms: float
    e2el_p50_ms: float
    e2el_p90_ms: float
    e2el_p99_ms: float
    queue_mean_ms: float
    queue_p99_ms: float
    request_throughput_per_s: float
    output_throughput_tok_per_s: float
    total_throughput_tok_per_s: float
    goodput_req_per_s: float
    goodput_fraction: float            # finished requests meeting every per-request SLO ÷ all requests
    num_gpus: int
    gpu_busy_frac: float
    mfu: float
    mbu: float
    kv_peak_frac: float
    preemptions: int
    recomputed_tokens: int = 0
    swap_bytes: int = 0                          # KV bytes moved GPU↔host by swap preemption
    peak_running: int = 0                        # most sequences batched at once (any replica)
    kv_internal_waste_tokens: int = 0            # at peak KV use: slots held − tokens written
    block_table_entries_at_peak: int = 0
    external_fragmentation_tokens: int = 0       # contiguous: free tokens when the first
    biggest_hole_tokens: int = 0                 # admission found no hole big enough
    prefix_hit_rate: float = float("nan")        # hit tokens ÷ queried tokens (vLLM's metric)
    prefix_block_hit_rate: float = float("nan")  # hit full blocks ÷ queried full blocks
    prefill_tokens_saved: int = 0                # prompt tokens not computed thanks to hits
    # KV offload to host memory (engine.kv_offloading_size): the host tier's hits, as
    # prefix_hit_rate is the GPU tier's (NaN without offload).
    offload_hit_rate: float = float("nan")       # host-tier hit tokens ÷ queried tokens
    offload_hit_tokens: int = 0                  # prompt tokens loaded from host memory
    slot_occupancy: float              # useful slot-steps ÷ (max_num_seqs × steps), seed 000's occupancy
    cost_per_hour_usd: float
    cost_per_million_output_tokens_usd: float
    slo_pass: bool                     # every scenario SLO target met (targets apply to cls == "all" and per class)
    slo_failed: str                    # "" or "; "-joined failed targets, e.g. "itl_p99_ms 120.3 > 100"
    # Prefill/decode disaggregation ("" / NaN for co-located variants; DisaggResult has the raw data).
    disagg: str = ""                             # "1P3D": prefill replicas, decode replicas
    prefill_busy_frac: float = float("nan")      # prefill pool GPU-busy seconds ÷ (its GPUs × span)
    decode_busy_frac: float = float("nan")
    prefill_mfu: float = float("nan")            # prefill pool FLOP/s ÷ (its GPUs × peak)
    decode_mbu: float = float("nan")             # decode pool HBM bytes/s ÷ (its GPUs × bandwidth)
    decode_slot_occupancy: float = float("nan")  # decode pool: sequences per step ÷ max_num_seqs
    kv_transfer_p50_ms: float = float("nan")     # decode slot reserved → last KV byte landed
    kv_transfer_p99_ms: float = float("nan")
    kv_transfer_max_ms: float = float("nan")
    kv_backpressure_p99_ms: float = float("nan") # token 1 → decode slot reserved (waiting for room)
    second_token_p50_ms: float = float("nan")    # token 1 (prefill) → token 2 (decode), in ITL too
    second_token_p99_ms: float = float("nan")
    kv_transfer_gib: float = float("nan")        # KV bytes moved, GiB
    kv_link_util_frac: float = float("nan")      # busiest port: bytes ÷ (capacity × span)
    stranded_prefill_frac: float = float("nan")  # idle prefill GPU-s while decode saturated ÷ (prefill GPUs × span)
    stranded_decode_frac: float = float("nan")   # idle decode GPU-s while prefill saturated ÷ (decode GPUs × span)
    # ``--percentiles``: vLLM-named percentile columns ("p99.9_itl_ms" → ms), in the order
    # asked for; empty by default. Left out of ``model_dump`` so summary.csv, pools.csv and
    # the sweep CSV keep their columns unless asked (summary_frame appends them).
    percentiles: dict[str, float] = Field(default_factory=dict, exclude=True)

    def value(self, key: str) -> float | int | str:
        """The column ``key``: a field, or a ``--percentiles`` column ("p99.9_itl_ms").

        Raises:
            KeyError: neither."""
        if key in self.percentiles:
            return self.percentiles[key]
        if key in type(self).model_fields:
            return getattr(self, key)
        raise KeyError(key)
