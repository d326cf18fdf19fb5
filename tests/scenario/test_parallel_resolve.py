"""Pipeline and expert parallelism in a scenario: GPUs per replica, the per-stage memory
and the KV capacity (the smallest stage's), the pricer each pool builds, and a short run.

Llama-3.1-70B (80 layers, 8 KV heads of 128: 327,680 KV bytes per token in bf16) on
H100 SXM nodes of 8 GPUs.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.cost.pipeline import PipelinePricer
from capsim.cost.pricer import StepPricer
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload.build import build

DOC = {
    "name": "pp", "model": "llama-3.1-70b", "hardware": "h100-sxm",
    "engine": {"tensor_parallel_size": 4, "max_model_len": 8192},
    "workload": {"num_requests": 20, "arrival": {"process": "poisson", "rate_per_s": 2},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 500},
                              "output_tokens": {"dist": "fixed", "value": 30}}]},
    "variants": [{"name": "tp4"},
                 {"name": "tp4pp2", "engine": {"pipeline_parallel_size": 2}},
                 {"name": "tp8pp2", "engine": {"tensor_parallel_size": 8,
                                               "pipeline_parallel_size": 2}}],
}


def _runs(tmp_path, doc=DOC):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {rc.variant: rc for rc in load(path).runs}, path


def test_gpus_per_replica_are_tp_times_pp(tmp_path):
    runs, _ = _runs(tmp_path)
    assert [runs[v].num_gpus for v in ("tp4", "tp4pp2", "tp8pp2")] == [4, 8, 16]
    assert isinstance(runs["tp4"].pool().pricer(runs["tp4"].model), StepPricer)
    pp = runs["tp8pp2"].pool().pricer(runs["tp8pp2"].model)
    assert isinstance(pp, PipelinePricer) and pp.partition == (40, 40)


def test_each_stage_holds_half_the_layers_and_their_kv(tmp_path):
    """TP 4 × PP 2: each GPU holds half TP 4's layer weights (the stages' KV per token is
    40 layers' 163,840 bytes), so the KV cache holds more than twice TP 4's tokens: the
    same GPU memory per stage now caches half as many bytes per token, and the freed
    weight memory adds to it."""
    runs, _ = _runs(tmp_path)
    tp4, pp2 = runs["tp4"].pool().kv, runs["tp4pp2"].pool().kv
    assert tp4.kv_bytes_per_token == 327_680
    assert pp2.kv_bytes_per_token == 163_840
    w4, w2 = tp4.memory.weight_bytes, pp2.memory.weight_bytes
    assert w2 / w4 == pytest.approx(0.5, abs=0.02)
    assert pp2.num_tokens > 2 * tp4.num_tokens
    # The binding stage (the smaller cache) is the last: it holds the LM head and the
    # sampler's activations besides its 40 layers.
    assert pp2.memory.activation_peak_bytes >= tp4.memory.activation_peak_bytes


def test_a_pipeline_replica_runs_and_its_steps_cost_the_stages(tmp_path):
    runs, path = _runs(tmp_path)
    results = {}
    for v in ("tp4", "tp4pp2"):
        rc = runs[v]
        trace = build(rc.workload, rc.seed, base_dir=path.parent)
        results[v] = simulate(rc, trace)
    for v in results:
        assert (results[v].requests.status == "finished").all()
    # One batch in flight: the pipeline's steps take the whole model's time plus the
    # handoffs, so a request's decode (finish − first token) is no faster than on TP 4.
    decode = {v: float(np.median(results[v].requests.finish_s - results[v].requests.first_token_s))
              for v in results}
    assert decode["tp4pp2"] >= decode["tp4"] * 0.99
    assert decode["tp4pp2"] < decode["tp4"] * 1.2


@pytest.mark.parametrize("engine,message,where", [
    ({"pipeline_parallel_size": 81}, "pipeline_parallel_size 81 exceeds the model's 80 layers",
     "variants.1.engine.pipeline_parallel_size"),
])
def test_bad_pipeline_sizes(tmp_path, engine, message, where):
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc["variants"][1]["engine"] = engine
    with pytest.raises(ScenarioError) as exc:
        _runs(tmp_path, doc)
    assert message in exc.value.message and exc.value.path == where


def test_pipeline_in_a_disaggregated_pool_is_refused(tmp_path):
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc["variants"] = [{"name": "split", "disaggregation": {
        "link": "nvlink-4",
        "prefill": {"num_replicas": 1, "engine": {"pipeline_parallel_size": 2}},
        "decode": {"num_replicas": 1}}}]
    with pytest.raises(ScenarioError) as exc:
        _runs(tmp_path, doc)
    assert exc.value.path == "variants.0.disaggregation.prefill.engine.pipeline_parallel_size"
    assert "not modelled in a disaggregated pool" in exc.value.message


def test_pipeline_macro_steps_match_the_step_loop(tmp_path):
    """Decode runs priced in one event (PipelinePricer.decode_costs) land on the same
    floats as the step-by-step loop."""
    runs, path = _runs(tmp_path)
    rc = runs["tp4pp2"]
    trace = build(rc.workload, rc.seed, base_dir=path.parent)
    a, b = simulate(rc, trace), simulate(rc, trace, macro_steps=False)
    assert np.array_equal(a.requests.finish_s, b.requests.finish_s)
    assert np.array_equal(a.requests.first_token_s, b.requests.first_token_s)


def test_dp_attention_with_ep_pool_prices_the_all_to_all(tmp_path):
    """DeepSeek-V3 on 8 × H200 with DP attention + EP: the pool's pricer dispatches and
    combines over NVLink (116 all-to-alls of 4.28 µs latency each); EP 16 on two nodes
    goes over the profile's scale-out link, InfiniBand NDR (30 µs each)."""
    doc = {"name": "ds", "model": "deepseek-v3", "hardware": "h200-sxm",
           "engine": {"tensor_parallel_size": 8, "max_model_len": 8192,
                      "enable_dp_attention": True, "enable_expert_parallel": True},
           "workload": DOC["workload"],
           "variants": [{"name": "ep8"},
                        {"name": "ep16", "engine": {"tensor_parallel_size": 16}}]}
    runs, _ = _runs(tmp_path, doc)
    ep8 = runs["ep8"].pool().pricer(runs["ep8"].model)
    ep16 = runs["ep16"].pool().pricer(runs["ep16"].model)
    assert ep8.all_to_all_terms()[0] == pytest.approx(116 * 4.28e-6)
    assert ep16.all_to_all_terms()[0] == pytest.approx(116 * 30e-6)
    assert runs["ep16"].num_gpus == 16
