"""Swap preemption (vLLM v0 ``preemption_mode="swap"``): a victim's KV goes to a host
buffer of ``swap_space_bytes`` and comes back, oldest first, when slots and blocks allow;
the copies are charged to the step that carries them (PCIe, ``Step.swap_bytes``).

A mixin of :class:`~capsim.engine.scheduler.continuous.ContinuousScheduler` (whose
``__init__`` sets ``swap_space_bytes``, ``swap_used_bytes`` and ``_swap_pending``).
"""

from __future__ import annotations

from capsim.engine.request import RUNNING, SWAPPED, Request


class SwapPreemption:
    """Swap out at preemption, swap in before scheduling."""

    def _swap_out(self, req: Request) -> bool:
        """Copy preempted ``req``'s KV to host memory if the swap space has room (its
        blocks freed here); False: no room, preempt by recompute."""
        nbytes = req.num_computed * self.kv_bytes_per_token
        if self.swap_used_bytes + nbytes > self.swap_space_bytes:
            return False
        self.kv.free(req)
        self.swap_used_bytes += nbytes
        self.kv_tokens -= req.num_computed
        self.counters.swap_out_bytes += nbytes
        self._swap_pending += nbytes
        req.state = SWAPPED
        self.swapped.append(req)
        return True

    def _swap_in(self) -> None:
        """Bring swapped requests back, oldest first, while slots and blocks allow (vLLM v0)."""
        kv, counters = self.kv, self.counters
        while self.swapped and self.num_running < self.max_num_seqs:
            req = self.swapped[0]
            need = kv.blocks_to_allocate(req, req.num_computed)
            if not kv.can_allocate(need):
                break
            self.swapped.popleft()
            kv.grow(req, req.num_computed)
            nbytes = req.num_computed * self.kv_bytes_per_token
            self.swap_used_bytes -= nbytes
            self.kv_tokens += req.num_computed
            counters.swap_in_bytes += nbytes
            self._swap_pending += nbytes
            req.state = RUNNING
            self.running[req.rid] = req
            if req.num_generated and req.remaining_to_compute == 1:
                self.decoders.join(req, req.last_token_s)
            else:
                self.prefilling[req.rid] = req
