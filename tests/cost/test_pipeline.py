"""Pipeline parallelism: vLLM's layer partition, stage shapes, the handoff between stages
(bytes and seconds for a known shape), a step as the sum of its stages, and the fast
paths held to ``cost``.

Llama-3.1-70B (hidden 8,192, 80 layers) on H100 SXM: NVLink 450 GB/s per direction ×
0.698, 4.28 µs per hop, 8 GPUs per node, InfiniBand NDR 50 GB/s and 30 µs between nodes.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.common.errors import ScenarioError
from capsim.cost.operators import pp_layer_partition, stage_shape
from capsim.cost.pipeline import PipelinePricer, pp_transfer_terms, stage_link_crosses_node
from capsim.cost.pricer import StepPricer
from capsim.kv.memory import weight_bytes_per_gpu
from capsim.profiles.hardware import load_hardware
from capsim.profiles.links import load_link
from capsim.profiles.models import load_model

H100 = load_hardware("h100-sxm")
IB = load_link("infiniband-ndr")
L70 = load_model("llama-3.1-70b")
NVLINK = 450e9 * 0.698


def test_layer_partition_follows_vllm_get_pp_indices():
    """⌊L / PP⌋ each, the remainder one layer each on the stages before the last
    (vllm/distributed/utils.py get_pp_indices): 126 over 4 → 31, 32, 32, 31; 61 over 2 →
    31, 30; 20 over 3 → 7, 7, 6."""
    assert pp_layer_partition(80, 2) == (40, 40)
    assert pp_layer_partition(126, 4) == (31, 32, 32, 31)
    assert pp_layer_partition(61, 2) == (31, 30)
    assert pp_layer_partition(20, 3) == (7, 7, 6)
    assert pp_layer_partition(5, 5) == (1, 1, 1, 1, 1)
    with pytest.raises(ScenarioError, match="pipeline_parallel_size 33 exceeds the model's 32"):
        pp_layer_partition(32, 33)
    with pytest.raises(ScenarioError, match="integer >= 1"):
        pp_layer_partition(32, 0)


def test_stage_shapes_split_dense_moe_and_windowed_layers():
    """DeepSeek-V3's 3 dense layers (first_k_dense_replace) land on stage 0; gpt-oss-120b's
    18 sliding-window layers of 36 split 9 + 9; the stages sum to the model."""
    ds = load_model("deepseek-v3")
    a, b = stage_shape(ds, 0, 31), stage_shape(ds, 31, 61)
    assert (a.dense_layers, a.moe_layers, b.dense_layers, b.moe_layers) == (3, 28, 0, 30)
    g = load_model("gpt-oss-120b")
    assert [stage_shape(g, s, e).sliding_window_layers for s, e in ((0, 18), (18, 36))] == [9, 9]
    assert stage_shape(L70, 0, 40).num_hidden_layers == 40


def test_handoff_within_a_node_hand_value():
    """TP 4 × PP 2 on one node: each rank sends 2 × 8,192 × 2 / 4 = 8,192 bytes per token
    over NVLink, then the stage all-gathers 3/4 of 32,768: 4 × 4.28 µs fixed and
    (8,192 + 24,576) / 314.1 GB/s = 104.3 ns per token."""
    assert not stage_link_crosses_node(0, 4, 8)
    fixed, per_token = pp_transfer_terms(L70, H100, 4, 2, IB)
    assert fixed == pytest.approx(4 * 4.28e-6)
    assert per_token == pytest.approx((8192 + 24576) / NVLINK)
    assert per_token == pytest.approx(104.3e-9, rel=1e-3)


def test_handoff_across_nodes_uses_the_scale_out_link():
    """TP 8 × PP 2 on two nodes (the issue's case): 32,768 / 8 = 4,096 bytes per rank and
    token over InfiniBand (30 µs, 50 GB/s), then 7/8 of 32,768 all-gathered over NVLink."""
    assert stage_link_crosses_node(0, 8, 8)
    fixed, per_token = pp_transfer_terms(L70, H100, 8, 2, IB)
    assert fixed == pytest.approx(30e-6 + 7 * 4.28e-6)
    assert per_token == pytest.approx(4096 / 50e9 + 7 / 8 * 32768 / NVLINK)
    # 1,000 tokens: 60.0 µs + 1,000 × 173.2 ns = 233.2 µs.
    assert fixed + 1000 * per_token == pytest.approx(233.2e-6, rel=1e-3)
    with pytest.raises(ValueError, match="crosses nodes"):
        pp_transfer_terms(L70, H100, 8, 2, None)


def test_a_step_is_the_sum_of_its_stages_plus_the_handoffs():
    pp = PipelinePricer(L70, H100, 4, 2, scale_out=IB)
    kwargs = {"decode_seqs": 64, "decode_ctx_tokens": 64 * 900}
    stages = [s.cost(**kwargs) for s in pp.stages]
    c = pp.cost(**kwargs)
    assert c.seconds == pytest.approx(sum(s.seconds for s in stages) + pp.transfer_s(64))
    # Stage 0 runs no LM head; stage 1 no embedding; the step overhead is counted once.
    names0 = {o.name: o for o in pp.stages[0].breakdown(**kwargs)}
    names1 = {o.name: o for o in pp.stages[1].breakdown(**kwargs)}
    assert names0["lm_head"].flops == 0 and names1["lm_head"].flops > 0
    assert names1["embedding"].bytes == 0 and names0["embedding"].bytes > 0
    assert c.overhead_s == pytest.approx(H100.step_overhead_s)
    # One batch in flight: the TP 4 × PP 2 step is the TP 4 step (80 layers on 4 GPUs)
    # plus the handoff, within the launch and all-reduce bookkeeping: the same weights
    # and KV are read, in two halves.
    whole = StepPricer(L70, H100, 4).cost(**kwargs)
    assert c.seconds == pytest.approx(whole.seconds + pp.transfer_s(64), rel=2e-3)


def test_decode_costs_equal_cost_bit_for_bit():
    from capsim.profiles.engines import HostOverhead
    host = HostOverhead(per_step_s=1e-3, per_seq_s=2e-6, overlap="serial")
    for model, tp, pp in ((L70, 4, 2), (load_model("mixtral-8x7b"), 2, 4)):
        pricer = PipelinePricer(model, H100, tp, pp, host=host, scale_out=IB)
        seqs, ctx0, lengths = [3, 50], [300, 40_000], [5, 7]
        secs, _ = pricer.decode_costs(seqs, ctx0, lengths)
        k = 0
        for n, c0, m in zip(seqs, ctx0, lengths):
            for j in range(m):
                c = pricer.cost(decode_seqs=n, decode_ctx_tokens=c0 + j * n, logits_seqs=n)
                assert secs[k] == c.seconds
                k += 1


def test_work_is_the_column_of_stages():
    """FLOPs of a GPU column (one TP rank per stage) = Σ stages; × TP gives the replica."""
    pp = PipelinePricer(L70, H100, 4, 2)
    tally = pp.new_tally()
    tally.add(10, 640, 640, 0, 64 * 900 * 10, 10)
    flops, nbytes = pp.work(tally)
    whole = StepPricer(L70, H100, 4).work(tally)
    assert flops == pytest.approx(whole[0], rel=1e-9)
    assert nbytes == pytest.approx(whole[1], rel=1e-3)


def test_stage_weights_sum_to_the_model():
    """Each stage holds its layers; the first the embedding, the last the final norm and
    the LM head: the stages together hold exactly the TP-sharded model."""
    for name in ("llama-3.1-70b", "deepseek-v3", "qwen2.5-7b"):
        m = load_model(name)
        parts, start, total = pp_layer_partition(m.num_hidden_layers, 3), 0, 0
        for i, layers in enumerate(parts):
            total += weight_bytes_per_gpu(stage_shape(m, start, start + layers), 2, 2,
                                          embedding=i == 0, lm_head=i == 2)
            start += layers
        whole = weight_bytes_per_gpu(m, 2, 2)
        tied = m.embedding_params * 2 // 2 if m.tie_word_embeddings else 0
        assert total == pytest.approx(whole + tied, abs=3 * 2)   # per-stage // rounding
    # Llama-3.1-70B TP 4 × PP 2: about half of TP 4's 35.3 GB per GPU on each stage.
    s0 = weight_bytes_per_gpu(stage_shape(L70, 0, 40), 4, 2, lm_head=False)
    assert s0 / weight_bytes_per_gpu(L70, 4, 2) == pytest.approx(0.5, abs=0.01)
    assert np.isfinite(s0)
