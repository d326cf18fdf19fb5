"""A scenario under the sglang-0.5.10 preset: SGLang 0.5.10+'s default mem_fraction_static with
the piecewise prefill graph's reserve (python/sglang/srt/server_args.py of the sglang 0.5.12
wheel, _handle_gpu_memory_settings: + 1.5 x 1024 MiB for an MLA model, + 8 MiB per captured size
otherwise, while the graph is on, before the 10 GiB floor; + 4 x 1024 for an EAGLE-family
drafter), and the graph reaching the pricer of a co-located pool only."""

from __future__ import annotations

import copy

import yaml

from capsim.scenario.load import load

DOC = {
    "name": "sgl", "model": "deepseek-v3", "hardware": "h200-sxm",
    "engine": {"preset": "sglang-0.5.10", "tensor_parallel_size": 8},
    "workload": {"num_requests": 4, "arrival": {"process": "concurrency", "users": 2,
                                                "think_time_s": 0.0},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 500},
                              "output_tokens": {"dist": "fixed", "value": 30}}]},
    "variants": [{"name": "h200"},
                 {"name": "b200", "hardware": "b200"},
                 {"name": "old", "engine": {"preset": "sglang-0.5"}},
                 {"name": "old_b200", "hardware": "b200", "engine": {"preset": "sglang-0.5"}}],
}


def _pools(tmp_path, doc=DOC):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {rc.variant: rc.pool() for rc in load(path).runs}


def test_deepseek_reserves_the_mla_graph_share(tmp_path):
    """H200 (143,155 MiB) TP 8, chunk 8,192: 0.5.7 reserves 14,848 MiB (0.896); 0.5.12 adds
    1,536 for the MLA graph: 16,384 MiB, round((143,155 - 16,384) / 143,155, 3) = 0.886. On
    B200 the graph is off for DeepSeek FP8 (flashinfer_trtllm MoE): the same fraction as 0.5."""
    pools = _pools(tmp_path)
    assert pools["old"].engine.mem_fraction_static == 0.896
    assert pools["h200"].engine.mem_fraction_static == 0.886
    assert pools["b200"].engine.mem_fraction_static == \
        pools["old_b200"].engine.mem_fraction_static


def test_a_gqa_model_reserves_8_mib_per_captured_size(tmp_path):
    """Llama-3.1-70B TP 4 on H100 (the profile's 81,091 MiB), chunk 8,192: 0.5.7 reserves 512 +
    12,288 + 512 x 2 + 512 = 14,336 MiB (0.823); 58 captured sizes up to 8,192 add 464: 14,800
    MiB (0.817)."""
    doc = copy.deepcopy(DOC)
    doc.update(model="llama-3.1-70b", hardware="h100-sxm")
    doc["engine"]["tensor_parallel_size"] = 4
    doc["variants"] = [{"name": "new"}, {"name": "old", "engine": {"preset": "sglang-0.5"}}]
    pools = _pools(tmp_path, doc)
    assert (pools["old"].engine.mem_fraction_static,
            pools["new"].engine.mem_fraction_static) == (0.823, 0.817)


def test_a_disaggregated_pool_prices_its_prefills_eagerly(tmp_path):
    """PD disaggregation turns the graph off (_handle_piecewise_cuda_graph): the prefill pool's
    pricer has no graph, a co-located pool's has SGLang's 2,048 tokens."""
    pools = _pools(tmp_path)
    model = load(tmp_path / "s.yaml").runs[0].model
    assert pools["h200"].pricer(model)._graph_tokens == 2048
    prefill = pools["h200"].__class__(**{**pools["h200"].__dict__, "role": "prefill"})
    assert prefill.pricer(model)._graph_tokens == 0.0
