"""engine.quantization in a scenario: the memory, the KV capacity and the step prices follow
the format; the chip must have the format's tensor cores (else a weight-only fallback)."""

from __future__ import annotations

import pytest

from capsim.metrics.summary import summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

GIB = 2**30


def _pool(scenarios_dir, *sets):
    loaded = load(scenarios_dir / "rag_mix.yaml", ["workload.duration_s=20", *sets])
    return loaded, loaded.runs[2].pool()       # chunked prefill, co-located


def test_awq_weights_leave_more_kv_cache(scenarios_dir):
    _, bf16 = _pool(scenarios_dir)
    _, awq = _pool(scenarios_dir, "engine.quantization=awq")
    # weights 14.99 -> 5.37 GiB (5,727,854,592 B + the RoPE cache); the KV pool gains the rest
    assert bf16.kv.memory.weight_bytes / GIB == pytest.approx(14.99, abs=0.01)
    assert awq.kv.memory.weight_bytes / GIB == pytest.approx(5.37, abs=0.01)
    gained = bf16.kv.memory.weight_bytes - awq.kv.memory.weight_bytes
    assert awq.kv.memory.available_kv_bytes - bf16.kv.memory.available_kv_bytes == gained
    assert awq.matmul_dtype == "bf16" and bf16.matmul_dtype == "bf16"


def test_mxfp4_on_hopper_runs_weight_only_and_fp8_block_on_fp8_cores(scenarios_dir):
    assert _pool(scenarios_dir, "engine.quantization=mxfp4", "model=qwen3-30b-a3b",
                 "engine.max_model_len=8192")[1].matmul_dtype == "bf16"
    assert _pool(scenarios_dir, "engine.quantization=fp8_block")[1].matmul_dtype == "fp8"
    assert _pool(scenarios_dir, "engine.quantization=nvfp4",
                 "hardware=b200")[1].matmul_dtype == "fp4"


def test_int4_weights_shorten_the_memory_bound_decode(scenarios_dir):
    """At this load a step is dominated by reading the weights: int4 weights (a quarter of
    the bytes) give a shorter TPOT; the trace and every scheduling rule are the same."""
    tpot = {}
    for fmt in ("bf16", "awq"):
        sets = [] if fmt == "bf16" else ["engine.quantization=awq"]
        loaded, _ = _pool(scenarios_dir, *sets)
        run = loaded.runs[2]
        result = simulate(run, build(run.workload, run.seed, loaded.base_dir))
        rows = {r.cls: r for r in summarize(result, loaded.spec.slo)}
        tpot[fmt] = rows["chat"].tpot_p50_ms
    assert tpot["awq"] < 0.7 * tpot["bf16"]
