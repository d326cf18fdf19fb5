"""Data-parallel attention ranks of several GPUs (issue 30 item 4): SGLang's
``--tp 32 --dp-size 8 --enable-dp-attention`` (attn_tp_size = tp / dp = 4,
python/sglang/srt/layers/dp_attention.py at 00161092), vLLM's ``--data-parallel-size 8
--tensor-parallel-size 4 --enable-expert-parallel``: attention sharded over each rank's 4 GPUs,
the experts over all 32."""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.cost.communication import Communication
from capsim.cost.operators import ACTIVATION_BYTES, dp_attention_work, ring_all_reduce_s
from capsim.kv.memory import weight_bytes_per_gpu
from capsim.profiles.hardware import load_hardware
from capsim.profiles.links import load_link
from capsim.profiles.models import load_model

V3 = load_model("deepseek-v3")
H200 = load_hardware("h200-sxm")
LATENT_BYTES = 61 * (512 + 64) * 2          # MLA's bf16 latent, all layers: 70,272 per token


def test_a_rank_of_four_reads_its_latents_on_each_of_its_gpus():
    """Every TP rank holds MLA's latent whole, so a rank of 4 GPUs reads each of its
    sequences' latents 4 times: per GPU 4/32 of the step's latent bytes, against 1/32 with a
    rank per GPU; the FLOPs per GPU stay 1/32 of the step's (heads split 4 ways, 4× the
    sequences)."""
    one, four = dp_attention_work(V3, 32, 2), dp_attention_work(V3, 32, 2, attention_tp=4)
    assert one.kv_bytes_per_token == pytest.approx(LATENT_BYTES / 32)
    assert four.kv_bytes_per_token == pytest.approx(LATENT_BYTES * 4 / 32)
    assert four.flops_per_pair == pytest.approx(one.flops_per_pair)


def test_a_rank_of_four_holds_a_quarter_of_the_attention_weights():
    """DeepSeek-V3's fp8 block-quantized checkpoint (1 byte + an fp32 scale per 128 × 128
    block) on 32 GPUs: the MLA projections less the replicated q_a / kv_a down-projections
    (61 × 7,168 × (1,536 + 512 + 64)) are whole on every GPU with a rank per GPU and a
    quarter on each GPU of a rank of 4; the rest of the model is the same."""
    whole = weight_bytes_per_gpu(V3, 32, 2, dp_attention=True)
    quarter = weight_bytes_per_gpu(V3, 32, 2, dp_attention=True, attention_tp=4)
    down = 61 * 7168 * (1536 + 512 + 64)
    sharded = 61 * (V3.attention_params - 1536 - 512) - down       # less the q_a / kv_a norms
    assert whole - quarter == pytest.approx(sharded * 3 / 4 * (1 + 4 / 128**2), rel=1e-6)
    assert whole / 2**30 == pytest.approx(30.08, abs=0.01)
    assert quarter / 2**30 == pytest.approx(22.76, abs=0.01)


def test_each_moe_layer_all_reduces_its_attention_inside_the_rank():
    """EP 32 over four H200 nodes: the all-to-alls are the same; a rank of 4 adds, on each
    of the 58 MoE layers, NCCL's ring over its 4 GPUs for its 4/32 of the step's tokens."""
    ndr = load_link("infiniband-ndr")
    one = Communication(V3, H200, 32, all_to_all=True, scale_out=ndr)
    four = Communication(V3, H200, 32, all_to_all=True, scale_out=ndr, attention_tp=4)
    bw = H200.tp_link_bandwidth_bytes_per_s * H200.efficiency.interconnect
    row = V3.hidden_size * ACTIVATION_BYTES * 4 / 32
    assert four.fixed_s - one.fixed_s == pytest.approx(
        58 * ring_all_reduce_s(0.0, 4, bw, H200.tp_link_latency_s))
    assert four.per_token_s - one.per_token_s == pytest.approx(
        58 * ring_all_reduce_s(row, 4, bw, 0.0))


def test_ranks_must_divide_the_gpus():
    from capsim.cost.pricer import StepPricer
    with pytest.raises(ScenarioError, match="ranks of 3 GPUs must divide tensor_parallel_size 32"):
        StepPricer(V3, H200, 32, dp_attention=True, expert_parallel=True, attention_tp=3,
                   scale_out=load_link("infiniband-ndr"))
