"""The two halves of prefill/decode disaggregation (DistServe / Splitwise) as a
continuous scheduler runs them.

A mixin of :class:`~capsim.engine.scheduler.continuous.ContinuousScheduler`: a ``prefill``
scheduler hands a request off after its first token, keeping its KV blocks until
:meth:`TransferRoles.release_handoff`; a ``decode`` scheduler takes transferred requests
with :meth:`~TransferRoles.reserve_transfer` (blocks and a slot held while the KV crosses
the link) and :meth:`~TransferRoles.admit_transfer` (joins the decode set at the next
schedule). The ``colocated`` role does both halves itself.
"""

from __future__ import annotations

from capsim.engine.request import RUNNING, Request


class TransferRoles:
    """The transfer methods of :class:`~capsim.engine.scheduler.base.Scheduler`."""

    def release_handoff(self, req: Request) -> None:
        """Prefill role: the request's KV has left; free its blocks here."""
        self.kv.release_handoff(req)

    def _hand_off(self, req: Request) -> None:
        """Prefill role: ``req`` emitted its first token; its KV waits for the link."""
        del self.running[req.rid]
        self.kv.hand_off(req)
        self.kv_tokens -= req.num_computed
        self.handoff.append(req)

    def reserve_transfer(self, req: Request) -> bool:
        """Decode role: hold a slot and blocks for a prefilled request's KV, if both are free.

        Returns False (nothing held) when the slot cap or the KV pool is full;
        the caller retries after this replica frees something.
        """
        kv = self.kv
        need = kv.blocks_to_allocate(req, req.num_computed)
        if self.num_running >= self.max_num_seqs or not kv.can_allocate(need):
            return False
        kv.grow(req, req.num_computed)
        self.kv_tokens += req.num_computed
        req.state = RUNNING
        self.incoming[req.rid] = req
        return True

    def admit_transfer(self, req: Request) -> None:
        """Decode role: the KV arrived; the request decodes from the next scheduled step.

        (Called between or during steps: it joins the decode set only when the
        next step is scheduled, so an in-flight step never counts it.)
        """
        self._kv_ready.append(req)

    def _join_transferred(self) -> None:
        for req in self._kv_ready:
            del self.incoming[req.rid]
            req.admit_order = self._admitted
            self._admitted += 1
            self.running[req.rid] = req
            self.decoders.join(req, req.last_token_s)   # its next gap runs from token 1
        self._kv_ready.clear()
