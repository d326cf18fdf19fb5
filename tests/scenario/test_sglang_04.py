"""A scenario under the sglang-0.4 preset: the mem_fraction_static SGLang 0.4.7-0.4.9 picks
from the GPU and the parallel size (python/sglang/srt/server_args.py __post_init__ of the
sglang 0.4.9.post6 wheel), and the KV pool of the one measured 0.4-era start-up."""

from __future__ import annotations

import yaml

from capsim.scenario.load import load

WORKLOAD = {"num_requests": 1, "arrival": {"process": "constant", "rate_per_s": 1.0},
            "classes": [{"name": "one", "weight": 1,
                         "prompt_tokens": {"dist": "fixed", "value": 100},
                         "output_tokens": {"dist": "fixed", "value": 10}}]}


def _engines(tmp_path, doc):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {rc.variant: rc.pool() for rc in load(path).runs}


def test_mem_fraction_static_by_tp_on_h100(tmp_path):
    """h100-sxm (79.19 GiB = 81,090.56 MiB): (9.5 + TP / 2) GiB reserved: 0.874 / 0.867 /
    0.855 / 0.830 at TP 1 / 2 / 4 / 8; a value the scenario gives is kept."""
    doc = {"name": "sgl04", "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"preset": "sglang-0.4"}, "workload": WORKLOAD,
           "variants": [{"name": f"tp{tp}", "engine": {"tensor_parallel_size": tp}}
                        for tp in (1, 2, 4, 8)]
           + [{"name": "set", "engine": {"mem_fraction_static": 0.8}}]}
    pools = _engines(tmp_path, doc)
    got = {v: p.engine.mem_fraction_static for v, p in pools.items()}
    assert got == {"tp1": 0.874, "tp2": 0.867, "tp4": 0.855, "tp8": 0.830, "set": 0.8}
    assert pools["tp1"].engine.max_num_batched_tokens == 8192


def test_startup_kv_of_vllm_issue_21348(tmp_path):
    """The measured 0.4-era start-up: Qwen3-235B-A22B-FP8, TP 4 on 4 x H100, SGLang of
    2025-07-22 (0.4.9.post2/3) with --mem-fraction-static 0.93 logged 367,404 KV tokens
    (vLLM issue 21348; benchmarks/fidelity/supplementary/kv_vllm_issue21348_...yaml).
    capsim: 0.93 x (79.19 - 0.5 GiB context) - 55.08 GiB of weights per GPU = 18.11 GiB,
    over 48,128 B per token (1 KV head x 128 x 94 layers x 2 x bf16) = 403,936 tokens,
    +9.9 %: capsim's flat 0.5 GiB before the weights leaves out the NCCL and custom
    all-reduce buffers init_torch_distributed creates before SGLang reads the free memory."""
    doc = {"name": "i21348", "model": "qwen3-235b-a22b", "hardware": "h100-sxm",
           "engine": {"preset": "sglang-0.4", "tensor_parallel_size": 4,
                      "quantization": "fp8_block", "mem_fraction_static": 0.93},
           "workload": WORKLOAD}
    kv = _engines(tmp_path, doc)["default"].kv
    assert kv.kv_bytes_per_token // 4 == 48_128
    assert kv.num_tokens == 403_936
    assert 0.09 < kv.num_tokens / 367_404 - 1 < 0.10
