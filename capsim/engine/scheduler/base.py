"""The interface every scheduling policy implements, and the state they all share.

A :class:`~capsim.engine.replica.Replica` (and its pipeline, disaggregation and macro-step
collaborators) drives its scheduler through this interface only (DESIGN.md "The step
model"): ``add`` arrivals, then per step ``schedule`` → price → wait → ``complete``,
draining ``finished``; every member read outside a policy is declared here. Schedulers are
pure deterministic Python without SimPy, so tests drive them step by step, as vLLM's tests
drive its scheduler.

Optional capabilities have defaults here (what a policy can do is data as well:
:data:`capsim.profiles.policies.POLICY_TABLE`, the row in :attr:`Scheduler.capabilities`):

- **macro-steps** (decode-only stretches advanced in one event):
  :meth:`Scheduler.plan_decode_run` returns None by default (every step on its
  own); a policy that plans runs implements :meth:`~Scheduler.grow_for_run`,
  :meth:`~Scheduler.commit_decode_run`, :meth:`~Scheduler.extend_decode_run` and
  :meth:`~Scheduler.decode_blocks_ahead` too (see :mod:`capsim.engine.macro`).
- **disaggregation roles** (``prefill`` / ``decode`` pools): the transfer methods
  raise by default, ``handoff`` and ``incoming`` stay empty.
- **batches in flight** (pipeline parallelism): :meth:`~Scheduler.can_pipeline` is False
  by default.
- **speculative decoding**: ``width`` is 1 and ``merged_tokens`` 0 by default.
- **multi-step windows** (tokens streamed once per window): ``merged_tokens`` and
  ``buffered_tokens`` are 0 by default.

KV blocks are the KV facade's (``kv``: :class:`capsim.kv.manager.KVCacheManager`, or
:class:`capsim.kv.contiguous.ContiguousKV`); a policy never touches a block list.

To add a policy, write a file under ``capsim/engine/scheduler/`` with a :class:`Scheduler`
subclass and a module-level ``build(args: PolicyArgs) -> Scheduler``, and give it a row in
:data:`capsim.profiles.policies.POLICY_TABLE`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

from capsim.engine.macro.plan import RunBlocks, RunPlan
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import WAITING, Request
from capsim.engine.step import Step
from capsim.kv.allocator import BlockAllocator
from capsim.kv.contiguous import ContiguousAllocator
from capsim.profiles.policies import PolicyCapabilities
from capsim.scenario.schema import EngineConfig
from capsim.scenario.speculative import SpecDecoding


@dataclass(slots=True)
class SchedulerCounters:
    """What one replica's scheduler counted over a run (every report reads them).

    Attributes:
        steps: engine steps completed.
        preemptions: preemptions (recompute or swap).
        recomputed_tokens: tokens re-prefilled after recompute preemptions.
        slot_steps_held, slot_steps_useful: Σ over steps of running sequences and of
            sequences that emitted a token (seed 000's slot occupancy).
        swap_out_bytes, swap_in_bytes: KV bytes copied for swap preemption.
        prefix_queried_tokens, prefix_hit_tokens, prefix_queried_blocks,
        prefix_hit_blocks: prefix-cache lookups at admission and their hits.
        offload_hit_tokens: tokens of those lookups found in the host tier (KV offload)
            after the GPU's hit, loaded instead of recomputed.
        admission_blocked, first_blocked: contiguous KV layouts: requests that
            waited for a hole at the head of the queue, and (wanted, free, biggest
            hole) tokens at the first such moment.
    """

    steps: int = 0
    preemptions: int = 0
    recomputed_tokens: int = 0
    slot_steps_held: int = 0
    slot_steps_useful: int = 0
    swap_out_bytes: int = 0
    swap_in_bytes: int = 0
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0
    prefix_queried_blocks: int = 0
    prefix_hit_blocks: int = 0
    offload_hit_tokens: int = 0
    admission_blocked: int = 0
    first_blocked: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class PolicyArgs:
    """What a policy's ``build`` makes one replica's scheduler from.

    Attributes:
        engine: the pool's resolved engine config.
        allocator: the replica's KV pool (``make_kv``).
        kv_bytes_per_token: KV bytes per token of the replica (swap copies).
        num_classes: request classes (per-class ITL runs).
        itl: the run's ITL recorder.
        role: ``colocated``, ``prefill`` or ``decode``.
        knobs: the engine preset's ``scheduler.knobs`` (SGLang's constants, …).
        spec: speculative decoding, or None.
    """

    engine: EngineConfig
    allocator: BlockAllocator | ContiguousAllocator
    kv_bytes_per_token: int
    num_classes: int
    itl: ItlRecorder
    role: str = "colocated"
    knobs: dict | None = None
    spec: SpecDecoding | None = None


class Scheduler(ABC):
    """One replica's scheduling policy and the counters every report reads.

    Attributes:
        capabilities: the policy's row (class attribute).
        kv: the KV facade (blocks, prefix cache).
        waiting: arrived requests not yet admitted, in queue order.
        running: admitted requests by id, in admission order (tail = newest).
        swapped: requests whose KV was swapped to host memory (swap preemption only).
        finished: requests that ended in ``complete`` (the replica drains it).
        handoff: prefill role only: prefilled requests whose KV awaits a transfer.
        incoming: decode role only: requests whose KV is crossing the link (slot and
            blocks reserved here).
        kv_tokens: Σ tokens of KV written by the sequences holding blocks here.
        counters: :class:`SchedulerCounters`.
        width: tokens verified per decoding sequence in the step last scheduled (1 + k
            with speculative decoding, else 1).
    """

    capabilities: ClassVar[PolicyCapabilities]
    role = "colocated"
    width = 1

    def __init__(self) -> None:
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}
        self.swapped: deque[Request] = deque()
        self.finished: list[Request] = []
        self.handoff: list[Request] = []
        self.incoming: dict[int, Request] = {}
        self.kv_tokens = 0
        self.counters = SchedulerCounters()

    # ------------------------------------------------------------ the step loop
    def add(self, req: Request) -> None:
        """Queue an arrived request (its total KV need must fit the pool; the caller checks)."""
        req.state = WAITING
        self.waiting.append(req)

    @abstractmethod
    def has_work(self) -> bool:
        """Whether anything is queued, running or in flight here."""

    @property
    @abstractmethod
    def num_running(self) -> int:
        """Sequences holding a slot (``max_num_seqs`` counts them)."""

    @abstractmethod
    def schedule(self, now: float = 0.0) -> Step | None:
        """The batch of a step starting at ``now`` (blocks taken), or None when idle."""

    @abstractmethod
    def complete(self, step: Step, now: float) -> None:
        """Apply ``step``, which ended at ``now``: emit tokens, append finishes to
        ``finished``."""

    def block_table_entries(self) -> int:
        """Σ block-table entries of the running sequences (seed 000's table size)."""
        return self.kv.num_table_entries(self.running.values())

    def sync(self) -> None:
        """Materialise every running sequence's counters (before they are read from
        outside: a failure hands them back; tests inspect them)."""

    # ------------------------------------------------------------ speculative decoding
    @property
    def merged_tokens(self) -> int:
        """Tokens that arrived in a chunk after the chunk's first (no ITL gap of their own;
        speculative decoding and multi-step windows only, else 0)."""
        return 0

    @property
    def streamed(self) -> bool:
        """Whether the step last completed streamed its decoders' tokens to their clients
        (False inside a multi-step window, where only a finishing request's do)."""
        return True

    @property
    def buffered_tokens(self) -> int:
        """Tokens computed but not yet streamed to their clients (multi-step windows only,
        else 0); a failure loses them."""
        return 0

    @property
    def held_finishes(self) -> bool:
        """Whether finished requests wait for the engine's loop to wake before their last
        chunk streams (vLLM 0.6.0 under multi-step windows only, else False)."""
        return False

    def release_held(self, now: float) -> None:
        """A request arrived at ``now``: stream the held last chunks (no-op here)."""

    @property
    def emitted_tokens(self) -> int:
        """Decode tokens the step last completed emitted (speculative decoding only)."""
        raise NotImplementedError(f"{type(self).__name__} does not speculate")

    # ------------------------------------------------------------ macro-steps
    def plan_decode_run(self, step: Step, max_steps: int = 4096, min_steps: int = 8,
                        horizon_steps: int = 4096) -> RunPlan | None:
        """Decode steps from ``step`` on that can be advanced in one event; None: one
        step at a time (the default)."""
        return None

    def extend_decode_run(self, plan: RunPlan, horizon_steps: int, committed: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} plans no decode runs")

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        raise NotImplementedError(f"{type(self).__name__} plans no decode runs")

    def commit_decode_run(self, clock_s) -> None:
        raise NotImplementedError(f"{type(self).__name__} plans no decode runs")

    def decode_blocks_ahead(self, start: int, count: int) -> int:
        raise NotImplementedError(f"{type(self).__name__} plans no decode runs")

    # ------------------------------------------------------------ batches in flight
    def can_pipeline(self) -> bool:
        """Whether :meth:`enable_pipeline` applies (False: one batch at a time)."""
        return False

    def enable_pipeline(self, batches: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} keeps one batch in flight")

    def launch(self, step: Step) -> None:
        raise NotImplementedError(f"{type(self).__name__} keeps one batch in flight")

    # ------------------------------------------------------------ disaggregation
    def reserve_transfer(self, req: Request) -> bool:
        raise NotImplementedError(f"{type(self).__name__} cannot take part in disaggregation")

    def admit_transfer(self, req: Request) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot take part in disaggregation")

    def release_handoff(self, req: Request) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot take part in disaggregation")
