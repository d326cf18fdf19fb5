"""The decoding sequences of a vLLM 0.6 replica under multi-step scheduling: a token per
step, streamed once per window.

With ``--num-scheduler-steps N`` vLLM 0.6 runs N decode steps per scheduler call and
hands a request's tokens to its client once per window (vLLM v0.6.0, commit 32e7db2):

- ``vllm/engine/llm_engine.py`` ``step`` (and ``async_llm_engine.py`` ``step_async``):
  while ``_has_remaining_steps`` is true after a step, the step returns the cleared
  ``ctx.request_outputs`` ("Multi-step case"): nothing is streamed. Only after a
  window's last step is its output queued with ``is_last_step`` True;
- ``vllm/worker/multi_step_model_runner.py`` ``execute_model`` returns the cached
  outputs of all N steps at the window's last step (``_final_process_outputs``); with
  async output processing (the default with CUDA graphs) the earlier steps' outputs are
  processed during the window with ``is_last_step`` False (``_async_process_outputs``);
- ``_process_model_outputs``: with ``is_last_step`` False the tokens are appended to the
  sequences (``vllm/engine/output_processor/multi_step.py``) but no ``RequestOutput`` is
  made except for requests that finished in that step, which go out at once
  (``process_request_outputs_callback``); with ``is_last_step`` True every scheduled
  request gets one ``RequestOutput`` holding all its new tokens;
- ``vllm/entrypoints/openai/serving_completion.py`` / ``serving_chat.py`` send one SSE
  message per ``RequestOutput`` with the tokens since the last one (``delta_token_ids``).

So a request's tokens of a window reach the client as one chunk at the window's end, and
a request that finishes inside a window gets its last chunk at the step of its last
token.

The window's batch is fixed on the GPU: ``MultiStepModelRunner`` prepares the model input
once, at the window's first step, and later steps only ``_advance_step`` it on the GPU over
the same ``num_seqs`` (vllm/worker/multi_step_model_runner.py ``execute_model`` /
``_advance_step``; multi_step_worker.py reuses the cached input), while
``_process_model_outputs`` frees a finished request's blocks at once
(``free_finished_seq_groups``). So a member that finished earlier in the window is still
computed, a token per step, until the window ends: here it leaves the set (its blocks
freed, its stream ended) and is counted in ``ghost_seqs`` / ``ghost_ctx_tokens``, which
the scheduler adds to each step's batch (priced, emitting nothing) until the window ends. ``vllm bench serve`` records one ITL per chunk received (see
:mod:`capsim.engine.spec_decode_set`); TPOT stays (E2EL − TTFT) / (output − 1).

vLLM 0.6.0-0.6.1 (``hold_finishes``, the vllm-0.6 preset's ``host_overhead.
outputs_wait_step_return``) delivers such a last chunk later: AsyncLLMEngine runs the driver's
``execute_model`` in an executor thread (vllm/executor/gpu_executor.py ``execute_model_async``
-> vllm/utils.py ``make_async``, ``run_in_executor``) and the output callback puts the
``RequestOutput`` into the request's ``asyncio.Queue`` from that thread
(vllm/engine/async_llm_engine.py ``AsyncStream.put`` -> ``put_nowait``, no
``call_soon_threadsafe``), which does not wake the RPC server's uvloop loop
(vllm/entrypoints/openai/rpc/server.py ``run_rpc_server``). Inside a window nothing syncs the
CPU with the GPU (the sampler defers its output, ``skip_sampler_cpu_output``;
``StatefulModelInput.wait_previous_step`` is a stream wait), so the driver launches the
window's steps ahead of the GPU and processes their outputs within the window's last step,
whose ``execute_model`` blocks on each in turn (vllm/worker/multi_step_model_runner.py
``_final_process_outputs``: ``output_proc_callback()`` then the blocking ``pythonize``). The
finished request's output, put as its step ends, leaves when the loop next wakes: when that
last step's ``execute_model`` returns at the window's end, or earlier when a new request
reaches the engine (its ZMQ socket wakes the loop). Here such a member's last chunk is held
(:attr:`held`) and released at the window's end or at the next arrival
(:meth:`release`), no earlier than its own step's end plus the output delay every chunk
waits; its KV is freed at its step, as vLLM's callback frees it as it processes the output.
A window whose members have all left ends here (capsim runs no step of ghosts alone), and
its held chunks leave with its last step.

Here, as for speculative decoding, a chunk adds ONE gap per request, whatever it carried,
and the tokens after a chunk's first are counted in ``merged_tokens`` (the run's
invariant adds them back). Epochs, buckets, finishes and KV growth are the parent's:
every member still computes one token per step. The scheduler says which step ends a
window (``window_end``, set when it schedules the step). Per step: O(1) (a window's
emission: O(classes)); per leaving member: O(log windows).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left

from capsim.engine.decode_set import DecodeSet
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request


class WindowDecodeSet(DecodeSet):
    """:class:`DecodeSet` whose members stream their tokens once per multi-step window.

    Args: as :class:`DecodeSet`.

    Attributes:
        window_end: whether the step being committed ends a window (the scheduler sets
            it when it schedules the step).
        merged_tokens: Σ (tokens − 1) over the chunks streamed so far (tokens without a
            gap of their own).
        buffered_tokens: tokens the members computed since their last chunk (not yet
            streamed; a failure loses them), held last chunks included.
        hold_delay_s: None, or (vLLM 0.6.0-0.6.1) the output delay every chunk waits, s
            (:attr:`capsim.scenario.run_config.Pool.output_delay_s`): a member finishing
            inside a window is :attr:`held` until the window ends or a request arrives.
        held: rid → (request, its previous chunk's time, its last step's end, tokens not
            streamed), the finished members whose last chunk is held.
        released: held requests whose last chunk streamed at the last release (their
            ``last_token_s`` set to it, before the output delay); the scheduler drains it.
    """

    def __init__(self, block_size: int, num_classes: int, itl: ItlRecorder):
        super().__init__(block_size, num_classes, itl)
        self.window_end = True
        self.merged_tokens = 0
        self.buffered_tokens = 0
        self._emits = array("q")      # epochs (step indices) whose end streamed a chunk
        self._last_emit = -1          # the latest of them (-1: none yet)
        self.ghost_seqs = 0           # members that finished earlier in this window
        self.ghost_ctx_tokens = 0     # Σ context they attend over in the next step
        # vLLM 0.6.0-0.6.1: a member finishing inside a window streams its last chunk when
        # the engine's loop next wakes (see the module docstring); None: at its step.
        self.hold_delay_s: float | None = None
        self.held: dict[int, tuple] = {}    # rid → (request, last chunk s, its step's end s, tokens)
        self.released: list[Request] = []   # held members whose last chunk has now streamed
        self._finishing = False

    def advance(self, clock_s) -> list[Request]:
        """Commit one decode step (``clock_s`` = (start, end); multi-step scheduling plans
        no decode runs): every member computes a token; at a window's end each streams the
        tokens since its last chunk as one chunk, one gap each (cohort gaps as
        :meth:`DecodeSet.advance` records them). Returns the members whose last token it
        was, already out of the set (their last chunk streamed)."""
        if len(clock_s) != 2:
            raise ValueError("multi-step scheduling commits one step at a time")
        now = clock_s[1]
        self.buffered_tokens += self.size
        self.ghost_ctx_tokens += self.ghost_seqs       # each computed one more token
        if self.window_end:
            self.end_window()
            if self.held:                  # the window's last step returns: they leave now
                self.release(now - self.hold_delay_s)
            had = self._cohort_t == self._cohort_t          # a chunk was streamed before
            gap = now - self._cohort_t if had else math.nan
            if had:
                self.itl.add(gap, self._cohort)
            if self._pending:
                self._merge_pending(now)
            self.merged_tokens += self.buffered_tokens - self.size
            self.buffered_tokens = 0
            self._cohort_t = now
            self._emits.append(self.epoch)
            self._last_emit = self.epoch
        else:
            gap = 0.0                  # no chunk ends here (never the longest gap)
        self._epoch_end.append(now)
        self._epoch_gap.append(gap)
        self.epoch += 1
        heap = self.finish_heap
        if (heap and heap[0][0] <= self.epoch) or len(self._epoch_end) >= self._trim_at:
            self._finishing = True
            out = self._finished()
            self._finishing = False
            if not self.window_end:                    # still computed until the window ends
                for req in out:
                    self.ghost_seqs += 1
                    self.ghost_ctx_tokens += req.num_computed + 1
                if self.held and not self.size:        # the window ends here (no ghost steps)
                    self.release(now - self.hold_delay_s)
            return out
        return []

    def release(self, client_s: float) -> None:
        """The engine's loop wakes at ``client_s + hold_delay_s``: every held last chunk
        streams, at ``client_s`` (times here are before the output delay every chunk waits)
        or, if later, at its own step's end. Its gap is recorded; the request joins
        :attr:`released`. O(held)."""
        for req, last_s, step_end_s, unsent in self.held.values():
            req.last_token_s = self._stream_last_chunk(req, last_s, max(client_s, step_end_s),
                                                       unsent)
            self.released.append(req)
        self.held.clear()

    def _stream_last_chunk(self, req: Request, last_s: float, end_s: float,
                           unsent: int) -> float:
        """``req``'s last chunk of ``unsent`` tokens streams at ``end_s``, ``last_s`` being
        its previous chunk's time: its gap recorded (ITL) and noted on it, the chunk's
        tokens counted; returns ``end_s``."""
        gap = end_s - last_s
        self.itl.add_one(gap, req.class_id)
        req.note_gap(gap)
        self.merged_tokens += unsent - 1
        self.buffered_tokens -= unsent
        return end_s

    def end_window(self) -> None:
        """The window is over: the next one's batch is its members alone (no ghosts)."""
        self.ghost_seqs = self.ghost_ctx_tokens = 0

    def _note_leaving(self, req: Request, steps: int) -> None:
        """``req`` leaves (finish or preemption): tokens it computed since its last chunk
        stream now, as one chunk at its last token; its gaps since joining are noted on it
        (the first chunk's, the longest of the window chunks', the last one's) and it
        leaves its cohort or pending group."""
        base, e0 = self._epoch_base, req.dec_epoch0
        in_cohort = self._last_emit >= e0                  # streamed a window chunk here
        last_s = self._cohort_t if in_cohort else req.last_token_s
        if in_cohort:
            first = self._emits[bisect_left(self._emits, e0)]
            req.note_gap(self._epoch_end[first - base] - req.last_token_s)
            if self._last_emit > first:
                req.note_gap(self._max_gap(first + 1 - base, self._last_emit + 1 - base))
            self._cohort[req.class_id] -= 1
        else:
            self._pending[req.last_token_s][req.class_id] -= 1
        unsent = self.epoch - max(e0, self._last_emit + 1)
        if unsent > 0:                                     # its last chunk, cut mid-window
            end_s = self._epoch_end[self.epoch - 1 - base]
            if self._finishing and self.hold_delay_s is not None and req.group is None \
                    and req.n == 1:                        # vLLM 0.6.0: held (see above)
                self.held[req.rid] = (req, last_s, end_s, unsent)
            else:
                last_s = self._stream_last_chunk(req, last_s, end_s, unsent)
        req.last_token_s = last_s
        req.dec_epoch0 = -1
        req.dec_version += 1

    def _trim(self) -> None:
        """:meth:`DecodeSet._trim`, and the window ends before the kept epochs (every
        member's first chunk is at or after its join)."""
        super()._trim()
        cut = bisect_left(self._emits, self._epoch_base)
        if cut:
            del self._emits[:cut]
