"""The scenario schema: the top level of a scenario file and its engine, cluster and
variant sections (pydantic, ``extra="forbid"``).

A scenario names a model, a GPU profile, engine defaults (vLLM knob names), a
cluster, a workload, SLOs and a list of variants; each variant overrides
engine/cluster/hardware fields. The workload, SLO, disaggregation and sweep
sections have their own modules; :mod:`capsim.scenario.load` reads a file into
these models and :mod:`capsim.scenario.resolve` turns each variant into a
:class:`~capsim.scenario.run_config.RunConfig`.
"""

from __future__ import annotations

from typing import ClassVar, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from capsim.common.schema import MAX_SECONDS, Bool, Int, StrictModel
from capsim.cost.experts import MAX_ROUTING_SKEW, ROUTING_SKEW_RANGE
from capsim.profiles.models import ModelShape
from capsim.profiles.policies import POLICY_NAMES, policy_capabilities
from capsim.profiles.quantization import quant_format_names
from capsim.scenario.admission import RateLimitConfig
from capsim.scenario.disagg import DisaggregationConfig
from capsim.scenario.fleet import MAX_REPLICAS, AutoscalingConfig, FailuresConfig
from capsim.scenario.parallel import PipelineParallelSize, TensorParallelSize
from capsim.scenario.pools import FleetPoolConfig, RouteRule, check_pools
from capsim.scenario.routing import (CACHE_ROUTERS, KV_ROUTERS, OPTIONS_READ, RouterOptions,
                                     SaturationConfig)
from capsim.scenario.slo import SloConfig
from capsim.scenario.speculative import SpeculativeConfig
from capsim.scenario.sweep import SizingConfig, SweepGrid
from capsim.scenario.workload import WorkloadConfig

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


class EngineConfig(StrictModel):
    """One engine replica's knobs, named as vLLM names them (vllm/config/scheduler.py,
    cache.py); other engines' own knobs under their own names.

    ``preset`` names the engine (``capsim/profiles/data/engines/NAME.yaml``, default
    ``vllm-v1``): it fills every knob the scenario leaves unset, on the scenario's GPU
    (:meth:`capsim.profiles.engines.EnginePreset.defaults_for`), and says how the engine
    sizes its KV cache. Without a preset value either, a knob takes the default below;
    ``max_num_batched_tokens`` then follows vLLM: 8192 with chunked prefill, else
    max(max_model_len, 2048). Engine-specific knobs:

    - memory fraction: ``gpu_memory_utilization`` (vLLM), ``mem_fraction_static``
      (SGLang), ``free_gpu_memory_fraction`` (TensorRT-LLM), ``cuda_memory_fraction``
      (TGI) — each valid only with its engine's preset;
    - ``capacity_scheduler_policy``, ``batch_wait_timeout_iters`` and
      ``batch_wait_max_tokens_ratio`` (TensorRT-LLM), ``schedule_conservativeness`` and
      ``scheduler_recv_interval`` (SGLang), ``max_waiting_tokens`` / ``waiting_served_ratio`` (TGI),
      ``num_scheduler_steps`` (vLLM 0.6), ``long_prefill_token_threshold`` (vLLM V1).
    """

    # in error messages
    yaml_example: ClassVar[str] = "{preset: vllm-v1, max_num_seqs: 256, max_model_len: 8192}"

    preset: str = "vllm-v1"        # empty: refused where it is located (its valid names)
    scheduler: Literal[POLICY_NAMES] = "continuous"           # one per policy table row
    enable_chunked_prefill: Bool = True
    max_num_seqs: Int = Field(default=256, gt=0)
    max_num_batched_tokens: Int | None = Field(default=None, gt=0)
    max_model_len: Int | None = Field(default=None, gt=0)
    tensor_parallel_size: TensorParallelSize = 1
    # vLLM --pipeline-parallel-size: the layers split over this many stages of
    # tensor_parallel_size GPUs each (capsim.cost.pipeline, capsim.engine.pipeline).
    pipeline_parallel_size: PipelineParallelSize = 1
    block_size: Int = Field(default=16, gt=0)
    enable_prefix_caching: Bool = True        # vLLM v1 default
    # Memory fractions, by engine (the preset's memory rule reads its own).
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    free_gpu_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    cuda_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    # Non-KV memory per GPU; None: what the preset's memory rule says (capsim.kv.memory).
    non_torch_memory_gib: float | None = Field(default=None, ge=0)   # NCCL, CUDA context
    cudagraph_memory_gib: float | None = Field(default=None, ge=0)   # charged to the KV budget
    dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    # Weight quantization format (vLLM --quantization; capsim/profiles/data/quantization):
    # fp8, fp8_channel, fp8_block, int8, awq, gptq, nvfp4, mxfp4. dtype fp8 is shorthand
    # for fp8_channel with bf16 activations.
    quantization: str | None = None
    kv_cache_dtype: Literal["auto", "bf16", "fp16", "fp8"] = "auto"
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    # vLLM --scheduling-policy: fcfs, or priority (the waiting queue ordered by each
    # request's priority, then arrival; a preemption takes the running request of the
    # lowest priority, latest arrival: vllm/v1/core/sched/scheduler.py).
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    # KV layout: vLLM's paged blocks, or the contiguous baselines of seed 000 / the
    # PagedAttention paper (reserve max_model_len, or prompt + max_tokens, first fit).
    kv_allocator: Literal["paged", "contiguous_max_model_len", "contiguous_max_tokens"] = "paged"
    # Fixed KV cache size per GPU instead of the memory fraction's leftover
    # (vLLM CacheConfig.kv_cache_memory_bytes); weights must still fit.
    kv_cache_memory_gib: float | None = Field(default=None, gt=0)
    swap_space_gib: float = Field(default=4.0, ge=0)    # host swap per GPU (vLLM --swap-space)
    host_memory_gib: float = Field(default=512.0, gt=0)  # host RAM available to this replica
    # vLLM's KV offloading to host memory (--kv-offloading-size GiB for the whole replica,
    # --kv-offloading-backend native | lmcache; vllm/config/cache.py at c1d8642): GPU
    # prefix-cache evictions kept in a CPU-DRAM tier, loaded back over PCIe on a hit
    # (capsim/kv/offload.py). None: off.
    kv_offloading_size: float | None = Field(
        default=None, gt=0, description="GiB of host memory per replica holding KV blocks "
                                        "the GPU evicted")
    kv_offloading_backend: Literal["native", "lmcache"] | None = None
    # TensorRT-LLM (scheduler: trtllm)
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] | None = None
    # TensorRT-LLM batch waiting (LLM API batch_wait_timeout_iters / batch_wait_max_tokens_ratio):
    # while requests decode, new contexts wait up to this many iterations for their prompts and
    # the decode tokens to reach this share of max_num_tokens; None: the preset's (0: off).
    # TensorRT-LLM refuses a ratio outside [0, 1] (tensorrt_llm/llmapi/llm_args.py, TorchLlmArgs
    # validate_batch_wait_max_tokens_ratio), so capsim does too.
    batch_wait_timeout_iters: Int | None = Field(default=None, ge=0)
    batch_wait_max_tokens_ratio: float | None = Field(default=None, ge=0, le=1)
    # SGLang (scheduler: sglang)
    schedule_conservativeness: float | None = Field(default=None, gt=0)
    # SGLang --scheduler-recv-interval: arrivals are taken in once every this many decode
    # steps (at once after a prefill, or when idle); None: the preset's (SGLang's 1).
    scheduler_recv_interval: Int | None = Field(default=None, gt=0)
    # vLLM 0.6 (V0) multi-step scheduling (--num-scheduler-steps): the scheduler runs once
    # per window of this many decode steps; valid with the vllm-0.6 presets, no chunking.
    num_scheduler_steps: Int = Field(default=1, gt=0)
    # vLLM V1 --long-prefill-token-threshold: the most prompt tokens one request is given in
    # a step, waiting or partly prefilled (0: no cap, vLLM's default with
    # max_num_partial_prefills 1); valid with the vLLM V1 presets and chunked prefill.
    long_prefill_token_threshold: Int = Field(default=0, ge=0)
    # vLLM V1 --[no-]async-scheduling (SGLang's overlap schedule, TensorRT-LLM's overlap
    # scheduler): the next step is scheduled while the GPU runs the current one; None: the
    # preset's default (on in vLLM 0.19 except with draft-model and n-gram drafters).
    async_scheduling: Bool | None = None
    # Mixture-of-experts routing skew (capsim's own knob, not an engine's): Zipf exponent
    # of expert popularity; 0 routes uniformly (capsim.cost.operators.expected_experts_hit).
    moe_routing_skew: float = 0.0
    # Expert parallelism (vLLM --enable-expert-parallel): the replica's
    # tensor_parallel_size GPUs hold num_experts / tensor_parallel_size whole experts each
    # instead of a 1/TP slice of every expert. Data-parallel attention (SGLang
    # --enable-dp-attention; vLLM --data-parallel-size with expert parallelism): each GPU
    # runs attention for its own requests with the whole attention weights and keeps those
    # requests' KV only (no KV replicated across the group, MLA's latent included).
    enable_expert_parallel: Bool = False
    enable_dp_attention: Bool = False
    # Data-parallel attention ranks (SGLang --dp-size with --enable-dp-attention): the
    # replica's tensor_parallel_size GPUs form this many attention ranks of
    # tensor_parallel_size / data_parallel_size GPUs each (SGLang's attn_tp_size); None: one
    # rank per GPU. vLLM's --data-parallel-size D --tensor-parallel-size T
    # --enable-expert-parallel is tensor_parallel_size D × T, data_parallel_size D.
    data_parallel_size: Int | None = Field(default=None, ge=1)
    # EPLB's redundant experts (vLLM --enable-eplb --eplb-config '{"num_redundant_experts":
    # N}'; SGLang --enable-eplb --ep-num-redundant-experts N): N extra copies of the hottest
    # experts, (num_experts + N) / EP per GPU; needs enable_expert_parallel.
    num_redundant_experts: Int = Field(default=0, ge=0)
    # vLLM --moe-backend (0.15: VLLM_MXFP4_USE_MARLIN=1 for marlin): the kernels of the
    # routed experts. auto: vLLM's default per GPU (MXFP4 experts: triton_kernels on Hopper
    # and ROCm, FlashInfer TRT-LLM on Blackwell; the GPU profile's fused_moe_mxfp4 entry);
    # marlin: Marlin's fused MoE (priced as the profile's fused_moe). vLLM presets only,
    # NVIDIA GPUs only (Marlin is CUDA-only; refused on a profile with platform: rocm).
    # vLLM also flashinfer_trtllm (fp8 / nvfp4 / MXFP4 experts, the TRT-LLM-gen MoE).
    # SGLang presets: --moe-runner-backend's names triton, flashinfer_trtllm (fp8 / nvfp4
    # experts) and flashinfer_mxfp4 (MXFP4 experts); a named runner takes the GPU profile's
    # efficiency.fused_moe_runners curve for it (capsim/profiles/moe_runners.py).
    # TensorRT-LLM presets: moe_config.backend TRTLLM (fp8 block / nvfp4 experts).
    moe_backend: Literal["auto", "marlin", "triton", "flashinfer_trtllm",
                         "flashinfer_mxfp4", "TRTLLM"] = "auto"
    # SGLang --disable-shared-experts-fusion: by default SGLang runs DeepSeek-V3/R1's shared
    # expert inside the routed experts' fused-MoE kernel (the preset's shared_experts_fusion
    # rule); true prices it as its own dense GEMMs. SGLang presets only.
    disable_shared_experts_fusion: Bool = False
    # Load shedding by the engine (capsim's names; a preset's admission: section gives the
    # engine's own): a request submitted to a replica whose waiting queue already holds
    # max_waiting_requests (SGLang --max-queued-requests), or that has
    # max_inflight_requests queued or running (TGI --max-concurrent-requests, 128 by
    # default), is rejected at once (queue_full). None: no limit (vLLM 0.19 has none).
    max_waiting_requests: Int | None = Field(
        default=None, gt=0, description="requests a replica's waiting queue may hold")
    max_inflight_requests: Int | None = Field(
        default=None, gt=0, description="requests a replica may hold, queued or running")
    # TGI (scheduler: tgi)
    max_waiting_tokens: Int | None = Field(default=None, gt=0)
    waiting_served_ratio: float | None = Field(default=None, ge=0)
    # Speculative decoding (vLLM --speculative-config; scenario/speculative.py); None: off.
    speculative: SpeculativeConfig | None = None

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"block_size must be a power of two (vLLM's paged-attention "
                             f"kernels use 8, 16, 32, ...), got {v}")
        return v

    @field_validator("moe_routing_skew")
    @classmethod
    def _skew_in_range(cls, v: float) -> float:
        if not 0.0 <= v <= MAX_ROUTING_SKEW:
            raise ValueError(ROUTING_SKEW_RANGE)
        return v

    @field_validator("quantization")
    @classmethod
    def _known_format(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        if v not in quant_format_names()[1:]:
            raise ValueError(f"unknown quantization {v!r}; valid: "
                             f"{', '.join(quant_format_names()[1:])}")
        if info.data.get("dtype") == "fp8":
            raise ValueError(f"dtype fp8 already means quantization fp8_channel; give "
                             f"dtype bf16 (or fp16) with quantization {v}")
        return v

    @property
    def weight_format(self) -> str | None:
        """The weight quantization format: ``quantization``, ``fp8_channel`` for dtype
        fp8, None for 16-bit weights."""
        return self.quantization or ("fp8_channel" if self.dtype == "fp8" else None)

    @model_validator(mode="after")
    def _swap_fits_host(self) -> "EngineConfig":
        swap = self.swap_space_gib * self.tensor_parallel_size
        if self.preemption_mode == "swap" and swap > self.host_memory_gib:
            raise ValueError(f"swap space {self.swap_space_gib:g} GiB × {self.tensor_parallel_size} "
                             f"GPUs = {swap:g} GiB exceeds host_memory_gib "
                             f"{self.host_memory_gib:g}")
        return self

    @model_validator(mode="after")
    def _offload_fits_host(self) -> "EngineConfig":
        """vLLM: kv_offloading_size and kv_offloading_backend go together; the buffer
        (and any swap space) must fit the host's memory."""
        size, backend = self.kv_offloading_size, self.kv_offloading_backend
        if (size is None) != (backend is None):
            raise ValueError("kv_offloading_size and kv_offloading_backend go together (vLLM "
                             "enables KV offloading with both); give both or neither")
        if size is None:
            return self
        swap = self.swap_space_gib * self.tensor_parallel_size \
            if self.preemption_mode == "swap" else 0.0
        if size + swap > self.host_memory_gib:
            raise ValueError(f"kv_offloading_size {size:g} GiB"
                             + (f" + swap space {swap:g} GiB" if swap else "")
                             + f" exceeds host_memory_gib {self.host_memory_gib:g}")
        return self

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes per KV element: ``auto`` keeps the model's 16-bit dtype even with fp8
        weights (vLLM ``CacheConfig.cache_dtype`` "auto" = the model dtype, not the
        quantization)."""
        return 2 if self.kv_cache_dtype == "auto" else DTYPE_BYTES[self.kv_cache_dtype]

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica: tensor_parallel_size × pipeline_parallel_size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def attention_tp_size(self) -> int:
        """GPUs per data-parallel attention rank (1: one rank per GPU); without DP
        attention, the tensor-parallel size."""
        tp = self.tensor_parallel_size
        if not self.enable_dp_attention:
            return tp
        return tp // (self.data_parallel_size or tp)

    @property
    def chunked(self) -> bool:
        """Prompts may be split over steps (vLLM's and SGLang's chunked prefill)."""
        return self.enable_chunked_prefill and policy_capabilities(self.scheduler).chunking

    def resolved(self, model: ModelShape, user_set: set[str] = frozenset()) -> "EngineConfig":
        """Fill model-dependent defaults and check the cross-field rules vLLM enforces.

        ``user_set``: the knobs the scenario gave (not the preset). As vLLM 0.19's
        ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``: a default
        token budget without chunked prefill is raised to max_model_len and capped at
        max_num_seqs × max_model_len; a default max_num_seqs is capped at the budget.

        Raises ValueError (turned into a ScenarioError by the caller) when
        max_num_batched_tokens < max_num_seqs, or when an unchunked vLLM engine's
        token budget cannot hold a max_model_len prompt (vLLM SchedulerConfig). Other
        engines keep their budget: a longer prompt is then rejected per request
        (TensorRT-LLM without chunked context cannot run it).
        """
        max_len = self.max_model_len or model.max_position_embeddings
        if max_len > model.max_position_embeddings:
            raise ValueError(f"max_model_len {max_len} exceeds the model's "
                             f"max_position_embeddings {model.max_position_embeddings}; "
                             f"valid: <= {model.max_position_embeddings}")
        budget = self.max_num_batched_tokens or (8192 if self.chunked else max(max_len, 2048))
        seqs = self.max_num_seqs
        vllm = self.scheduler in ("continuous", "static")   # vLLM's own rules below
        if "max_num_batched_tokens" not in user_set and vllm:
            if not self.chunked:
                budget = max(max_len, budget)
            budget = min(seqs * max_len, budget)
        if "max_num_seqs" not in user_set:
            seqs = min(seqs, budget)
        if budget < seqs:
            raise ValueError(f"max_num_batched_tokens ({budget}) must be >= max_num_seqs "
                             f"({seqs})")
        if vllm and not self.chunked and budget < max_len:
            raise ValueError(f"max_num_batched_tokens ({budget}) is smaller than max_model_len "
                             f"({max_len}) without chunked prefill; raise it, lower "
                             "max_model_len or set enable_chunked_prefill: true")
        return self.model_copy(update={"max_model_len": max_len, "max_num_batched_tokens": budget,
                                       "max_num_seqs": seqs})


class ClusterConfig(StrictModel):
    """Replicas (each one tensor-parallel engine) behind a router; or several pools of them
    (``pools``, scenario/pools.py: each its own GPU, TP, engine and model)."""

    # in error messages
    yaml_example: ClassVar[str] = "{num_replicas: 2, router: least_outstanding_tokens}"

    num_replicas: Int = Field(default=1, gt=0, le=MAX_REPLICAS)
    # cost: the cheapest pool whose estimated queueing keeps the TTFT SLO (pools only);
    # prefix_aware, kv_scorer, session_affinity: by what each replica holds
    # (scenario/routing.py, engine/cache_router.py; one pool of replicas only).
    router: Literal["round_robin", "least_outstanding_tokens", "cost", "prefix_aware",
                    "kv_scorer", "session_affinity"] = "round_robin"
    router_options: RouterOptions | None = None
    # The gateway's saturation detector: while the pool is saturated, requests of a
    # sheddable class (workload.classes.N.criticality) are dropped (scenario/routing.py).
    saturation: SaturationConfig | None = None
    # How long the router holds a request while no replica serves (every one failed or not
    # yet repaired) before it answers with an error: the gateway's timeout (ingress-nginx
    # proxy-read-timeout 60 s, Envoy's route timeout 15 s by default). None: held until a
    # replica serves (vLLM itself has no queue timeout). Only a fleet with cluster.failures
    # (or pools with them) ever holds requests at the router.
    router_queue_timeout_s: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS,
        description="seconds a request may wait at the router while no "
                                        "replica serves; then it fails (timed out)")
    # Load shedding at the router (scenario/admission.py), rejected at once (the gateway's
    # HTTP 429): an arrival that finds this many requests waiting behind the router (in
    # the replicas' queues, or held at the router) is rejected (queue_full); a token
    # bucket of rate_per_s and burst (rate_limited). None: no limit.
    router_max_queued_requests: Int | None = Field(
        default=None, gt=0, description="requests that may wait behind the router")
    router_rate_limit: RateLimitConfig | None = None
    # A fleet that scales with the load (scenario/fleet.py); num_replicas serve at t = 0.
    autoscaling: AutoscalingConfig | None = None
    # Replica failures and repairs (scenario/fleet.py).
    failures: FailuresConfig | None = None
    # A heterogeneous / multi-model fleet: pools behind this router (scenario/pools.py).
    pools: list[FleetPoolConfig] | None = None
    # Rules sending a class or long prompts to one pool; the first match wins.
    route: list[RouteRule] = Field(default_factory=list)

    @field_validator("pools")
    @classmethod
    def _pools(cls, v):
        return check_pools(v)

    @model_validator(mode="after")
    def _pools_or_one(self):
        if self.pools is None:
            if self.route:
                raise ValueError("route rules send requests to pools; give cluster.pools "
                                 "(or remove route)")
            if self.router == "cost":
                raise ValueError("router: cost picks among pools; give cluster.pools (valid "
                                 "for one pool of replicas: round_robin, "
                                 "least_outstanding_tokens, " + ", ".join(KV_ROUTERS) + ")")
            self._options_read()
            return self
        if self.router in KV_ROUTERS:
            # "router ..." first: the error names cluster.router (common/schema.field_named)
            raise ValueError(f"router {self.router} picks a replica within one pool; with "
                             "cluster.pools give round_robin, least_outstanding_tokens or cost")
        for key in ("num_replicas", "autoscaling", "failures"):
            if key in self.model_fields_set:
                raise ValueError(f"with pools, give {key} per pool "
                                 f"(cluster.pools.N.{key}); remove cluster.{key}")
        self._options_read()
        return self

    def _options_read(self) -> None:
        """``router_options`` only with a router that reads them."""
        if self.router_options is not None and self.router not in CACHE_ROUTERS:
            raise ValueError(f"router_options are read by router {' or '.join(CACHE_ROUTERS)}"
                             f"; router {self.router} reads none (remove router_options)")
        if (self.router_options is not None and self.router_options.prefix_match == "precise"
                and self.router != "kv_scorer"):
            raise ValueError(f"router_options with prefix_match: precise (llm-d's precise "
                             f"prefix-cache scorer) are read by router kv_scorer; router "
                             f"{self.router} keeps its own view (valid: prefix_match: "
                             f"approximate)")
        self._options_unread()

    def _options_unread(self) -> None:
        """No ``router_options`` key the router ignores (``scorer_weights`` on
        ``prefix_aware``; ``max_tree_size_blocks`` with ``prefix_match: precise``, which keeps
        no record of its own)."""
        if self.router_options is None:
            return
        read = set(OPTIONS_READ[self.router])
        precise = self.router_options.prefix_match == "precise"
        if precise:
            read.discard("max_tree_size_blocks")
        unread = sorted(self.router_options.model_fields_set - read)
        if unread:
            mode = " with prefix_match: precise" if precise else ""
            raise ValueError(f"router_options {', '.join(unread)}: not read by router "
                             f"{self.router}{mode}, which reads {', '.join(sorted(read))} "
                             f"(remove {', '.join(unread)})")


#: Longest scenario or variant name, characters. Names become file and directory names
#: (reports/<name>-sweep, timeline_<variant>.png) and table labels; file systems refuse
#: names over 255 bytes (NAME_MAX of ext4, XFS, APFS), and a label this long already
#: crowds a table.
MAX_NAME_CHARS = 100


class VariantSpec(StrictModel):
    """One variant: a name (at most ``MAX_NAME_CHARS``) and overrides of the scenario's defaults."""

    # in error messages
    yaml_example: ClassVar[str] = "{name: chunked-512, engine: {max_num_batched_tokens: 512}}"

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    description: str = ""
    hardware: str | None = None
    model: str | None = None
    engine: dict[str, Any] = Field(default_factory=dict, examples=["{max_num_seqs: 128}"])
    cluster: dict[str, Any] = Field(default_factory=dict, examples=["{num_replicas: 2}"])
    # Fields of the hardware profile changed for this variant (over the scenario's),
    # e.g. {hbm_bytes: 100931731456, memory_total_gib: 93.1} for an H100 NVL (94 GB),
    # without copying the profile.
    hardware_overrides: dict[str, Any] = Field(default_factory=dict,
                                               examples=["{price_per_gpu_hour_usd: 2.5}"])
    disaggregation: DisaggregationConfig | None = None   # prefill/decode pools (scenario/disagg.py)
    # Any other scenario field for this variant only, as dotted paths (like --set),
    # e.g. {"workload.classes.0.shared_prefix.fraction": 0.5}. A variant that changes
    # the workload gets its own trace (same seed and streams).
    set: dict[str, Any] = Field(default_factory=dict,
                                examples=["{workload.arrival.users: 128}"])


class Scenario(StrictModel):
    """The top level of a scenario YAML file."""

    # Names the report directory (reports/<name>), so no path separators.
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS,
                      pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="letters, digits, '.', '_' and '-', from a letter or digit "
                                  "(it names the report folder reports/<name>)",
                      examples=["rag_mix"])
    description: str = ""
    seed: Int = Field(default=0, ge=0)   # SeedSequence entropy
    model: str
    hardware: str
    hardware_overrides: dict[str, Any] = Field(                       # profile fields changed
        default_factory=dict, examples=["{price_per_gpu_hour_usd: 2.5}"])
    engine: EngineConfig = Field(default_factory=EngineConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    workload: WorkloadConfig
    slo: SloConfig = Field(default_factory=SloConfig)
    variants: list[VariantSpec] = Field(default_factory=list)
    sweep: SweepGrid | None = Field(        # capsim sweep: dotted field → values (config_sweep)
        default=None, examples=["{workload.arrival.rate_per_s: [2, 4, 8]}"])
    sizing: SizingConfig | None = None      # capsim size: load, options, search bound
    # Written into scenario.resolved.yaml (the version that ran it); ignored when read.
    capsim_version: str | None = None

    @field_validator("variants")
    @classmethod
    def _unique_variant_names(cls, variants: list) -> list:
        names = [v.name for v in variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"variant names must be unique; repeated: {', '.join(dupes)}")
        return variants

