"""The interface every scheduling policy implements, and the state they all share.

A :class:`~capsim.engine.replica.Replica` drives its scheduler through this
interface only (DESIGN.md "The step model"): ``add`` arrivals, then per step
``schedule`` → price → wait → ``complete``, draining ``finished``. Schedulers are
pure deterministic Python without SimPy, so tests drive them step by step, as
vLLM's tests drive its scheduler.

Two capabilities are optional, with defaults here:

- **macro-steps** (decode-only stretches advanced in one event):
  :meth:`Scheduler.plan_decode_run` returns None by default (every step on its
  own); a policy that plans runs implements :meth:`~Scheduler.grow_for_run`,
  :meth:`~Scheduler.commit_decode_run` and :meth:`~Scheduler.decode_blocks_ahead`
  too (see :mod:`capsim.engine.macro`).
- **disaggregation roles** (``prefill`` / ``decode`` pools): the transfer methods
  raise by default, ``handoff`` and ``incoming`` stay empty.

To add a policy, subclass :class:`Scheduler` in a file of its own under
``capsim/engine/scheduler/`` and name it in :data:`capsim.engine.scheduler.POLICIES`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import TYPE_CHECKING

from capsim.engine.request import WAITING, Request
from capsim.engine.step import Step

if TYPE_CHECKING:
    from capsim.engine.macro.plan import RunBlocks, RunPlan


class Scheduler(ABC):
    """One replica's scheduling policy and the counters every report reads.

    Attributes:
        waiting: arrived requests not yet admitted, in queue order.
        running: admitted requests by id, in admission order (tail = newest).
        finished: requests that ended in ``complete`` (the replica drains it).
        handoff: prefill role only: prefilled requests whose KV awaits a transfer.
        incoming: decode role only: requests whose KV is crossing the link (slot and
            blocks reserved here).
        kv_tokens: Σ tokens of KV written by the sequences holding blocks here.
        steps, preemptions, recomputed_tokens: engine steps, preemptions, tokens
            re-prefilled after recompute preemptions.
        slot_steps_held, slot_steps_useful: Σ over steps of running sequences and of
            sequences that emitted a token (seed 000's slot occupancy).
        swap_out_bytes, swap_in_bytes: KV bytes copied for swap preemption.
        prefix_queried_tokens, prefix_hit_tokens, prefix_queried_blocks,
        prefix_hit_blocks: prefix-cache lookups at admission and their hits.
        admission_blocked, first_blocked: contiguous KV layouts: requests that
            waited for a hole at the head of the queue, and (wanted, free, biggest
            hole) tokens at the first such moment.
    """

    role = "colocated"
    #: Whether the policy can run over a prefix-caching allocator (``make_kv`` enables
    #: caching only for those).
    supports_prefix_caching = False

    def __init__(self) -> None:
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}
        self.finished: list[Request] = []
        self.handoff: list[Request] = []
        self.incoming: dict[int, Request] = {}
        self.kv_tokens = 0
        self.steps = 0
        self.preemptions = 0
        self.recomputed_tokens = 0
        self.slot_steps_held = 0
        self.slot_steps_useful = 0
        self.swap_out_bytes = 0
        self.swap_in_bytes = 0
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0
        self.prefix_queried_blocks = 0
        self.prefix_hit_blocks = 0
        self.admission_blocked = 0
        self.first_blocked: tuple[int, int, int] | None = None

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
        return sum(len(r.blocks) for r in self.running.values())

    # ------------------------------------------------------------ macro-steps
    def plan_decode_run(self, step: Step, max_steps: int = 4096, min_steps: int = 8,
                        horizon_steps: int = 4096) -> RunPlan | None:
        """Decode steps from ``step`` on that can be advanced in one event; None: one
        step at a time (the default)."""
        return None

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        raise NotImplementedError(f"{type(self).__name__} plans no decode runs")

    def commit_decode_run(self, clock_s) -> None:
        raise NotImplementedError(f"{type(self).__name__} plans no decode runs")

    def decode_blocks_ahead(self, start: int, count: int) -> int:
        raise NotImplementedError(f"{type(self).__name__} plans no decode runs")

    # ------------------------------------------------------------ disaggregation
    def reserve_transfer(self, req: Request) -> bool:
        raise NotImplementedError(f"{type(self).__name__} cannot take part in disaggregation")

    def admit_transfer(self, req: Request) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot take part in disaggregation")

    def release_handoff(self, req: Request) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot take part in disaggregation")
