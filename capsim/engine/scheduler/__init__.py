"""Scheduling policies behind one interface (:class:`~capsim.engine.scheduler.base.Scheduler`).

- ``continuous`` (:mod:`.continuous`): iteration-level batching, chunked
  (Sarathi-Serve / vLLM v1) or not (Orca / vLLM v0); over a contiguous KV layout
  :mod:`.contiguous` is its pre-paging baseline;
- ``static`` (:mod:`.static`): run-to-completion batches;
- ``trtllm`` (:mod:`.trtllm`): TensorRT-LLM's in-flight batching, GUARANTEED_NO_EVICT
  (default) or MAX_UTILIZATION (``capacity_scheduler_policy``);
- ``sglang`` (:mod:`.sglang`): SGLang's prefill-first scheduler and its admission budget;
- ``tgi`` (:mod:`.tgi`): TGI 2.1's router-v3 batching.

:func:`make_scheduler` builds the one an engine names; :data:`POLICIES` maps
``engine.scheduler`` values to classes.
"""

from __future__ import annotations

from capsim.engine.recorder import ItlRecorder
from capsim.engine.scheduler.base import Scheduler
from capsim.engine.scheduler.contiguous import ContiguousScheduler
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.sglang import SglangScheduler
from capsim.engine.scheduler.speculative import SpeculativeScheduler
from capsim.engine.scheduler.static import StaticScheduler
from capsim.engine.scheduler.tgi import TgiScheduler
from capsim.engine.scheduler.trtllm import TrtllmMaxUtilizationScheduler, TrtllmScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.kv.contiguous import ContiguousAllocator
from capsim.scenario.schema import EngineConfig
from capsim.scenario.speculative import SpecDecoding

GIB = 2**30

#: ``engine.scheduler`` → policy class.
POLICIES: dict[str, type[Scheduler]] = {"continuous": ContinuousScheduler,
                                        "static": StaticScheduler,
                                        "trtllm": TrtllmScheduler,
                                        "sglang": SglangScheduler,
                                        "tgi": TgiScheduler}

#: SGLang's constants, read from the preset's ``scheduler.knobs``.
SGLANG_KNOBS = ("init_new_token_ratio", "min_new_token_ratio_factor",
                "new_token_ratio_decay_steps", "retract_decode_steps", "clip_max_new_tokens")


def make_kv(eng: EngineConfig, num_gpu_blocks: int) -> BlockAllocator | ContiguousAllocator:
    """A replica's KV pool of ``num_gpu_blocks`` blocks: paged (vLLM), or a contiguous
    baseline (``engine.kv_allocator``). The paged pool caches prefixes when
    ``enable_prefix_caching`` is on and the policy supports it
    (``supports_prefix_caching``)."""
    if eng.kv_allocator != "paged":
        return ContiguousAllocator(num_gpu_blocks * eng.block_size, eng.block_size)
    return BlockAllocator(num_gpu_blocks, eng.block_size,
                          enable_caching=eng.enable_prefix_caching
                          and POLICIES[eng.scheduler].supports_prefix_caching)


def make_scheduler(eng: EngineConfig, alloc: BlockAllocator | ContiguousAllocator,
                   kv_bytes_per_token: int, num_classes: int, itl: ItlRecorder,
                   role: str = "colocated", knobs: dict | None = None,
                   spec: SpecDecoding | None = None) -> Scheduler:
    """The scheduler ``eng.scheduler`` names, for one replica in ``role``; ``knobs``: the
    engine preset's ``scheduler.knobs`` (SGLang's constants); ``spec``: speculative
    decoding (:class:`SpeculativeScheduler`, vLLM's continuous batching only: the
    scenario's resolution refuses it elsewhere).

    Raises:
        ValueError: static batching or an engine's own policy in a disaggregated pool
            (the scenario's resolution refuses them first, with the YAML path); an
            engine's own policy over a contiguous KV layout or with swap preemption; a
            knob the policy needs that neither the engine config nor ``knobs`` gives.
    """
    policy = POLICIES[eng.scheduler]
    if policy is StaticScheduler:
        if role != "colocated":
            raise ValueError("static batching cannot be disaggregated")
        return StaticScheduler(max_num_seqs=eng.max_num_seqs, allocator=alloc,
                               num_classes=num_classes, itl=itl)
    common = dict(max_num_seqs=eng.max_num_seqs, max_num_batched_tokens=eng.max_num_batched_tokens,
                  chunked=eng.chunked, allocator=alloc, num_classes=num_classes, itl=itl,
                  role=role)
    if policy is not ContinuousScheduler:
        return _engine_policy(eng, common, knobs or {})
    common["long_prefill_token_threshold"] = eng.long_prefill_token_threshold
    if eng.kv_allocator != "paged":
        return ContiguousScheduler(reserve=eng.kv_allocator.removeprefix("contiguous_"),
                                   max_model_len=eng.max_model_len, **common)
    swap = int(eng.swap_space_gib * GIB) * eng.tensor_parallel_size \
        if eng.preemption_mode == "swap" else 0
    if spec is not None:
        return SpeculativeScheduler(**common, spec=spec, swap_space_bytes=swap,
                                    kv_bytes_per_token=kv_bytes_per_token)
    return policy(**common, swap_space_bytes=swap, kv_bytes_per_token=kv_bytes_per_token,
                  num_scheduler_steps=eng.num_scheduler_steps)


def _engine_policy(eng: EngineConfig, common: dict, knobs: dict) -> Scheduler:
    """TensorRT-LLM's, SGLang's or TGI's policy, its knobs from ``eng`` or the preset."""
    name = eng.scheduler
    if common["role"] != "colocated":
        raise ValueError(f"scheduler {name} runs co-located replicas only")
    if eng.kv_allocator != "paged" or eng.preemption_mode != "recompute":
        raise ValueError(f"scheduler {name} runs on the paged KV allocator with recompute "
                         "preemption only")

    def knob(key: str):
        value = getattr(eng, key, None)
        if value is None:
            value = knobs.get(key)
        if value is None:
            raise ValueError(f"scheduler {name} needs {key} (engine knob or the preset's "
                             "scheduler.knobs)")
        return value

    if name == "trtllm":
        policy = eng.capacity_scheduler_policy or knobs.get("capacity_scheduler_policy",
                                                            "GUARANTEED_NO_EVICT")
        cls = TrtllmMaxUtilizationScheduler if policy == "MAX_UTILIZATION" else TrtllmScheduler
        return cls(**common)
    if name == "tgi":
        return TgiScheduler(max_waiting_tokens=knob("max_waiting_tokens"),
                            waiting_served_ratio=knob("waiting_served_ratio"), **common)
    return SglangScheduler(schedule_conservativeness=knob("schedule_conservativeness"),
                           **{k: knob(k) for k in SGLANG_KNOBS}, **common)


__all__ = ["POLICIES", "ContiguousScheduler", "ContinuousScheduler", "Scheduler",
           "SglangScheduler", "StaticScheduler", "TgiScheduler", "TrtllmMaxUtilizationScheduler",
           "TrtllmScheduler", "make_kv", "make_scheduler"]
