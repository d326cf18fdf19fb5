"""A replica's accounting (capsim.engine.account): one step through ``account_one`` is
``account_steps`` of that step plus its busy time, number for number."""

from __future__ import annotations

import random

from capsim.cost.pricer import WorkTally
from capsim.engine.account import ReplicaAccount
from capsim.engine.recorder import TimelineRecorder
from capsim.engine.request import Request
from capsim.engine.step import Step

FIELDS = ("busy_s", "compute_bound_steps", "prefill_tokens", "decode_tokens")
TALLY = ("steps", "logit_steps", "tokens", "logits", "attn_pairs", "kv_read_tokens",
         "steps_by_tokens")


class _Sched:
    """What the account reads off a scheduler."""

    def __init__(self):
        self.num_running, self.kv_tokens = 0, 0

    def block_table_entries(self) -> int:
        return 7


def _step(rng: random.Random) -> Step:
    step = Step(decode_seqs=rng.randrange(0, 40), decode_ctx_tokens=rng.randrange(0, 9000))
    for _ in range(rng.randrange(0, 3)):
        prompt = rng.randrange(1, 600)
        req = Request(0, 0, 0.0, prompt, 10, None)
        step.add_prefill(req, rng.randrange(1, prompt + 1))
    return step


def test_one_step_is_account_steps_of_one_step_with_its_busy_time():
    rng = random.Random(3)
    one = ReplicaAccount(_Sched(), WorkTally(True), TimelineRecorder(0, "colocated", 0.05, 64))
    many = ReplicaAccount(_Sched(), WorkTally(True), TimelineRecorder(0, "colocated", 0.05, 64))
    now = 0.0
    for _ in range(3000):           # far enough to coarsen the bins (past max_bins)
        step = _step(rng)
        secs = rng.uniform(0.001, 0.02)
        now += secs
        bound, used, queue = rng.randrange(2), rng.randrange(100), rng.randrange(5)
        logits = step.logits_seqs
        for acct in (one, many):
            acct.scheduler.num_running = rng.randrange(60) if acct is one else \
                one.scheduler.num_running
        one.account_one(step, now, secs, bound, logits, used, queue)
        ctx = step.decode_ctx_tokens
        many.add_busy(secs, bound)
        many.account_steps((now,), (secs,), step.prefill_tokens, step.decode_seqs,
                           (1, step.batch_tokens, logits, int(step.prefill_attn_pairs) + ctx,
                            step.prefill_kv_tokens + ctx, 1 if logits else 0),
                           used, 0, 0, queue)
    assert one.timeline.bin_s > 0.05
    for f in FIELDS:
        assert getattr(one, f) == getattr(many, f), f
    for f in TALLY:
        assert getattr(one.work, f) == getattr(many.work, f), f
    assert one.timeline.bins == many.timeline.bins
    assert one.timeline.bin_s == many.timeline.bin_s


def test_a_kv_peak_notes_the_tokens_written_and_the_tables_then():
    sched = _Sched()
    sched.kv_tokens = 500
    acct = ReplicaAccount(sched, WorkTally(), TimelineRecorder(0, "colocated"))
    step = Step(decode_seqs=4, decode_ctx_tokens=100)
    acct.note_kv_peak(12, step)
    assert (acct.peak_kv_used_blocks, acct.kv_written_at_peak, acct.table_entries_at_peak) \
        == (12, 504, 7)
