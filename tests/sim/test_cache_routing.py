"""Cache-aware routers in whole runs (engine/cache_router.py): multi-turn conversations on
4 replicas keep their history's cache hits only where the router sends a conversation's
turns to one replica."""

from __future__ import annotations

import pytest

from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build

CHAT = {"name": "chat", "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 160},
        "output_tokens": {"dist": "fixed", "value": 96},
        "conversation": {"turns": {"dist": "fixed", "value": 5}, "think_time_s": 2}}


@pytest.fixture
def conv_run(tmp_path, write_scenario):
    """``conv_run(router, **cluster)`` → (hit tokens ÷ queried tokens, result)."""
    def go(router: str, **cluster):
        doc = {"name": "c", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": {"max_model_len": 4096, "enable_prefix_caching": True},
               "cluster": {"num_replicas": 4, "router": router, **cluster},
               "workload": {"duration_s": 20, "arrival": {"process": "poisson",
                                                          "rate_per_s": 2.0},
                            "classes": [CHAT]}}
        run = load(write_scenario(tmp_path, doc)).runs[0]
        res = simulate(run, build(run.workload, run.seed, tmp_path))
        hits = sum(r.prefix_hit_tokens for r in res.replicas)
        queried = sum(r.prefix_queried_tokens for r in res.replicas)
        return hits / queried, res
    return go


def test_cache_aware_routers_keep_the_conversations_hits(conv_run):
    """Turn t (t ≥ 2) holds (t − 1) × 256 tokens of history + 160 new: on the replica of
    the turn before, all the history's full blocks hit. Round robin sends a 5-turn
    conversation's turns to 4 replicas in turn (only a quarter of the later turns land
    where the history is); session_affinity keeps every later turn there. prefix_aware
    loses turn 2: it holds turn 1's 160-token prompt (10 blocks) in 26 blocks, a 38 %
    match, not above SGLang's cache_threshold 0.5, so it goes to the smallest tree; from
    turn 3 on (26 of 42 blocks, 62 %) the conversation stays."""
    rr, _ = conv_run("round_robin")
    pa, res = conv_run("prefix_aware")
    sa, _ = conv_run("session_affinity")
    ks, _ = conv_run("kv_scorer")
    assert rr < 0.35
    assert pa > 0.6 and sa > 0.6 and ks > 0.6
    assert sa > pa > rr
    again, _ = conv_run("prefix_aware")
    assert again == pa                  # deterministic for a seed


def test_a_cache_aware_fleet_with_failures_routes_among_the_survivors(conv_run):
    hit, res = conv_run("prefix_aware",
                        failures={"at": [{"replica": 1, "at_s": 5, "repair_s": 10}],
                                  "in_flight": "retry"})
    assert hit > 0.55
    assert res.fleet is not None and res.fleet.failures[0][0] == 1
