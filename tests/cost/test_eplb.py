"""EPLB's redundant experts (issue 30 item 4): vLLM ``--enable-eplb --eplb-config
'{"num_redundant_experts": N}'``, SGLang ``--ep-num-redundant-experts N``. The copies go to the
hottest experts and are packed onto the least-loaded ranks (vllm/distributed/eplb/
rebalance_algo.py at 07fb932a): the balance they buy under a routing skew, the memory they
cost."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.cost.experts import busiest_rank_load
from capsim.cost.operators import eplb_rank_loads
from capsim.cost.pricer import StepPricer
from capsim.kv.memory import redundant_bytes_per_gpu
from capsim.profiles.hardware import load_hardware
from capsim.profiles.links import load_link
from capsim.profiles.models import load_model

V3 = load_model("deepseek-v3")


@pytest.mark.parametrize("skew,without", [(0.5, 1.9194), (1.0, 4.7959)])
def test_32_copies_balance_ep32_under_a_skew(skew, without):
    """DeepSeek-V3 on EP 32 (8 experts a rank): random placement of Zipf-popular experts
    loads the busiest rank 1.92× (skew 0.5) or 4.80× (skew 1.0) the mean; 32 copies of the
    hottest experts (9 a rank) bring it within 0.3 % of the mean."""
    q0, imb0 = busiest_rank_load(V3, 32, skew, True)
    q, imb = busiest_rank_load(V3, 32, skew, True, redundant_experts=32)
    assert len(q0) == 8 and imb0 == pytest.approx(without, abs=1e-4)
    assert len(q) == 9 and 1.0 <= imb < 1.003


def test_the_copies_split_the_hottest_experts_load():
    """The busiest rank's copies are what busiest_rank_load prices (its share of the k
    routed pairs × EP), every one of them carrying load."""
    q = eplb_rank_loads(256, 8, 32, 1.0, 32)
    assert q.sum() * 32 / 8 == pytest.approx(busiest_rank_load(V3, 32, 1.0, True, 32)[1])
    assert np.all(q > 0)


def test_uniform_routing_is_balanced_with_or_without_copies():
    assert busiest_rank_load(V3, 32, 0.0, True, redundant_experts=32) == (None, 1.0)


def test_the_pricer_takes_the_balance():
    """Skew 1.0, EP 32 with DP attention over four H200 nodes: a 2,048-token step's routed
    experts cost less with EPLB's 32 copies (the busiest rank carries the mean)."""
    hw, ndr = load_hardware("h200-sxm"), load_link("infiniband-ndr")
    kw = dict(routing_skew=1.0, dp_attention=True, expert_parallel=True, scale_out=ndr)
    plain, eplb = StepPricer(V3, hw, 32, **kw), StepPricer(V3, hw, 32, redundant_experts=32, **kw)
    c0, c1 = (p.cost(prefill_tokens=2048, prefill_attn_pairs=2048 * 1024, logits_seqs=1)
              for p in (plain, eplb))
    assert c1.seconds < 0.6 * c0.seconds


def test_the_copies_cost_one_expert_per_gpu_per_layer():
    """32 copies over 32 GPUs: one more whole expert (3 × 7,168 × 2,048 weights) on each of
    58 MoE layers per GPU, fp8 block-quantized (1 byte + an fp32 scale per 128 × 128)."""
    extra = redundant_bytes_per_gpu(V3, 32, 2, None, 32)
    assert extra == pytest.approx(58 * 3 * 7168 * 2048 * (1 + 4 / 128**2))
    assert extra / 2**30 == pytest.approx(2.38, abs=0.01)


def test_copies_need_ep_and_must_fill_the_ranks_evenly():
    hw = load_hardware("h200-sxm")
    with pytest.raises(ScenarioError, match="needs expert parallelism"):
        StepPricer(V3, hw, 8, redundant_experts=8)
    with pytest.raises(ScenarioError, match="must divide num_experts 256 \\+ 4 redundant"):
        StepPricer(V3, hw, 8, expert_parallel=True, redundant_experts=4)
