"""Tensor-parallel all-reduce per engine preset: vLLM's custom one-shot / two-shot kernels
below their size limits, NCCL's ring otherwise.

Measured figures: ai-dynamo/aiconfigurator (Apache-2.0, at 095f58a5),
aic-core/src/aiconfigurator_core/systems/data/<gpu>/comm/vllm/<version>/
custom_allreduce_perf.parquet: vLLM's ``tensor_model_parallel_all_reduce`` in a CUDA graph
(5 back-to-back calls per replay, collector/network/collect_all_reduce.py), bf16, TP 2 / 4
/ 8 — A100-SXM4-80GB with vLLM 0.14.0, H100 80GB HBM3 and H200 with vLLM 0.19.0. The TP 2 and
TP 4 rows of 16 KiB – 4 MiB are the a100-80gb / h100-sxm fits' data; TP 8, the H200 and
vLLM PR 24111's H100 timings (github.com/vllm-project/vllm/pull/24111) are held out; vLLM
PR 24532's H100 table (pull/24532, the previous fit's data) disagrees. Thresholds: vLLM
csrc/custom_all_reduce.cuh ``allreduce`` (1-stage below 512 KiB at TP <= 4, 256 KiB at TP <=
8; always at TP 2) and custom_all_reduce.py (below 8 MiB).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.common.errors import ScenarioError
from capsim.cost.operators import (ACTIVATION_BYTES, one_shot_all_reduce_s,
                                   ring_all_reduce_s, two_shot_all_reduce_s)
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import TpAllReduce, load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

US, MIB = 1e-6, 2**20


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


def _one_shot(hw, nbytes: float, tp: int) -> float:
    k = hw.custom_all_reduce
    return one_shot_all_reduce_s(nbytes, tp, hw.nvlink_bandwidth_bytes_per_s
                                 * k.one_shot_link_efficiency, k.one_shot_latency_s)


def _two_shot(hw, nbytes: float, tp: int) -> float:
    k = hw.custom_all_reduce
    return two_shot_all_reduce_s(nbytes, tp, hw.nvlink_bandwidth_bytes_per_s
                                 * k.two_shot_link_efficiency, k.two_shot_latency_s)


def _vllm(hw, nbytes: float, tp: int) -> float:
    """The kernel vLLM dispatches (one-shot at TP 2 and below 512 KiB at TP 4 / 256 KiB at
    TP 8, two-shot above), as the profile prices it."""
    limit = {2: None, 4: 512 * 1024, 8: 256 * 1024}[tp]
    one = limit is None or nbytes < limit
    return (_one_shot if one else _two_shot)(hw, nbytes, tp)


#: (KiB, TP, µs): aiconfigurator's graph-mode rows at four sizes (see the module docstring).
A100_VLLM_0140 = [(32, 2, 5.22), (32, 4, 6.00), (128, 2, 5.74), (128, 4, 7.78),
                  (512, 2, 7.99), (512, 4, 14.55), (2048, 2, 15.18), (2048, 4, 26.05)]
H100_VLLM_0190 = [(32, 2, 4.41), (32, 4, 4.85), (128, 2, 4.75), (128, 4, 5.83),
                  (512, 2, 6.29), (512, 4, 11.18), (2048, 2, 12.36), (2048, 4, 18.46)]


@pytest.mark.parametrize("hw_name, rows", [("a100-80gb", A100_VLLM_0140),
                                           ("a100-40gb", A100_VLLM_0140),
                                           ("h100-sxm", H100_VLLM_0190)])
def test_kernels_fit_the_measured_tp2_and_tp4_timings(hw_name, rows):
    """The fits' data (TP 2 / 4): within 7 % of every row; Llama-70B TP 4's decode message
    at batch 8 (128 KiB) costs 7.78 µs on an A100 and 5.83 µs on an H100."""
    hw = load_hardware(hw_name)
    for kib, tp, us in rows:
        assert _vllm(hw, kib * 1024, tp) == pytest.approx(us * US, rel=0.07), (kib, tp)


@pytest.mark.parametrize("hw_name, rows, rel", [
    # TP 8 on an A100: the model is 13 % / 20 % low at 128 / 512 KiB (the one-shot
    # kernel's 7-peer read fan-in, then the two-shot from 256 KiB).
    ("a100-80gb", [(32, 8, 6.91), (128, 8, 11.35), (512, 8, 18.86), (2048, 8, 27.93)], 0.21),
    ("h100-sxm", [(32, 8, 5.45), (128, 8, 7.78), (512, 8, 11.87), (2048, 8, 19.37)], 0.07),
    # H200 (vLLM 0.19.0) on the H100's terms: the profile's check, not its data.
    ("h200-sxm", [(32, 2, 4.55), (128, 4, 5.82), (512, 4, 10.54), (128, 8, 7.96),
                  (2048, 8, 18.32)], 0.12),
])
def test_kernels_held_out_tp8_and_h200(hw_name, rows, rel):
    hw = load_hardware(hw_name)
    for kib, tp, us in rows:
        assert _vllm(hw, kib * 1024, tp) == pytest.approx(us * US, rel=rel), (kib, tp)


#: (KiB, TP, µs): aiconfigurator's b200_sxm/comm/sglang/<version>/custom_allreduce_perf.parquet,
#: kernel_source SGLang_CustomAllReduce_graph (bytes = 2 x message_size elements). 0.5.10's
#: TP 2 / 4 / 8 rows of 16 KiB – 4 MiB are b200's fit; 0.5.9's are held out.
B200_SGLANG_05100 = [(32, 2, 7.39), (512, 2, 9.63), (2048, 2, 19.91), (32, 4, 7.89),
                     (256, 4, 8.85), (1024, 4, 18.95), (16, 8, 7.83), (128, 8, 9.42),
                     (512, 8, 26.00), (2048, 8, 28.98)]
B200_SGLANG_0590 = [(32, 2, 7.52), (512, 2, 9.57), (32, 4, 7.84), (1024, 4, 18.73),
                    (16, 8, 7.83), (512, 8, 25.87), (2048, 8, 28.93)]


def _sglang(hw, nbytes: float, tp: int) -> float:
    """The kernel SGLang dispatches (the sglang presets' one_shot_max_bytes: vLLM's)."""
    return _vllm(hw, nbytes, tp)


@pytest.mark.parametrize("rows", [B200_SGLANG_05100, B200_SGLANG_0590])
def test_b200_kernels_fit_sglangs_measured_timings(rows):
    """B200 (SGLang 0.5.10 fitted, 0.5.9 held out): every row within 31 % (the one-shot
    kernel's (TP-1) x bytes term is 25-30 % high at TP 4 / 8 near its limit), the median
    within 10 %; DeepSeek-V3 TP 8's decode message at batch 1 (14 KiB) ~7.8 µs, not the
    ring's 60 µs (2 x 7 hops x 4.28 µs)."""
    hw = load_hardware("b200")
    errors = sorted(abs(_sglang(hw, kib * 1024, tp) / (us * US) - 1) for kib, tp, us in rows)
    assert errors[-1] < 0.31
    assert errors[len(errors) // 2] < 0.10
    msg = 7168 * ACTIVATION_BYTES
    assert _one_shot(hw, msg, 8) == pytest.approx(7.8 * US, rel=0.05)
    assert ring_all_reduce_s(msg, 8, hw.nvlink_bandwidth_bytes_per_s
                             * hw.efficiency.interconnect, hw.nvlink_latency_s) > 59 * US


def test_b200_tensorrt_llm_kernels_are_faster_than_the_fit():
    """Held out from this fit: TensorRT-LLM 1.3.0rc20's own all-reduce on B200
    (comm/trtllm/1.3.0rc20, AUTO strategy) at 16 / 128 KiB and TP 2 / 8 takes 5.22 / 5.14
    / 5.93 / 6.34 µs; the SGLang kernel b200 prices is 26–85 % slower there. The trtllm
    presets price TensorRT-LLM's own table instead (test_all_reduce_table.py)."""
    hw = load_hardware("b200")
    for kib, tp, us in [(16, 2, 5.22), (128, 2, 5.14), (16, 8, 5.93), (128, 8, 6.34)]:
        assert 1.25 < _sglang(hw, kib * 1024, tp) / (us * US) < 1.9, (kib, tp)


def test_h100_kernels_held_out_pr24111(h100):
    """Not fitted: PR 24111's H100 one-shot at TP 2 (0.5 MiB, 7 µs) and TP 6 (0.5 MiB, 13 µs;
    4 MiB, 70 µs: the model is 18 % high there)."""
    assert _one_shot(h100, 0.5 * MIB, 2) == pytest.approx(7 * US, rel=0.10)
    assert _one_shot(h100, 0.5 * MIB, 6) == pytest.approx(13 * US, rel=0.10)
    assert _one_shot(h100, 4 * MIB, 6) == pytest.approx(70 * US, rel=0.19)


@pytest.mark.parametrize("mib, one_us, two_us", [
    (0.5, 10, 17), (1, 14, 18), (1.5, 19, 25), (2, 23, 26), (3, 30, 35), (4, 38, 42)])
def test_h100_pr24532_two_shot_column_is_slower_than_the_fit(h100, mib, one_us, two_us):
    """PR 24532's ca_2stage column (TP 4, H100, 0.5-4 MiB) lies 26-37 % above the fit (and
    above aiconfigurator's rows, e.g. 11.2 µs at 512 KiB against its 17); its ca_1stage
    column, forced past vLLM's 512 KiB switch, agrees at 0.5 MiB and is 35 % under at 4."""
    assert 0.62 < _two_shot(h100, mib * MIB, 4) / (two_us * US) < 0.75
    assert 1.0 < _one_shot(h100, mib * MIB, 4) / (one_us * US) < 1.36


def test_one_worker_costs_nothing():
    assert one_shot_all_reduce_s(1e6, 1, 1e9, 1e-5) == 0.0
    assert two_shot_all_reduce_s(1e6, 1, 1e9, 1e-5) == 0.0


def _pricers(model: str, hw_name: str, tp: int, preset: str = "vllm-v1"):
    m, hw = load_model(model), load_hardware(hw_name)
    ar = load_engine_preset(preset).tp_all_reduce
    return m, hw, StepPricer(m, hw, tp, all_reduce=ar), StepPricer(m, hw, tp)


def _comm(p: StepPricer, tokens: int) -> float:
    return p.cost(decode_seqs=tokens, decode_ctx_tokens=tokens * 100).comm_s


def test_vllm_70b_tp4_decode_uses_the_one_shot_kernel(h100):
    """Llama-70B TP 4 at 8 decode tokens: 2 × 80 + 1 all-reduces of 128 KiB, each one-shot
    (< 512 KiB) at 5.83 µs (aiconfigurator's H100 row), plus the logits gather NCCL prices;
    against the ring's 2(TP−1) = 6 hops of 4.28 µs each, 3.3 ms less per step."""
    m, hw, custom, ring = _pricers("llama-3.1-70b", "h100-sxm", 4)
    msg = 8 * m.hidden_size * ACTIVATION_BYTES
    gather = ring.cost(decode_seqs=8, decode_ctx_tokens=800).comm_s - 161 * ring_all_reduce_s(
        msg, 4, hw.nvlink_bandwidth_bytes_per_s * hw.efficiency.interconnect,
        hw.nvlink_latency_s)
    assert _comm(custom, 8) == pytest.approx(161 * _one_shot(hw, msg, 4) + gather, rel=1e-9)
    assert _one_shot(hw, msg, 4) == pytest.approx(5.83 * US, rel=0.01)
    assert _comm(ring, 8) - _comm(custom, 8) == pytest.approx(3.3e-3, rel=0.01)


def test_vllm_kernel_changes_at_the_engine_thresholds(h100):
    """TP 4, hidden 8192 (16 KiB a token): one-shot below 32 tokens (512 KiB), two-shot from
    32 up to 511 tokens, NCCL's ring from 512 tokens (8 MiB, custom_all_reduce.py max_size)."""
    m, hw, custom, ring = _pricers("llama-3.1-70b", "h100-sxm", 4)
    row = m.hidden_size * ACTIVATION_BYTES
    n_ar = 2 * m.num_hidden_layers + 1
    extra = _comm(ring, 1) - n_ar * ring_all_reduce_s(
        row, 4, hw.nvlink_bandwidth_bytes_per_s * hw.efficiency.interconnect,
        hw.nvlink_latency_s)                              # the logits gather, as priced
    gather_per_logit = (_comm(ring, 2) - _comm(ring, 1)) - n_ar * ring_all_reduce_s(
        row, 4, hw.nvlink_bandwidth_bytes_per_s * hw.efficiency.interconnect, 0.0)
    for n, kernel in [(31, _one_shot), (32, _two_shot), (511, _two_shot)]:
        expected = n_ar * kernel(hw, n * row, 4) + extra + gather_per_logit * (n - 1)
        assert _comm(custom, n) == pytest.approx(expected, rel=1e-9), n
    assert _comm(custom, 512) == pytest.approx(_comm(ring, 512), rel=1e-12)
    assert _comm(custom, 4096) == pytest.approx(_comm(ring, 4096), rel=1e-12)


def test_tp2_is_one_shot_up_to_the_size_limit():
    """TP 2 always runs the 1-stage kernel (custom_all_reduce.cuh), up to 8 MiB."""
    m, hw, custom, ring = _pricers("mixtral-8x7b", "h100-sxm", 2)
    row = m.hidden_size * ACTIVATION_BYTES                  # 8 KiB: 8 MiB at 1,024 tokens
    n_ar = 2 * m.num_hidden_layers + 1
    d = _comm(custom, 1023) - _comm(custom, 1022)
    k = hw.custom_all_reduce
    per_token = n_ar * row / (hw.nvlink_bandwidth_bytes_per_s * k.one_shot_link_efficiency)
    gather_per_logit = (_comm(ring, 2) - _comm(ring, 1)) - n_ar * ring_all_reduce_s(
        row, 2, hw.nvlink_bandwidth_bytes_per_s * hw.efficiency.interconnect, 0.0)
    assert d == pytest.approx(per_token + gather_per_logit, rel=1e-6)
    assert _comm(custom, 1024) == pytest.approx(_comm(ring, 1024), rel=1e-12)


@pytest.mark.parametrize("preset", ["sglang-0.3", "tgi"])
def test_other_presets_keep_the_ring(preset):
    _, _, custom, ring = _pricers("llama-3.1-70b", "h100-sxm", 4, preset)
    assert _comm(custom, 8) == _comm(ring, 8)


@pytest.mark.parametrize("preset", ["sglang", "sglang-0.4", "sglang-0.5"])
def test_sglang_runs_the_same_kernels_as_vllm(preset):
    """SGLang's custom all-reduce (custom_all_reduce.py at 263bc85d, sgl-kernel
    custom_all_reduce.cuh at 0bb5d5e9) has vLLM's limits: the same price at every size."""
    *_, sgl, _ = _pricers("llama-3.1-70b", "h100-sxm", 4, preset)
    *_, vllm, _ = _pricers("llama-3.1-70b", "h100-sxm", 4)
    for tokens in (8, 64, 1024):
        assert _comm(sgl, tokens) == _comm(vllm, tokens)


def test_gpu_without_kernel_costs_or_nvlink_keeps_the_ring():
    """H20 has no custom_all_reduce costs (no timing found); an L4 is PCIe-only (vLLM
    refuses its kernel above TP 2 without full NVLink)."""
    for hw_name, tp in [("h20", 4), ("l4", 4)]:
        _, _, custom, ring = _pricers("llama-3.1-8b", hw_name, tp)
        assert _comm(custom, 8) == _comm(ring, 8), hw_name


def test_ideal_profile_drops_the_kernel_costs(h100):
    assert h100.ideal().custom_all_reduce is None


@settings(max_examples=40, deadline=None)
@given(seqs=st.lists(st.integers(1, 700), min_size=1, max_size=4),
       ctx=st.integers(1, 5000), k=st.integers(1, 6))
def test_decode_costs_equal_cost_bit_for_bit_across_the_kernels(seqs, ctx, k):
    """The vectorised decode path takes the same all-reduce piece as cost() for every batch
    (one-shot, two-shot and ring for TP 4 at 8,192 hidden), bit for bit."""
    m, hw = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    p = StepPricer(m, hw, 4, all_reduce=load_engine_preset("vllm-v1").tp_all_reduce)
    ctx0 = [ctx * n for n in seqs]
    secs, _ = p.decode_costs(seqs, ctx0, [k] * len(seqs))
    expected = [p.cost(decode_seqs=n, decode_ctx_tokens=c + n * i).seconds
                for n, c in zip(seqs, ctx0) for i in range(k)]
    assert list(secs) == expected


def test_custom_preset_needs_its_limits():
    with pytest.raises(ValueError, match="world_sizes and max_bytes"):
        TpAllReduce(algorithm="custom")
    with pytest.raises(ValueError, match="one_shot_max_bytes has no entry for world size"):
        TpAllReduce(algorithm="custom", world_sizes=[2, 4], max_bytes=8 * MIB,
                    one_shot_max_bytes={2: None})


@pytest.mark.parametrize("old, new, field, says", [
    ("algorithm: custom", "algorithm: magic", "tp_all_reduce.algorithm", ""),
    # A preset's booleans are YAML's true / false only (capsim.common.schema.Bool).
    ("async_scheduling_knob: true", "async_scheduling_knob: 'yes'", "async_scheduling_knob",
     "expected true or false (got 'yes')"),
])
def test_a_bad_field_in_a_preset_file_is_one_line(tmp_path, repo_root, old, new, field, says):
    text = (repo_root / "capsim/profiles/data/engines/vllm-v1.yaml").read_text()
    assert old in text
    bad = tmp_path / "mine.yaml"
    bad.write_text(text.replace(old, new))
    with pytest.raises(ScenarioError) as exc:
        load_engine_preset(str(bad))
    msg = str(exc.value)
    assert "\n" not in msg and str(bad) in msg and field in msg and says in msg
