"""The custom all-reduce SGLang and vLLM run on MI300X (mi300x.yaml ``custom_all_reduce``).

Measured figures: the MI300X TP 4 kernel benchmark of vLLM PR 19744
(github.com/vllm-project/vllm/pull/19744; the same table in SGLang PR 6619,
github.com/sgl-project/sglang/pull/6619), its "baseline" column: the custom all-reduce the
PR's quick-reduce is compared against, µs per call at each message size. At TP 4 a GPU of
the xGMI full mesh reads its 3 peers over 3 of its 7 links, so the table is reproduced here
on 3/7 of the profile's 7-link aggregate; at TP 8 (all 7 links) capsim's own pricing is the
same formula. Thresholds: the presets' (one-shot below 512 KiB at TP 4, 256 KiB at TP 8).
"""
from __future__ import annotations

import pytest

from capsim.cost.operators import ACTIVATION_BYTES, one_shot_all_reduce_s, two_shot_all_reduce_s
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

US, KIB = 1e-6, 1024

#: (KiB, µs): vLLM PR 19744's MI300X TP 4 custom all-reduce column.
MI300X_TP4 = [(2, 7.18), (16, 7.26), (32, 7.58), (256, 14.39), (512, 14.65), (1024, 22.91),
              (2048, 36.64), (4096, 63.86), (8192, 118.31)]


@pytest.fixture(scope="module")
def mi300x():
    return load_hardware("mi300x")


def _kernel(hw, nbytes: float, tp: int, links: int) -> float:
    """The kernel the presets dispatch at ``tp``, over ``links`` of the 7 xGMI links."""
    k, bw = hw.custom_all_reduce, hw.nvlink_bandwidth_bytes_per_s * links / 7
    if nbytes < {4: 512, 8: 256}[tp] * KIB:
        return one_shot_all_reduce_s(nbytes, tp, bw * k.one_shot_link_efficiency,
                                     k.one_shot_latency_s)
    return two_shot_all_reduce_s(nbytes, tp, bw * k.two_shot_link_efficiency,
                                 k.two_shot_latency_s)


@pytest.mark.parametrize("kib, us", MI300X_TP4)
def test_the_fit_reproduces_the_pr19744_mi300x_tp4_rows(mi300x, kib, us):
    """Every row within 4 % (the fit: -3.7 ... +2.9 %)."""
    assert _kernel(mi300x, kib * KIB, 4, links=3) / US == pytest.approx(us, rel=0.04)


def test_small_messages_cost_the_kernel_latency_not_the_ring(mi300x):
    """A decode all-reduce of one DeepSeek-V3 token (7,168 x 2 bytes) at TP 8: ~7 µs, where
    NCCL's ring model pays 2 (TP - 1) = 14 link latencies (60 µs)."""
    t = _kernel(mi300x, 7168 * ACTIVATION_BYTES, 8, links=7)
    assert 6.9 * US < t < 7.3 * US
    ring_latency = 14 * mi300x.tp_link_latency_s
    assert ring_latency > 8 * t


@pytest.mark.parametrize("preset", ["sglang-0.5", "vllm-v1"])
def test_the_engines_price_mi300x_tp8_with_their_kernel(preset):
    """SGLang and vLLM presets use the custom kernel on the MI300X's full mesh: Llama-3.1-70B
    at TP 8 and 8 decode tokens, 161 all-reduces of 128 KiB (one-shot, < 256 KiB)."""
    m, hw = load_model("llama-3.1-70b"), load_hardware("mi300x")
    custom = StepPricer(m, hw, 8, all_reduce=load_engine_preset(preset).tp_all_reduce)
    ring = StepPricer(m, hw, 8)
    n_ar = 2 * m.num_hidden_layers + 1
    c = custom.cost(decode_seqs=8, decode_ctx_tokens=800).comm_s
    r = ring.cost(decode_seqs=8, decode_ctx_tokens=800).comm_s
    expected = n_ar * _kernel(hw, 8 * m.hidden_size * ACTIVATION_BYTES, 8, links=7)
    gather = custom.comm.per_logit_s * 8 + hw.tp_link_latency_s
    assert c == pytest.approx(expected + gather, rel=1e-9)
    assert r > 4 * c


def test_presets_without_the_kernel_keep_the_ring_on_mi300x():
    m, hw = load_model("llama-3.1-70b"), load_hardware("mi300x")
    trt = StepPricer(m, hw, 8, all_reduce=load_engine_preset("trtllm").tp_all_reduce)
    ring = StepPricer(m, hw, 8)
    assert trt.cost(decode_seqs=8, decode_ctx_tokens=800).comm_s == \
        ring.cost(decode_seqs=8, decode_ctx_tokens=800).comm_s
