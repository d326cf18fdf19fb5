"""MoE / MLA / sliding-window models in a scenario: weights per GPU, KV bytes per token
and the KV cache they leave, with tensor, expert and data-parallel attention.

DeepSeek-V3's latent (70,272 bytes per token in bf16, 35,136 in fp8) is held whole by
every tensor-parallel rank (vLLM's MLAAttentionSpec has one KV head), so TP 8 stores 8
copies; data-parallel attention keeps each request's KV on one GPU.
"""

from __future__ import annotations

import pytest
import yaml

from capsim.kv.memory import weight_bytes_per_gpu
from capsim.profiles.links import load_link
from capsim.profiles.models import load_model
from capsim.scenario.load import load

GIB = 2**30

DOC = {
    "name": "moe", "model": "deepseek-v3", "hardware": "h200-sxm",
    "engine": {"tensor_parallel_size": 8, "max_model_len": 16384},   # fp8 block checkpoint
    "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 500},
                              "output_tokens": {"dist": "fixed", "value": 50}}]},
    "variants": [{"name": "tp8"},
                 {"name": "dp8", "engine": {"enable_dp_attention": True,
                                            "enable_expert_parallel": True}}],
}


def _load(tmp_path, doc=DOC):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {rc.variant: rc.pool() for rc in load(path).runs}


def test_mla_latent_is_replicated_over_tp_but_not_with_dp_attention(tmp_path):
    pools = _load(tmp_path)
    tp8, dp8 = pools["tp8"].kv, pools["dp8"].kv
    # kv_cache_dtype auto: the model's bf16 (the weights' fp8 does not change it).
    assert tp8.kv_bytes_per_token == 8 * 61 * 576 * 2 == 562_176
    assert dp8.kv_bytes_per_token == 61 * 576 * 2 == 70_272
    # Each GPU's KV memory holds the same bytes; DP attention stores 8× the tokens in it,
    # less what the whole attention weights on every GPU take.
    per_gpu = {k: p.kv.num_tokens * p.kv.kv_bytes_per_token / 8 for k, p in pools.items()}
    assert dp8.num_tokens > 6 * tp8.num_tokens
    assert per_gpu["dp8"] < per_gpu["tp8"]


def test_dp_attention_holds_the_whole_attention_weights_on_each_gpu():
    """The difference is 7/8 of the 61 layers' attention projections (the checkpoint's fp8
    blocks: 1 byte each plus a 4-byte scale per 128 × 128 block, rounded up per matrix),
    less the MLA down-projections TP already replicates."""
    m = load_model("deepseek-v3")
    tp = weight_bytes_per_gpu(m, 8, 1)
    dp = weight_bytes_per_gpu(m, 8, 1, dp_attention=True)
    down = 61 * 7168 * (1536 + 512 + 64)
    attention = 61 * m.mla_params
    assert dp - tp == pytest.approx((attention - down) * 7 / 8 * (1 + 4 / 128**2), rel=2e-5)
    # fp8 DeepSeek-V3 on 8 GPUs: ~671e9 / 8 bytes of weights, plus the bf16 vocabulary.
    assert tp / GIB == pytest.approx(79.2, abs=0.1)


def test_gpt_oss_kv_counts_only_the_full_attention_layers(tmp_path):
    doc = {**DOC, "model": "gpt-oss-120b", "hardware": "h100-sxm",
           "engine": {"tensor_parallel_size": 4, "max_model_len": 16384},
           "variants": [{"name": "tp4"}]}
    kv = _load(tmp_path, doc)["tp4"].kv
    assert kv.kv_bytes_per_token == 18 * 2 * 8 * 64 * 2 == 36_864


def test_an_mtp_drafter_on_two_nodes_prices_its_all_to_all_over_the_scale_out_link(
        tmp_path, run_cli):
    """Issue 31: DeepSeek-V3 on 16 H200s (EP 16 with DP attention) with MTP passed capsim
    validate and capsim run refused it ("expert parallel size 16 spans nodes of 8 GPUs:
    the pricer needs the scale-out link"): the MTP layer is MoE and its pricer was built
    without the profile's InfiniBand NDR link. Both pricers now cross it, and resolving a
    variant builds them, so validate refuses whatever the run's pricers would."""
    doc = {**DOC, "engine": {"tensor_parallel_size": 16, "max_model_len": 4096,
                             "enable_expert_parallel": True, "enable_dp_attention": True,
                             "speculative": {"method": "mtp", "num_speculative_tokens": 1,
                                             "acceptance_rate": 0.8}},
           "variants": [{"name": "mtp16"}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    pool = load(path).runs[0].pool()
    target, draft = pool.pricer(load_model("deepseek-v3")), pool.draft_pricer()
    link = load_link("infiniband-ndr")
    for pricer in (target, draft):
        assert pricer.comm.scale_out.bandwidth_bytes_per_s == link.bandwidth_bytes_per_s
    code, out, _ = run_cli(["validate", str(path)])
    assert code == 0 and "1 × h200-sxm TP16 EP DP-attention" in out
