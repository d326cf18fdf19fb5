"""Engine presets: what a serving engine does by default, as data with sources.

One YAML file per engine (and version era) under ``capsim/profiles/data/engines/``:

- ``defaults``: the engine's own defaults for capsim's engine knobs (vLLM names:
  ``max_num_seqs``, ``max_num_batched_tokens``, ``enable_chunked_prefill``,
  ``block_size``, ``enable_prefix_caching``, the memory fraction, ...). A scenario's
  ``engine:`` section overrides any of them.
- ``memory``: how the engine sizes its KV pool at start-up (:class:`MemoryRule`,
  applied by :mod:`capsim.kv.memory`), with every constant's source.
- ``scheduler``: the scheduling policy family (``engine.scheduler``) and its knobs,
  named as the engine names them.
- ``host_overhead``: the CPU work per step and per request around the GPU
  (:class:`HostOverhead`), each term with its source.
- ``tp_all_reduce``: which all-reduce the engine runs for tensor-parallel layers at which
  message size (:class:`TpAllReduce`; default NCCL's ring).
- ``dataset_tuning``: a benchmark front end that picks the batch limits from the dataset
  (``trtllm-bench``: :class:`~capsim.profiles.bench_tuning.DatasetTuning`), applied by
  :mod:`capsim.scenario.bench_settings` to the knobs the scenario leaves unset.

A scenario picks one with ``engine: {preset: NAME}``; the default is ``vllm-v1``. A file
holding only ``name`` and ``alias_of`` is another name for a packaged preset (``sglang``: the
newest SGLang modelled, ``sglang-0.5.10``): loading it gives that preset, its own name included.

Public API:
    EnginePreset, MemoryRule, HostOverhead, TpAllReduce, SharedExpertsFusion,
    PiecewiseCudaGraph, AllReduceFusion
    load_engine_preset(name_or_path) -> EnginePreset
    engine_preset_names() -> list[str]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from capsim.common.errors import ScenarioError
from capsim.common.schema import MAX_TOKENS, Bool, Int, StrictModel
from capsim.profiles.bench_tuning import DatasetTuning
from capsim.profiles.files import (FittedTo, is_path, packaged_file, packaged_names,
                                   read_yaml_mapping, scenario_error_from_validation)
from capsim.profiles.hardware import EngineFamily, HardwareProfile
from capsim.profiles.host_overhead import MAX_LAUNCH_S, HostOverhead
from capsim.profiles.models import ModelShape
from capsim.profiles.policies import POLICY_NAMES
from capsim.profiles.speculative import METHODS
from capsim.profiles.static_fraction import StaticFraction
from capsim.profiles.tiered_fraction import TieredFraction

_FOLDER = "engines"

#: The preset a scenario runs when it names none.
DEFAULT_PRESET = "vllm-v1"

#: Each memory rule and the engine knob that holds its memory fraction.
FRACTION_KNOBS = {
    "vllm_v1": "gpu_memory_utilization",
    "vllm_v0": "gpu_memory_utilization",
    "sglang": "mem_fraction_static",
    "trtllm": "free_gpu_memory_fraction",
    "tgi": "cuda_memory_fraction",
}


class MemoryRule(StrictModel):
    """How an engine turns a GPU into a KV pool (:mod:`capsim.kv.memory` has the formulas).

    Rules (per GPU; W weights, A the profile run's activation peak, N non-torch memory):

    - ``vllm_v1`` (vLLM 0.10-0.19 ``gpu_worker.determine_available_memory``):
      KV = ceil(total × gpu_memory_utilization) − W − A − N_increase(TP) [− graphs];
    - ``vllm_v0`` (vLLM 0.2.5-0.6 ``worker.determine_num_available_blocks``, 0.2.5's
      ``profile_num_available_blocks``): KV = total × gpu_memory_utilization − W − A − N
      (N: ``non_torch_gib``, the context where ``context_in_budget``, the all-reduce outputs
      where ``held_all_reduce_outputs``);
    - ``sglang`` (``profile_max_num_token``): KV = f × (total − context) − W, f =
      ``mem_fraction_static`` (activations and graphs live in the rest);
    - ``trtllm`` (PyTorch backend ``KvCacheCreator``): KV = free_gpu_memory_fraction ×
      (total − W − A − N);
    - ``tgi`` (``flash_causal_lm.warmup``): KV = kv_fraction_of_free × (cuda_memory_fraction
      × total − W − A − N).

    The activation peak A is the larger of the profile run's forward pass over
    ``max_num_batched_tokens`` tokens (``forward_bytes_per_token_*`` coefficients of
    intermediate ÷ TP and hidden size) and its sampler over ``min(max_num_seqs,
    max_num_batched_tokens)`` requests × vocabulary (``sampler_bytes_per_logit`` bytes
    per element, plus ``sampler_scratch_rows`` fp32 rows of scratch, plus the hidden
    states), plus ``profile_constant_gib``.
    """

    rule: Literal["vllm_v1", "vllm_v0", "sglang", "trtllm", "tgi"]
    #: Tokens and requests of the profile run: ``max_num_batched_tokens`` /
    #: ``max_num_seqs`` (vLLM), or the engine's own warm-up batch.
    profile_tokens: Literal["max_num_batched_tokens"] = "max_num_batched_tokens"
    forward_bytes_per_token_intermediate: float = Field(0.0, ge=0)
    forward_bytes_per_token_hidden: float = Field(0.0, ge=0)
    sampler_bytes_per_logit: float = Field(0.0, ge=0)
    sampler_scratch_rows: Literal["num_sms"] | int = 0
    profile_constant_gib: float = Field(0.0, ge=0)
    #: Non-torch memory charged to the KV budget, GiB per GPU, by tensor-parallel degree:
    #: the entry of the largest key <= TP applies.
    non_torch_gib: dict[int, float] = Field(default_factory=lambda: {1: 0.0})
    #: CUDA context and other memory present before the engine loads (not in the
    #: budget of vllm_v1; subtracted by sglang's ``total − context``), GiB per GPU.
    context_gib: float = Field(0.0, ge=0)
    #: Weights include the RoPE cos/sin cache (vLLM ``rotary_embedding`` buffers).
    rope_cache: Bool = False
    #: Round the budget up to a whole byte like vLLM 0.19's ``request_memory`` (ceil).
    ceil_budget: Bool = False
    #: tgi: fraction of the free memory after warm-up that becomes KV.
    kv_fraction_of_free: float = Field(1.0, gt=0, le=1)
    #: The CUDA context of the engine's process on one GPU = ``cuda_context_base_gib``
    #: (driver, runtime, the kernels loaded by then: the same on every GPU of a build) + the
    #: local-memory reservation num_sms × max_threads_per_sm × ``cuda_stack_bytes_per_thread``
    #: (the driver sizes local memory for every thread the GPU can hold; the GPU profile's
    #: fields, the term is 0 when it lacks them). :func:`capsim.kv.memory.cuda_context_bytes`.
    cuda_context_base_gib: float = Field(0.0, ge=0)
    cuda_stack_bytes_per_thread: Int = Field(0, ge=0)
    #: The profiler counts the CUDA context as non-torch memory charged to the budget (vLLM
    #: 0.6.4's "every non-torch byte in use"); otherwise it lives outside the budget.
    context_in_budget: Bool = False
    #: Communicator memory allocated before the budget's baseline snapshot (NCCL, custom
    #: all-reduce, at TP >= 2), GiB per GPU by TP like ``non_torch_gib``: not in the budget,
    #: it must fit beside it with the context and the CUDA graphs.
    init_comm_gib: dict[int, float] = Field(default_factory=lambda: {1: 0.0})
    #: Which CUDA graphs the engine captures after sizing the pool (``vllm_v1``: vLLM
    #: 0.19's FULL_AND_PIECEWISE capture sizes, :func:`capsim.kv.memory.cudagraph_count`;
    #: ``vllm_0_11``: the same mode at 0.11's sizes, every multiple of 8; ``none``: graph
    #: memory not modelled).
    cudagraph_capture: Literal["none", "vllm_v1", "vllm_0_11"] = "none"
    #: Graph pool per layer per captured graph, MiB, by TP (vLLM logs the pool as "Graph
    #: capturing finished in N secs, took X GiB"), and the start-up estimate of it ("Estimated
    #: CUDA graph memory: X GiB total").
    cudagraph_mib_per_layer_graph: dict[int, float] = Field(default_factory=lambda: {1: 0.0})
    cudagraph_estimate_mib_per_layer_graph: dict[int, float] = Field(
        default_factory=lambda: {1: 0.0})
    #: The estimate is taken out of the KV budget (vLLM >= 0.21 by default,
    #: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); else the graphs live beside the budget.
    cudagraph_in_budget: Bool = False
    #: The profile run's tensor-parallel all-reduce outputs stay reserved by PyTorch's caching
    #: allocator until the run ends, and the profiler counts reserved memory (vLLM <= 0.2.5:
    #: ``torch.distributed.all_reduce`` records its tensor on the NCCL stream, so a freed block
    #: is reused only after the GPU has run that all-reduce, while the CPU is a forward ahead).
    #: At TP >= 2 it charges every all-reduce of one forward to the budget
    #: (:func:`capsim.kv.memory.held_all_reduce_bytes`).
    held_all_reduce_outputs: Bool = False
    #: sglang: the default memory fraction is SGLang 0.5's reserve heuristic
    #: (:class:`~capsim.profiles.static_fraction.StaticFraction`) wherever the scenario
    #: leaves ``mem_fraction_static`` unset; None: the preset's ``defaults`` give it.
    static_fraction: StaticFraction | None = None
    #: sglang: the same, by SGLang 0.4.7-0.4.9's reserve per GPU-memory tier
    #: (:class:`~capsim.profiles.tiered_fraction.TieredFraction`); at most one of the two.
    static_fraction_tiers: TieredFraction | None = None

    @property
    def fraction_rule(self) -> StaticFraction | TieredFraction | None:
        """The rule that picks the default ``mem_fraction_static`` (None: the defaults')."""
        return self.static_fraction or self.static_fraction_tiers

    @model_validator(mode="after")
    def _non_torch_from_tp1(self) -> "MemoryRule":
        if self.static_fraction is not None and self.static_fraction_tiers is not None:
            raise ValueError("give static_fraction (SGLang 0.5's rule) or "
                             "static_fraction_tiers (0.4's), not both")
        for name in ("non_torch_gib", "init_comm_gib", "cudagraph_mib_per_layer_graph",
                     "cudagraph_estimate_mib_per_layer_graph"):
            if 1 not in getattr(self, name):
                raise ValueError(f"{name} needs an entry for TP 1 (the smallest degree)")
        return self

    @property
    def fraction_knob(self) -> str:
        """The engine knob holding this rule's memory fraction (``gpu_memory_utilization`` …)."""
        return FRACTION_KNOBS[self.rule]

    def non_torch_gib_at(self, tp: int) -> float:
        """Non-torch memory charged per GPU at tensor-parallel degree ``tp``."""
        return at_tp(self.non_torch_gib, tp)


def at_tp(by_tp: dict[int, float], tp: int) -> float:
    """The entry of a by-TP table that applies at ``tp``: the largest key <= ``tp``."""
    return by_tp[max(k for k in by_tp if k <= tp)]


class Condition(StrictModel):
    """When a conditional default applies (every given field must hold): the GPU's memory
    at least ``min_memory_total_gib`` and below ``below_memory_total_gib``, a profile name
    without ``hardware_not_matching``, the knob ``enable_chunked_prefill`` as given, and
    ``speculative`` (true: ``engine.speculative`` is set; false: it is not)."""

    min_memory_total_gib: float | None = None
    below_memory_total_gib: float | None = None
    hardware_not_matching: str | None = None      # substring of the profile name
    enable_chunked_prefill: Bool | None = None
    speculative: Bool | None = None

    def holds(self, hardware_name: str, memory_total_gib: float, knobs: dict[str, Any]) -> bool:
        if self.min_memory_total_gib is not None and memory_total_gib < self.min_memory_total_gib:
            return False
        if (self.below_memory_total_gib is not None
                and memory_total_gib >= self.below_memory_total_gib):
            return False
        if self.speculative is not None and (knobs.get("speculative") is not None
                                             ) != self.speculative:
            return False
        if self.hardware_not_matching is not None and self.hardware_not_matching in hardware_name:
            return False
        return (self.enable_chunked_prefill is None
                or knobs.get("enable_chunked_prefill") == self.enable_chunked_prefill)


class ConditionalDefaults(StrictModel):
    """Defaults that depend on the GPU or on another knob (vLLM's batch defaults by GPU)."""

    when: Condition
    set: dict[str, Any]


#: The policies a preset can name: the policy table's, vLLM's first (as error messages list them).
_PRESET_POLICIES = ("continuous",) + tuple(n for n in POLICY_NAMES if n != "continuous")


class SchedulerPreset(StrictModel):
    """The engine's scheduling policy family and its own knobs (engine spelling)."""

    policy: Literal[_PRESET_POLICIES]
    knobs: dict[str, Any] = Field(default_factory=dict)


class Admission(StrictModel):
    """The engine's own limits on the requests it accepts, under the engine's own names
    (each ``None``: no limit). A request over a limit is rejected at once (``queue_full``);
    the scenario's ``engine.max_inflight_requests`` / ``engine.max_waiting_requests`` set
    the same limits under capsim's names (:meth:`knobs`).

    - ``max_concurrent_requests`` (TGI's router, ``--max-concurrent-requests``): a
      semaphore of that many permits, one taken by each request until its reply ends
      (queued or running); ``try_acquire`` failing is ``InferError::Overloaded``, HTTP 429
      (router/src/infer/mod.rs, router/src/server.rs at v2.1.0).
    - ``max_queued_requests`` (SGLang's ``--max-queued-requests``): a request that finds
      the waiting queue holding that many is aborted, HTTP 503 "The request queue is
      full." (``Scheduler._abort_on_queued_limit``, python/sglang/srt/managers/scheduler.py).
    """

    max_concurrent_requests: Int | None = Field(default=None, gt=0)
    max_queued_requests: Int | None = Field(default=None, gt=0)

    def knobs(self) -> dict[str, int]:
        """The limits set, as the scenario's engine knobs: requests in flight
        (``max_inflight_requests``) and waiting (``max_waiting_requests``)."""
        out = {"max_inflight_requests": self.max_concurrent_requests,
               "max_waiting_requests": self.max_queued_requests}
        return {k: v for k, v in out.items() if v is not None}


class TpAllReduce(StrictModel):
    """Which kernel an engine's tensor-parallel all-reduces run (the cost of each is the
    GPU profile's: :mod:`capsim.cost.operators`).

    ``nccl_ring``: NCCL's ring for every message. ``custom``: the engine's own
    peer-to-peer kernel (vLLM's ``CustomAllreduce``) where the engine would use it —
    TP in ``world_sizes``, a message of fewer than ``max_bytes`` bytes, and TP 2 or a
    fully NVLink-connected group (``custom_all_reduce.py should_custom_ar``) — as the
    one-shot kernel below ``one_shot_max_bytes[TP]`` (``None``: always) and the two-shot
    kernel above (``csrc/custom_all_reduce.cuh`` ``allreduce``); NCCL otherwise (above
    ``max_bytes``: the profile's measured ``all_reduce_tables.nccl`` where it has one,
    :data:`capsim.cost.communication.NCCL_TABLE`, else the ring), and NCCL's ring wherever
    the GPU profile has no ``custom_all_reduce`` costs. ``table``: the
    engine's own dispatch as measured on the GPU, the profile's ``all_reduce_tables[table]``
    (:class:`~capsim.profiles.all_reduce_table.AllReduceTable`; TensorRT-LLM's AUTO strategy:
    ``trtllm_auto``) at every message size within a node; NCCL's ring where the GPU profile
    has no such table or no row for the TP size (said in the run's trust line:
    :func:`capsim.profiles.trust.all_reduce_note`).
    """

    algorithm: Literal["nccl_ring", "custom", "table"] = "nccl_ring"
    table: str | None = Field(None, min_length=1)
    world_sizes: list[Int] = Field(default_factory=list)
    max_bytes: Int | None = Field(None, gt=0)
    one_shot_max_bytes: dict[Int, Int | None] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _custom_complete(self) -> "TpAllReduce":
        if (self.algorithm == "table") != (self.table is not None):
            raise ValueError("algorithm table needs table: the GPU profile's all_reduce_tables "
                             "key (e.g. trtllm_auto); other algorithms take no table")
        if self.algorithm == "custom":
            if not self.world_sizes or self.max_bytes is None:
                raise ValueError("algorithm custom needs world_sizes and max_bytes")
            missing = [w for w in self.world_sizes if w not in self.one_shot_max_bytes]
            if missing:
                raise ValueError(f"one_shot_max_bytes has no entry for world size(s) "
                                 f"{', '.join(map(str, missing))} (null: always one-shot)")
        return self


class FusionOff(StrictModel):
    """GPUs and expert formats on which SGLang's MoE runner turns the fusion off."""

    hardware: list[str] = Field(min_length=1)
    expert_formats: list[str] = Field(min_length=1)


class SharedExpertsFusion(StrictModel):
    """SGLang's shared-experts fusion: the shared expert of a model that meets the rule runs
    inside the routed experts' fused-MoE kernel as one more expert every token selects
    (``num_fused_shared_experts``; DeepseekV2ForCausalLM.determine_num_fused_shared_experts
    in python/sglang/srt/models/deepseek_v2.py), unless ``--disable-shared-experts-fusion``.

    The rule (the preset's ``sources:`` name the wheel): the model's ``model_type`` in
    ``model_types`` (its architecture), exactly ``num_experts`` routed and
    ``num_shared_experts`` shared experts (capsim's shared width over the expert width), a
    GPU of a platform in ``platforms``, no expert parallelism, and not a GPU and expert
    format of ``off_on`` (where SGLang picks a MoE runner that cannot fuse).
    """

    model_types: list[str] = Field(min_length=1)
    num_experts: Int = Field(gt=0)
    num_shared_experts: Int = Field(gt=0)
    platforms: list[Literal["cuda", "rocm"]] = Field(min_length=1)
    off_on: list[FusionOff] = Field(default_factory=list)

    def fits(self, model: ModelShape) -> bool:
        """Whether ``model`` is one whose shared expert SGLang fuses on some GPU: the
        architecture, the routed experts and the shared width of the rule above."""
        f = model.moe_intermediate_size
        return (model.model_type in self.model_types and model.num_experts == self.num_experts
                and f > 0 and model.shared_expert_intermediate_size
                == self.num_shared_experts * f)

    def applies(self, model: ModelShape, hardware: str, platform: str, expert_format: str,
                expert_parallel: bool) -> bool:
        """Whether SGLang fuses ``model``'s shared expert on a ``hardware`` GPU of
        ``platform`` with experts in ``expert_format`` (EP on or off): the rule above."""
        return (self.fits(model) and platform in self.platforms and not expert_parallel
                and not any(hardware in o.hardware and expert_format in o.expert_formats
                            for o in self.off_on))


class PiecewiseGraphOff(StrictModel):
    """Models, GPUs and expert formats on which SGLang turns its piecewise graph off by
    default (the MoE runner or attention backend it picks there cannot be captured)."""

    model_types: list[str] = Field(min_length=1)
    hardware: list[str] = Field(min_length=1)
    expert_formats: list[str] = Field(min_length=1)


class AllReduceFusion(StrictModel):
    """SGLang's fused all-reduce + residual add + RMSNorm (``--enable-flashinfer-allreduce-
    fusion``, which SGLang turns on by itself for some models on some GPUs): each layer's
    attention-output and MoE-output all-reduce, and the add-RMSNorm after it, run as one
    FlashInfer ``trtllm_allreduce_fusion`` kernel (TensorRT-LLM's one-shot / two-shot
    all-reduce with the norm in its epilogue) on a forward of at most ``max_tokens`` tokens;
    the last layer's MoE output and the embedding's all-reduce stay the engine's custom
    kernel, and so does every all-reduce of a larger forward.

    The rule (the preset's ``sources:`` name the wheel): the model's ``model_type`` in
    ``model_types``, a GPU in ``hardware``, no DP attention, the TP group on one node. Where
    it holds, capsim prices each fused all-reduce at the GPU profile's measured all-reduce
    table ``table`` (``all_reduce_tables``: the same kernels timed through TensorRT-LLM);
    the add-RMSNorm it absorbs stays in the step's element-wise term (capsim does not split
    that term by kernel), so the saving priced is the all-reduce's alone.
    """

    PLATFORM: ClassVar[str] = "cuda"   # FlashInfer's trtllm_allreduce_fusion's platform
    model_types: list[str] = Field(min_length=1)
    hardware: list[str] = Field(min_length=1)
    # bounded: the priced pieces end at a finite token limit (capsim.cost.communication)
    max_tokens: Int = Field(gt=0, le=MAX_TOKENS)
    table: str = Field(min_length=1)

    def applies(self, model: ModelShape, hardware: str, dp_attention: bool,
                one_node: bool) -> bool:
        """Whether SGLang fuses ``model``'s all-reduces on a ``hardware`` GPU (DP attention
        on or off, the TP group on one node or not): the rule above."""
        return (model.model_type in self.model_types and hardware in self.hardware
                and not dp_attention and one_node)

    def applies_to(self, model: ModelShape, hw: HardwareProfile, tp: int,
                   dp_attention: bool) -> bool:
        """:meth:`applies` to a TP-``tp`` group (>= 2: else no all-reduce) on ``hw``, one
        node when the group fits in ``hw.gpus_per_node`` (the pricer's and the preset-rule
        lines' one test)."""
        one_node = hw.gpus_per_node is None or tp <= hw.gpus_per_node
        return tp >= 2 and self.applies(model, hw.name, dp_attention, one_node)


class PiecewiseCudaGraph(StrictModel):
    """SGLang's piecewise CUDA graph for prefill (extend) forwards, on by default from 0.5.10
    (``disable_piecewise_cuda_graph`` False): a forward of at most
    ``piecewise_cuda_graph_max_tokens`` tokens (the whole batch, ``len(input_ids)``) replays
    captured graph pieces, a larger one runs eagerly (PiecewiseCudaGraphRunner.can_run). The
    limit is ``mla_max_tokens`` for MLA models and ``chunked_prefill_size`` (so every prefill
    step) for the rest. SGLang turns the graph off on a platform outside ``platforms``, with
    DP attention (and so with its all-to-all MoE), with pipeline parallelism
    (:class:`~capsim.cost.pipeline.PipelinePricer` keeps the eager floor), and on a model,
    GPU and expert format of ``off_on``. Where it applies, the preset's
    ``host_overhead.eager_prefill_op_s`` floor holds only above the limit."""

    mla_max_tokens: Int = Field(gt=0)
    platforms: list[Literal["cuda", "rocm"]] = Field(min_length=1)
    off_on: list[PiecewiseGraphOff] = Field(default_factory=list)
    #: The graph's share of SGLang's default mem_fraction_static reserve, MiB: a flat sum for
    #: an MLA model, else so much per captured size (:meth:`reserve_mib`).
    reserve_mla_mib: float = Field(0.0, ge=0)
    reserve_mib_per_size: float = Field(0.0, ge=0)
    #: The captured sizes: [start, stop, step] ranges (stop null: up to the limit), each size
    #: kept while it is at most the limit (_generate_piecewise_cuda_graph_tokens).
    capture_ranges: list[tuple[Int, Int | None, Int]] = Field(default_factory=list)

    def max_tokens(self, model: ModelShape, hardware: str, platform: str, expert_format: str,
                   dp_attention: bool) -> float:
        """Tokens up to which a prefill step of ``model`` replays the graph on a
        ``hardware`` GPU of ``platform`` with experts in ``expert_format``: 0 where SGLang
        turns the graph off (every prefill eager), ``inf`` for a model that is not MLA."""
        off = (platform not in self.platforms or dp_attention
               or any(model.model_type in o.model_types and hardware in o.hardware
                      and expert_format in o.expert_formats for o in self.off_on))
        if off:
            return 0.0
        return float(self.mla_max_tokens) if model.is_mla else float("inf")

    def reserve_mib(self, model: ModelShape, hardware: str, platform: str, expert_format: str,
                    dp_attention: bool, chunked_prefill_tokens: int) -> float:
        """MiB SGLang adds to its default reserve while the graph is on: ``reserve_mla_mib``
        for an MLA model, else ``reserve_mib_per_size`` x the sizes captured up to
        ``chunked_prefill_tokens`` (the limit of a model that is not MLA); 0 where it is off."""
        if not self.max_tokens(model, hardware, platform, expert_format, dp_attention):
            return 0.0
        if model.is_mla:
            return self.reserve_mla_mib
        sizes = sum(len([t for t in range(a, (b if b is not None else chunked_prefill_tokens)
                                          + 1, step) if t <= chunked_prefill_tokens])
                    for a, b, step in self.capture_ranges)
        return self.reserve_mib_per_size * sizes


class AbsorbedBmmDequant(StrictModel):
    """SGLang's absorbed MLA decode on the GPUs in ``hardware`` (gfx942, CDNA 3): the two
    batched matmuls that absorb kv_b_proj (``w_kc`` into q, ``w_vc`` into the output) keep
    fp8 weights with a per-tensor scale and run as ``torch.bmm(x, w.to(bfloat16) * w_scale)``
    (DeepseekV2AttentionMLA.forward_absorb_prepare / forward_absorb_core, the ``_is_hip``
    branch that is not gfx950, python/sglang/srt/models/deepseek_v2.py): every decode step
    each layer rewrites both weights ``passes`` times (the cast, the scale multiply) before
    a 16-bit bmm reads them. The CUDA path dequantises them to bf16 once at load."""

    PLATFORM: ClassVar[str] = "rocm"   # the code path's platform (the _is_hip branch)
    hardware: list[str] = Field(min_length=1)
    passes: Int = Field(gt=0)

    def applies(self, model: ModelShape, hardware: str, weight_compute: str) -> bool:
        """Whether a ``hardware`` GPU runs ``model``'s absorbed decode this way: an MLA
        model with fp8 attention weights (``weight_compute`` fp8) on one of the GPUs."""
        return model.is_mla and weight_compute == "fp8" and hardware in self.hardware


#: The layer matmuls capsim prices by name (capsim/cost/operators.py layer_matmuls).
LAYER_MATMULS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "q_a_kv_a_proj",
                 "q_b_proj", "kv_a_proj", "q_proj", "kv_b_proj", "shared_expert", "router")


class UntunedFp8Gemm(StrictModel):
    """SGLang on the GPUs in ``hardware`` (gfx942, CDNA 3) runs block-fp8 layer linears through
    aiter's Triton ``gemm_a8w8_blockscale`` (python/sglang/srt/layers/quantization/
    fp8_utils.py, ``aiter_w8a8_block_fp8_linear``), and the aiter its ROCm image ran has no
    config for DeepSeek's shapes on that GPU, so every call takes the generic one: one
    ``block_m`` x ``block_n`` output tile per workgroup walking the whole K dimension in
    ``block_k`` steps, no split-K. At decode sizes a handful of workgroups run the K loop
    one step after another, whatever the rows: a matmul in ``matmuls`` costs at least
    ``ceil(K / block_k) x k_step_s`` per layer, times the waves of tiles over the GPU's
    compute units (:func:`~capsim.cost.gemm_floor.k_loop_floor_s`)."""

    PLATFORM: ClassVar[str] = "rocm"   # aiter's kernels' platform
    hardware: list[str] = Field(min_length=1)
    matmuls: list[str] = Field(min_length=1)   # of LAYER_MATMULS
    block_m: Int = Field(gt=0)
    block_n: Int = Field(gt=0)
    block_k: Int = Field(gt=0)
    # bounded as a launch: 1e30 s a K step passed validation and broke the run (IndexError)
    k_step_s: float = Field(gt=0, le=MAX_LAUNCH_S)

    @field_validator("matmuls")
    @classmethod
    def _known_matmuls(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in LAYER_MATMULS]
        if unknown:
            raise ValueError(f"unknown layer matmul(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(LAYER_MATMULS)}")
        return names

    def applies(self, hardware: str, weight_compute: str, block_scaled: bool) -> bool:
        """Whether a ``hardware`` GPU runs the layer linears this way: block-scaled fp8
        weights (``weight_compute`` fp8) on one of the GPUs."""
        return block_scaled and weight_compute == "fp8" and hardware in self.hardware


class SpeculativeMethods(StrictModel):
    """The speculative methods an engine version runs as capsim models them, by vLLM's
    ``method`` name → the engine's own (SGLang's ``--speculative-algorithm``), and those it
    runs in a way capsim does not model, each with why. A method in neither is one the
    version does not have (the preset's ``sources:`` name the choices read)."""

    methods: dict[str, str] = Field(default_factory=dict)
    not_modelled: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_methods(self) -> "SpeculativeMethods":
        # A name the scenario schema refuses would be offered as "valid" by refusal().
        unknown = [m for m in (*self.methods, *self.not_modelled) if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown speculative method(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(METHODS)} (vLLM's names)")
        return self

    def refusal(self, method: str) -> str | None:
        """Why ``method`` is refused on this engine (None: modelled)."""
        if method in self.methods:
            return None
        valid = ", ".join(self.methods) or "none: remove engine.speculative"
        why = self.not_modelled.get(method)
        if why is not None:
            return f"{why} (valid: {valid})"
        has = ", ".join([*self.methods.values(),
                         *(f"{m} (not modelled)" for m in self.not_modelled)])
        return (f"this engine version has no such speculative method"
                f"{f' (it has {has})' if has else ' (it has no speculative decoding)'}; "
                f"valid: {valid}")


class EnginePreset(StrictModel):
    """One engine (and version era) as capsim models it."""

    name: str = Field(min_length=1)
    display_name: str = Field(min_length=1)
    engine: EngineFamily
    version: str = Field(min_length=1)
    defaults: dict[str, Any] = Field(default_factory=dict)
    conditional_defaults: list[ConditionalDefaults] = Field(default_factory=list)
    memory: MemoryRule
    scheduler: SchedulerPreset
    admission: Admission = Field(default_factory=Admission)
    host_overhead: HostOverhead = Field(default_factory=HostOverhead)
    tp_all_reduce: TpAllReduce = Field(default_factory=TpAllReduce)
    shared_experts_fusion: SharedExpertsFusion | None = None
    all_reduce_fusion: AllReduceFusion | None = None
    absorbed_bmm_dequant: AbsorbedBmmDequant | None = None
    untuned_fp8_gemm: UntunedFp8Gemm | None = None
    piecewise_cuda_graph: PiecewiseCudaGraph | None = None
    # The engine build (<family>-<version>) whose fused-MoE curve a GPU profile may hold
    # (efficiency.grouped_gemm_fp8_engine): fp8 routed experts take it there (None: the
    # profile's grouped_gemm_fp8).
    grouped_gemm_fp8_engine: str | None = Field(
        None, pattern=r"^(vllm|sglang|tensorrt-llm|tgi)-[0-9][^\s]*$")
    # None: every method capsim models (vLLM's names); else the version's own list
    speculative_methods: SpeculativeMethods | None = None
    dataset_tuning: DatasetTuning | None = None
    # The GPU platforms the engine builds for (a GPU profile's ``platform``).
    platforms: list[Literal["cuda", "rocm"]] = Field(default=["cuda", "rocm"], min_length=1)
    sources: dict[str, str] = Field(min_length=1)
    fitted_to: FittedTo = Field(default_factory=dict)
    notes: str = ""

    @field_validator("host_overhead")
    @classmethod
    def _graph_sizes_known(cls, host: HostOverhead, info: ValidationInfo) -> HostOverhead:
        """The largest captured decode batch is memory.static_fraction's cuda_graph_max_bs
        or memory.cudagraph_capture's largest size (Pool.decode_graph_max_seqs), and the eager
        decode has a floor (eager_decode_op_s, else eager_prefill_op_s): without either the
        flag would change nothing, silently; nor would eager_decode_op_s without the flag."""
        memory = info.data.get("memory")
        if host.eager_decode_above_graph_bs and memory is not None \
                and memory.static_fraction is None and memory.cudagraph_capture == "none":
            raise ValueError("eager_decode_above_graph_bs: true needs memory.static_fraction "
                             "(its cuda_graph_max_bs is the largest captured decode batch) "
                             "or memory.cudagraph_capture (vLLM's capture sizes); give one "
                             "or set it false")
        if host.eager_decode_op_s and not host.eager_decode_above_graph_bs:
            raise ValueError("eager_decode_op_s prices nothing without "
                             "eager_decode_above_graph_bs: true (valid: set it true, or "
                             "eager_decode_op_s 0)")
        if host.eager_decode_above_graph_bs and not (host.eager_decode_op_s
                                                     or host.eager_prefill_op_s):
            raise ValueError("eager_decode_above_graph_bs: true prices nothing with "
                             "eager_decode_op_s and eager_prefill_op_s 0 (the eager decode is "
                             "held to that floor); valid: eager_decode_op_s or "
                             "eager_prefill_op_s > 0, the host seconds to launch one "
                             "operator, or eager_decode_above_graph_bs false")
        return host

    def defaults_for(self, hardware_name: str, memory_total_gib: float,
                     knobs: dict[str, Any]) -> dict[str, Any]:
        """The engine knobs this preset sets on that GPU, given the ones the scenario set
        (``knobs``; conditions on a knob see the scenario's value, else the default); the
        engine's request limits (``admission``) among them."""
        out = {**self.admission.knobs(), **self.defaults}
        seen = {**out, **knobs}
        for cond in self.conditional_defaults:
            if cond.when.holds(hardware_name, memory_total_gib, seen):
                out.update(cond.set)
        return out

    @property
    def label(self) -> str:
        """``vllm-v1 (vLLM 0.19.0)``: the name and the version it models."""
        return f"{self.name} ({self.display_name} {self.version})"


def engine_preset_names() -> list[str]:
    """Names of the packaged engine presets, sorted."""
    return packaged_names(_FOLDER)


class PresetAlias(StrictModel):
    """A preset file that names another packaged preset (``alias_of``) instead of values."""

    name: str = Field(min_length=1)
    alias_of: str = Field(min_length=1)


def _parse(path: Path) -> EnginePreset:
    raw = read_yaml_mapping(path)
    model = PresetAlias if "alias_of" in raw else EnginePreset
    try:
        parsed = model.model_validate(raw)
    except ValidationError as exc:
        raise scenario_error_from_validation(exc, str(path), model) from None
    return _aliased(parsed, path) if isinstance(parsed, PresetAlias) else parsed


def _aliased(alias: PresetAlias, path: Path) -> EnginePreset:
    """The packaged preset ``alias`` names; an alias of an alias (or of an unknown name) is
    refused, naming the file, ``alias_of`` and the presets it may name."""
    if alias.alias_of in engine_preset_names() and not _is_alias(alias.alias_of):
        return load_engine_preset(alias.alias_of)
    valid = [n for n in engine_preset_names() if not _is_alias(n)]
    raise ScenarioError(f"alias_of names a packaged preset that is not itself an alias; got "
                        f"{alias.alias_of!r} (valid: {', '.join(valid)})",
                        file=str(path), path="alias_of")


def _is_alias(name: str) -> bool:
    """The packaged preset ``name`` is another name for one (its file has ``alias_of``)."""
    with packaged_file(_FOLDER, name, "engine preset") as path:
        return "alias_of" in read_yaml_mapping(path)


def load_engine_preset(name_or_path: str | Path) -> EnginePreset:
    """An engine preset by packaged name (``vllm-v1``) or from a ``.yaml`` file.

    Raises:
        ScenarioError: unknown name (the message lists the valid ones), or an
            unreadable or invalid file (names the file and the field).
    """
    if is_path(name_or_path):
        return _parse(Path(name_or_path))
    with packaged_file(_FOLDER, str(name_or_path), "engine preset") as path:
        return _parse(path)
