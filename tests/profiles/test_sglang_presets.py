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


@pytest.mark.parametrize("name", ["sglang", "sglang-0.4", "sglang-0.5"])
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


def test_b200_deepseek_tp8_decode_uses_sglangs_measured_kernel():
    """b200's custom_all_reduce (fitted to aiconfigurator's b200_sxm/comm/sglang/0.5.10
    table): DeepSeek-V3 TP 8 at 1 decode token (14 KiB messages, one-stage) costs 0.92 ms
    of communication per step instead of the ring's 7.38 ms."""
    m, hw = load_model("deepseek-v3"), load_hardware("b200")
    assert hw.custom_all_reduce is not None
    kwargs = {"decode_seqs": 1, "decode_ctx_tokens": 1500}
    ring = StepPricer(m, hw, 8).cost(**kwargs).comm_s
    custom = StepPricer(m, hw, 8, all_reduce=load_engine_preset("sglang-0.5").tp_all_reduce)
    assert ring == pytest.approx(7.38e-3, rel=0.01)
    assert custom.cost(**kwargs).comm_s == pytest.approx(0.918e-3, rel=0.01)


# ------------------------------------------------------------------ sglang-0.5
@pytest.fixture(scope="module")
def rule():
    return load_engine_preset("sglang-0.5").memory.static_fraction


def test_sglang_05_loads_with_sglangs_own_knobs():
    p = load_engine_preset("sglang-0.5")
    assert p.label == "sglang-0.5 (SGLang 0.5.7)"
    assert p.scheduler.policy == "sglang" and p.memory.rule == "sglang"
    assert "mem_fraction_static" not in p.defaults          # chosen by the heuristic
    assert p.host_overhead.overlap == "async"               # disable_overlap_schedule False
    assert p.host_overhead.serial_with_speculation          # _handle_speculative_decoding


@pytest.mark.parametrize("gpu_mib, tp, bs", [
    (16_000, 1, 8), (24_000, 2, 24), (24_000, 4, 80), (40_000, 1, 32), (40_000, 8, 160),
    (81_000, 1, 256), (81_000, 4, 512), (143_000, 2, 256), (143_000, 8, 512),
    (180_000, 1, 512), (196_000, 8, 512)])
def test_cuda_graph_max_bs_by_gpu_memory_and_tp(rule, gpu_mib, tp, bs):
    """_handle_gpu_memory_settings (0.5.7 wheel): 8 below 20 GB, 24 / 80 (TP < 4 / >= 4)
    below 35, 32 / 160 below 60, 256 / 512 below 160, 512 above."""
    assert rule.cuda_graph_max_bs(gpu_mib, tp) == bs


def test_mem_fraction_static_on_h200_tp8(rule):
    """H200 (143,155 MiB), chunk 8,192, TP 8: 512 + 12,288 + 2 x 512 + 1,024 = 14,848 MiB
    reserved (above the 10 GiB floor): (143,155 - 14,848) / 143,155 = 0.896."""
    assert rule.reserve_mib(143_155, 8192, 8) == 14_848
    assert rule.fraction(143_155, 8192, 8) == 0.896


def test_mem_fraction_static_floor_and_drafter(rule):
    """H100 (81,090 MiB) TP 1 at chunk 2,048: 512 + 3,072 + 512 + 128 = 4,224 MiB, raised
    to the 10,240 floor of GPUs above 60 GiB; an EAGLE / MTP drafter adds 2,048, a draft
    model (STANDALONE) 6,144, n-gram nothing."""
    assert rule.reserve_mib(81_090, 2048, 1) == 10_240
    assert rule.reserve_mib(81_090, 2048, 1, drafter="mtp") == 12_288
    assert rule.reserve_mib(81_090, 2048, 1, drafter="draft_model") == 16_384
    assert rule.reserve_mib(81_090, 2048, 1, drafter="ngram") == 10_240
    assert rule.fraction(81_090, 2048, 1) == round((81_090 - 10_240) / 81_090, 3) == 0.874


def test_mem_fraction_static_with_dp_attention(rule):
    """MI300X-sized GPU (196,608 MiB), chunk 16,384, TP 8, 8 DP attention ranks: 512 +
    24,576 + 1,024 + 1,024 + 3 x 512 x 8 + (512 > 300) 1.5 x 512 x 8 = 45,568 MiB."""
    assert rule.reserve_mib(196_608, 16_384, 8, dp_attention_ranks=8) == 45_568
    assert rule.fraction(196_608, 16_384, 8, dp_attention_ranks=8) == 0.768


@pytest.mark.parametrize("hw, gib, chunk", [
    ("l4", 22.0, 2048), ("a100-40gb", 39.4, 4096), ("h100-sxm", 79.2, 8192),
    ("h200-sxm", 139.8, 8192), ("b200", 178.0, 16384), ("mi300x", 192.0, 16384)])
def test_chunked_prefill_size_by_gpu_memory(hw, gib, chunk):
    """chunked_prefill_size (max_num_batched_tokens): 2,048 below 35 GB, 4,096 below 60,
    8,192 below 160, 16,384 above (_handle_gpu_memory_settings)."""
    d = load_engine_preset("sglang-0.5").defaults_for(hw, gib, {})
    assert d["max_num_batched_tokens"] == chunk
    assert d["max_num_seqs"] == 4096


def test_speculation_caps_running_requests_at_48():
    """_handle_speculative_decoding: max_running_requests 48 when unset (EAGLE family)."""
    p = load_engine_preset("sglang-0.5")
    assert p.defaults_for("h200-sxm", 139.8, {"speculative": {"method": "mtp"}})[
        "max_num_seqs"] == 48
    assert p.defaults_for("h200-sxm", 139.8, {})["max_num_seqs"] == 4096
