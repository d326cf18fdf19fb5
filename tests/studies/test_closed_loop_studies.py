"""Closed loops and all-at-once arrivals in studies: a sweep over users (the concurrency
curve), a rate sweep reaching .inf, and capsim size refusing what has no rate to search."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from capsim.studies import sweep
from capsim.studies.parallel import ExecutorSpec, open_runner

DOC = {
    "name": "conc", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096, "max_num_seqs": 64},
    "workload": {"num_requests": 90, "warmup_request_count": 10,
                 "arrival": {"process": "concurrency", "users": 1},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "uniform", "min": 64, "max": 2000},
                              "output_tokens": {"dist": "uniform", "min": 16, "max": 200}}]},
    "slo": {"targets": {"ttft_p99_ms": 400}},
    "sweep": {"workload.arrival.users": [1, 4, 16, 48]},
}


def with_(**sections) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc.update(sections)
    return doc


def test_a_sweep_over_users_gives_the_concurrency_curve(tmp_path, write_scenario):
    plan = sweep.plan(write_scenario(tmp_path, DOC))
    tasks = sweep.tasks(plan, [plan.base.spec.seed])
    # Common random numbers: every point sends the same requests in the same order.
    for t in tasks[1:]:
        assert np.array_equal(t.trace.prompt_tokens, tasks[0].trace.prompt_tokens)
        assert t.trace.closed_loop.users == t.labels["workload.arrival.users"]
    assert all(math.isnan(t.labels["offered_rate_per_s"]) for t in tasks)
    with open_runner(ExecutorSpec("serial")) as runner:
        result = sweep.run(plan, [plan.base.spec.seed], runner)
    points = result.points.sort_values("workload.arrival.users")
    assert list(points["workload.arrival.users"]) == [1, 4, 16, 48]
    assert (points["num_requests"] == 80).all()                    # warm-up left out
    tput = points["output_throughput_tok_per_s"].to_numpy()
    itl = points["itl_mean_ms"].to_numpy()
    ttft = points["ttft_mean_ms"].to_numpy()
    assert np.all(np.diff(tput) > 0)             # more users, more tokens/s ...
    assert np.all(np.diff(itl) > 0)              # ... each one slower
    assert ttft[-1] > ttft[0]


def test_cli_sweep_over_users_writes_the_curve(tmp_path, run_cli, write_scenario):
    out = tmp_path / "report"
    code, stdout, err = run_cli(["sweep", str(write_scenario(tmp_path, DOC)), "-o", str(out),
                                 "--workers", "1"])
    assert code == 0, err
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["workload.arrival.users"]) == [1, 4, 16, 48]
    assert summary["offered_rate_per_s"].isna().all()
    assert "workload.arrival.users" in stdout


def test_a_rate_sweep_may_end_all_at_once(tmp_path, write_scenario):
    doc = with_(workload={**DOC["workload"], "arrival": {"process": "poisson", "rate_per_s": 2}},
                sweep={"workload.arrival.rate_per_s": [2.0, math.inf]})
    plan = sweep.plan(write_scenario(tmp_path, doc))
    tasks = sweep.tasks(plan, [plan.base.spec.seed])
    assert [t.labels["offered_rate_per_s"] for t in tasks] == [2.0, math.inf]
    assert (tasks[1].trace.arrival_s == 0.0).all()
    assert np.array_equal(tasks[0].trace.prompt_tokens, tasks[1].trace.prompt_tokens)


@pytest.mark.parametrize("arrival,where,expected", [
    ({"process": "concurrency", "users": 8}, "workload.arrival.process",
     "capsim size searches request rates"),
    ({"process": "poisson", "rate_per_s": math.inf}, "workload.arrival.rate_per_s",
     "capsim size needs a finite request rate"),
])
def test_size_refuses_loads_without_a_rate_to_search(tmp_path, run_cli, write_scenario, arrival,
                                                     where, expected):
    doc = with_(workload={**DOC["workload"], "arrival": arrival})
    doc.pop("sweep")
    path = write_scenario(tmp_path, doc)
    out = tmp_path / "r"
    for args in ([], ["--rate", "5"], ["--gpus", "2"]):
        code, _, err = run_cli(["size", str(path), "-o", str(out), *args])
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: {path}: {where}: {expected}"), err
        assert not out.exists()
