"""Multi-step windows streamed as the client sees them (capsim/engine/window_decode_set.py):
vLLM 0.6's ``--num-scheduler-steps N`` hands a request's tokens of a window over as one
chunk (vllm/engine/llm_engine.py ``step`` / ``_process_model_outputs`` at v0.6.0, 32e7db2),
and ``vllm bench serve`` records one ITL per chunk. Schedulers driven step by step, every
step 1 s long."""

from __future__ import annotations

import math

import pytest

from capsim.engine.decode_set import DecodeSet
from capsim.engine.recorder import ItlRecorder
from capsim.engine.request import Request
from capsim.engine.scheduler.continuous import ContinuousScheduler
from capsim.engine.window_decode_set import WindowDecodeSet
from capsim.kv.allocator import BlockAllocator


def scheduler(steps: int, num_blocks: int = 10_000, max_num_seqs: int = 64,
              swap_space_bytes: int = 0) -> tuple[ContinuousScheduler, ItlRecorder]:
    itl = ItlRecorder()
    sched = ContinuousScheduler(max_num_seqs=max_num_seqs, max_num_batched_tokens=4096,
                                chunked=False, allocator=BlockAllocator(num_blocks, 16),
                                num_classes=1, itl=itl, num_scheduler_steps=steps,
                                swap_space_bytes=swap_space_bytes, kv_bytes_per_token=1)
    return sched, itl


def drain(sched: ContinuousScheduler, t: float = 0.0, arrivals=()) -> list[tuple]:
    """Step until idle, adding ``arrivals`` ((time, request)) when the clock reaches them;
    the (rid, first token, finish, max ITL) of every finished request, by rid."""
    arrivals = list(arrivals)
    while sched.has_work() or arrivals:
        while arrivals and arrivals[0][0] <= t:
            sched.add(arrivals.pop(0)[1])
        step = sched.schedule(t)
        t += 1.0
        if step is not None:
            sched.complete(step, t)
    return sorted((r.rid, r.first_token_s, r.finish_s, r.max_itl_s) for r in sched.finished)


def runs(itl: ItlRecorder) -> list[tuple[float, int]]:
    r = itl.result()
    return [(float(g), int(c)) for g, c in zip(r.gap_s, r.count)]


def test_a_window_streams_as_one_chunk_and_a_finish_cuts_the_last_one():
    """Two 64-token prompts, replies of 10 and 7 tokens, windows of 4 steps. Token 1 at the
    prefill (t 1); the first window (steps ending 2–5) streams 4 tokens each at t 5: two
    gaps of 4 s; in the second window the 7-token reply ends at t 7 and streams its last 2
    tokens then (gap 2 s) while the other's window streams at t 9 (4 s); its last token
    is alone in the third window (1 s)."""
    sched, itl = scheduler(4)
    assert isinstance(sched.decoders, WindowDecodeSet)
    sched.add(Request(0, 0, 0.0, 64, 10))
    sched.add(Request(1, 0, 0.0, 64, 7))
    done = drain(sched)
    assert done == [(0, 1.0, 10.0, 4.0), (1, 1.0, 7.0, 4.0)]
    # 5 chunks after the first token; 15 tokens after it: 10 arrived inside a chunk.
    assert sched.merged_tokens == 10 and sched.buffered_tokens == 0
    assert runs(itl) == [(4.0, 2), (2.0, 1), (4.0, 1), (1.0, 1)]


def test_single_step_scheduling_streams_every_token_at_the_same_finish_times():
    """The same requests with num_scheduler_steps 1: a gap per token, a plain DecodeSet, and
    the same first-token and finish times: windows move ITL, not TTFT, E2EL or TPOT."""
    sched, itl = scheduler(1)
    assert type(sched.decoders) is DecodeSet
    sched.add(Request(0, 0, 0.0, 64, 10))
    sched.add(Request(1, 0, 0.0, 64, 7))
    done = drain(sched)
    assert done == [(0, 1.0, 10.0, 1.0), (1, 1.0, 7.0, 1.0)]
    assert sched.merged_tokens == 0
    assert sum(c for _, c in runs(itl)) == 9 + 6


@pytest.mark.parametrize("output, chunks", [(2, 1), (11, 1), (12, 2), (23, 3), (31, 3)])
def test_chunks_per_request(output, chunks):
    """One request, windows of 10: token 1 at the prefill, then ⌈(output − 1) ÷ 10⌉ chunks;
    gaps + tokens merged into chunks = output − 1 (the run's invariant)."""
    sched, itl = scheduler(10)
    sched.add(Request(0, 0, 0.0, 64, output))
    drain(sched)
    counts = runs(itl)
    assert sum(c for _, c in counts) == chunks == math.ceil((output - 1) / 10)
    assert sched.merged_tokens == output - 1 - chunks
    # Every chunk but the last is a whole window of 10 steps of 1 s.
    assert [g for g, _ in counts] == [10.0] * (chunks - 1) + [float((output - 2) % 10 + 1)]


def test_a_prompt_waits_for_the_window_and_joins_the_next_chunk():
    """A request arriving inside the first window (t 2) is prefilled after it (t 5–6); the
    next window (steps ending 7–10) streams for both at t 10: the running reply's gap runs
    from its chunk at t 5 (5 s: the prefill step stalls it), the newcomer's from its own
    first token at t 6 (4 s). The newcomer's 5 tokens are then all out; the other's last 3
    tokens end a cut window at t 13."""
    sched, itl = scheduler(4)
    sched.add(Request(0, 0, 0.0, 64, 12))
    done = drain(sched, arrivals=[(2.0, Request(1, 0, 2.0, 64, 5))])
    assert done == [(0, 1.0, 13.0, 5.0), (1, 6.0, 10.0, 4.0)]
    assert runs(itl) == [(4.0, 1), (5.0, 1), (4.0, 1), (3.0, 1)]
    assert sched.merged_tokens == (11 + 4) - 4


@pytest.mark.parametrize("swap_space_bytes", [0, 10_000])
def test_preemption_inside_a_window_streams_what_was_computed(swap_space_bytes):
    """A KV cache too small for both replies preempts the newer one inside a window (by
    recompute, or by swap: it swaps back in inside a later window): the tokens it computed
    in the window stream at its last step (one gap), and every token is accounted for
    (gaps + merged = output − 1 per request)."""
    sched, itl = scheduler(8, num_blocks=9, swap_space_bytes=swap_space_bytes)
    sched.add(Request(0, 0, 0.0, 60, 40))
    sched.add(Request(1, 0, 0.0, 60, 40))
    drain(sched)
    assert sched.counters.preemptions > 0
    assert (sched.counters.swap_in_bytes > 0) == (swap_space_bytes > 0)
    gaps = sum(c for _, c in runs(itl))
    assert gaps + sched.merged_tokens == 2 * 39
    assert sched.buffered_tokens == 0


def test_a_request_finished_inside_a_window_is_computed_until_the_window_ends():
    """vLLM 0.6 prepares a window's batch once and advances it on the GPU (vllm/worker/
    multi_step_model_runner.py ``_advance_step`` over the window's ``num_seqs`` at v0.6.0,
    32e7db2): a member that finished at window step 2 of 4 is still computed at steps 3 and 4
    (priced, emitting nothing) and gone from the next window. Prompts of 64 tokens: a
    member's step k of the window attends over 64 + k keys."""
    sched, _ = scheduler(steps=4)
    sched.add(Request(0, 0, 0.0, 64, 3))         # first token at the prefill, 2 decoded
    sched.add(Request(1, 0, 0.0, 64, 100))
    t, seen = 0.0, []
    for _ in range(6):
        step = sched.schedule(t)
        t += 1.0
        seen.append((len(step.prefills), step.decode_seqs, step.emitting_decodes,
                     step.decode_ctx_tokens))
        sched.complete(step, t)
    assert seen == [(2, 0, 0, 0),                          # the prefill step
                    (0, 2, 2, 65 + 65), (0, 2, 2, 66 + 66),  # request 0's last token
                    (0, 2, 1, 67 + 67), (0, 2, 1, 68 + 68),  # its ghost, to the window's end
                    (0, 1, 1, 69)]                          # the next window: request 1 alone
    assert [r.rid for r in sched.finished] == [0]
    assert sched.finished[0].output_tokens == 3


def test_single_step_decoding_drops_a_finished_request_at_once():
    """Without multi-step the batch shrinks at the next step (no ghosts)."""
    sched, _ = scheduler(steps=1)
    sched.add(Request(0, 0, 0.0, 64, 3))
    sched.add(Request(1, 0, 0.0, 64, 100))
    t, seqs = 0.0, []
    for _ in range(4):
        step = sched.schedule(t)
        t += 1.0
        seqs.append(step.decode_seqs)
        sched.complete(step, t)
    assert seqs == [0, 2, 2, 1]
