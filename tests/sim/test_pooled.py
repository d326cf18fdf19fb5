"""Pooled fleets (cluster.pools, issue 17 item 5): routing by model, class and prompt length,
least outstanding work and cost; per-pool Little's law; one pool = a single fleet."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.metrics.pools import pool_rows, pool_run
from capsim.metrics.summary import request_frame, summarize
from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.studies.queueing import little_check
from capsim.workload import build

CHAT = {"name": "chat", "weight": 0.7,
        "prompt_tokens": {"dist": "lognormal", "mean": 600, "sigma": 0.8, "min": 16, "max": 4096},
        "output_tokens": {"dist": "lognormal", "mean": 200, "sigma": 0.7, "min": 8, "max": 1024}}
RAG = {"name": "rag", "weight": 0.3, "prompt_tokens": {"dist": "uniform", "min": 3000, "max": 8000},
       "output_tokens": {"dist": "fixed", "value": 150}, "slo": {"ttft_ms": 3000}}
TWO_POOLS = [{"name": "h100", "num_replicas": 2}, {"name": "h200", "hardware": "h200-sxm"}]


@pytest.fixture
def pooled(tmp_path, write_scenario):
    """``pooled(cluster, classes=..., rate=...)`` → (loaded scenario, run, trace, result)."""
    def go(cluster: dict, classes=(CHAT, RAG), rate: float = 6.0, duration_s: float = 90,
           workload_extra: dict | None = None, **top):
        workload = {"duration_s": duration_s, "classes": list(classes),
                    "arrival": {"process": "poisson", "rate_per_s": rate},
                    **(workload_extra or {})}
        doc = {"name": "p", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
               "engine": {"max_model_len": 16384, "max_num_seqs": 64,
                          "max_num_batched_tokens": 2048},
               "cluster": cluster, "slo": {"ttft_ms": 1000, "tpot_ms": 60},
               "workload": workload, **top}
        path = write_scenario(tmp_path, doc)
        loaded = load(path)
        run = loaded.runs[0]
        trace = build(run.workload, run.seed, path.parent)
        return loaded, run, trace, simulate(run, trace)
    return go


def _pool_names(result) -> np.ndarray:
    names = np.array([p.name for p in result.pools])
    return names[np.asarray(result.requests.pool)]


def test_every_request_goes_to_a_pool_serving_its_model(pooled):
    """Two models, one pool each plus a shared-model second pool: a request never lands on a
    pool serving another model, and every request is routed (none rejected here)."""
    chat = {**CHAT, "model": "llama-3.1-8b"}
    rag = {**RAG, "model": "qwen2.5-7b"}
    cluster = {"router": "least_outstanding_tokens",
               "pools": [{"name": "llama-a"}, {"name": "qwen", "model": "qwen2.5-7b"},
                         {"name": "llama-b", "hardware": "h200-sxm"}]}
    _, run, trace, res = pooled(cluster, classes=(chat, rag))
    served = {p.name: p.model for p in res.pools}
    assert served == {"llama-a": "llama-3.1-8b", "qwen": "qwen2.5-7b", "llama-b": "llama-3.1-8b"}
    asked = np.array(["llama-3.1-8b", "qwen2.5-7b"])[np.asarray(trace.class_id)]
    got = np.array([served[n] for n in _pool_names(res)])
    assert (np.asarray(res.requests.status) == "finished").all()
    assert (got == asked).all()
    # Both llama pools took chat traffic (least outstanding spreads it); qwen took all RAG.
    names = _pool_names(res)
    assert set(names[asked == "llama-3.1-8b"]) == {"llama-a", "llama-b"}
    assert (names[asked == "qwen2.5-7b"] == "qwen").all()
    assert sum(p.routed_requests for p in res.pools) == len(trace)


def test_class_routing_sends_exactly_the_named_class(pooled):
    """rag → h200 and chat → h100: the h200 pool's requests are exactly the RAG requests."""
    cluster = {"router": "least_outstanding_tokens", "pools": TWO_POOLS,
               "route": [{"class": "rag", "pool": "h200"}, {"class": "chat", "pool": "h100"}]}
    _, _, trace, res = pooled(cluster)
    names = _pool_names(res)
    is_rag = np.asarray(trace.class_id) == 1
    assert is_rag.sum() > 50
    assert ((names == "h200") == is_rag).all()
    # Per-class ITL: the h200 pool's gaps are all RAG gaps, the h100's all chat.
    itl = res.itl
    pool, cls = np.asarray(itl.pool), np.asarray(itl.class_id)
    assert set(cls[pool == 1]) == {1} and set(cls[pool == 0]) == {0}


def test_a_prompt_length_threshold_sends_long_prompts_to_the_h200_pool(pooled):
    cluster = {"router": "least_outstanding_tokens", "pools": TWO_POOLS,
               "route": [{"min_prompt_tokens": 3000, "pool": "h200"}]}
    _, _, trace, res = pooled(cluster)
    names = _pool_names(res)
    long = np.asarray(trace.prompt_tokens) >= 3000
    assert (names[long] == "h200").all()
    # Short prompts are shared by least outstanding work; the 2 H100s take most of them.
    assert (names[~long] == "h100").sum() > (names[~long] == "h200").sum() > 0


def test_littles_law_holds_per_pool_and_pools_add_up_to_the_fleet(pooled):
    """L = λW on each pool's own requests (L from the time integral of the number in the
    pool, W from the per-request times); requests, tokens and $/h add up to the fleet's."""
    cluster = {"router": "least_outstanding_tokens", "pools": TWO_POOLS,
               "route": [{"class": "rag", "pool": "h200"}]}
    loaded, _, trace, res = pooled(cluster, rate=8.0)
    total = summarize(res, loaded.spec.slo, loaded.class_slos)[0]
    rows = {name: row for name, row in pool_rows(res, loaded.spec.slo, loaded.class_slos)
            if row.cls == "all"}
    for k, p in enumerate(res.pools):
        sub = pool_run(res, k).requests
        check = little_check(np.asarray(sub.arrival_s), np.asarray(sub.finish_s))
        assert check.mean_in_system > 0.5
        assert check.mean_in_system == pytest.approx(
            check.arrival_rate_per_s * check.mean_time_in_system_s, rel=1e-9)
    assert sum(r.num_requests for r in rows.values()) == total.num_requests == len(trace)
    assert rows["h100"].cost_per_hour_usd + rows["h200"].cost_per_hour_usd == pytest.approx(
        total.cost_per_hour_usd)
    # h100-sxm $6.88/GPU-h × 2 (AWS p5), h200-sxm $7.91/GPU-h × 1 (AWS p5en): the profiles.
    assert total.cost_per_hour_usd == pytest.approx(2 * 6.88 + 7.91)
    out = {k: float((request_frame(pool_run(res, i)).query("status == 'finished'")
                     .output_tokens).sum()) for i, k in enumerate(("h100", "h200"))}
    assert sum(out.values()) == float(np.asarray(trace.output_tokens).sum())


def test_cost_router_keeps_light_load_on_the_cheapest_pool_and_spills_when_busy(pooled):
    """router: cost — per replica the H100 ($6.88/h) is cheaper than the H200 ($7.91/h): at a
    trickle every request goes to the H100 pool; at a load one H100 cannot prefill within
    the TTFT limit, requests spill to the H200."""
    cluster = {"router": "cost", "pools": [{"name": "h100"},
                                           {"name": "h200", "hardware": "h200-sxm"}]}
    _, _, _, light = pooled(cluster, classes=(CHAT,), rate=0.5)
    assert (_pool_names(light) == "h100").all()
    _, _, _, busy = pooled(cluster, classes=(RAG,), rate=6.0)
    names = _pool_names(busy)
    assert (names == "h200").sum() > 0 and (names == "h100").sum() > (names == "h200").sum() / 4


def _same_figures(a, b) -> None:
    """Two results give the same summary rows and per-request outcomes, number for number."""
    for col in ("request_id", "class_id", "replica", "arrival_s", "status", "first_scheduled_s",
                "first_token_s", "finish_s", "num_preemptions", "max_itl_s"):
        assert np.array_equal(np.asarray(getattr(a.requests, col)),
                              np.asarray(getattr(b.requests, col)), equal_nan=col != "status"
                              and col.endswith("_s")), col
    assert a.itl == b.itl
    assert a.sim_end_s == b.sim_end_s and a.price_per_hour_usd == b.price_per_hour_usd


@pytest.mark.parametrize("cluster", [
    {"num_replicas": 2, "router": "least_outstanding_tokens"},
    {"num_replicas": 3, "router": "round_robin"},
    {"num_replicas": 1, "router": "least_outstanding_tokens",
     "autoscaling": {"signal": "running", "target": 8, "min_replicas": 1, "max_replicas": 3,
                     "provisioning": {"delay_s": 20}},
     "failures": {"at": [{"replica": 0, "at_s": 40, "repair_s": 15}]}},
])
def test_a_single_pool_gives_exactly_a_single_fleets_results(pooled, cluster):
    """cluster.pools with one pool (same GPU, engine, replicas, autoscaling and failures) is
    today's single fleet: summary rows equal field for field, every request's times equal."""
    loaded, _, _, plain = pooled(cluster)
    pool = {"name": "only", **{k: v for k, v in cluster.items() if k != "router"}}
    loaded_p, run_p, _, one = pooled({"router": cluster["router"], "pools": [pool]})
    assert run_p.fleet is not None and len(one.pools) == 1
    _same_figures(plain, one)
    rows = summarize(plain, loaded.spec.slo, loaded.class_slos)
    assert [r.model_dump() for r in rows] == \
        [r.model_dump() for r in summarize(one, loaded_p.spec.slo, loaded_p.class_slos)]
    # The pool's own rows are the fleet's: one pool serves every request.
    assert [r.model_dump() for _, r in pool_rows(one, loaded_p.spec.slo, loaded_p.class_slos)] \
        == [r.model_dump() for r in rows]
    if "autoscaling" in cluster:
        assert one.pools[0].fleet == plain.fleet


def test_pooled_runs_are_deterministic(pooled):
    cluster = {"router": "round_robin", "pools": TWO_POOLS,
               "route": [{"min_prompt_tokens": 5000, "pool": "h200"}]}
    _, _, _, a = pooled(cluster)
    _, _, _, b = pooled(cluster)
    _same_figures(a, b)
    assert np.array_equal(np.asarray(a.requests.pool), np.asarray(b.requests.pool))


def test_each_pools_gaps_are_its_own_requests_gaps_warm_up_left_out(pooled):
    """Per pool, the ITL runs recorded count exactly Σ (output tokens − 1) over the measured
    requests it finished; the 25 warm-up requests count in no pool."""
    cluster = {"router": "round_robin", "pools": TWO_POOLS,
               "route": [{"class": "rag", "pool": "h200"}]}
    _, _, _, res = pooled(cluster)
    _, _, _, warm = pooled(cluster, workload_extra={"warmup_request_count": 25})
    assert (np.asarray(warm.requests.status) == "warmup").sum() == 25
    for result in (res, warm):
        req = result.requests
        status = np.asarray(req.status)
        for k in range(len(result.pools)):
            mine = (np.asarray(req.pool) == k) & (status == "finished")
            want = int((np.asarray(req.output_tokens)[mine] - 1).sum())
            got = int(np.asarray(result.itl.count)[np.asarray(result.itl.pool) == k].sum())
            assert got == want > 0


def test_an_autoscaled_pool_next_to_a_fixed_one_is_paid_for_its_replica_hours(pooled):
    """The H200 pool scales 1-3 replicas on running sequences over a 4× surge; the day's cost
    is the fixed H100 pool's 2 GPUs × run length plus the H200 pool's replica-hours."""
    wl = {"schedule": {"kind": "piecewise", "step_s": 60, "factors": [1, 4, 1]}}
    cluster = {"router": "least_outstanding_tokens",
               "pools": [{"name": "h100", "num_replicas": 2},
                         {"name": "h200", "hardware": "h200-sxm", "num_replicas": 1,
                          "autoscaling": {"signal": "running", "target": 8, "min_replicas": 1,
                                          "max_replicas": 3, "provisioning": {"delay_s": 20},
                                          "scale_down_cooldown_s": 30}}],
               "route": [{"class": "rag", "pool": "h200"}]}
    from capsim.metrics.day import day_cost
    _, _, _, res = pooled(cluster, duration_s=180, workload_extra=wl)
    h200 = res.pools[1]
    assert h200.fleet is not None and h200.fleet.scale_ups >= 1 and h200.num_replicas >= 2
    assert res.pools[0].fleet is None and res.day is not None
    hours = res.sim_end_s / 3600.0
    cost = day_cost(res)
    assert cost["cost_usd"] == pytest.approx(2 * 6.88 * hours + h200.fleet.cost_usd)
    assert cost["gpu_hours"] == pytest.approx(2 * hours + h200.fleet.gpu_hours)


def test_pools_route_by_least_outstanding_work_unless_told(tmp_path, write_scenario):
    """The issue's default for pools; a single fleet keeps round_robin."""
    doc = {"name": "p", "model": "llama-3.1-8b", "hardware": "h100-sxm",
           "engine": {"max_model_len": 4096}, "cluster": {"pools": TWO_POOLS},
           "workload": {"num_requests": 10, "classes": [CHAT],
                        "arrival": {"process": "poisson", "rate_per_s": 1}}}
    assert load(write_scenario(tmp_path, doc)).runs[0].fleet.policy == \
        "least_outstanding_tokens"
    single = {**doc, "cluster": {"num_replicas": 2}}
    assert load(write_scenario(tmp_path, single, "single.yaml")).runs[0].router == "round_robin"
