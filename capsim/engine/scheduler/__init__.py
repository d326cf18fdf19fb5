"""Scheduling policies behind one interface (:class:`~capsim.engine.scheduler.base.Scheduler`).

- ``continuous`` (:mod:`.continuous`): iteration-level batching, chunked
  (Sarathi-Serve / vLLM v1) or not (Orca / vLLM v0); over a contiguous KV layout
  :mod:`.contiguous` is its pre-paging baseline;
- ``static`` (:mod:`.static`): run-to-completion batches.

:func:`make_scheduler` builds the one an engine names; :data:`POLICIES` maps
``engine.scheduler`` values to classes.
"""

from __future__ import annotations

from capsim.engine.recorder import ItlRecorder
from capsim.engine.scheduler.base import Scheduler
from capsim.engine.scheduler.contiguous import ContiguousScheduler
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.scheduler.static import StaticScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.kv.contiguous import ContiguousAllocator
from capsim.scenario.schema import EngineConfig

GIB = 2**30

#: ``engine.scheduler`` → policy class.
POLICIES: dict[str, type[Scheduler]] = {"continuous": ContinuousScheduler,
                                        "static": StaticScheduler}


def make_kv(eng: EngineConfig, num_gpu_blocks: int) -> BlockAllocator | ContiguousAllocator:
    """A replica's KV pool of ``num_gpu_blocks`` blocks: paged (vLLM), or a contiguous
    baseline (``engine.kv_allocator``)."""
    if eng.kv_allocator != "paged":
        return ContiguousAllocator(num_gpu_blocks * eng.block_size, eng.block_size)
    return BlockAllocator(num_gpu_blocks, eng.block_size,
                          enable_caching=eng.enable_prefix_caching
                          and eng.scheduler == "continuous")


def make_scheduler(eng: EngineConfig, alloc: BlockAllocator | ContiguousAllocator,
                   kv_bytes_per_token: int, num_classes: int, itl: ItlRecorder,
                   role: str = "colocated") -> Scheduler:
    """The scheduler ``eng.scheduler`` names, for one replica in ``role``.

    Raises:
        ValueError: static batching in a disaggregated pool (the scenario's
            resolution refuses it first, with the YAML path).
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
    if eng.kv_allocator != "paged":
        return ContiguousScheduler(reserve=eng.kv_allocator.removeprefix("contiguous_"),
                                   max_model_len=eng.max_model_len, **common)
    swap = int(eng.swap_space_gib * GIB) * eng.tensor_parallel_size \
        if eng.preemption_mode == "swap" else 0
    return policy(**common, swap_space_bytes=swap, kv_bytes_per_token=kv_bytes_per_token)


__all__ = ["POLICIES", "ContiguousScheduler", "ContinuousScheduler", "Scheduler",
           "StaticScheduler", "make_kv", "make_scheduler"]
