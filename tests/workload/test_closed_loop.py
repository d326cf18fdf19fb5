"""The closed loop's and all-at-once arrivals' schema and rows (capsim.scenario.workload,
capsim.workload.synthetic / build): what a scenario may say, what it is refused with, and
the rows a closed loop sends."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from capsim.common.errors import ScenarioError
from capsim.scenario.workload import WorkloadConfig
from capsim.workload import build
from capsim.workload.synthetic import BLOCK_ROWS

CLASSES = [{"name": "chat", "weight": 3,
            "prompt_tokens": {"dist": "uniform", "min": 16, "max": 2000},
            "output_tokens": {"dist": "lognormal", "mean": 120, "sigma": 0.8, "min": 2,
                              "max": 600}},
           {"name": "rag", "weight": 1,
            "prompt_tokens": {"dist": "fixed", "value": 3000},
            "output_tokens": {"dist": "fixed", "value": 50},
            "shared_prefix": {"tokens": 500, "fraction": 0.5, "num_templates": 2}}]


def closed(users=4, think_time_s=None, classes=None, **top) -> WorkloadConfig:
    """A closed-loop workload (120 requests unless ``duration_s`` is given)."""
    if "duration_s" not in top:
        top.setdefault("num_requests", 120)
    arrival = {"process": "concurrency", "users": users}
    if think_time_s is not None:
        arrival["think_time_s"] = think_time_s
    return WorkloadConfig.model_validate({"arrival": arrival, "classes": classes or CLASSES,
                                          **top})


# --------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------


def test_schema_accepts_the_documented_examples():
    wl = closed(users=50, think_time_s=0.0, warmup_request_count=20)
    assert wl.arrival.closed_loop and wl.arrival.users == 50 and wl.arrival.think_s == 0.0
    assert wl.warmup_request_count == 20 and wl.arrival.rate_per_s is None
    assert closed(users=1).arrival.think_s == 0.0                      # the default
    inf = WorkloadConfig.model_validate(yaml.safe_load(
        "num_requests: 100\narrival: {process: poisson, rate_per_s: .inf}\n"
        "classes: [{name: a, weight: 1, prompt_tokens: {dist: fixed, value: 8}, "
        "output_tokens: {dist: fixed, value: 8}}]"))
    assert inf.arrival.all_at_once and inf.arrival.rate_per_s == math.inf
    assert not closed().arrival.all_at_once


def messages(data: dict) -> list[str]:
    with pytest.raises(ValidationError) as info:
        WorkloadConfig.model_validate(data)
    return [f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
            for e in info.value.errors()]


def doc(arrival: dict, **top) -> dict:
    if "duration_s" not in top:
        top.setdefault("num_requests", 10)
    return {"arrival": arrival, "classes": CLASSES[:1], **top}


@pytest.mark.parametrize("data,expected", [
    (doc({"process": "concurrency", "users": 0}), "arrival.users: Input should be greater than 0"),
    (doc({"process": "concurrency", "users": -2}), "arrival.users: Input should be greater than 0"),
    (doc({"process": "concurrency", "users": 2.5}), "arrival.users: Input should be a valid integer"),
    (doc({"process": "concurrency", "users": 2, "think_time_s": -0.5}),
     "arrival.think_time_s: Input should be greater than or equal to 0"),
    (doc({"process": "concurrency", "users": 2, "think_time_s": math.inf}),
     "arrival.think_time_s: Input should be a finite number"),
    (doc({"process": "concurrency"}), "users is required for process: concurrency"),
    (doc({"process": "concurrency", "users": 2, "rate_per_s": 3}),
     "process: concurrency has no rate_per_s"),
    (doc({"process": "poisson", "rate_per_s": 3, "users": 2}),
     "users only applies to process: concurrency"),
    (doc({"process": "constant", "rate_per_s": 3, "think_time_s": 1}),
     "think_time_s only applies to process: concurrency"),
    (doc({"process": "poisson"}), "rate_per_s is required for process: poisson"),
    (doc({"process": "concurrency", "users": 2}, warmup_request_count=10),
     "warmup_request_count: must be < num_requests (10): no request would be measured"),
    (doc({"process": "poisson", "rate_per_s": 3}, warmup_request_count=-1),
     "warmup_request_count: Input should be greater than or equal to 0"),
    (doc({"process": "poisson", "rate_per_s": math.inf}, num_requests=None, duration_s=10),
     "arrival: rate_per_s: .inf sends every request at t = 0: give num_requests"),
    (doc({"process": "gamma", "rate_per_s": math.inf, "cv": 2}),
     "rate_per_s: .inf (every request at t = 0) applies to process: poisson or constant"),
    (doc({"process": "poisson", "rate_per_s": math.nan}),
     "arrival.rate_per_s: must be a number > 0 requests/s, or .inf"),
    (doc({"process": "poisson", "rate_per_s": -math.inf}),
     "arrival.rate_per_s: Input should be greater than 0"),
    (doc({"process": "gamma", "rate_per_s": 2, "cv": math.inf}),
     "arrival.cv: Input should be a finite number"),
    ({**doc({"process": "concurrency", "users": 2}),
      "classes": [{**CLASSES[0], "conversation": {"turns": {"dist": "fixed", "value": 3}}}]},
     "classes: classes.0 (chat) has conversation turns, which process: concurrency cannot send"),
    ({"arrival": {"process": "concurrency", "users": 2},
      "trace": {"path": "t.csv", "rate_scale": 2}},
     "trace: rate_scale has no effect in a closed loop"),
    ({"arrival": {"process": "poisson", "rate_per_s": 2}, "trace": {"path": "t.csv"}},
     "give either trace or arrival + classes, not both"),
])
def test_bad_closed_loop_or_all_at_once_input_is_refused(data, expected):
    assert any(expected in m for m in messages(data)), messages(data)


def test_bad_input_is_one_line_naming_file_and_yaml_path(tmp_path, run_cli, write_scenario):
    """Through the CLI: exit 2, one line naming the --set key (the value is not in the
    file), or, for a rule of the section it breaks, the file, the YAML path and the key;
    no report."""
    base = {"name": "c", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "workload": doc({"process": "concurrency", "users": 2})}
    path = write_scenario(tmp_path, base)
    out = tmp_path / "report"
    for setting, start in (
            ("workload.arrival.users=0", "--set workload.arrival.users: "),
            ("workload.arrival.think_time_s=-1", "--set workload.arrival.think_time_s: "),
            ("workload.warmup_request_count=10", "--set workload.warmup_request_count: "),
            ("workload.trace={path: t.csv}", f"{path}: workload: ")):
        code, _, err = run_cli(["run", str(path), "-o", str(out), "--set", setting])
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: {start}"), err
        assert not out.exists()
    assert err.endswith(" (with --set workload.trace)\n"), err


# --------------------------------------------------------------------------
# The rows a closed loop sends
# --------------------------------------------------------------------------


def test_closed_loop_rows_are_the_classes_draws_in_sending_order(tmp_path):
    trace = build(closed(users=3, think_time_s=0.25, warmup_request_count=5), 7, tmp_path)
    assert len(trace) == 120 and np.isnan(trace.arrival_s).all()
    loop = trace.closed_loop
    assert (loop.users, loop.think_time_s, loop.stop_s, loop.more) == (3, 0.25, math.inf, None)
    assert trace.warmup_requests == 5 and trace.class_names == ("chat", "rag")
    rag = trace.class_id == 1
    assert 0 < rag.sum() < 60                                # weight 1 of 4
    assert (trace.prompt_tokens[rag] == 3000 + 500).all()    # the shared prefix is prepended
    assert set(trace.prefix_id[rag]) <= {-1, 1_000_000, 1_000_001}
    assert (trace.parent == -1).all()


def test_rows_do_not_depend_on_users_think_time_or_count(tmp_path):
    """Common random numbers across a users sweep, and num_requests N is the first N rows of
    the endless sequence (blocks drawn from their own streams)."""
    a = build(closed(users=1, num_requests=50), 3, tmp_path)
    b = build(closed(users=64, think_time_s=2.0, num_requests=3 * BLOCK_ROWS + 7), 3, tmp_path)
    for col in ("prompt_tokens", "output_tokens", "class_id", "prefix_id"):
        assert np.array_equal(getattr(a, col), getattr(b, col)[:50])
    c = build(closed(users=1, num_requests=50), 4, tmp_path)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)
    again = build(closed(users=1, num_requests=50), 3, tmp_path)
    assert np.array_equal(a.output_tokens, again.output_tokens)


def test_a_loop_bounded_by_time_draws_more_rows_with_the_same_start(tmp_path):
    trace = build(closed(users=8, duration_s=30.0, warmup_request_count=3), 3, tmp_path)
    loop = trace.closed_loop
    assert loop.stop_s == 30.0 and loop.more is not None and len(trace) >= BLOCK_ROWS
    bigger = pickle.loads(pickle.dumps(loop.more))(len(trace) + 1)     # as a worker would
    assert len(bigger) > len(trace) and bigger.warmup_requests == 3
    for col in ("prompt_tokens", "output_tokens", "class_id", "prefix_id"):
        assert np.array_equal(getattr(bigger, col)[:len(trace)], getattr(trace, col))
    bounded = build(closed(users=8, num_requests=len(bigger)), 3, tmp_path)
    assert np.array_equal(bounded.prompt_tokens, bigger.prompt_tokens)


def test_empirical_lengths_are_read_once_and_travel_with_the_loop(tmp_path):
    csv = tmp_path / "lens.csv"
    csv.write_text("n\n" + "\n".join(str(v) for v in (10, 20, 30, 40)) + "\n")
    wl = closed(users=2, duration_s=10.0, classes=[
        {"name": "a", "weight": 1, "prompt_tokens": {"dist": "empirical", "path": "lens.csv",
                                                      "column": "n"},
         "output_tokens": {"dist": "fixed", "value": 4}}])
    trace = build(wl, 1, tmp_path)
    more = pickle.loads(pickle.dumps(trace.closed_loop.more))
    csv.unlink()                                  # a remote worker has no scenario files
    rows = more(5 * BLOCK_ROWS)
    assert set(rows.prompt_tokens) == {10, 20, 30, 40}


def test_a_trace_file_sent_by_a_closed_loop(tmp_path):
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.1,100,10\n"
                                    "2023-11-16 18:15:47.2,200,20\n"
                                    "2023-11-16 18:15:48.3,300,30\n")
    wl = WorkloadConfig.model_validate({
        "num_requests": 3, "warmup_request_count": 1, "trace": {"path": "t.csv"},
        "arrival": {"process": "concurrency", "users": 2, "think_time_s": 0.5}})
    trace = build(wl, 0, tmp_path)
    assert list(trace.prompt_tokens) == [100, 200, 300] and np.isnan(trace.arrival_s).all()
    assert trace.closed_loop.users == 2 and trace.closed_loop.think_time_s == 0.5
    assert trace.warmup_requests == 1
    with pytest.raises(ScenarioError, match="must be < the trace's 3 requests") as info:
        build(wl.model_copy(update={"num_requests": None, "warmup_request_count": 3}), 0,
              tmp_path)
    assert info.value.path == "workload.warmup_request_count"


def test_all_at_once_sends_every_request_at_zero_and_keeps_the_lengths(tmp_path):
    at_rate = WorkloadConfig.model_validate(doc({"process": "poisson", "rate_per_s": 5.0},
                                                num_requests=300))
    at_once = at_rate.model_copy(update={"arrival": at_rate.arrival.model_copy(
        update={"rate_per_s": math.inf})})
    a, b = build(at_rate, 9, tmp_path), build(at_once, 9, tmp_path)
    assert (b.arrival_s == 0.0).all() and b.closed_loop is None
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    constant = at_once.model_copy(update={"arrival": at_once.arrival.model_copy(
        update={"process": "constant"})})
    assert (build(constant, 9, tmp_path).arrival_s == 0.0).all()


def test_open_loop_warmup_must_leave_a_request_arriving_before_duration(tmp_path):
    wl = WorkloadConfig.model_validate(doc({"process": "constant", "rate_per_s": 1.0},
                                           num_requests=None, duration_s=5.0,
                                           warmup_request_count=5))
    with pytest.raises(ScenarioError, match="all 5 requests arriving before duration_s=5") as e:
        build(wl, 0, tmp_path)
    assert e.value.path == "workload.warmup_request_count"
    assert build(wl.model_copy(update={"warmup_request_count": 4}), 0, tmp_path) \
        .warmup_requests == 4
