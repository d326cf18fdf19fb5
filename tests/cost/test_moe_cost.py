"""MoE step cost (distinct experts hit, FLOPs of the active experts), MLA attention and
windowed attention, against hand-computed values and brute-force routing counts.

Shapes from the presets' HF configs (tests/profiles/test_moe_models.py). The expected
experts formula is issue 15's: E·(1 − (1 − k/E)^n) under uniform top-k routing.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.cost.describe import describe_step
from capsim.cost.experts import MAX_ROUTING_SKEW
from capsim.cost.operators import _skewed_marginals, attn_pairs, expected_experts_hit
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model, model_names

H100 = load_hardware("h100-sxm")


def _ops(pricer: StepPricer, **kwargs) -> dict:
    return {op.name: op for op in pricer.breakdown(**kwargs)}


# -- expected experts hit ------------------------------------------------------------------


def test_expected_experts_hand_values():
    """E = 8, k = 2: one token hits 2; two hit 8·(1 − 0.75²) = 3.5; four 8·(1 − 0.75⁴)
    = 5.46875; DeepSeek-V3 (256, 8): 32 tokens 256·(1 − (31/32)^32) = 163.3."""
    assert expected_experts_hit(1, 8, 2) == pytest.approx(2.0)
    assert expected_experts_hit(2, 8, 2) == pytest.approx(3.5)
    assert expected_experts_hit(4, 8, 2) == pytest.approx(5.46875)
    assert expected_experts_hit(32, 256, 8) == pytest.approx(256 * (1 - (31 / 32) ** 32))
    assert expected_experts_hit(32, 256, 8) == pytest.approx(163.31, abs=0.01)
    assert expected_experts_hit(0, 256, 8) == 0.0
    assert expected_experts_hit(8192, 256, 8) == pytest.approx(256.0)


@pytest.mark.parametrize("experts, k, tokens", [(8, 2, 3), (128, 8, 16), (256, 8, 32),
                                                 (32, 4, 1)])
def test_expected_experts_match_brute_force_routing(experts, k, tokens):
    """Route ``tokens`` tokens to k distinct experts chosen uniformly, 20,000 times, and
    count the distinct experts: the mean is the formula's (within 4 standard errors)."""
    rng = np.random.default_rng(15)
    trials = 20_000
    picks = np.argsort(rng.random((trials, tokens, experts)), axis=2)[:, :, :k]
    hit = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    counts = hit.sum(axis=1)
    err = counts.std() / np.sqrt(trials)
    assert abs(counts.mean() - expected_experts_hit(tokens, experts, k)) < 4 * err + 1e-9


def test_routing_skew_hits_fewer_experts():
    """Skewed (Zipf) popularity: still k experts for one token (Σ q_i = k), fewer distinct
    experts for a batch than uniform routing, more skew fewer still."""
    assert expected_experts_hit(1, 256, 8, routing_skew=1.0) == pytest.approx(8.0)
    uniform = expected_experts_hit(64, 256, 8)
    mild, strong = (expected_experts_hit(64, 256, 8, routing_skew=s) for s in (0.5, 1.2))
    assert strong < mild < uniform
    assert expected_experts_hit(10**6, 256, 8, routing_skew=1.2) == pytest.approx(256.0)


@pytest.mark.parametrize("experts,top_k", [(256, 8), (128, 8), (32, 4), (8, 2), (16, 1),
                                           (8, 8)])
@pytest.mark.parametrize("skew", [0.5, 1.0, 3.0, 4.0, 32.0, 100.0])
def test_skewed_popularities_are_probabilities_summing_to_top_k(experts, top_k, skew):
    """Each expert is picked by a token with probability <= 1 and a token picks top_k of
    them; a capped expert stays capped (spreading the excess over it again left 128-of-8
    experts at 1.50 at skew 4 and 6.998 at 32, and 1e9 ended in NaN)."""
    q = _skewed_marginals(experts, top_k, skew)
    assert q.max() <= 1.0 and q.min() >= 0.0
    assert q.sum() == pytest.approx(top_k, rel=1e-12)
    assert np.all(np.diff(q) <= 0)                     # Zipf order kept


def test_the_skew_bound_is_where_routing_is_deterministic_for_every_packaged_moe():
    """MAX_ROUTING_SKEW's docstring: at 100 every packaged MoE model sends all but 1e-6 of
    its picks to its top_k most popular experts, so a larger skew prices the same step."""
    moe = [m for m in map(load_model, model_names()) if m.is_moe]
    assert len(moe) >= 7
    for m in moe:
        q = _skewed_marginals(m.num_experts, m.num_experts_per_tok, MAX_ROUTING_SKEW)
        assert q[m.num_experts_per_tok:].sum() / m.num_experts_per_tok < 1e-6, m.name
    # One step further the figures of the step no longer move (DeepSeek-V3, 64 tokens).
    assert expected_experts_hit(64, 256, 8, MAX_ROUTING_SKEW) == pytest.approx(8.0, abs=1e-3)


# -- the routed experts in a step -------------------------------------------------------------


def test_mixtral_decode_reads_the_experts_its_tokens_hit():
    """Mixtral-8x7B, TP 1, bf16: one expert of one layer is 3 × 4096 × 14336 =
    176,160,768 parameters. One decoding token reads 2 experts × 32 layers of them
    (22.5 GB) and computes 2 FLOPs per weight of those; four tokens read 5.46875 experts
    per layer on average."""
    pricer = StepPricer(load_model("mixtral-8x7b"), H100.ideal())
    per_expert = 3 * 4096 * 14336
    act_per_pair = 32 * (2 * 4096 + 3 * 14336) * 2
    for seqs, hit in ((1, 2.0), (4, 5.46875)):
        ops = _ops(pricer, decode_seqs=seqs, decode_ctx_tokens=seqs * 100)
        experts = ops["experts"]
        assert experts.count == 32
        assert experts.bytes == pytest.approx(32 * hit * per_expert * 2
                                              + seqs * 2 * act_per_pair, rel=1e-12)
        assert experts.flops == pytest.approx(2.0 * 32 * seqs * 2 * per_expert, rel=1e-12)
    assert pricer.experts_hit(4) == pytest.approx(5.46875)


def test_decode_reads_few_experts_prefill_nearly_all():
    """DeepSeek-V3 at TP 8: a decode step of 4 sequences reads 30.5 of 256 experts per
    MoE layer (12 %); a 4,096-token prefill reads all of them."""
    model = load_model("deepseek-v3")
    small = describe_step(model, "h200-sxm", 8, decode_batch=4, context=2000)
    big = describe_step(model, "h200-sxm", 8, prefill_tokens=4096)
    assert small["experts"]["hit"] == pytest.approx(256 * (1 - (1 - 8 / 256) ** 4))
    assert small["experts"]["hit"] == pytest.approx(30.53, abs=0.01)
    assert big["experts"]["hit"] == pytest.approx(256.0, abs=1e-6)
    row = {op["name"]: op for op in big["operators"]}["experts"]
    weights = 58 * 256 * 3 * 7168 * 2048 / 8 * 1      # the checkpoint's fp8 (1 byte + scales)
    assert row["bytes"] > weights


def test_dense_model_has_no_experts_row():
    pricer = StepPricer(load_model("llama-3.1-8b"), H100)
    assert "experts" not in _ops(pricer, decode_seqs=4, decode_ctx_tokens=400)
    assert pricer.experts_hit(10) == 0.0
    assert describe_step("llama-3.1-8b", "h100-sxm", decode_batch=1, context=10)["experts"] is None


# -- MLA --------------------------------------------------------------------------------------


def test_mla_decode_attention_reads_the_latent_on_every_rank():
    """DeepSeek-V3: a decode over C tokens reads 61 × 576 × 2 = 70,272 bytes per context
    token on every TP rank, and computes 2 × heads/TP × (2·512 + 64) FLOPs per key and
    layer (absorbed form); prefill 2 × heads/TP × (128 + 64 + 128)."""
    for tp in (1, 8):
        pricer = StepPricer(load_model("deepseek-v3"), load_hardware("h200-sxm").ideal(), tp)
        ops = _ops(pricer, decode_seqs=1, decode_ctx_tokens=1000)
        dec = ops["attention_decode"]
        new = 61 * (576 * 2 + 128 / tp * 320 * 2)
        assert dec.bytes == pytest.approx(70_272 * 1000 + new, rel=1e-12)
        assert dec.flops == pytest.approx(61 * 2 * 128 / tp * (2 * 512 + 64) * 1000, rel=1e-12)
        pre = _ops(pricer, prefill_tokens=100, prefill_attn_pairs=attn_pairs(100, 0),
                   prefill_kv_tokens=100)["attention_prefill"]
        assert pre.flops == pytest.approx(61 * 2 * 128 / tp * 320 * 5050, rel=1e-12)


# -- windows ----------------------------------------------------------------------------------


def test_sliding_window_layers_read_at_most_the_window():
    """gpt-oss-120b: one sequence decoding at context 10,000 reads 10,000 keys on its 18
    full layers and 128 on its 18 sliding layers: (10,000 + 128) / 2 keys of the 36-layer
    coefficient."""
    pricer = StepPricer(load_model("gpt-oss-120b"), H100.ideal())
    ops = _ops(pricer, decode_seqs=1, decode_ctx_tokens=10_000)
    kv_per_token = 36 * 2 * 8 * 64 * 2
    new = 36 * (2 * 8 * 64 * 2 + 2 * 64 * 64 * 2)
    assert ops["attention_decode"].bytes == pytest.approx(kv_per_token * 5_064 + new, rel=1e-12)
    short = _ops(pricer, decode_seqs=1, decode_ctx_tokens=100)["attention_decode"]
    assert short.bytes == pytest.approx(kv_per_token * 100 + new, rel=1e-12)


# -- fast paths equal the reference ---------------------------------------------------------

MODELS = ["mixtral-8x7b", "deepseek-v3", "gpt-oss-20b", "llama-4-scout", "qwen3-30b-a3b"]
PRICERS = {(m, tp): StepPricer(load_model(m), H100, tp) for m in MODELS for tp in (1, 8)}


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(MODELS), tp=st.sampled_from([1, 8]), seqs=st.integers(0, 512),
       ctx=st.integers(1, 20_000), chunk=st.integers(0, 4096), cached=st.integers(0, 4096))
def test_cost_equals_the_breakdown(model, tp, seqs, ctx, chunk, cached):
    if seqs + chunk == 0:
        return
    pricer = PRICERS[(model, tp)]
    kwargs = dict(prefill_tokens=chunk, prefill_attn_pairs=attn_pairs(chunk, cached),
                  prefill_kv_tokens=cached + chunk if chunk else 0, decode_seqs=seqs,
                  decode_ctx_tokens=seqs * ctx)
    cost, ops = pricer.cost(**kwargs), pricer.breakdown(**kwargs)
    assert sum(op.seconds for op in ops) + cost.comm_s + cost.overhead_s == pytest.approx(
        cost.seconds, rel=1e-12)
    assert sum(op.flops for op in ops) == pytest.approx(cost.flops, rel=1e-12)
    assert sum(op.bytes for op in ops) == pytest.approx(cost.bytes, rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(model=st.sampled_from(MODELS), tp=st.sampled_from([1, 8]), seqs=st.integers(1, 300),
       ctx=st.integers(1, 200_000), k=st.integers(1, 30))
def test_decode_costs_equal_cost_bit_for_bit(model, tp, seqs, ctx, k):
    pricer = PRICERS[(model, tp)]
    secs, bound = pricer.decode_costs([seqs], [ctx], [k])
    for i in range(k):
        one = pricer.cost(decode_seqs=seqs, decode_ctx_tokens=ctx + i * seqs, logits_seqs=seqs)
        assert (secs[i], bound is not None and bool(bound[i])) == (one.seconds, one.compute_bound)


def test_work_counts_the_experts_of_each_step():
    """The tally keeps steps per token count, so the experts' bytes of a run are Σ of each
    step's, not the mean batch's (hits are concave in the tokens)."""
    pricer = PRICERS[("mixtral-8x7b", 1)]
    tally = pricer.new_tally()
    costs = []
    for seqs in (1, 1, 1, 64):
        tally.add(1, seqs, seqs, seqs * 50, seqs * 50, 1)
        costs.append(pricer.cost(decode_seqs=seqs, decode_ctx_tokens=seqs * 50))
    flops, nbytes = pricer.work(tally)
    assert nbytes == pytest.approx(sum(c.bytes for c in costs), rel=1e-12)
    assert flops == pytest.approx(sum(c.flops for c in costs), rel=1e-12)
