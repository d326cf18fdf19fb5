"""engine.kv_offloading_size / kv_offloading_backend (vLLM's KV offloading): where they
apply, what they must fit, and what a run reports with them."""

from __future__ import annotations

import math

import pytest

from capsim.common.errors import ScenarioError
from capsim.metrics.summary import summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 300},
        "output_tokens": {"dist": "fixed", "value": 64},
        "conversation": {"turns": {"dist": "fixed", "value": 4}, "think_time_s": 1}}


def _doc(engine: dict) -> dict:
    return {"name": "o", "seed": 2, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "engine": {"max_model_len": 4096, **engine},
            "workload": {"duration_s": 30, "arrival": {"process": "poisson", "rate_per_s": 3},
                         "classes": [CHAT]}}


OFFLOAD = {"kv_offloading_size": 8, "kv_offloading_backend": "native"}


@pytest.mark.parametrize("engine, key, words", [
    ({"kv_offloading_size": 8}, "engine.kv_offloading_size", "go together"),
    ({**OFFLOAD, "kv_offloading_size": 600}, "engine.kv_offloading_size",
     "kv_offloading_size 600 GiB exceeds host_memory_gib 512"),
    ({**OFFLOAD, "preset": "sglang"}, "engine.kv_offloading_size",
     "has no KV offloading (vLLM V1's; valid with: vllm-0.21, vllm-v1)"),
    ({**OFFLOAD, "enable_prefix_caching": False}, "engine.kv_offloading_size",
     "set enable_prefix_caching: true"),
])
def test_bad_offload_input_is_one_line_naming_the_key(tmp_path, write_scenario, engine, key,
                                                      words):
    with pytest.raises(ScenarioError) as err:
        load(write_scenario(tmp_path, _doc(engine)))
    assert err.value.path == key and words in str(err.value)


def test_offload_recovers_hits_a_small_gpu_cache_loses(tmp_path, write_scenario):
    """A 1 GiB GPU cache (8,192 tokens) holds a few conversations' history only: later turns
    whose prefix was evicted recompute it without offload and load it with 8 GiB of host
    memory; the GPU tier's hits stay as they were (same routing, one replica)."""
    rows = {}
    for name, extra in (("plain", {}), ("offload", OFFLOAD)):
        loaded = load(write_scenario(tmp_path, _doc({"kv_cache_memory_gib": 1, **extra})))
        run = loaded.runs[0]
        res = simulate(run, build(run.workload, run.seed, tmp_path))
        rows[name] = next(r for r in summarize(res, loaded.spec.slo) if r.cls == "all")
    plain, off = rows["plain"], rows["offload"]
    assert math.isnan(plain.offload_hit_rate) and plain.offload_hit_tokens == 0
    assert off.offload_hit_rate > 0.1 and off.offload_hit_tokens > 0
    assert off.prefix_hit_rate + off.offload_hit_rate > plain.prefix_hit_rate + 0.1
