"""A step's collectives (capsim/cost/communication.py): the pricer's inlined first piece and
Communication.seconds agree at every token count, across the pieces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

PRICERS = {tp: StepPricer(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), tp,
                          all_reduce=load_engine_preset("vllm-v1").tp_all_reduce)
           for tp in (1, 2, 4, 8)}


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 200_000), tp=st.sampled_from([1, 2, 4, 8]))
def test_the_step_communication_is_the_piecewise_sum(n, tp):
    """``price().comm_s`` (first piece inlined) equals ``Communication.seconds`` at every
    token count; nothing at TP 1."""
    p = PRICERS[tp]
    assert p.cost(decode_seqs=n, decode_ctx_tokens=n, logits_seqs=n).comm_s == \
        p.comm.seconds(n, n)
    if tp == 1:
        assert p.comm.seconds(n, n) == 0.0


def test_a_custom_preset_has_one_shot_two_shot_and_ring_pieces():
    """vLLM's custom all-reduce on an H100 at TP 4: three pieces in token order, the last
    unlimited."""
    c = PRICERS[4].comm
    limits = [c.split_tokens, *(limit for limit, _, _ in c.tail)]
    assert len(limits) == 3 and limits == sorted(limits)
