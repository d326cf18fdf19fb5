"""Tensor parallelism across nodes (issue 30 item 4): a TP group of whole nodes prices its
all-reduces hierarchically, NVLink inside each node and the scale-out link between them,
without the engines' intra-node kernels (vLLM's CustomAllreduce turns itself off when the
group spans nodes: vllm/distributed/device_communicators/custom_all_reduce.py at 00d618aa)."""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.cost.communication import Communication, hierarchical_all_reduce_s
from capsim.cost.operators import ring_all_reduce_s
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.links import load_link
from capsim.profiles.models import load_model

H100 = load_hardware("h100-sxm")
NDR = load_link("infiniband-ndr")          # 50 GB/s per GPU and direction, 30 µs
VLLM = load_engine_preset("vllm-v1").tp_all_reduce


def test_the_two_level_all_reduce_by_hand():
    """1 MiB over 2 nodes × 8: in each node 2 × 7/8 × 1 MiB at 300 GB/s and 14 hops of 4 µs,
    between them 2 × 1/2 × (1 MiB / 8) at 50 GB/s and 2 hops of 30 µs."""
    s = 2**20
    want = 2 * (7 / 8 * s / 300e9 + 7 * 4e-6) + (s / 8) / 50e9 + 2 * 30e-6
    assert hierarchical_all_reduce_s(s, 8, 2, 300e9, 4e-6, 50e9, 30e-6) == pytest.approx(want)
    # one node: NCCL's ring over it
    assert hierarchical_all_reduce_s(s, 8, 1, 300e9, 4e-6, 50e9, 30e-6) == pytest.approx(
        ring_all_reduce_s(s, 8, 300e9, 4e-6))


def test_tp16_over_two_h100_nodes_is_the_ring_in_each_node_plus_the_infiniband_part():
    """Llama-3.1-70B: 161 all-reduces a step (80 layers × 2 + the embedding's); TP 16 adds to
    each one TP 8's ring (not vLLM's custom kernel) the InfiniBand exchange: 2 × 30 µs and
    (hidden × 2 bytes ÷ 8 GPUs) per token at 50 GB/s."""
    m = load_model("llama-3.1-70b")
    tp16 = Communication(m, H100, 16, VLLM, scale_out=NDR)
    ring8 = Communication(m, H100, 8, None, scale_out=NDR)       # NCCL's ring in one node
    assert tp16.tail == () and tp16.split_tokens > 1 << 60        # one piece: no custom kernel
    assert tp16.fixed_s == pytest.approx(ring8.fixed_s + 161 * 2 * NDR.latency_s)
    row = m.hidden_size * 2
    assert tp16.per_token_s == pytest.approx(ring8.per_token_s + 161 * row / 8 / 50e9)
    # The logits gather: 1/16 of a row from the other node's peer, then 7/8 inside the node.
    bw = H100.tp_link_bandwidth_bytes_per_s * H100.efficiency.interconnect
    logits = m.vocab_size * 2
    assert tp16.per_logit_s == pytest.approx(logits / 16 / 50e9 + 7 / 8 * logits / bw)


def test_the_pricer_charges_it_and_tp8_is_unchanged():
    """TP 16 over two nodes: the step's collectives cost more than TP 8's in one (InfiniBand's
    latency on every all-reduce); TP 8 in one node keeps vLLM's custom kernels."""
    m = load_model("deepseek-v3")
    tp8 = StepPricer(m, H100, 8, all_reduce=VLLM, scale_out=NDR)
    tp16 = StepPricer(m, H100, 16, all_reduce=VLLM, scale_out=NDR)
    assert tp8.comm.tail != ()                            # one-shot, two-shot, ring pieces
    c8, c16 = (p.cost(decode_seqs=8, decode_ctx_tokens=8 * 2000, logits_seqs=8)
               for p in (tp8, tp16))
    assert c16.comm_s > c8.comm_s + 123 * 2 * NDR.latency_s      # 61 × 2 + 1 all-reduces


def test_a_tp_group_across_nodes_needs_the_link_and_whole_nodes():
    m = load_model("llama-3.1-70b")
    with pytest.raises(ScenarioError, match="tensor_parallel_size 16 spans nodes of 8 GPUs: "
                                            "the pricer needs the scale-out link"):
        Communication(m, H100, 16, VLLM)
    with pytest.raises(ScenarioError, match="spans nodes of 12 GPUs unevenly"):
        Communication(m, H100.model_copy(update={"gpus_per_node": 12}), 16, scale_out=NDR)
