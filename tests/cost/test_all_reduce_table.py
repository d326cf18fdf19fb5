"""TensorRT-LLM's own all-reduce, priced from the GPU profile's measured table
(``all_reduce_tables.trtllm_auto``; capsim/profiles/all_reduce_table.py,
capsim/cost/communication.py ``table_pieces``).

Measured figures: ai-dynamo/aiconfigurator (Apache-2.0, at 095f58a5),
aic-core/src/aiconfigurator_core/systems/data/<gpu>/comm/trtllm/1.3.0rc20/
custom_allreduce_perf.parquet: TensorRT-LLM 1.3.0rc20's ``AllReduce`` with strategy AUTO in a
CUDA graph (collector/network/collect_all_reduce.py), bf16, message_size in elements (bytes =
2 × elements), latency in ms. The rows quoted below are that file's, rounded as the profiles
store them (µs, 3 decimals).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.common.errors import ScenarioError
from capsim.cost.communication import Communication, table_pieces
from capsim.cost.operators import ACTIVATION_BYTES, ring_all_reduce_s
from capsim.cost.pricer import StepPricer
from capsim.profiles.all_reduce_table import AllReduceTable
from capsim.profiles.engines import TpAllReduce, load_engine_preset
from capsim.scenario.load import load
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.profiles.trust import all_reduce_note

US = 1e-6
TRTLLM = load_engine_preset("trtllm").tp_all_reduce

#: (GPU profile, TP, message bytes, µs): rows of the 1.3.0rc20 files (module docstring).
MEASURED = [("b200", 8, 16384, 5.933), ("b200", 8, 131072, 6.342), ("b200", 2, 65536, 5.146),
            ("h100-sxm", 8, 65536, 4.595), ("h100-sxm", 4, 1048576, 12.911),
            ("h200-sxm", 8, 262144, 10.106), ("h200-sxm", 2, 16384, 2.827)]


def _ring_one(hw, nbytes: float, tp: int) -> float:
    return ring_all_reduce_s(nbytes, tp, hw.tp_link_bandwidth_bytes_per_s
                             * hw.efficiency.interconnect, hw.tp_link_latency_s)


@pytest.mark.parametrize("hw_name", ["b200", "h100-sxm", "h200-sxm"])
def test_the_table_loads_with_tp_2_4_8_from_256_bytes_to_1_gib(hw_name):
    t = load_hardware(hw_name).all_reduce_tables["trtllm_auto"]
    assert sorted(t.latency_us) == [2, 4, 8]
    assert t.message_bytes[0] == 256 and t.message_bytes[-1] == 2**30
    assert len(t.message_bytes) == 23


@pytest.mark.parametrize("preset", ["trtllm", "trtllm-bench"])
def test_the_tensorrt_llm_presets_use_the_table(preset):
    ar = load_engine_preset(preset).tp_all_reduce
    assert (ar.algorithm, ar.table) == ("table", "trtllm_auto")


@pytest.mark.parametrize("hw_name, tp, nbytes, us", MEASURED)
def test_the_priced_all_reduce_at_a_measured_size_is_the_table_value(hw_name, tp, nbytes, us):
    """Llama-3.1-8B (hidden 4,096: 8 KiB a token) at a token count whose message is a
    measured size: each all-reduce of the step costs aiconfigurator's row, the ring's
    logits gather on top as before."""
    m, hw = load_model("llama-3.1-8b"), load_hardware(hw_name)
    row = m.hidden_size * ACTIVATION_BYTES
    n = nbytes // row
    assert n * row == nbytes
    table = Communication(m, hw, tp, TRTLLM, lm_head=False)
    ring = Communication(m, hw, tp, None, lm_head=False)
    n_ar = 2 * m.num_hidden_layers + 1
    gather_latency = hw.tp_link_latency_s                 # the logits gather's, in both
    assert table.seconds(n, 0) == pytest.approx(n_ar * us * US + gather_latency, rel=1e-9)
    assert ring.seconds(n, 0) == pytest.approx(n_ar * _ring_one(hw, nbytes, tp)
                                               + gather_latency, rel=1e-9)


def test_deepseek_tp8_decode_on_b200_costs_the_measured_kernel_not_the_ring():
    """DeepSeek-V3 (hidden 7,168, 61 layers) TP 8 on B200 at 4 decode tokens: 123
    all-reduces of 56 KiB, between the 32 KiB (6.092 µs) and 64 KiB (5.986 µs) rows;
    the ring priced 2 × 7 hops of 4.28 µs each, ten times more (the +83 % TPOT of
    load_trtllm130rc14_8xb200_dsr1_fp8_tp8_random1k1k_concurrency_sweep at 4 users)."""
    m, hw = load_model("deepseek-v3"), load_hardware("b200")
    table = Communication(m, hw, 8, TRTLLM, lm_head=False)
    nbytes = 4 * 7168 * ACTIVATION_BYTES
    one = 6.092 + (5.986 - 6.092) * (nbytes - 32768) / 32768
    assert table.seconds(4, 0) == pytest.approx(123 * one * US + hw.tp_link_latency_s, rel=1e-9)
    assert _ring_one(hw, nbytes, 8) / (one * US) > 9


def test_between_sizes_linear_below_flat_beyond_the_last_slope():
    t = AllReduceTable(message_bytes=[100, 200, 400], latency_us={2: [5.0, 7.0, 11.0]})
    assert t.seconds(2, 150) == pytest.approx(6.0 * US)
    assert t.seconds(2, 1) == pytest.approx(5.0 * US)
    assert t.seconds(2, 800) == pytest.approx(19.0 * US)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 200_000), row=st.sampled_from([256, 4096, 8192, 14336, 32768]),
       tp=st.sampled_from([2, 4, 8]))
def test_the_pieces_equal_the_interpolated_table_at_every_token_count(n, row, tp):
    t = load_hardware("h100-sxm").all_reduce_tables["trtllm_auto"]
    pieces = table_pieces(t.knots_s(tp), row)
    limits = [limit for limit, _, _ in pieces]
    assert limits == sorted(set(limits))
    _, fixed, per_token = next(p for p in pieces if n < p[0])
    assert fixed + per_token * n == pytest.approx(t.seconds(tp, n * row), rel=1e-9, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(seqs=st.lists(st.integers(1, 700), min_size=1, max_size=4),
       ctx=st.integers(1, 5000), k=st.integers(1, 6))
def test_decode_costs_equal_cost_bit_for_bit_across_the_table_pieces(seqs, ctx, k):
    m, hw = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    p = StepPricer(m, hw, 4, all_reduce=TRTLLM)
    ctx0 = [ctx * n for n in seqs]
    secs, _ = p.decode_costs(seqs, ctx0, [k] * len(seqs))
    expected = [p.cost(decode_seqs=n, decode_ctx_tokens=c + n * i).seconds
                for n, c in zip(seqs, ctx0) for i in range(k)]
    assert list(secs) == expected


@pytest.mark.parametrize("hw_name, tp", [("a100-80gb", 4), ("h100-sxm", 6), ("l40s", 2)])
def test_without_a_table_or_its_tp_row_the_ring_is_priced(hw_name, tp):
    """No trtllm_auto table on an A100 / L40S profile; the tables have no TP 6 row: NCCL's
    ring, the documented fallback (the trust line says so where the table is missing)."""
    m, hw = load_model("llama-3.1-8b"), load_hardware(hw_name)
    assert Communication(m, hw, tp, TRTLLM).seconds(8, 8) == \
        Communication(m, hw, tp, None).seconds(8, 8)


def test_the_trust_line_says_when_the_table_is_missing():
    assert all_reduce_note("trtllm", "a100-80gb") == (
        "; trtllm's own all-reduce (table trtllm_auto) is not measured on a100-80gb: NCCL's "
        "ring is priced instead at TP >= 2")
    assert all_reduce_note("trtllm", "b200") == ""
    assert all_reduce_note("vllm-v1", "a100-80gb") == ""
    assert all_reduce_note("disaggregated", "b200") == ""


def test_ideal_profile_drops_the_tables():
    assert load_hardware("b200").ideal().all_reduce_tables == {}


def test_a_table_preset_names_its_table():
    with pytest.raises(ValueError, match="algorithm table needs table"):
        TpAllReduce(algorithm="table")
    with pytest.raises(ValueError, match="algorithm table needs table"):
        TpAllReduce(algorithm="nccl_ring", table="trtllm_auto")


@pytest.mark.parametrize("sizes, rows, says", [
    ([200, 100], {2: [1.0, 2.0]}, "strictly increasing"),
    ([100, 200], {2: [1.0]}, "one per size"),
    ([100, 200], {1: [1.0, 2.0]}, "group sizes >= 2"),
    ([100, 200], {2: [1.0, 0.0]}, "> 0"),
])
def test_a_bad_table_is_refused(sizes, rows, says):
    with pytest.raises(ValueError, match=says):
        AllReduceTable(message_bytes=sizes, latency_us=rows)


def test_a_bad_table_in_a_profile_file_is_one_line(tmp_path, repo_root):
    text = (repo_root / "capsim/profiles/data/hardware/b200.yaml").read_text()
    old = "      2: [4.582, 4.646,"
    assert old in text
    bad = tmp_path / "mine.yaml"
    bad.write_text(text.replace(old, "      2: [4.646,"))
    with pytest.raises(ScenarioError) as exc:
        load_hardware(str(bad))
    msg = str(exc.value)
    assert "\n" not in msg and str(bad) in msg and "all_reduce_tables" in msg
    assert "one per size" in msg


def test_capsim_hardware_lists_the_measured_tables():
    from click.testing import CliRunner

    from capsim.cli.main import cli

    out = CliRunner().invoke(cli, ["hardware"], terminal_width=250)
    assert out.exit_code == 0
    assert "trtllm_auto: b200, h100-sxm, h200-sxm" in out.output


def test_a_gpu_without_the_preset_table_is_warned_at_load(write_scenario, tmp_path, caplog):
    """TensorRT-LLM at TP 2 on the A100 (no ``trtllm_auto`` table in a100-80gb.yaml): the
    scenario loads, and one warning names the preset, the table and what the GPU has, so a
    GPU file of the user's own or a misspelt table name is not priced on NCCL's ring in
    silence; at TP 1 (no all-reduce) nothing is said."""
    doc = {"name": "t", "seed": 1, "model": "llama-3.1-8b", "hardware": "a100-80gb",
           "engine": {"preset": "trtllm", "tensor_parallel_size": 2, "max_model_len": 4096},
           "workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                        "classes": [{"name": "c", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 100},
                                     "output_tokens": {"dist": "fixed", "value": 10}}]}}
    with caplog.at_level("WARNING"):
        load(write_scenario(tmp_path, doc))
    said = [r.getMessage() for r in caplog.records if "all-reduce table" in r.getMessage()]
    assert len(said) == 1
    assert ("engine preset 'trtllm' runs the all-reduce table 'trtllm_auto', which is not in "
            "a100-80gb's all_reduce_tables (it has: none); NCCL's ring is priced instead"
            in said[0])
    caplog.clear()
    doc["engine"]["tensor_parallel_size"] = 1
    with caplog.at_level("WARNING"):
        load(write_scenario(tmp_path, doc))
    assert not [r for r in caplog.records if "all-reduce table" in r.getMessage()]
