"""Continuous batching over a contiguous KV allocator: the pre-paging baseline
(seed 000; the PagedAttention paper's comparison, Kwon et al., SOSP 2023)."""

from __future__ import annotations

from capsim.engine.macro.plan import RunBlocks
from capsim.engine.request import Request
from capsim.engine.scheduler.base import PolicyArgs
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.step import Step
from capsim.kv.contiguous import ContiguousAllocator, ContiguousKV


class ContiguousScheduler(ContinuousScheduler):
    """Continuous batching over a contiguous KV allocator (the pre-paging baseline).

    Admission reserves the whole range a request may ever need — ``max_model_len``
    tokens (``reserve="max_model_len"``) or its prompt + ``max_tokens``
    (``reserve="max_tokens"``) — first fit (:class:`capsim.kv.contiguous.ContiguousAllocator`);
    nothing grows afterwards, so nothing is preempted. The queue head waits when no
    hole fits, even if enough tokens are free in pieces: the first such moment is
    recorded (``first_blocked``: wanted, free, biggest hole) as the seed's demo prints it.
    One batch at a time under pipeline parallelism (not modelled).
    """

    grows_kv = False

    def __init__(self, *, reserve: str, max_model_len: int, **kwargs):
        super().__init__(**kwargs)
        self.reserve = reserve
        self.max_model_len = max_model_len
        self._blocked_rid = -1                     # counts requests, not attempts (admission_blocked)

    def make_kv(self, allocator: ContiguousAllocator) -> ContiguousKV:
        return ContiguousKV(allocator)

    @classmethod
    def from_engine(cls, args: PolicyArgs, **extra) -> ContiguousScheduler:
        """The baseline ``engine.kv_allocator`` names (``contiguous_max_model_len`` /
        ``contiguous_max_tokens``)."""
        eng = args.engine
        return cls(**cls.engine_kwargs(args), reserve=eng.kv_allocator.removeprefix("contiguous_"),
                   max_model_len=eng.max_model_len,
                   long_prefill_token_threshold=eng.long_prefill_token_threshold)

    def can_pipeline(self) -> bool:
        return False

    def _size(self, req: Request) -> int:
        if self.reserve == "max_model_len":
            return self.max_model_len
        return req.prompt_tokens + req.output_tokens

    def _admit_waiting(self, step: Step, budget: int, whole_prompts: bool) -> None:
        while self.waiting and budget > 0 and self.num_running < self.max_num_seqs:
            req = self.waiting[0]
            todo = req.remaining_to_compute
            if whole_prompts and todo > budget:
                break
            size = self._size(req)
            if not self.kv.reserve_range(req, size):
                self._note_blocked(req, size)
                break
            n = min(todo, budget, self.chunk_cap)
            self._start(req, step, n)
            budget -= n

    def _note_blocked(self, req: Request, size: int) -> None:
        counters = self.counters
        if req.rid != self._blocked_rid:          # count requests, not scheduling attempts
            self._blocked_rid = req.rid
            counters.admission_blocked += 1
        if counters.first_blocked is None:
            counters.first_blocked = (size, self.kv.free_tokens, self.kv.biggest_hole)

    def _grow_decoders(self) -> None:
        """Nothing to grow: the reservation already covers every future token."""

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        return RunBlocks(self.kv.num_used_blocks, m, self.bs, [], 0, first)

    def _reserve_prefill(self, req: Request, n: int) -> bool:
        return True
