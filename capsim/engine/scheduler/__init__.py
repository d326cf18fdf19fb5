"""Scheduling policies behind one interface (:class:`~capsim.engine.scheduler.base.Scheduler`).

- ``continuous`` (:mod:`.vllm`): iteration-level batching, chunked (Sarathi-Serve / vLLM
  v1) or not (Orca / vLLM v0), :mod:`.continuous`; over a contiguous KV layout
  :mod:`.contiguous` is its pre-paging baseline, with speculative decoding
  :mod:`.speculative`;
- ``static`` (:mod:`.static`): run-to-completion batches;
- ``trtllm`` (:mod:`.trtllm`): TensorRT-LLM's in-flight batching, GUARANTEED_NO_EVICT
  (default) or MAX_UTILIZATION (``capacity_scheduler_policy``);
- ``sglang`` (:mod:`.sglang`): SGLang's prefill-first scheduler and its admission budget;
- ``tgi`` (:mod:`.tgi`): TGI 2.1's router-v3 batching.

Each policy's row in :data:`capsim.profiles.policies.POLICY_TABLE` names its module, whose
``build(PolicyArgs)`` makes the scheduler from the engine config; :func:`make_scheduler`
calls the one an engine names, :func:`make_kv` makes the replica's KV pool.
"""

from __future__ import annotations

from importlib import import_module
from typing import Callable

from capsim.engine.recorder import ItlRecorder
from capsim.engine.scheduler.base import PolicyArgs, Scheduler, SchedulerCounters
from capsim.engine.scheduler.contiguous import ContiguousScheduler
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.sglang import SglangScheduler
from capsim.engine.scheduler.speculative import SpeculativeScheduler
from capsim.engine.scheduler.static import StaticScheduler
from capsim.engine.scheduler.tgi import TgiScheduler
from capsim.engine.scheduler.trtllm import TrtllmMaxUtilizationScheduler, TrtllmScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.kv.contiguous import ContiguousAllocator
from capsim.kv.offload import HostTier, host_blocks
from capsim.profiles.policies import POLICY_TABLE, policy_capabilities
from capsim.scenario.schema import EngineConfig
from capsim.scenario.speculative import SpecDecoding

#: ``engine.scheduler`` → the ``build`` of its module (the table row's ``module``).
POLICIES: dict[str, Callable[[PolicyArgs], Scheduler]] = {
    name: import_module(f"{__name__}.{row.module}").build for name, row in POLICY_TABLE.items()}


def make_kv(eng: EngineConfig, num_gpu_blocks: int, kv_bytes_per_token: int = 0
            ) -> BlockAllocator | ContiguousAllocator:
    """A replica's KV pool of ``num_gpu_blocks`` blocks: paged (vLLM), or a contiguous
    baseline (``engine.kv_allocator``). The paged pool caches prefixes when
    ``enable_prefix_caching`` is on and the policy has a prefix cache
    (``capabilities.prefix_cache``); with ``engine.kv_offloading_size`` its evictions go
    to a host tier (:mod:`capsim.kv.offload`) of that many GiB at ``kv_bytes_per_token``
    bytes per token of the replica."""
    if eng.kv_allocator != "paged":
        return ContiguousAllocator(num_gpu_blocks * eng.block_size, eng.block_size)
    caching = eng.enable_prefix_caching and policy_capabilities(eng.scheduler).prefix_cache
    host = None
    if caching and eng.kv_offloading_size is not None and kv_bytes_per_token:
        host = HostTier(host_blocks(eng.kv_offloading_size, kv_bytes_per_token,
                                    eng.block_size))
    return BlockAllocator(num_gpu_blocks, eng.block_size, enable_caching=caching, host=host)


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
    return POLICIES[eng.scheduler](PolicyArgs(eng, alloc, kv_bytes_per_token, num_classes,
                                              itl, role, knobs, spec))


__all__ = ["POLICIES", "ContiguousScheduler", "ContinuousScheduler", "PolicyArgs", "Scheduler",
           "SchedulerCounters", "SglangScheduler", "SpeculativeScheduler", "StaticScheduler",
           "TgiScheduler", "TrtllmMaxUtilizationScheduler", "TrtllmScheduler", "make_kv",
           "make_scheduler"]
