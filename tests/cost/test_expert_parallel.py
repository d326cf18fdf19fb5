"""Expert parallelism: the all-to-all dispatch and combine (bytes and seconds for a known
shape, within a node and across two), the all-reduces it replaces, and the busiest
rank under routing skew.

Shapes: DeepSeek-V3's config.json (hidden 7,168, 256 routed experts, top-8, 61 layers of
which the first 3 dense: 58 MoE layers). H200 SXM profile: NVLink 450 GB/s per direction
× interconnect efficiency 0.698, 4.28 µs per hop; 8 GPUs per node; InfiniBand NDR 50 GB/s
per GPU and 30 µs (capsim/profiles/data/links/infiniband-ndr.yaml).
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.cost.operators import (
    all_to_all_s,
    expert_rank_loads,
    moe_all_to_all_bytes_per_token,
    ring_all_reduce_s,
)
from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.links import load_link
from capsim.profiles.models import load_model

H200 = load_hardware("h200-sxm")
IB = load_link("infiniband-ndr")
DSV3 = load_model("deepseek-v3")
NVLINK = 450e9 * 0.698


def test_dispatch_bytes_per_token_are_topk_hidden_activation_over_ep():
    """8 × 7,168 × 2 bytes per token, each rank sending for its 1/EP of the tokens."""
    assert moe_all_to_all_bytes_per_token(DSV3, 8) == 8 * 7168 * 2 / 8 == 14_336
    assert moe_all_to_all_bytes_per_token(DSV3, 16) == 7_168


def test_all_to_all_within_a_node_hand_value():
    """1 MB from each of 8 ranks: 7/8 of it over NVLink, plus one hop's latency."""
    t = all_to_all_s(1e6, 8, 8, NVLINK, 4.28e-6, IB.bandwidth_bytes_per_s, IB.latency_s)
    assert t == pytest.approx(4.28e-6 + 7 / 8 * 1e6 / NVLINK)     # 7.07 µs
    assert t == pytest.approx(7.0656e-6, rel=1e-4)
    assert all_to_all_s(1e6, 1, 8, NVLINK, 4.28e-6) == 0.0
    # No node size: every rank is NVLink-local.
    assert all_to_all_s(1e6, 16, None, NVLINK, 4.28e-6) == pytest.approx(
        4.28e-6 + 15 / 16 * 1e6 / NVLINK)


def test_all_to_all_across_two_nodes_is_bound_by_the_scale_out_link():
    """16 ranks over two nodes of 8: 7/16 over NVLink, 8/16 over InfiniBand at 50 GB/s,
    at once: the InfiniBand share and latency set the time (30 µs + 10 µs per MB)."""
    t = all_to_all_s(1e6, 16, 8, NVLINK, 4.28e-6, IB.bandwidth_bytes_per_s, IB.latency_s)
    assert t == pytest.approx(30e-6 + 0.5e6 / 50e9) == pytest.approx(40e-6)
    arr = all_to_all_s(np.array([0.0, 1e6]), 16, 8, NVLINK, 4.28e-6, 50e9, 30e-6)
    assert arr == pytest.approx([30e-6, 40e-6])


def test_ep_with_dp_attention_replaces_the_moe_layers_all_reduces():
    """DP attention + EP 8 on one H200 node: 58 MoE layers × 2 all-to-alls of 14,336
    bytes per token (7/8 over NVLink) replace 116 of the 123 all-reduces.

    Fixed: 7 all-reduces × 14 hops × 4.28 µs + the logits gather's 4.28 µs + 116 × 4.28 µs
    = 0.4194 + 0.0043 + 0.4965 = 0.9202 ms. Per token: 7 ring all-reduces of 14,336 bytes (2·7/8 each) + 116 ×
    (7/8 × 14,336 / 314.1 GB/s) = 0.559 + 4.632 = 5.191 µs (+ the logits gather)."""
    tp = StepPricer(DSV3, H200, 8, dp_attention=True)
    ep = StepPricer(DSV3, H200, 8, dp_attention=True,
                    expert_parallel=True, scale_out=IB)
    n = 256
    a2a_fixed, a2a_token = ep.all_to_all_terms()
    assert a2a_fixed == pytest.approx(116 * 4.28e-6)
    assert a2a_token == pytest.approx(116 * 7 / 8 * 14_336 / NVLINK)
    assert a2a_token == pytest.approx(4.632e-6, rel=1e-3)
    ar_fixed = 7 * ring_all_reduce_s(0.0, 8, NVLINK, 4.28e-6) + 4.28e-6
    ar_token = 7 * ring_all_reduce_s(7168 * 2, 8, NVLINK, 0.0)
    expected = ar_fixed + a2a_fixed + (ar_token + a2a_token) * n
    logits = 7 / 8 * DSV3.vocab_size * 2 / NVLINK * n
    c = ep.cost(decode_seqs=n, decode_ctx_tokens=n * 1000)
    assert c.comm_s == pytest.approx(expected + logits)
    assert ar_fixed + a2a_fixed == pytest.approx(0.9202e-3, rel=1e-4)
    # The all-reduces cost more at every batch: 123 × 60 µs of latency alone.
    assert tp.cost(decode_seqs=n, decode_ctx_tokens=n * 1000).comm_s > 3 * c.comm_s


def test_ep_across_two_nodes_pays_the_scale_out_link():
    """EP 16 over two H200 nodes: 116 × (30 µs + 8/16 × 7,168 bytes / 50 GB/s per token)."""
    ep = StepPricer(DSV3, H200, 16, dp_attention=True,
                    expert_parallel=True, scale_out=IB)
    fixed, token = ep.all_to_all_terms()
    assert fixed == pytest.approx(116 * 30e-6) == pytest.approx(3.48e-3)
    assert token == pytest.approx(116 * 0.5 * 7168 / 50e9)
    with pytest.raises(ScenarioError, match="spans nodes of 8 GPUs"):
        StepPricer(DSV3, H200, 16, dp_attention=True, expert_parallel=True)


def test_ep_without_dp_attention_keeps_tp_all_reduces_and_costs():
    """vLLM's use_all2all_kernels needs dp_size > 1: with EP over the TP group every rank
    holds every token and the all-reduce combines; uniform routing: the same step."""
    tp = StepPricer(DSV3, H200, 8)
    ep = StepPricer(DSV3, H200, 8, expert_parallel=True)
    for kwargs in ({"decode_seqs": 16, "decode_ctx_tokens": 16_000},
                   {"prefill_tokens": 2048, "prefill_attn_pairs": 2048 * 2049 / 2,
                    "prefill_kv_tokens": 2048}):
        assert ep.cost(**kwargs) == tp.cost(**kwargs)


def test_busiest_rank_under_skew():
    """Uniform routing: every rank holds k / EP of the load. Zipf skew 0.5 over
    DeepSeek-V3's 256 experts on EP 8, experts placed at random (seeded): the busiest
    rank carries 1.235× the mean; skew 1.0: 1.88×. The loads are each expert's q ≤ 1."""
    q = expert_rank_loads(256, 8, 8)
    assert q.shape == (32,) and q.sum() == pytest.approx(1.0)
    for skew, factor in ((0.5, 1.235), (1.0, 1.877)):
        q = expert_rank_loads(256, 8, 8, skew)
        assert q.shape == (32,) and (q <= 1).all()
        assert q.sum() * 8 / 8 == pytest.approx(factor, abs=1e-3)


def test_skewed_ep_prices_the_busiest_rank():
    """With skew, EP's expert FLOPs are the busiest rank's (× its load over the mean) and
    a prefill of 4,096 tokens takes longer than TP's evenly sliced experts."""
    tp = StepPricer(DSV3, H200, 8, routing_skew=1.0)
    ep = StepPricer(DSV3, H200, 8, routing_skew=1.0, expert_parallel=True)
    kwargs = {"prefill_tokens": 4096, "prefill_attn_pairs": 4096 * 4097 / 2,
              "prefill_kv_tokens": 4096}
    ops_tp = {o.name: o for o in tp.breakdown(**kwargs)}
    ops_ep = {o.name: o for o in ep.breakdown(**kwargs)}
    assert ops_ep["experts"].flops == pytest.approx(ops_tp["experts"].flops * 1.877, rel=1e-3)
    assert ep.cost(**kwargs).seconds > tp.cost(**kwargs).seconds


def test_ep_refuses_a_dense_model_and_an_uneven_split():
    with pytest.raises(ScenarioError, match="needs a mixture-of-experts model"):
        StepPricer(load_model("llama-3.1-8b"), H200, 2, expert_parallel=True)
    with pytest.raises(ScenarioError, match="must divide num_experts 8"):
        StepPricer(load_model("mixtral-8x7b"), H200, 16, expert_parallel=True)
