"""cluster.router's cache-aware routers in the schema and resolution: their knobs
(scenario/routing.py, SGLang router's and llm-d's defaults), where they apply, and the
line capsim validate prints."""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.scenario.describe import router_text
from capsim.scenario.load import load
from capsim.scenario.routing import RouterOptions

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": 20}}


def _doc(cluster: dict, conversation: bool = True) -> dict:
    cls = {**CHAT, "conversation": {"turns": {"dist": "fixed", "value": 3}}} if conversation \
        else CHAT
    return {"name": "r", "seed": 0, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "engine": {"max_model_len": 4096}, "cluster": cluster,
            "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1},
                         "classes": [cls]}}


def test_defaults_are_sglang_routers_and_llm_ds():
    o = RouterOptions()
    assert (o.cache_threshold, o.balance_abs_threshold, o.balance_rel_threshold,
            o.max_tree_size_blocks) == (0.5, 32, 1.1, 10000)
    w = o.scorer_weights
    assert (w.queue, w.kv_cache_utilization, w.prefix_cache) == (2.0, 2.0, 3.0)


def test_the_router_and_its_options_reach_the_run_and_validates_line(tmp_path, write_scenario):
    run = load(write_scenario(tmp_path, _doc(
        {"num_replicas": 4, "router": "prefix_aware",
         "router_options": {"cache_threshold": 0.3, "balance_abs_threshold": 8}}))).runs[0]
    assert run.router == "prefix_aware" and run.router_options.cache_threshold == 0.3
    assert router_text(run) == (", router prefix_aware (cache_threshold 0.3, by load past 8 "
                                "and 1.1×; 10000 blocks per replica)")
    plain = load(write_scenario(tmp_path, _doc({"num_replicas": 4}))).runs[0]
    assert router_text(plain) == ""


@pytest.mark.parametrize("cluster, conversation, path, words", [
    ({"router": "round_robin", "router_options": {"cache_threshold": 0.5}}, True,
     "cluster.router_options", "router round_robin reads none"),
    ({"router": "session_affinity"}, False, "cluster.router", "no workload class has "
                                                              "conversation turns"),
    ({"router": "prefix_aware", "router_options": {"balance_rel_threshold": 0.5}}, True,
     "cluster.router_options.balance_rel_threshold", "must be >= 1 (got 0.5)"),
    # A key the router ignores was accepted silently before: SGLang's cache_aware policy has
    # no scorers, llm-d's scorers no cache threshold, the precise scorer no tree of its own.
    ({"router": "prefix_aware", "router_options": {"scorer_weights": {"queue": 1}}}, True,
     "cluster.router_options", "router_options scorer_weights: not read by router "
     "prefix_aware, which reads balance_abs_threshold, balance_rel_threshold, "
     "cache_threshold, max_tree_size_blocks (remove scorer_weights)"),
    ({"router": "kv_scorer", "router_options": {"cache_threshold": 0.9,
                                                 "balance_abs_threshold": 4}}, True,
     "cluster.router_options", "router_options balance_abs_threshold, cache_threshold: not "
     "read by router kv_scorer, which reads max_tree_size_blocks, prefix_match, "
     "scorer_weights"),
    ({"router": "kv_scorer", "router_options": {"prefix_match": "precise",
                                                 "max_tree_size_blocks": 100}}, True,
     "cluster.router_options", "max_tree_size_blocks: not read by router kv_scorer with "
     "prefix_match: precise, which reads prefix_match, scorer_weights"),
])
def test_bad_router_input_is_one_line_naming_the_key(tmp_path, write_scenario, cluster,
                                                     conversation, path, words):
    with pytest.raises(ScenarioError) as err:
        load(write_scenario(tmp_path, _doc({"num_replicas": 2, **cluster}, conversation)))
    assert err.value.path == path
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_cache_aware_router_is_refused_across_pools(tmp_path, write_scenario):
    doc = _doc({"router": "prefix_aware",
                "pools": [{"name": "a", "hardware": "h100-sxm", "num_replicas": 1},
                          {"name": "b", "hardware": "a100-80gb", "num_replicas": 1}]})
    with pytest.raises(ScenarioError, match="picks a replica within one pool"):
        load(write_scenario(tmp_path, doc))
