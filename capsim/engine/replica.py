"""One replica (a tensor-parallel engine) as a SimPy process.

The loop is DESIGN.md's step model: schedule → price with the roofline →
``yield env.timeout(seconds)`` → complete. With nothing runnable it waits on
an event that the next submitted request triggers; it never busy-polls.
"""

from __future__ import annotations

from typing import Callable

import simpy

from capsim.config import RunConfig
from capsim.engine.recorder import ItlRecorder, TimelineRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler import ContinuousScheduler
from capsim.engine.static import StaticScheduler
from capsim.kv.allocator import BlockAllocator
from capsim.results import ReplicaStats
from capsim.roofline import StepPricer


def make_scheduler(run: RunConfig, alloc: BlockAllocator, num_classes: int, itl: ItlRecorder,
                   role: str = "colocated"):
    """The scheduler named by ``engine.scheduler`` for one replica in ``role``."""
    eng = run.engine
    if eng.scheduler == "static":
        if role != "colocated":
            raise ValueError("static batching cannot be disaggregated")
        return StaticScheduler(max_num_seqs=eng.max_num_seqs, allocator=alloc,
                               num_classes=num_classes, itl=itl)
    return ContinuousScheduler(max_num_seqs=eng.max_num_seqs,
                               max_num_batched_tokens=eng.max_num_batched_tokens,
                               chunked=eng.chunked, allocator=alloc,
                               num_classes=num_classes, itl=itl, role=role)


class Replica:
    """A SimPy process that runs one engine; ``submit`` hands it a request.

    ``on_finish(req)`` is called for every finished request.
    """

    def __init__(self, env: simpy.Environment, index: int, run: RunConfig, pricer: StepPricer,
                 itl: ItlRecorder, num_classes: int, on_finish: Callable[[Request], None],
                 pool: str = "colocated"):
        self.env, self.index, self.run_cfg, self.pool = env, index, run, pool
        self.pricer = pricer
        eng = run.engine
        self.alloc = BlockAllocator(run.kv.num_gpu_blocks, eng.block_size,
                                    enable_caching=eng.enable_prefix_caching
                                    and eng.scheduler == "continuous")
        self.scheduler = make_scheduler(run, self.alloc, num_classes, itl, pool)
        self.timeline = TimelineRecorder(index, pool)
        self.on_finish = on_finish
        self.outstanding_tokens = 0     # Σ prompt + output tokens of unfinished requests (router)
        self.busy_s = 0.0
        self.flops = 0.0
        self.hbm_bytes = 0.0
        self.compute_bound_steps = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.peak_kv_used_blocks = 0
        self._wake: simpy.Event | None = None
        env.process(self._loop())

    def submit(self, req: Request) -> None:
        req.replica = self.index
        self.outstanding_tokens += req.prompt_tokens + req.output_tokens
        self.scheduler.add(req)
        self.wake()

    def wake(self) -> None:
        """Resume the loop if it is idle (new work arrived by another path than submit)."""
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _loop(self):
        env, sched, pricer = self.env, self.scheduler, self.pricer
        while True:
            step = sched.schedule(env.now)
            if step is None:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            cost = pricer.cost(prefill_tokens=step.prefill_tokens,
                               prefill_attn_pairs=step.prefill_attn_pairs,
                               prefill_kv_tokens=step.prefill_kv_tokens,
                               decode_seqs=step.decode_seqs,
                               decode_ctx_tokens=step.decode_ctx_tokens,
                               logits_seqs=step.logits_seqs)
            used = self.alloc.num_used_blocks
            yield env.timeout(cost.seconds)
            sched.complete(step, env.now)
            self._account(step, cost, used)
            if sched.finished:
                for req in sched.finished:
                    self.outstanding_tokens -= req.prompt_tokens + req.output_tokens
                    self.on_finish(req)
                sched.finished.clear()

    def _account(self, step, cost, kv_used_blocks: int) -> None:
        tp = self.run_cfg.engine.tensor_parallel_size
        self.busy_s += cost.seconds
        self.flops += cost.flops * tp
        self.hbm_bytes += cost.bytes * tp
        self.compute_bound_steps += cost.compute_bound
        self.prefill_tokens += step.prefill_tokens
        self.decode_tokens += step.decode_seqs
        if kv_used_blocks > self.peak_kv_used_blocks:
            self.peak_kv_used_blocks = kv_used_blocks
        self.timeline.step(self.env.now, cost.seconds, step.prefill_tokens, step.decode_seqs,
                           kv_used_blocks, len(self.scheduler.waiting), self.scheduler.num_running)

    def stats(self) -> ReplicaStats:
        eng, sched = self.run_cfg.engine, self.scheduler
        return ReplicaStats(
            replica=self.index, pool=self.pool, hardware=self.run_cfg.hardware.name,
            tensor_parallel_size=eng.tensor_parallel_size,
            num_gpu_blocks=self.alloc.num_blocks, block_size=eng.block_size,
            kv_cache_tokens=self.alloc.num_blocks * eng.block_size, steps=sched.steps,
            busy_s=self.busy_s, flops=self.flops, hbm_bytes=self.hbm_bytes,
            compute_bound_steps=self.compute_bound_steps, prefill_tokens=self.prefill_tokens,
            decode_tokens=self.decode_tokens, preemptions=sched.preemptions,
            peak_kv_used_blocks=self.peak_kv_used_blocks,
            slot_steps_held=sched.slot_steps_held, slot_steps_useful=sched.slot_steps_useful,
            slot_capacity=sched.steps * eng.max_num_seqs,
            recomputed_tokens=sched.recomputed_tokens,
            prefix_queried_tokens=getattr(sched, "prefix_queried_tokens", 0),
            prefix_hit_tokens=getattr(sched, "prefix_hit_tokens", 0),
            prefix_queried_blocks=getattr(sched, "prefix_queried_blocks", 0),
            prefix_hit_blocks=getattr(sched, "prefix_hit_blocks", 0),
            prefix_evictions=self.alloc.num_evictions)
