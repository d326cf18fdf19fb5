"""SGLang presets: the values read from SGLang's code, each test naming its source.

Sources: the sglang 0.5.7 and 0.5.3 wheels from PyPI (python/sglang/srt/...), and
sgl-project/sglang python/sglang/srt/distributed/device_communicators/custom_all_reduce.py
at 263bc85d / 004e6561, sgl-kernel/csrc/allreduce/custom_all_reduce.cuh at 0bb5d5e9.
"""
from __future__ import annotations

import pytest

from capsim.cost.operators import ACTIVATION_BYTES, one_shot_all_reduce_s
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

MIB = 2**20


@pytest.mark.parametrize("name", ["sglang"])
def test_custom_all_reduce_limits_are_sglangs(name):
    """custom_all_reduce.py: world sizes 2 / 4 / 6 / 8, below 8 MiB on CUDA; the kernel
    (custom_all_reduce.cuh REDUCE_CASE): one-stage always at TP 2, below 512 KiB at TP 4,
    below 256 KiB at TP 6 / 8."""
    ar = load_engine_preset(name).tp_all_reduce
    assert ar.algorithm == "custom"
    assert ar.world_sizes == [2, 4, 6, 8]
    assert ar.max_bytes == 8 * MIB
    assert ar.one_shot_max_bytes == {2: None, 4: 512 * 1024, 6: 256 * 1024, 8: 256 * 1024}


def test_sglang_03_keeps_the_ring():
    """The 0.3 preset is unchanged (its TP 4 case is priced as before)."""
    assert load_engine_preset("sglang-0.3").tp_all_reduce.algorithm == "nccl_ring"


def test_deepseek_tp8_decode_at_8_uses_the_one_shot_kernel():
    """DeepSeek-V3 TP 8 on H200 at 8 decode tokens: 2 x 61 + 1 all-reduces of 8 x 7,168 x 2
    = 112 KiB (< 256 KiB: one-stage) instead of NCCL's ring of 14 hops each; the step's
    communication falls from 7.46 ms to 0.92 ms."""
    m, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    ring = StepPricer(m, hw, 8)
    custom = StepPricer(m, hw, 8, all_reduce=load_engine_preset("sglang").tp_all_reduce)
    kwargs = {"decode_seqs": 8, "decode_ctx_tokens": 8 * 1500}
    msg = 8 * m.hidden_size * ACTIVATION_BYTES
    assert msg < 256 * 1024
    k = hw.custom_all_reduce
    one = one_shot_all_reduce_s(msg, 8, hw.nvlink_bandwidth_bytes_per_s
                                * k.one_shot_link_efficiency, k.one_shot_latency_s)
    gather = ring.cost(**kwargs).comm_s - custom.cost(**kwargs).comm_s
    assert gather > 0
    assert custom.cost(**kwargs).comm_s == pytest.approx(0.916e-3, rel=0.01)
    assert ring.cost(**kwargs).comm_s == pytest.approx(7.46e-3, rel=0.01)
    assert one * (2 * m.num_hidden_layers + 1) < custom.cost(**kwargs).comm_s


def test_b200_without_kernel_costs_keeps_the_ring():
    """b200 has no custom_all_reduce costs: the ring prices it under either preset."""
    m, hw = load_model("deepseek-v3"), load_hardware("b200")
    assert hw.custom_all_reduce is None
    ring = StepPricer(m, hw, 8).cost(decode_seqs=8, decode_ctx_tokens=8000).comm_s
    custom = StepPricer(m, hw, 8, all_reduce=load_engine_preset("sglang").tp_all_reduce)
    assert custom.cost(decode_seqs=8, decode_ctx_tokens=8000).comm_s == ring
