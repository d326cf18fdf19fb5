"""KV blocks for a request's whole sequence taken at admission: what TensorRT-LLM's
GUARANTEED_NO_EVICT (:mod:`.trtllm`) and TGI's router (:mod:`.tgi`) both do.

An admitted request holds the blocks of its prompt and of all its output from its
first step on, so a decoder never asks for a block and nothing is ever preempted. The
engines differ only in how many tokens they reserve (:meth:`UpFrontKV.reserve_tokens`).
capsim allocates the blocks when it admits the request, as its contiguous and static
baselines do: the KV in use is what the engine has promised, not what it has written.

Parallel sampling (``n`` > 1, capsim's own model of it): the samples share the prompt's
full blocks and each reserves the rest of a sequence, all at admission; the siblings
take theirs when they are forked after the prefill.
"""

from __future__ import annotations

from capsim.engine.macro.plan import RunBlocks
from capsim.engine.request import Request


class UpFrontKV:
    """Mixin for a :class:`~capsim.engine.scheduler.continuous.ContinuousScheduler` whose
    admission reserves every block of the sequence (listed before it in the bases)."""

    grows_kv = False

    def seq_blocks(self, req: Request) -> int:
        """Blocks one sequence of ``req`` reserves at admission."""
        raise NotImplementedError

    def group_blocks(self, req: Request, per_seq: int) -> int:
        """Blocks ``req``'s samples reserve together when each sequence reserves ``per_seq``:
        the prompt's full blocks once, the rest per sample."""
        return per_seq + (req.n - 1) * (per_seq - req.prompt_tokens // self.bs)

    def take_reservation(self, req: Request, per_seq: int) -> None:
        """Allocate :meth:`group_blocks`: ``req``'s own sequence's now, its future siblings'
        aside until they are forked (:meth:`KVCacheManager.reserve`). Blocks ``req`` already
        holds (a reused prefix, shared with whoever else holds them) count once: only the
        rest is new."""
        self.kv.reserve(req, per_seq, self.group_blocks(req, per_seq), req.n > 1)

    def _fork_samples(self, req: Request, now: float) -> None:
        """Fork as :class:`ContinuousScheduler` does, then give each sibling the blocks
        reserved for it: the prompt's full blocks stay shared, the rest are its own (no
        copy-on-write is left to do)."""
        super()._fork_samples(req, now)
        siblings = [r for r in self.running.values() if r.group is req]
        self.kv.fork_reserved(req, siblings, req.prompt_tokens // self.bs)
        self._cow_pending.clear()

    def _grow_decoders(self) -> None:
        """Nothing to grow: the reservation holds every future token."""

    def grow_for_run(self, m: int, first: int = 1) -> RunBlocks:
        return RunBlocks(self.kv.num_used_blocks, m, self.bs, [], 0, first)
