"""What a resolved variant is: the frozen types ``sim.simulate`` runs.

A variant of a scenario becomes one :class:`RunConfig`: its workload, model and
:class:`Pool` s — ``(colocated,)``, ``(prefill, decode)`` joined by a :class:`KVTransfer`
(DistServe, OSDI'24; Splitwise, ISCA'24), or one per pool of a :class:`PooledFleet`
(``cluster.pools``). :mod:`capsim.scenario.resolve` makes them; nothing here reads a file.

Public API:
    Pool, KVTransfer, RunConfig        a pool of replicas, a KV link, a whole variant
    FleetPool, Route, PooledFleet      a pooled fleet's pools, route rules and router
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from capsim.cost.pipeline import PipelinePricer
from capsim.cost.pricer import StepPricer
from capsim.cost.speculative import DraftHost
from capsim.kv.capacity import KVCapacity
from capsim.kv.memory import rule_capture_sizes
from capsim.profiles.engines import EnginePreset, HostOverhead
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.links import LinkProfile, resolve_link
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import load_quant_format
from capsim.scenario.admission import RateLimitConfig
from capsim.scenario.fleet import AutoscalingConfig, FailuresConfig
from capsim.scenario.routing import RouterOptions, SaturationConfig
from capsim.scenario.schema import EngineConfig
from capsim.scenario.speculative import SERIAL_DRAFTERS, SpecDecoding
from capsim.scenario.workload import WorkloadConfig


@dataclass(frozen=True)
class Pool:
    """Identical replicas, each one tensor-parallel engine with its GPU, knobs and KV cache.

    A co-located variant has one pool (``role`` ``colocated``); a disaggregated one a
    ``prefill`` and a ``decode`` pool, each resolved with every rule, default and memory
    check of a co-located variant.
    """

    role: str
    hardware: HardwareProfile
    engine: EngineConfig
    kv: KVCapacity
    num_replicas: int
    preset: EnginePreset
    spec: SpecDecoding | None = None     # engine.speculative, resolved (None: off)

    @property
    def host_overhead(self) -> HostOverhead:
        """The preset's host terms with ``engine.async_scheduling`` applied. Left unset, a
        vLLM V1 preset schedules asynchronously unless a draft-model or n-gram drafter runs
        (vllm/config/vllm.py ``VllmConfig`` at v0.19.0: ``async_scheduling`` None is set
        True unless the speculative method is not EAGLE / MTP); a preset with
        ``serial_with_speculation`` (SGLang 0.5) runs every drafter serially."""
        knob, host = self.engine.async_scheduling, self.preset.host_overhead
        if knob is None and self.spec is not None and (
                self.spec.method in SERIAL_DRAFTERS or host.serial_with_speculation):
            knob = False
        return host.resolved(knob)

    @property
    def output_delay_s(self) -> float:
        """Seconds after the step that computed them that its tokens reach the client: with
        vLLM V0's asynchronous output processing (the preset's ``async_output_proc``) a
        step's outputs are streamed during the next step, once that step is scheduled, its
        input prepared and broadcast to the TP workers and its forward launched, so one
        step's full host work (``per_step_s`` with the TP term; under multi-step scheduling
        the step after a prefill or a window starts a window and runs the scheduler), else 0.
        vLLM turns the processing off with pipeline parallelism or speculative decoding
        (``ModelConfig.verify_async_output_proc``, vllm/config.py at v0.6.0, 32e7db2), and a
        replica that is not co-located streams nothing itself."""
        host, eng = self.host_overhead, self.engine
        if (not host.async_output_proc or self.role != "colocated" or self.spec is not None
                or eng.pipeline_parallel_size > 1):
            return 0.0
        return host.for_tensor_parallel(eng.tensor_parallel_size).per_step_s

    @property
    def holds_window_finishes(self) -> bool:
        """Whether a request finishing inside a multi-step window streams its last chunk at
        the window's end or the next arrival, not at its step: vLLM 0.6.0-0.6.1's output path
        (the preset's ``outputs_wait_step_return``, with asynchronous output processing on:
        :attr:`output_delay_s` > 0) under ``num_scheduler_steps`` > 1."""
        return (self.host_overhead.outputs_wait_step_return and self.output_delay_s > 0
                and self.engine.num_scheduler_steps > 1)

    @property
    def engine_label(self) -> str:
        """``vllm-v1 (vLLM 0.19.0)``, with ``, async scheduling off`` (or ``on``) where this
        pool's host work does not overlap the GPU as its preset's does by default, and with
        multi-step scheduling ``, num_scheduler_steps 10 (ITL per chunk of up to 10
        tokens)``: its tokens stream once per window, so its ITL is per chunk."""
        label = self.preset.label
        overlap = self.host_overhead.overlap
        if overlap != self.preset.host_overhead.overlap:
            label += f", async scheduling {'on' if overlap == 'async' else 'off'}"
        steps = self.engine.num_scheduler_steps
        if steps > 1:
            label += f", num_scheduler_steps {steps} (ITL per chunk of up to {steps} tokens)"
        return label

    @property
    def num_gpus(self) -> int:
        return self.num_replicas * self.engine.gpus_per_replica

    def draft_pricer(self) -> StepPricer | None:
        """The roofline of one draft pass (:mod:`capsim.profiles.speculative`): the
        drafter's shape on this pool's GPUs, TP and dtypes, without the engine's host
        overhead (the draft passes run inside the step); None without a GPU drafter."""
        if self.spec is None or self.spec.draft is None:
            return None
        return StepPricer(self.spec.draft, self.hardware, self.engine.tensor_parallel_size,
                          scale_out=self._scale_out(),
                          **self._pricer_kwargs(moe=self.spec.draft.is_moe))

    def draft_host(self) -> DraftHost | None:
        """The drafting's host launches on this pool's engine
        (:class:`~capsim.cost.speculative.DraftHost`: the preset's ``draft_launch_s`` × its
        launch counts per step, first pass and later pass); None without a GPU drafter or
        where the preset prices no launches."""
        host = self.preset.host_overhead
        if self.spec is None or self.spec.draft is None or not host.draft_launch_s:
            return None
        s = host.draft_launch_s
        return DraftHost(s * host.draft_step_launches, s * host.draft_pass_launches,
                         s * (host.draft_pass_launches + host.draft_update_launches))

    def _scale_out(self) -> LinkProfile | None:
        """The link between nodes an expert-parallel all-to-all crosses beyond one node
        (the target's and an MoE drafter's alike: DeepSeek's MTP layer is MoE)."""
        link = self.hardware.scale_out_link
        return resolve_link(link) if link else None

    def _pricer_kwargs(self, moe: bool = True) -> dict:
        """The engine's dtypes, MoE placement and kernels, quantization and all-reduce for a
        :class:`StepPricer`; DP attention and expert parallelism only where ``moe``; the
        preset's shared-experts fusion unless ``disable_shared_experts_fusion``; its fused
        all-reduce + RMSNorm (the pricer checks where it applies); its ROCm
        absorbed-MLA weight rewrite; its piecewise prefill graph (co-located pools only)."""
        eng = self.engine
        fusion = None if eng.disable_shared_experts_fusion \
            else self.preset.shared_experts_fusion
        return dict(weight_dtype=eng.dtype, kv_cache_dtype_bytes=eng.kv_dtype_bytes,
                    routing_skew=eng.moe_routing_skew,
                    dp_attention=eng.enable_dp_attention and moe,
                    attention_tp=eng.attention_tp_size if eng.enable_dp_attention and moe
                    else 1,
                    expert_parallel=eng.enable_expert_parallel and moe,
                    redundant_experts=eng.num_redundant_experts if moe else 0,
                    quantization=eng.quantization, all_reduce=self.preset.tp_all_reduce,
                    engine=self.preset.engine, moe_backend=eng.moe_backend,
                    shared_experts_fusion=fusion,
                    all_reduce_fusion=self.preset.all_reduce_fusion,
                    absorbed_bmm_dequant=self.preset.absorbed_bmm_dequant,
                    untuned_fp8_gemm=self.preset.untuned_fp8_gemm,
                    moe_build=self.preset.grouped_gemm_fp8_engine,
                    # SGLang turns the prefill graph off for PD disaggregation
                    piecewise_cuda_graph=self.preset.piecewise_cuda_graph
                    if self.role == "colocated" else None,
                    decode_graph_max_seqs=self.decode_graph_max_seqs)

    @property
    def decode_graph_max_seqs(self) -> int | None:
        """The most sequences a decode step of one replica replays a CUDA graph for, where
        the preset says larger ones run eagerly (``host_overhead.eager_decode_above_graph_bs``):
        SGLang's ``cuda_graph_max_bs`` default for the GPU's memory and TP (the preset's
        ``memory.static_fraction`` table), per DP-attention rank, so x the ranks with DP
        attention (a rank's batch is its share); vLLM V1's largest default capture size
        (the preset's ``memory.cudagraph_capture``: min(2 x max_num_seqs, 512,
        max_num_batched_tokens) on its size grid, :func:`capsim.kv.memory.
        rule_capture_sizes`; above it the model runner dispatches CUDAGraphMode.NONE).
        None: no limit."""
        memory, eng = self.preset.memory, self.engine
        sf = memory.static_fraction
        if not self.preset.host_overhead.eager_decode_above_graph_bs:
            return None
        if sf is None:
            sizes = rule_capture_sizes(memory, eng.max_num_seqs, eng.max_num_batched_tokens)
            return max(sizes) if sizes else None
        tp = eng.tensor_parallel_size
        ranks = (eng.data_parallel_size or tp) if eng.enable_dp_attention else 1
        return sf.cuda_graph_max_bs(self.hardware.memory_total_bytes / 2**20, tp) * ranks

    def pricer(self, model: ModelShape) -> StepPricer | PipelinePricer:
        """The roofline of one of its replicas running ``model`` (hardware, TP, PP, EP,
        dtypes) with its engine's host overhead: a :class:`PipelinePricer` with
        pipeline_parallel_size > 1."""
        host = self.host_overhead.for_tensor_parallel(self.engine.tensor_parallel_size)
        steps = self.engine.num_scheduler_steps
        if steps > 1:          # scheduled once per window: its per-step work spread over it,
            spread_s = host.per_step_s / steps   # but a prefill step is a window of its own
            seq_s = host.per_seq_s / steps
            host = host.model_copy(update={
                "per_step_s": spread_s, "per_seq_s": seq_s,
                "per_prefill_step_s": host.per_prefill_step_s + host.per_step_s - spread_s,
                "per_prefill_seq_s": host.per_prefill_seq_s + host.per_seq_s - seq_s})
        eng = self.engine
        scale_out = self._scale_out()
        kwargs = self._pricer_kwargs()
        if eng.pipeline_parallel_size > 1:
            return PipelinePricer(model, self.hardware, eng.tensor_parallel_size,
                                  eng.pipeline_parallel_size, host=host, scale_out=scale_out,
                                  **kwargs)
        return StepPricer(model, self.hardware, eng.tensor_parallel_size, host=host,
                          scale_out=scale_out, **kwargs)

    @property
    def matmul_dtype(self) -> str:
        """The peak the layer matmuls run at (the quantization format's on this GPU); MFU
        is measured against it."""
        fmt = load_quant_format(self.engine.weight_format or "bf16")
        return fmt.compute_dtype(self.hardware, "fp16" if self.engine.dtype == "fp16" else "bf16",
                                 self.preset.engine)


@dataclass(frozen=True)
class KVTransfer:
    """How a disaggregated variant moves each prompt's KV cache from the prefill pool to
    the decode pool: the link, the decode-side router, layer-wise overlap."""

    link: LinkProfile
    router: str
    layerwise_overlap: bool


@dataclass(frozen=True)
class FleetPool:
    """One resolved pool: its replicas' :class:`Pool` (role ``colocated``), the model they
    serve, and its own autoscaling / failures (None: a fixed pool that never fails)."""

    name: str
    pool: Pool
    model: ModelShape
    autoscaling: AutoscalingConfig | None = None
    failures: FailuresConfig | None = None
    provisioning_delay_s: float = 0.0

    @property
    def gpus_per_replica(self) -> int:
        return self.pool.engine.gpus_per_replica

    @property
    def price_per_replica_hour_usd(self) -> float:
        """One replica's GPUs at the profile's hourly price, $/h."""
        return self.pool.hardware.price_per_gpu_hour_usd * self.gpus_per_replica


@dataclass(frozen=True)
class Route:
    """A resolved route rule: requests of ``class_id`` (None: any) with at least
    ``min_prompt_tokens`` prompt tokens (None: any) go to pool ``pool`` (an index)."""

    class_id: int | None
    min_prompt_tokens: int | None
    pool: int
    class_name: str | None = None

    def matches(self, class_id: int, prompt_tokens: int) -> bool:
        return ((self.class_id is None or self.class_id == class_id)
                and (self.min_prompt_tokens is None or prompt_tokens >= self.min_prompt_tokens))


@dataclass(frozen=True)
class PooledFleet:
    """The pools behind one router, how it routes, and what each request class asks for.

    Attributes:
        pools: the pools, in the scenario's order.
        policy: ``least_outstanding_tokens``, ``round_robin`` or ``cost``.
        routes: the route rules, first match wins.
        class_models: the model name each class id asks for.
        class_ttft_s: each class's per-request TTFT limit, s (None: none; ``cost`` routing
            then takes the cheapest pool serving the model).
    """

    pools: tuple[FleetPool, ...]
    policy: str
    routes: tuple[Route, ...]
    class_models: tuple[str, ...]
    class_ttft_s: tuple[float | None, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pools)

    def required(self) -> set[str]:
        """Pools that cannot be left out of a mix: a route names them, or they alone serve
        a model some class asks for."""
        out = {self.pools[r.pool].name for r in self.routes}
        for model in set(self.class_models):
            serving = [p.name for p in self.pools if p.model.name == model]
            if len(serving) == 1:
                out.add(serving[0])
        return out

    def with_counts(self, counts: dict[str, int]) -> "PooledFleet":
        """``counts[name]`` replicas in pool ``name`` (others unchanged); a pool at 0 is left
        out (route indices follow).

        Raises:
            ValueError: an unknown pool, a negative count, or leaving out a pool
                :meth:`required` keeps.
        """
        unknown = set(counts) - set(self.names)
        if unknown:
            raise ValueError(f"no pool named {sorted(unknown)[0]!r}")
        dropped = {n for n, c in counts.items() if c == 0}
        if any(c < 0 for c in counts.values()) or dropped & self.required():
            raise ValueError(f"pools {sorted(dropped & self.required())} must keep a replica")
        kept = [replace(p, pool=replace(p.pool, num_replicas=counts.get(p.name,
                                                                        p.pool.num_replicas)))
                for p in self.pools if p.name not in dropped]
        index = {p.name: i for i, p in enumerate(kept)}
        routes = tuple(replace(r, pool=index[self.pools[r.pool].name]) for r in self.routes)
        return replace(self, pools=tuple(kept), routes=routes)


@dataclass(frozen=True)
class RunConfig:
    """One variant, fully resolved: everything ``sim.simulate`` needs besides the trace.

    ``pools`` is ``(colocated,)`` or ``(prefill, decode)``; arrivals reach the first
    pool's replicas through ``router`` (the scenario's ``cluster.router``); ``transfer``
    is set exactly when the variant is disaggregated.
    """

    variant: str
    description: str
    seed: int
    workload: WorkloadConfig
    model: ModelShape
    pools: tuple[Pool, ...]
    router: str
    transfer: KVTransfer | None = None
    autoscaling: AutoscalingConfig | None = None   # cluster.autoscaling (scenario/fleet.py)
    failures: FailuresConfig | None = None         # cluster.failures (scenario/fleet.py)
    provisioning_delay_s: float = 0.0              # a new replica's start-up, s
    fleet: PooledFleet | None = None               # cluster.pools (scenario/resolve_pools.py)
    router_queue_timeout_s: float | None = None    # cluster.router_queue_timeout_s
    router_max_queued_requests: int | None = None  # cluster.router_max_queued_requests
    router_rate_limit: RateLimitConfig | None = None   # cluster.router_rate_limit
    router_options: RouterOptions | None = None    # cluster.router_options (scenario/routing.py)
    saturation: SaturationConfig | None = None     # cluster.saturation (scenario/routing.py)

    @property
    def disaggregated(self) -> bool:
        return self.transfer is not None

    @property
    def static_batching(self) -> bool:
        """Some pool runs static batching: replies return whole (TPOT and ITL 0)."""
        return any(p.engine.scheduler == "static" for p in self.pools)

    @property
    def pooled(self) -> bool:
        """A heterogeneous / multi-model fleet (``cluster.pools``): ``pools`` holds one
        :class:`Pool` per fleet pool, its ``role`` the pool's name."""
        return self.fleet is not None

    def pool(self, role: str = "colocated") -> Pool:
        """The pool of ``role`` (``colocated``, ``prefill`` or ``decode``).

        Raises:
            KeyError: the variant has no such pool, or it is pooled (``cluster.pools``:
                its pools are ``fleet.pools``).
        """
        if self.fleet is not None:
            raise KeyError(f"variant {self.variant} has several pools (cluster.pools); "
                           "read run.fleet.pools")
        for p in self.pools:
            if p.role == role:
                return p
        raise KeyError(f"variant {self.variant} has no {role} pool")

    @property
    def serving_pool(self) -> Pool:
        """The pool that streams the replies: the only pool, or a split's decode pool
        (sweep and sizing tables label a variant's hardware and TP by it)."""
        return self.pools[-1]

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    @property
    def num_replicas(self) -> int:
        return sum(p.num_replicas for p in self.pools)

    @property
    def label(self) -> str:
        """``1P1D``-style name of a disaggregated split (replicas, not GPUs); "" co-located."""
        if not self.disaggregated:
            return ""
        return f"{self.pool('prefill').num_replicas}P{self.pool('decode').num_replicas}D"

    def with_hardware(self, hw: HardwareProfile) -> "RunConfig":
        """This variant with every pool on ``hw``, KV sizes kept (a calibrated copy of the
        same GPU's profile)."""
        return replace(self, pools=tuple(replace(p, hardware=hw) for p in self.pools))

    def with_replicas(self, num_replicas: int) -> "RunConfig":
        """This co-located variant on ``num_replicas`` replicas (a sizing candidate)."""
        return replace(self, pools=(replace(self.pool(), num_replicas=num_replicas),))

    def with_pool_replicas(self, counts: dict[str, int]) -> "RunConfig":
        """This pooled variant with ``counts[name]`` replicas in pool ``name`` (the others
        as they are); a pool given 0 leaves the fleet (a sizing mix)."""
        fleet = self.fleet.with_counts(counts)
        return replace(self, fleet=fleet, pools=tuple(fp.pool for fp in fleet.pools))
