"""``router_options.prefix_match: precise`` (llm-d's precise prefix-cache scorer) in the
schema and resolution: read by kv_scorer only, over replicas that keep a prefix cache;
shown in capsim validate's line."""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.scenario.describe import router_text
from capsim.scenario.load import load

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": 20}}


def _doc(cluster: dict, engine: dict | None = None) -> dict:
    return {"name": "r", "seed": 0, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "engine": {"max_model_len": 4096, **(engine or {})}, "cluster": cluster,
            "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1},
                         "classes": [CHAT]}}


def test_precise_reaches_the_run_and_validates_line(tmp_path, write_scenario):
    run = load(write_scenario(tmp_path, _doc(
        {"num_replicas": 4, "router": "kv_scorer",
         "router_options": {"prefix_match": "precise"}},
        {"enable_prefix_caching": True}))).runs[0]
    assert run.router_options.prefix_match == "precise"
    assert router_text(run) == (", router kv_scorer (weights queue 2, kv_cache_utilization 2, "
                                "prefix_cache 3; precise: the replicas' cached blocks)")


@pytest.mark.parametrize("cluster, engine, path, words", [
    ({"router": "prefix_aware", "router_options": {"prefix_match": "precise"}}, {},
     "cluster.router_options", "are read by router kv_scorer; router prefix_aware keeps its own"),
    ({"router": "kv_scorer", "router_options": {"prefix_match": "precise"}},
     {"enable_prefix_caching": False}, "cluster.router_options.prefix_match",
     "this engine keeps none; set engine.enable_prefix_caching: true"),
    ({"router": "kv_scorer", "router_options": {"prefix_match": "exact"}}, {},
     "cluster.router_options.prefix_match", "'approximate' or 'precise'"),
])
def test_bad_precise_input_is_one_line_naming_the_key(tmp_path, write_scenario, cluster, engine,
                                                      path, words):
    with pytest.raises(ScenarioError) as err:
        load(write_scenario(tmp_path, _doc({"num_replicas": 2, **cluster}, engine)))
    assert err.value.path == path
    assert words in str(err.value) and "\n" not in str(err.value)
