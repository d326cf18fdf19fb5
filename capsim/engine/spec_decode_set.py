"""The decoding sequences of a replica that speculates: several tokens per sequence per step.

:class:`~capsim.engine.decode_set.DecodeSet` keeps its members implicitly because each
emits exactly one token per step. With speculative decoding each member emits
1 + a tokens per verification step, a drawn per member and step, so members diverge;
this subclass keeps them explicitly (O(members) per step; macro-steps are off for these
replicas) and reuses the parent's epochs, cohorts and gap bookkeeping unchanged.

**Acceptance draws.** Member r's step emits ``1 + accepted_drafts(u, α_class, width − 1)``
tokens (:func:`capsim.profiles.speculative.accepted_drafts`, P(a ≥ i) = α^i; for a class
given by position, :func:`~capsim.profiles.speculative.accepted_drafts_by_position` with
P(a ≥ i) = S_i, vLLM's per-position acceptance rate), capped by the tokens it has left, with u from the request's own stream (``random.Random`` seeded by
the run's seed and the request id): a request draws the same sequence in every variant
and whatever else is in the batch. Draws, not the expectation, so the ITL tail and the
spread of TPOT are those of real acceptance (a run of rejections is a run of one-token
steps); the mean converges on (1 − α^(k+1)) / (1 − α) tokens per step (1 + Σ S_i by
position).

**ITL as a streaming client sees it.** The tokens of one step leave the engine together
(vLLM's output processor sends one delta per request per step), and ``vllm bench serve``
records one inter-token latency per received chunk (vllm/benchmarks/lib/
endpoint_request_func.py at 3aee4a4: ``output.itl.append(timestamp −
most_recent_timestamp)`` per SSE message) while TPOT stays ``(E2EL − TTFT) /
(output_tokens − 1)``. So a step adds ONE gap per member, however many tokens it
carried: a request has (verification steps it emitted in) gaps, not output − 1; the
tokens merged into chunks are counted in ``merged_tokens`` (the run's invariant adds
them back).
"""

from __future__ import annotations

import math
import random

from capsim.engine.decode_set import DecodeSet
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.profiles.speculative import accepted_drafts, accepted_drafts_by_position


class SpecDecodeSet(DecodeSet):
    """Decoding members with explicit counters (``num_computed`` / ``num_generated`` kept
    current on each request).

    Args:
        block_size, num_classes, itl: as :class:`DecodeSet`.
        alpha_by_class: acceptance rate per class id (warm-up class ids, shifted by
            the class count, map back modulo it).
        seed: the run's seed.
        survival_by_class: per class id, per-position rates S_1 … S_k or None (i.i.d. α);
            empty: every class i.i.d.
    """

    def __init__(self, block_size: int, num_classes: int, itl: ItlRecorder,
                 alpha_by_class: tuple[float, ...], seed: int,
                 survival_by_class: tuple[tuple[float, ...] | None, ...] = ()):
        super().__init__(block_size, num_classes, itl)
        self.members: dict[int, Request] = {}     # rid → request, in join order
        self._ctx = 0                              # Σ (num_computed + 1) over members
        self._alpha = alpha_by_class
        self._survival = survival_by_class or (None,) * len(alpha_by_class)
        self._seed = seed
        self._rngs: dict[int, random.Random] = {}
        self.merged_tokens = 0     # Σ (tokens − 1) over emitted chunks: gaps not streamed
        self.emitted_tokens = 0    # tokens the members emitted in the last step

    # ------------------------------------------------------------ membership
    def join(self, req: Request, now: float) -> None:
        """``req`` decodes from the next step; it emitted its last token at ``now``."""
        req.dec_epoch0 = self.epoch
        req.dec_computed0, req.dec_generated0 = req.num_computed, req.num_generated
        self.members[req.rid] = req
        self.size += 1
        self.shareable += req.shareable
        self._ctx += req.num_computed + 1
        counts = self._pending.get(now)
        if counts is None:
            counts = self._pending[now] = [0] * self.num_classes
        counts[req.class_id] += 1

    def leave(self, req: Request) -> None:
        """Take ``req`` out (finish or preemption); its gaps since joining are noted on it
        as :meth:`DecodeSet.leave` does (one per step)."""
        steps = self.epoch - req.dec_epoch0
        del self.members[req.rid]
        self.size -= 1
        self.shareable -= req.shareable
        self._ctx -= req.num_computed + 1
        self._note_leaving(req, steps)

    def sync(self) -> None:
        """Counters are explicit: nothing to materialise."""

    @property
    def ctx_tokens(self) -> int:
        """Σ over members of cached context + 1 (what one decode token would attend over)."""
        return self._ctx

    def steps_to_finish(self) -> int | None:
        return None if not self.size else 1

    # ------------------------------------------------------------ a step
    def advance_spec(self, now: float, width: int) -> list[Request]:
        """Commit one verification step of ``width`` tokens per member (1 + drafts) that
        ended at ``now``: each member emits 1 + accepted drafts (capped by what it has
        left) in one chunk; one gap per member (module docstring). Returns the members
        that emitted their last token, already out of the set, in join order."""
        alpha, k, seed, rngs = self._alpha, width - 1, self._seed, self._rngs
        survivals, num_alpha = self._survival, len(alpha)
        done, total, merged = [], 0, 0
        for req in self.members.values():
            rng = rngs.get(req.rid)
            if rng is None:
                rng = rngs[req.rid] = random.Random(f"{seed}:{req.rid}")
            c = req.class_id % num_alpha
            survival = survivals[c]
            t = 1 + (accepted_drafts(rng.random(), alpha[c], k) if survival is None
                     else accepted_drafts_by_position(rng.random(), survival, k))
            left = req.output_tokens - req.num_generated
            if t >= left:
                t = left
                done.append(req)
            req.num_computed += t
            req.num_generated += t
            total += t
            merged += t - 1
        self._ctx += total
        self.merged_tokens += merged
        self.emitted_tokens = total
        had_epoch = self.epoch > 0
        gap = now - self._cohort_t if had_epoch else math.nan
        if had_epoch:
            self.itl.add(gap, self._cohort)
        if self._pending:
            self._merge_pending(now)
        self._epoch_end.append(now)
        self._epoch_gap.append(gap)
        self._cohort_t = now
        self.epoch += 1
        for req in done:
            self.leave(req)
            del rngs[req.rid]
        if len(self._epoch_end) >= self._trim_at:
            self._trim()
        return done

    def _members(self):
        """Every member request: they are explicit here."""
        return self.members.values()
