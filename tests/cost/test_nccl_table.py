"""NCCL's all-reduce as measured on the GPU (``all_reduce_tables.nccl``), priced for the
messages above vLLM's / SGLang's custom kernels (capsim/cost/communication.py ``NCCL_TABLE``,
``Communication.nccl_tail``).

Measured figures: ai-dynamo/aiconfigurator (Apache-2.0, at 095f58a5),
aic-core/src/aiconfigurator_core/systems/data/h200_sxm/comm/nccl/2.26.2/nccl_perf.parquet
(rows: NCCL 2.29.2 all_reduce, nccl_dtype half, on NVIDIA H200; message_size in elements,
bytes = 2 x elements; latency in ms; each size timed twice, the median stored in µs).
"""
from __future__ import annotations

import pytest

from capsim.cost.communication import NCCL_TABLE, Communication
from capsim.cost.operators import ACTIVATION_BYTES, ring_all_reduce_s
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

US = 1e-6
SGLANG = load_engine_preset("sglang-0.5").tp_all_reduce
VLLM = load_engine_preset("vllm-v1").tp_all_reduce

#: (TP, message bytes, µs): the parquet's rows at 64 / 128 / 256 MiB (median of the two).
MEASURED_H200 = [(8, 67108864, 320.2), (8, 134217728, 564.0), (8, 268435456, 1055.4),
                 (4, 134217728, 610.2), (2, 134217728, 462.5)]


@pytest.mark.parametrize("tp, nbytes, us", MEASURED_H200)
def test_the_h200_profile_holds_the_measured_rows(tp, nbytes, us):
    t = load_hardware("h200-sxm").all_reduce_tables[NCCL_TABLE]
    assert t.latency_us[tp][t.message_bytes.index(nbytes)] == us


def test_a_deepseek_prefill_of_8192_tokens_all_reduces_at_nccls_measured_time():
    """DeepSeek-V3 (hidden 7,168: 14 KiB a token) TP 8 on H200 under SGLang 0.5 at 8,192
    tokens: 117,440,512 bytes per all-reduce, above SGLang's 8 MiB custom kernels, between
    the 64 MiB (320.2 µs) and 128 MiB (564.0 µs) rows: 503.0 µs each, 122 of them (2 per
    layer) and the embedding's. The ring at efficiency.interconnect priced 714 µs."""
    m, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    n = 8192
    nbytes = n * m.hidden_size * ACTIVATION_BYTES
    assert nbytes == 117440512
    one_s = (320.2 + (564.0 - 320.2) * (nbytes - 67108864) / 67108864) * US
    assert one_s == pytest.approx(503.0e-6, abs=0.1e-6)
    comm = Communication(m, hw, 8, SGLANG, lm_head=False)
    n_ar = 2 * m.num_hidden_layers + 1
    assert comm.seconds(n, 0) == pytest.approx(n_ar * one_s + hw.tp_link_latency_s, rel=1e-9)
    ring_s = ring_all_reduce_s(nbytes, 8, hw.tp_link_bandwidth_bytes_per_s
                               * hw.efficiency.interconnect, hw.tp_link_latency_s)
    assert ring_s == pytest.approx(714e-6, abs=1e-6)


@pytest.mark.parametrize("n", [1, 64, 585])
def test_below_the_custom_limit_the_custom_kernels_are_priced_as_before(n):
    """Up to 585 tokens (8,386,560 bytes < 8 MiB) vLLM and SGLang run their own kernels:
    the NCCL table changes nothing there (the profile without it prices the same)."""
    m, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    bare = hw.model_copy(update={"all_reduce_tables": {
        k: v for k, v in hw.all_reduce_tables.items() if k != NCCL_TABLE}})
    for ar in (SGLANG, VLLM):
        assert Communication(m, hw, 8, ar).seconds(n, 1) == \
            Communication(m, bare, 8, ar).seconds(n, 1)


def test_from_the_custom_limit_on_nccl_is_the_table_and_continuous_in_the_tokens():
    """From 586 tokens (8,400,896 bytes) the table prices it: at 586 tokens 78.54 µs plus the
    slope to 16 MiB (121.1 µs), per all-reduce."""
    m, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    comm = Communication(m, hw, 8, SGLANG, lm_head=False, embedding=False)
    nbytes = 586 * m.hidden_size * ACTIVATION_BYTES
    one_s = (78.54 + (121.1 - 78.54) * (nbytes - 8388608) / 8388608) * US
    assert comm.seconds(586, 0) == pytest.approx(2 * m.num_hidden_layers * one_s
                                                 + hw.tp_link_latency_s, rel=1e-9)


def test_a_gpu_without_an_nccl_table_keeps_the_ring():
    """h100-sxm has no measured NCCL table: above the custom kernels, the ring."""
    m, hw = load_model("deepseek-v3"), load_hardware("h100-sxm")
    assert NCCL_TABLE not in hw.all_reduce_tables
    comm = Communication(m, hw, 8, SGLANG, lm_head=False, embedding=False)
    nbytes = 8192 * m.hidden_size * ACTIVATION_BYTES
    ring_s = ring_all_reduce_s(nbytes, 8, hw.tp_link_bandwidth_bytes_per_s
                               * hw.efficiency.interconnect, hw.tp_link_latency_s)
    assert comm.seconds(8192, 0) == pytest.approx(2 * m.num_hidden_layers * ring_s
                                                  + hw.tp_link_latency_s, rel=1e-9)
