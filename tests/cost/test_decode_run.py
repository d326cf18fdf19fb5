"""Decode runs priced in one numpy pass (capsim/cost/decode_run.py): bit for bit the
step formula of each step (StepPricer.cost), both paths (the memory-bound fast path and
the general one)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import HostOverhead
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

HOSTS = [None, HostOverhead(per_step_s=1.05e-3, per_seq_s=2e-6),
         HostOverhead(per_step_s=4e-3, per_seq_s=1e-5, overlap="async", residual_s=3e-4)]


@settings(max_examples=100, deadline=None)
@given(seqs=st.integers(1, 512), ctx=st.integers(1, 10**6), k=st.integers(1, 40),
       model=st.sampled_from(["llama-3.1-8b", "llama-2-7b"]),
       hw=st.sampled_from(["h100-sxm", "a100-80gb", "l40s"]), tp=st.sampled_from([1, 2]),
       host=st.sampled_from(HOSTS))
def test_vectorised_decode_costs_equal_cost_bit_for_bit(seqs, ctx, k, model, hw, tp, host):
    """Macro-steps price k decode steps at once; the floats must be exactly cost()'s, or the
    macro-step clock would drift from the step-by-step one (issue 6: identical results)."""
    import numpy as np

    pricer = StepPricer(load_model(model), load_hardware(hw), tp, host=host)
    ctxs = ctx + seqs * np.arange(k)
    secs, bound = pricer.decode_costs([seqs], [ctx], [k])
    assert len(secs) == k
    for i, c in enumerate(ctxs.tolist()):
        one = pricer.cost(decode_seqs=seqs, decode_ctx_tokens=c, logits_seqs=seqs)
        assert (secs[i], bound is not None and bool(bound[i])) == \
            (one.seconds, one.compute_bound)


@settings(max_examples=60, deadline=None)
@given(segs=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 12)), min_size=1, max_size=5),
       ctx=st.integers(1, 10**6), hw=st.sampled_from(["h100-sxm", "a100-80gb"]),
       tp=st.sampled_from([1, 2]), host=st.sampled_from(HOSTS))
def test_segmented_decode_costs_equal_cost_bit_for_bit(segs, ctx, hw, tp, host):
    """A run that goes on through finishes prices segments of different batch sizes in one
    call; each step must still equal cost() for its own batch exactly."""
    import numpy as np

    pricer = StepPricer(load_model("llama-3.1-8b"), load_hardware(hw), tp, host=host)
    seqs = [n for n, _ in segs]
    lengths = [m for _, m in segs]
    per_step = np.repeat(seqs, lengths)
    ctxs = ctx + np.cumsum(per_step) - per_step
    firsts = np.cumsum([0, *lengths[:-1]])
    secs, bound = pricer.decode_costs(seqs, ctxs[firsts].tolist(), lengths)
    assert len(secs) == sum(lengths)
    for i, (n, c) in enumerate(zip(per_step.tolist(), ctxs.tolist())):
        one = pricer.cost(decode_seqs=n, decode_ctx_tokens=c, logits_seqs=n)
        assert (secs[i], bound is not None and bool(bound[i])) == \
            (one.seconds, one.compute_bound)


def test_async_host_term_inside_a_segment_equals_cost_bit_for_bit():
    """An overlapped host term between a decode segment's first and last GPU step (the
    run turns from host-bound to GPU-bound mid-segment): every step is still cost()'s
    float, the host-bound ones at the host term (decode_costs takes the maximum per
    segment only when the host term exceeds its first step)."""
    import numpy as np

    gpu = StepPricer(load_model("llama-3.1-8b"), load_hardware("h100-sxm"))
    seqs, ctx, k = 64, 64 * 256, 400
    first = gpu.cost(decode_seqs=seqs, decode_ctx_tokens=ctx, logits_seqs=seqs).seconds
    last = gpu.cost(decode_seqs=seqs, decode_ctx_tokens=ctx + seqs * (k - 1),
                    logits_seqs=seqs).seconds
    host = HostOverhead(per_step_s=(first + last) / 2, overlap="async", residual_s=3e-4)
    pricer = StepPricer(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), host=host)
    secs, _ = pricer.decode_costs([seqs, 8], [ctx, 8 * 256], [k, 3])
    ctxs = [*(ctx + seqs * np.arange(k)).tolist(), *(8 * 256 + 8 * np.arange(3)).tolist()]
    ns = [seqs] * k + [8] * 3
    want = [pricer.cost(decode_seqs=n, decode_ctx_tokens=c, logits_seqs=n).seconds
            for n, c in zip(ns, ctxs)]
    assert secs.tolist() == want
    host_bound = sum(s == host.per_step_s + 3e-4 for s in want[:k])
    assert 0 < host_bound < k            # both kinds of step in the first segment


def test_decode_costs_find_where_a_run_turns_memory_bound():
    """512 sequences of Llama-3.1-8B on an H100: the step's GEMMs are compute-bound until
    the context grows past 76,900 tokens, when the KV read wins. A run crossing that point
    must flag exactly the steps before it (decode_costs skips the compute side only when
    no step of a segment can be compute-bound)."""
    pricer = StepPricer(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1)
    last_bound = 76_900
    assert pricer.cost(decode_seqs=512, decode_ctx_tokens=last_bound,
                       logits_seqs=512).compute_bound
    assert not pricer.cost(decode_seqs=512, decode_ctx_tokens=last_bound + 1,
                           logits_seqs=512).compute_bound
    _, bound = pricer.decode_costs([512, 256], [last_bound - 512 * 10, 5_000], [20, 5])
    assert bound.tolist() == [True] * 11 + [False] * 14
    _, bound = pricer.decode_costs([512], [last_bound + 1], [20])
    assert bound is None
