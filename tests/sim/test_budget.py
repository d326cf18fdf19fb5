"""Work a fleet would take, refused before it starts (capsim.sim.budget): autoscaler ticks,
replicas made by failures, retries that never end. Issue 31's examples: interval_s 1e-6
ran past 2 minutes; mtbf_s 0.001 / mttr_s 0.001 grew a worker past 12 GB."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from capsim.common.errors import ScenarioError
from capsim.scenario.load import load
from capsim.sim.budget import (MAX_AUTOSCALER_TICKS, MAX_EXPECTED_ATTEMPTS, check_run_work,
                               check_work)
from capsim.workload import TraceCache

BASE = {
    "name": "budget", "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096}, "cluster": {"num_replicas": 2},
    "workload": {"duration_s": 60, "arrival": {"process": "poisson", "rate_per_s": 5},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 200},
                              "output_tokens": {"dist": "fixed", "value": 20}}]},
}
AUTOSCALED = {"signal": "running", "target": 6, "max_replicas": 4}


def _doc(cluster: dict, **top) -> dict:
    return {**BASE, "cluster": {**BASE["cluster"], **cluster}, **top}


def _refused(tmp_path, run_cli, write_scenario, doc) -> str:
    """The one error line capsim validate and capsim run both give; run writes nothing."""
    path = write_scenario(tmp_path, doc)
    code, out, err = run_cli(["validate", str(path)])
    assert (code, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err
    code, _, run_err = run_cli(["run", str(path), "-o", str(tmp_path / "out"), "--workers", "1"])
    assert (code, run_err) == (2, err)
    assert not (tmp_path / "out").exists()
    return err.removeprefix(f"error: {path}: ")


def test_an_autoscaler_ticking_every_microsecond_is_refused_with_the_count(
        tmp_path, run_cli, write_scenario):
    err = _refused(tmp_path, run_cli, write_scenario,
                   _doc({"autoscaling": {**AUTOSCALED, "interval_s": 1e-6}}))
    # 303 arrivals, the last at 59.42 s (seed 0): 59.4 million ticks.
    assert err == ("cluster.autoscaling.interval_s: interval_s 1e-06 would tick the autoscaler "
                   "at least 59,424,302 times over the run's 59.42 s, more than 1,000,000 "
                   "(each reads every replica); valid here: interval_s >= 6e-05 (Kubernetes "
                   "HPA's default is 15)\n")


def test_a_microsecond_interval_on_a_five_second_run_is_refused(tmp_path, run_cli,
                                                                write_scenario):
    """Issue 31: interval_s 1e-6 on a 5-s run (5 million ticks, ~35 s of CPU at the 7.4 µs
    a tick measured in capsim.sim.budget) was accepted under a limit of 10 million."""
    doc = _doc({"autoscaling": {**AUTOSCALED, "interval_s": 1e-6}},
               workload={**BASE["workload"], "duration_s": 5})
    err = _refused(tmp_path, run_cli, write_scenario, doc)
    assert err.startswith("cluster.autoscaling.interval_s: interval_s 1e-06 would tick the "
                          "autoscaler at least 4,")
    assert "more than 1,000,000 (each reads every replica); valid here: interval_s >= 5e-06" \
        in err


def test_a_rate_limit_that_would_never_refill_a_token_is_refused(tmp_path, run_cli,
                                                                 write_scenario):
    """Issue 31: router_rate_limit.rate_per_s 1e-300 was accepted; its bucket gains less
    than one token over the run, so the rate plays no part."""
    err = _refused(tmp_path, run_cli, write_scenario,
                   _doc({"router_rate_limit": {"rate_per_s": 1e-300, "burst": 40}}))
    assert err == ("cluster.router_rate_limit.rate_per_s: rate_per_s 1e-300 would add "
                   "5.94e-299 token(s) to the bucket over the run's 59.42 s, less than one "
                   "request: the limit would pass the first burst (40) and refuse every later "
                   "request, its rate playing no part; valid here: rate_per_s >= 0.017, or a "
                   "longer run\n")


def test_a_rate_limit_is_checked_at_its_variant(tmp_path, run_cli, write_scenario):
    """One token over the run (1 / 59.42 s) passes; under it is named at the variant."""
    doc = {**_doc({}), "variants": [
        {"name": "a", "cluster": {"router_rate_limit": {"rate_per_s": 0.0169, "burst": 4}}},
        {"name": "b", "cluster": {"router_rate_limit": {"rate_per_s": 0.0168, "burst": 4}}}]}
    err = _refused(tmp_path, run_cli, write_scenario, doc)
    assert err.startswith("variants.1.cluster.router_rate_limit.rate_per_s: rate_per_s 0.0168 "
                          "would add 0.998 token(s)")


def test_failures_every_millisecond_are_refused_before_a_replica_is_made(
        tmp_path, run_cli, write_scenario):
    err = _refused(tmp_path, run_cli, write_scenario,
                   _doc({"failures": {"mtbf_s": 0.001, "mttr_s": 0.001}}))
    assert err == ("cluster.failures.mtbf_s: mtbf_s 0.001 + mttr_s 0.001 would fail and "
                   "replace 2 replica(s) about 59,424 times over the run's 59.42 s; a run "
                   "keeps every replica it makes (each its own KV pool), at most 1,024: valid "
                   "here: mtbf_s + mttr_s >= 0.12\n")


def test_a_replica_failing_faster_than_a_reply_would_retry_it_forever(
        tmp_path, run_cli, write_scenario):
    doc = {**_doc({"failures": {"mtbf_s": 0.01, "mttr_s": 60}}), "variants": [
        {"name": "a"}, {"name": "b", "cluster": {"failures": {"mtbf_s": 0.01, "mttr_s": 60}}}]}
    del doc["cluster"]["failures"]
    err = _refused(tmp_path, run_cli, write_scenario, doc)
    # 20 tokens × one decode step alone (llama-3.1-8b, H100, vLLM V1: 6.6 ms) = 0.13 s;
    # e^(0.13 / 0.01) = 5.6e5 sends of it on average.
    assert err.startswith("variants.1.cluster.failures.mtbf_s: mtbf_s 0.01 is shorter than "
                          "the longest reply takes alone (0.1323 s): with in_flight: retry it "
                          "would be sent about 5.59e+05 times on average before it finishes "
                          "(at most 100); valid here: mtbf_s >= 0.029, or in_flight: fail\n")
    # Counted as failed instead, the run ends: accepted.
    doc["variants"][1]["cluster"]["failures"]["in_flight"] = "fail"
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0, err


def test_a_pooled_fleets_failures_are_named_at_the_pool(tmp_path, run_cli, scenarios_dir):
    code, _, err = run_cli(["validate", str(scenarios_dir / "hetero_fleet.yaml"), "--set",
                            'cluster.pools.0.failures={"mtbf_s": 0.01, "mttr_s": 0.01}'])
    assert code == 2 and err.startswith(
        "error: --set cluster.pools.0.failures: cluster.pools.0.failures.mtbf_s: mtbf_s 0.01 "
        "+ mttr_s 0.01 would fail and replace")


def test_a_swept_value_is_refused_at_its_sweep_key_by_validate_and_sweep(
        tmp_path, run_cli, write_scenario):
    doc = {**_doc({"failures": {"mtbf_s": 3600, "mttr_s": 60}}),
           "sweep": {"cluster.failures.mtbf_s": [3600, 0.001]}}
    path = write_scenario(tmp_path, doc)
    expected = (f"error: {path}: sweep.cluster.failures.mtbf_s: mtbf_s 0.001 is shorter than "
                "the longest reply takes alone (0.1323 s)")
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.startswith(expected) and err.endswith(
        "(sweep point cluster.failures.mtbf_s=0.001)\n")
    code, _, sweep_err = run_cli(["sweep", str(path), "--executor", "serial", "-o",
                                  str(tmp_path / "out")])
    assert (code, sweep_err) == (2, err) and not (tmp_path / "out").exists()


def test_the_estimates_sit_on_the_limits(tmp_path, write_scenario):
    """Just within a limit passes, just past it is refused (the quoted valid bounds)."""
    path = write_scenario(tmp_path, _doc({"autoscaling": {**AUTOSCALED, "interval_s": 6e-5},
                                          "failures": {"mtbf_s": 0.06, "mttr_s": 0.06}}))
    rc = load(path).runs[0]
    trace = TraceCache(path.parent, str(path)).get(rc.workload, rc.seed)
    check_run_work(rc, trace, lambda key: f"cluster.{key}")        # within every limit
    span = float(trace.arrival_s.max())
    assert span / 6e-5 <= MAX_AUTOSCALER_TICKS < span / 5e-5
    assert 0.13 / 0.06 < math.log(MAX_EXPECTED_ATTEMPTS)
    faster = replace(rc, autoscaling=rc.autoscaling.model_copy(update={"interval_s": 5e-5}))
    with pytest.raises(ScenarioError, match="interval_s 5e-05 would tick"):
        check_run_work(faster, trace, lambda key: f"cluster.{key}")


def test_shipped_fleets_are_far_within_the_limits(scenarios_dir):
    path = scenarios_dir / "day_in_the_life.yaml"
    loaded = load(path)
    check_work(loaded, TraceCache(loaded.base_dir, str(path)))


def test_conversations_later_turns_do_not_hide_the_span(tmp_path, run_cli, write_scenario):
    """Later turns arrive after their previous reply (NaN in the trace's arrival column):
    the span is the last first turn's arrival, not NaN (which passed every check)."""
    doc = _doc({"autoscaling": {**AUTOSCALED, "interval_s": 1e-6}})
    doc["workload"]["classes"][0]["conversation"] = {"turns": {"dist": "fixed", "value": 3}}
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 2 and "interval_s 1e-06 would tick the autoscaler at least" in err
