"""SGLang's scheduler in a prefill/decode split (SGLang's --disaggregation-mode prefill /
decode): a prefill replica runs SGLang's prefill steps and hands each request off after its
first token; a decode replica takes the transferred KV and decodes with SGLang's policy."""

from __future__ import annotations

from capsim.scenario.load import load
from capsim.sim.simulate import simulate
from capsim.workload import build


def test_sglang_pools_run_a_split_to_the_end(disagg_scenario, disagg):
    """1 prefill + 1 decode replica of sglang-0.5 on H100s, 120 chat requests at 6 req/s:
    both pools run SGLang's scheduler (the decode pool without the radix cache), every
    request finishes with its first token before its last, and the same run twice is
    identical."""
    path = disagg_scenario([{"name": "1P1D", "disaggregation": disagg()}],
                           engine={"preset": "sglang-0.5", "max_model_len": 8192})
    run = load(path).runs[0]
    assert {p.role: p.engine.scheduler for p in run.pools} == {"prefill": "sglang",
                                                                 "decode": "sglang"}
    # _handle_pd_disaggregation: the decode server runs without the radix cache
    assert {p.role: p.engine.enable_prefix_caching for p in run.pools} == {
        "prefill": True, "decode": False}
    trace = build(run.workload, run.seed, base_dir=path.parent)
    a, b = simulate(run, trace), simulate(run, trace)
    r = a.requests
    assert (r.status == "finished").all() and r.status.size == 120
    assert (r.first_token_s <= r.finish_s).all()
    assert a.requests.finish_s.tolist() == b.requests.finish_s.tolist()
