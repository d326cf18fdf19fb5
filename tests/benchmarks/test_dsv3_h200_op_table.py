"""benchmarks/calibration/dsv3_h200_op_table.py without the aiconfigurator mirror: its table
lookups on small hand-made tables, and capsim's side of the comparison (its own pricer).

The figures below are the synthetic tables' (not measurements): each test checks the rule
the script applies to aiconfigurator's rows (linear between grid points, NCCL's table above
the engine's own, one prompt's attention scaled by the prompts)."""
from __future__ import annotations

import pandas as pd
import pytest
from support.scripts import load_script


@pytest.fixture(scope="module")
def tab():
    return load_script("benchmarks/calibration/dsv3_h200_op_table.py")


def _aic(tab, **tables):
    empty = pd.DataFrame()
    base = dict(gemm=empty, moe=empty, ctx_mla=empty, gen_mla=empty, mla_bmm=None,
                allreduce=empty, nccl=empty, mem_bw=4.8e12, mem_scaling=0.8, mem_const_s=3e-6,
                used={}, backend="sglang")
    return tab.Aic(**{**base, **tables})


def test_a_gemm_between_grid_points_is_linear_in_m_and_n(tab):
    """Rows at m 1 / 3 and n 2,048 / 2,560 (k 7,168): m 2, n 2,112 (the fused q_a + kv_a
    width) lies 1/2 and 1/8 of the way: (1 + 3) / 2 = 2 ms at n 2,048, 6 ms at 2,560,
    2 + (6 - 2) / 8 = 2.5 ms."""
    gemm = pd.DataFrame({"gemm_dtype": "fp8_block", "m": [1, 3, 1, 3],
                         "n": [2048, 2048, 2560, 2560], "k": 7168,
                         "latency": [1.0, 3.0, 5.0, 7.0]})
    assert tab.gemm_ms(_aic(tab, gemm=gemm), 2, 2112, 7168) == pytest.approx(2.5)


def test_an_all_reduce_beyond_the_engines_table_is_nccls(tab):
    """The engine's table to 1,024 elements (its faster implementation at each size), NCCL's
    beyond: 8 GPUs, 1 token x 7,168 hidden = 7,168 elements -> NCCL's row."""
    custom = pd.DataFrame({"num_gpus": 8, "message_size": [512, 512, 1024, 1024],
                           "latency": [0.004, 0.02, 0.005, 0.02]})
    nccl = pd.DataFrame({"op_name": "all_reduce", "num_gpus": 8, "nccl_dtype": "half",
                         "message_size": [4096, 8192], "latency": [0.03, 0.05]})
    a = _aic(tab, allreduce=custom, nccl=nccl)
    assert tab.allreduce_ms(a, 1) == pytest.approx(0.03 + 0.02 * (7168 - 4096) / 4096)
    small = pd.DataFrame({"num_gpus": 8, "message_size": [512, 65536], "latency": [0.004, 0.008]})
    a = _aic(tab, allreduce=small, nccl=nccl)
    assert tab.allreduce_ms(a, 1) == pytest.approx(0.004 + 0.004 * (7168 - 512) / 65024)


def test_context_attention_of_many_prompts_scales_the_largest_batch_row(tab):
    """Rows at batch 1 and 16 (isl 128 / 256): 32 prompts of 192 tokens take the batch-16
    row at isl 192 (1.5 ms) twice: 3 ms."""
    ctx = pd.DataFrame({"num_heads": 16, "tp_size": 8, "kv_cache_dtype": "bfloat16",
                        "batch_size": [1, 1, 16, 16], "isl": [128, 256, 128, 256],
                        "latency": [0.1, 0.2, 1.0, 2.0]})
    assert tab.ctx_mla_ms(_aic(tab, ctx_mla=ctx), 32, 192) == pytest.approx(3.0)


def test_capsims_side_sums_to_its_pricer_and_groups_every_operator(tab):
    """capsim's groups of a 8,192-token SGLang 0.5 prefill: every operator in one group, the
    groups and the host term adding up to the pricer's step (its communication apart)."""
    pricer = tab.build_pricer("sglang")
    g = tab.capsim_groups(pricer, 8192, 32, 0)
    parts = sum(v for k, v in g.items() if k != "total")
    assert parts == pytest.approx(g["total"], rel=1e-9)
    assert set(g) >= {"mla_attention", "qkvo_proj", "routed_moe", "all_reduce"}


def test_a_wide_decode_step_reads_the_context_it_is_given(tab):
    """Issue 30's wide batch: 1,024 sequences of 400 keys (ShareGPT's ~200-token prompts and
    outputs) price as the pricer's step of 1,024 x 400 = 409,600 context tokens, not the
    default 2,048 keys a sequence; the attention group is the part that reads them."""
    pricer = tab.build_pricer("sglang")
    wide = tab.capsim_groups(pricer, 0, 0, 1024, 400)
    cost = pricer.cost(decode_seqs=1024, decode_ctx_tokens=409_600)
    assert wide["total"] == pytest.approx(cost.seconds * 1e3, rel=1e-12)
    long = tab.capsim_groups(pricer, 0, 0, 1024)
    assert long["mla_attention"] > wide["mla_attention"]
    assert long["routed_moe"] == pytest.approx(wide["routed_moe"], rel=1e-12)


def test_decode_attention_is_linear_in_keys_between_table_steps(tab):
    """Rows at steps 255 / 511 (256 / 512 keys) and batches 1 / 3: 400 keys at batch 2 lie
    (1 + 3) / 2 = 2 ms and 6 ms at the two steps, 144 / 256 of the way: 2 + 4 x 0.5625 =
    4.25 ms (the nearest step alone gave 6 ms)."""
    gen = pd.DataFrame({"num_heads": 16, "tp_size": 8, "kv_cache_dtype": "bfloat16",
                        "batch_size": [1, 3, 1, 3], "step": [255, 255, 511, 511],
                        "latency": [1.0, 3.0, 5.0, 7.0]})
    assert tab.gen_mla_ms(_aic(tab, gen_mla=gen), 2, 400) == pytest.approx(4.25)


@pytest.mark.parametrize("backend, ms", [("sglang", 0.1 + 0.2), ("trtllm", 0.4 + 0.8)])
def test_sglang_takes_the_bf16_absorbed_bmm(tab, backend, ms):
    """SGLang on CUDA runs the absorbed bmm in bf16 (kv_b_proj dequantised once); the other
    backends keep aiconfigurator's fp8 rows."""
    bmm = pd.DataFrame({"num_heads": 16, "num_tokens": 64,
                        "op_name": ["mla_gen_pre", "mla_gen_post"] * 2,
                        "bmm_dtype": ["bfloat16", "bfloat16", "fp8", "fp8"],
                        "latency": [0.1, 0.2, 0.4, 0.8]})
    assert tab.mla_bmm_ms(_aic(tab, mla_bmm=bmm, backend=backend), 64) == pytest.approx(ms)
