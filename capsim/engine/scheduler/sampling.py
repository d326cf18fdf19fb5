"""Parallel sampling (vLLM ``SamplingParams.n``): after the prefill, n − 1 sibling
sequences share the prompt's blocks; the first write into a shared, partly filled last
block copies it (copy-on-write).

A mixin of :class:`~capsim.engine.scheduler.continuous.ContinuousScheduler`.
"""

from __future__ import annotations

from capsim.engine.request import RUNNING, Request


class ParallelSampling:
    """Fork the samples of a request; copy their shared last block on first write."""

    def _copy_on_write(self, samples: list[Request]) -> None:
        """First write of forked samples into their shared partial last block (seed 000):
        each writer copies while others still share the block; the last one left writes
        in place (pack Q7: 4 samples of a 1,000-token prompt hold 63 + 3 blocks)."""
        copy = self.kv.copy_on_write
        for req in samples:
            if req.dec_epoch0 >= 0:
                copy(req)
        samples.clear()

    def _fork_samples(self, req: Request, now: float) -> None:
        """Parallel sampling: n − 1 sibling sequences share the prompt's blocks (refcounts).

        All n samples emit their first token at the end of the prefill; each then
        decodes on its own. Siblings have the same output length as sample 0.
        """
        siblings = []
        for _ in range(req.n - 1):
            self._fork_id -= 1
            f = Request(self._fork_id, req.class_id, req.arrival_s, req.prompt_tokens,
                        req.output_tokens, req.segments[:-1])
            f.group, f.samples_left, f.shareable = req, 0, req.shareable
            f.num_computed, f.num_generated = req.num_computed, req.num_generated
            f.first_scheduled_s, f.first_token_s, f.last_token_s = req.first_scheduled_s, now, now
            f.replica, f.state, f.admit_order = req.replica, RUNNING, self._admitted
            self._admitted += 1
            self.kv.fork(req, f)
            self.kv_tokens += f.num_computed    # shared tokens count once per sequence
            self.running[f.rid] = f
            siblings.append(f)
        if req.num_generated == req.output_tokens:
            return                                   # one-token replies: nothing to decode
        if req.num_computed % self.bs:
            self._cow_pending.extend(siblings + [req])
        for f in siblings:
            self.decoders.join(f, now)
