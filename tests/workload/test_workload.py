"""Tests for capsim.workload and the workload schema (capsim.scenario.workload)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from capsim.scenario.workload import WorkloadConfig
from capsim.common.errors import ScenarioError
from capsim.workload import RequestTrace, build

FIXED_8 = {"dist": "fixed", "value": 8}


def synthetic(arrival=None, classes=None, **top) -> WorkloadConfig:
    """A synthetic workload; defaults: 1000 Poisson requests at 10/s, one fixed class."""
    if "duration_s" not in top:
        top.setdefault("num_requests", 1000)
    return WorkloadConfig.model_validate(
        {
            "arrival": arrival or {"process": "poisson", "rate_per_s": 10.0},
            "classes": classes
            or [{"name": "a", "weight": 1, "prompt_tokens": FIXED_8, "output_tokens": FIXED_8}],
            **top,
        }
    )


def one_class(prompt=FIXED_8, output=FIXED_8) -> list[dict]:
    return [{"name": "a", "weight": 1, "prompt_tokens": prompt, "output_tokens": output}]


def cv(x: np.ndarray) -> float:
    return float(x.std() / x.mean())


# --------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------


def errors_of(data: dict) -> list[str]:
    with pytest.raises(ValidationError) as info:
        WorkloadConfig.model_validate(data)
    return [e["msg"] for e in info.value.errors()]


def test_schema_accepts_the_documented_example():
    cfg = WorkloadConfig.model_validate(
        {
            "num_requests": 2000,
            "arrival": {"process": "gamma", "rate_per_s": 8.0, "cv": 2.0},
            "classes": [
                {
                    "name": "chat",
                    "weight": 0.7,
                    "prompt_tokens": {"dist": "lognormal", "mean": 600, "sigma": 0.8, "min": 16, "max": 4096},
                    "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.7, "min": 8, "max": 1024},
                    "slo": {"ttft_ms": 1000, "tpot_ms": 50},
                },
                {
                    "name": "rag",
                    "weight": 0.3,
                    "prompt_tokens": {"dist": "uniform", "min": 3000, "max": 8000},
                    "output_tokens": {"dist": "fixed", "value": 200},
                },
            ],
        }
    )
    assert cfg.class_names == ("chat", "rag")
    assert cfg.classes[0].slo == {"ttft_ms": 1000.0, "tpot_ms": 50.0}
    trace_cfg = WorkloadConfig.model_validate(
        {
            "trace": {
                "path": "t.csv",
                "format": "azure",
                "columns": {"arrival": "TIMESTAMP", "prompt_tokens": "ContextTokens", "output_tokens": "GeneratedTokens"},
                "rate_scale": 1.0,
                "class_name": "trace",
            }
        }
    )
    assert trace_cfg.class_names == ("trace",)


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"num_requests": 5, "duration_s": 5.0}, "exactly one of num_requests or duration_s"),
        ({}, "exactly one of num_requests or duration_s"),
        ({"num_requests": 0}, "greater than 0"),
        ({"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 0}}, "greater than 0"),
        ({"num_requests": 5, "arrival": {"process": "gamma", "rate_per_s": 1}}, "cv is required"),
        ({"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1, "cv": 2}}, "cv only applies"),
        ({"num_requests": 5, "arrival": {"process": "burst", "rate_per_s": 1}}, "'poisson', 'gamma', 'constant' or 'concurrency'"),
        ({"num_requests": 5, "classes": []}, "at least 1 item"),
        ({"num_requests": 5, "classes": one_class() * 2}, "class names must be unique; repeated: a"),
        ({"num_requests": 5, "classes": one_class(prompt={"dist": "zipf"})},
         "unknown dist 'zipf'; valid: fixed, uniform, normal, lognormal, empirical"),
        ({"num_requests": 5, "classes": one_class(prompt={"mean": 3})}, "missing dist; valid: fixed"),
        ({"num_requests": 5, "classes": one_class(prompt={"dist": "uniform", "min": 10, "max": 5})},
         "min must be ≤ max (got min=10, max=5)"),
        ({"num_requests": 5, "classes": one_class(prompt={"dist": "fixed", "value": 0})}, "greater than or equal to 1"),
        ({"num_requests": 5, "classes": one_class(
            output={"dist": "lognormal", "mean": 100, "sigma": 1, "min": 0, "max": 10})},
         "greater than or equal to 1"),
        ({"num_requests": 5, "classes": one_class(output={"dist": "fixed", "value": 3, "max": 4})}, "Extra inputs"),
    ],
)
def test_schema_errors_say_what_is_valid(data, expected):
    base = {"arrival": {"process": "poisson", "rate_per_s": 1.0}, "classes": one_class()}
    msgs = errors_of({**base, **data})
    assert any(expected in m for m in msgs), msgs


def test_schema_trace_rules():
    assert any("not both" in m for m in errors_of(
        {"trace": {"path": "x.csv"}, "arrival": {"process": "poisson", "rate_per_s": 1}}))
    assert any("missing arrival and classes" in m for m in errors_of({"num_requests": 3}))
    assert any("format: columns needs columns" in m for m in errors_of(
        {"trace": {"path": "x.csv", "format": "columns"}}))
    assert any("at most one" in m for m in errors_of(
        {"trace": {"path": "x.csv"}, "num_requests": 3, "duration_s": 1.0}))
    assert any("greater than 0" in m for m in errors_of({"trace": {"path": "x.csv", "rate_scale": 0}}))
    # trace without a count is fine (replay everything)
    WorkloadConfig.model_validate({"trace": {"path": "x.csv"}})


# --------------------------------------------------------------------------
# Synthetic arrivals
# --------------------------------------------------------------------------


def test_same_seed_identical_different_seed_different():
    cfg = synthetic(
        classes=one_class(
            prompt={"dist": "lognormal", "mean": 600, "sigma": 0.8, "min": 1, "max": 8192},
            output={"dist": "uniform", "min": 1, "max": 500},
        )
    )
    a, b, c = build(cfg, 7, Path(".")), build(cfg, 7, Path(".")), build(cfg, 8, Path("."))
    for col in ("arrival_s", "prompt_tokens", "output_tokens", "class_id", "prefix_id"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)


def test_trace_columns_types_and_readonly():
    tr = build(synthetic(), 0, Path("."))
    assert len(tr) == 1000
    assert tr.arrival_s.dtype == np.float64 and tr.prompt_tokens.dtype == np.int64
    assert tr.output_tokens.dtype == np.int64
    assert tr.class_id.dtype == np.int32 and tr.prefix_id.dtype == np.int32
    assert (tr.prefix_id == -1).all()
    assert tr.class_names == ("a",)
    assert tr.total_prompt_tokens == 8000 and tr.total_output_tokens == 8000
    assert tr.duration_s == pytest.approx(tr.arrival_s[-1] - tr.arrival_s[0])
    with pytest.raises(ValueError):
        tr.arrival_s[0] = 5.0


def test_poisson_mean_and_cv():
    tr = build(synthetic(num_requests=200_000), 1, Path("."))
    gaps = np.diff(np.concatenate([[0.0], tr.arrival_s]))
    assert tr.arrival_s[0] > 0  # first arrival after the first gap, not at 0
    assert gaps.mean() == pytest.approx(0.1, rel=0.01)
    assert cv(gaps) == pytest.approx(1.0, abs=0.02)


def test_gamma_cv():
    tr = build(synthetic({"process": "gamma", "rate_per_s": 10.0, "cv": 3.0}, num_requests=200_000), 2, Path("."))
    gaps = np.diff(np.concatenate([[0.0], tr.arrival_s]))
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert cv(gaps) == pytest.approx(3.0, rel=0.05)


def test_constant_exact_spacing():
    tr = build(synthetic({"process": "constant", "rate_per_s": 4.0}, num_requests=9), 0, Path("."))
    assert tr.arrival_s.tolist() == [i * 0.25 for i in range(9)]
    # duration: arrivals in [0, 2.0), none at 2.0
    tr = build(synthetic({"process": "constant", "rate_per_s": 4.0}, duration_s=2.0), 0, Path("."))
    assert tr.arrival_s.tolist() == [i * 0.25 for i in range(8)]


@pytest.mark.parametrize("process", ["poisson", "gamma"])
def test_duration_cutoff_is_prefix_of_count(process):
    arrival = {"process": process, "rate_per_s": 20.0, **({"cv": 2.5} if process == "gamma" else {})}
    by_time = build(synthetic(arrival, duration_s=300.0), 5, Path("."))
    assert by_time.arrival_s[-1] < 300.0
    assert len(by_time) == pytest.approx(6000, rel=0.15)
    by_count = build(synthetic(arrival, num_requests=len(by_time) + 1), 5, Path("."))
    assert np.array_equal(by_count.arrival_s[:-1], by_time.arrival_s)
    assert by_count.arrival_s[-1] >= 300.0  # the next request would be beyond the cut


def test_duration_with_no_arrival_is_an_error():
    cfg = synthetic({"process": "constant", "rate_per_s": 1.0}, duration_s=1e-9)
    tr = build(cfg, 0, Path("."))  # constant: the request at t=0 is inside [0, 1e-9)
    assert len(tr) == 1
    cfg = synthetic({"process": "poisson", "rate_per_s": 1e-6}, duration_s=1.0)
    with pytest.raises(ScenarioError, match="no request arrives before duration_s"):
        build(cfg, 0, Path("."))


def test_million_requests_is_fast():
    import time

    cfg = synthetic(
        {"process": "gamma", "rate_per_s": 50.0, "cv": 2.0},
        classes=[
            {"name": "chat", "weight": 3, "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.7, "min": 8, "max": 1024},
             "prompt_tokens": {"dist": "lognormal", "mean": 600, "sigma": 0.8, "min": 16, "max": 4096}},
            {"name": "rag", "weight": 1, "prompt_tokens": {"dist": "uniform", "min": 3000, "max": 8000},
             "output_tokens": {"dist": "normal", "mean": 200, "std": 50, "min": 1, "max": 1000}},
        ],
        num_requests=1_000_000,
    )
    # CPU seconds of this process, not wall time: on a shared 2-CPU machine the wall clock
    # counts other jobs' time too (1.5 s of wall for well under 1 s of CPU, a fresh clone's
    # first test run).
    start = time.process_time()
    tr = build(cfg, 0, Path("."))
    assert time.process_time() - start < 1.0
    assert len(tr) == 1_000_000


# --------------------------------------------------------------------------
# Lengths and classes
# --------------------------------------------------------------------------


def test_lognormal_mean_is_the_configured_mean():
    dist = {"dist": "lognormal", "mean": 600, "sigma": 0.8, "min": 1, "max": 10_000_000}
    tr = build(synthetic(classes=one_class(prompt=dist), num_requests=400_000), 3, Path("."))
    assert tr.prompt_tokens.mean() == pytest.approx(600, rel=0.02)
    # median of a log-normal = mean * exp(-sigma^2 / 2)
    assert np.median(tr.prompt_tokens) == pytest.approx(600 * np.exp(-0.32), rel=0.02)


@pytest.mark.parametrize(
    "dist, lo, hi",
    [
        ({"dist": "lognormal", "mean": 600, "sigma": 1.5, "min": 100, "max": 1000}, 100, 1000),
        ({"dist": "normal", "mean": 50, "std": 100, "min": 1, "max": 120}, 1, 120),
        ({"dist": "uniform", "min": 3, "max": 7}, 3, 7),
    ],
)
def test_clipping_respected(dist, lo, hi):
    tr = build(synthetic(classes=one_class(output=dist), num_requests=50_000), 4, Path("."))
    out = tr.output_tokens
    assert out.min() == lo and out.max() == hi  # both bounds are hit with these parameters


def test_uniform_is_inclusive_and_flat():
    tr = build(synthetic(classes=one_class(prompt={"dist": "uniform", "min": 3, "max": 7}), num_requests=100_000),
               0, Path("."))
    counts = np.bincount(tr.prompt_tokens)[3:]
    assert len(counts) == 5
    assert counts / counts.sum() == pytest.approx([0.2] * 5, abs=0.01)


def test_class_weights_give_fractions():
    classes = [
        {"name": n, "weight": w, "prompt_tokens": FIXED_8, "output_tokens": {"dist": "fixed", "value": i + 1}}
        for i, (n, w) in enumerate([("chat", 0.7), ("rag", 0.2), ("batch", 0.1)])
    ]
    tr = build(synthetic(classes=classes, num_requests=200_000), 9, Path("."))
    frac = np.bincount(tr.class_id, minlength=3) / len(tr)
    assert frac == pytest.approx([0.7, 0.2, 0.1], abs=0.01)
    assert tr.class_names == ("chat", "rag", "batch")
    # each class got its own length distribution
    assert (tr.output_tokens == tr.class_id + 1).all()


def test_changing_one_class_length_keeps_arrivals_and_other_classes():
    def cfg(out_b):
        return synthetic(
            {"process": "gamma", "rate_per_s": 5.0, "cv": 2.0},
            classes=[
                {"name": "a", "weight": 1, "prompt_tokens": {"dist": "uniform", "min": 1, "max": 999},
                 "output_tokens": {"dist": "lognormal", "mean": 100, "sigma": 1, "min": 1, "max": 5000}},
                {"name": "b", "weight": 2, "prompt_tokens": {"dist": "uniform", "min": 1, "max": 999},
                 "output_tokens": out_b},
            ],
            num_requests=5000,
        )

    x = build(cfg({"dist": "fixed", "value": 10}), 11, Path("."))
    y = build(cfg({"dist": "normal", "mean": 300, "std": 80, "min": 1, "max": 2000}), 11, Path("."))
    assert np.array_equal(x.arrival_s, y.arrival_s)
    assert np.array_equal(x.class_id, y.class_id)
    assert np.array_equal(x.prompt_tokens, y.prompt_tokens)
    a = x.class_id == 0
    assert np.array_equal(x.output_tokens[a], y.output_tokens[a])
    assert not np.array_equal(x.output_tokens[~a], y.output_tokens[~a])


def test_empirical_samples_from_column(tmp_path):
    (tmp_path / "lens.csv").write_text("id,len\n1,10\n2,20\n\n3,30.4\n4,5000\n")
    dist = {"dist": "empirical", "path": "lens.csv", "column": "len", "max": 1000}
    tr = build(synthetic(classes=one_class(prompt=dist), num_requests=20_000), 0, tmp_path)
    values, counts = np.unique(tr.prompt_tokens, return_counts=True)
    assert values.tolist() == [10, 20, 30, 1000]  # 30.4 rounds to 30, 5000 clips to 1000
    assert counts / counts.sum() == pytest.approx([0.25] * 4, abs=0.02)


def test_empirical_errors(tmp_path):
    (tmp_path / "lens.csv").write_text("len\n10\nabc\n")
    dist = {"dist": "empirical", "path": "lens.csv", "column": "len"}
    with pytest.raises(ScenarioError) as info:
        build(synthetic(classes=one_class(output=dist)), 0, tmp_path)
    assert info.value.path == "workload.classes.0.output_tokens.path"
    assert "line 3" in str(info.value) and "'abc'" in str(info.value)
    (tmp_path / "huge.csv").write_text("len\n10\n1e20\n")
    dist = {"dist": "empirical", "path": "huge.csv", "column": "len"}
    with pytest.raises(ScenarioError, match=r"line 3: column 'len' must be at most "
                                            r"2,147,483,647 tokens, got '1e20'"):
        build(synthetic(classes=one_class(output=dist)), 0, tmp_path)
    dist = {"dist": "empirical", "path": "nope.csv", "column": "len"}
    with pytest.raises(ScenarioError, match="empirical length file not found"):
        build(synthetic(classes=one_class(output=dist)), 0, tmp_path)


# --------------------------------------------------------------------------
# Trace replay: the real Azure 2023 conversation trace
# --------------------------------------------------------------------------


def trace_cfg(path, **trace) -> WorkloadConfig:
    top = {k: trace.pop(k) for k in ("num_requests", "duration_s") if k in trace}
    return WorkloadConfig.model_validate({"trace": {"path": str(path), **trace}, **top})


def test_azure_conv_replay_matches_independent_csv_read(azure_conv_trace):
    with azure_conv_trace.open(newline="") as f:
        rows = list(csv.DictReader(f))
    prompt_sum = sum(int(r["ContextTokens"]) for r in rows)
    output_sum = sum(int(r["GeneratedTokens"]) for r in rows)

    tr = build(trace_cfg(azure_conv_trace), 0, Path("."))
    assert len(tr) == len(rows) == 19_366
    assert tr.arrival_s[0] == 0.0
    # the file spans 18:15:46.68059 .. 19:14:08.402527 — 58.4 min, not a full hour
    assert tr.duration_s == pytest.approx(3501.721937, abs=1e-6)
    assert tr.total_prompt_tokens == prompt_sum == 22_361_870
    assert tr.total_output_tokens == output_sum == 4_088_665
    assert tr.class_names == ("trace",) and (tr.class_id == 0).all()
    assert tr.prompt_tokens[:3].tolist() == [374, 396, 879]
    assert tr.arrival_s[1] == pytest.approx(4.314579, abs=1e-9)


def test_splitwise_columns_format_equals_azure_timestamps(azure_conv_trace, splitwise_conv_trace):
    azure = build(trace_cfg(azure_conv_trace), 0, Path("."))
    cols = {"arrival": "arrived_at", "prompt_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"}
    split = build(trace_cfg(splitwise_conv_trace, format="columns", columns=cols), 0, Path("."))
    assert np.allclose(split.arrival_s, azure.arrival_s, rtol=0, atol=1e-6)
    assert np.array_equal(split.prompt_tokens, azure.prompt_tokens)
    assert np.array_equal(split.output_tokens, azure.output_tokens)


def test_rate_scale_and_cutoffs(azure_conv_trace):
    full = build(trace_cfg(azure_conv_trace), 0, Path("."))
    fast = build(trace_cfg(azure_conv_trace, rate_scale=2.0), 0, Path("."))
    assert fast.duration_s == pytest.approx(full.duration_s / 2)
    assert np.array_equal(fast.prompt_tokens, full.prompt_tokens)
    first = build(trace_cfg(azure_conv_trace, num_requests=100), 0, Path("."))
    assert len(first) == 100 and np.array_equal(first.arrival_s, full.arrival_s[:100])
    ten_min = build(trace_cfg(azure_conv_trace, duration_s=600.0), 0, Path("."))
    assert len(ten_min) == int((full.arrival_s < 600.0).sum())
    assert ten_min.arrival_s[-1] < 600.0
    with pytest.raises(ScenarioError, match="only 19366 rows"):
        build(trace_cfg(azure_conv_trace, num_requests=20_000), 0, Path("."))


def test_trace_path_relative_to_base_dir(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.5000000,10,2\n"
        "2023-11-16 18:15:47.0000000,20,3\n"
    )
    tr = build(trace_cfg("sub/t.csv"), 0, tmp_path)
    assert tr.arrival_s.tolist() == [0.0, 0.5]


def test_unsorted_trace_is_stably_sorted(tmp_path):
    (tmp_path / "t.csv").write_text("t,p,o\n5.0,1,1\n2.0,2,2\n5.0,3,3\n3.0,4,4\n")
    cols = {"arrival": "t", "prompt_tokens": "p", "output_tokens": "o"}
    tr = build(trace_cfg(tmp_path / "t.csv", format="columns", columns=cols), 0, tmp_path)
    assert tr.arrival_s.tolist() == [0.0, 1.0, 3.0, 3.0]
    assert tr.prompt_tokens.tolist() == [2, 4, 1, 3]


def test_zero_output_tokens_become_one(tmp_path):
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.0,10,0\n2023-11-16 18:15:47.0,10,5\n")
    tr = build(trace_cfg(tmp_path / "t.csv"), 0, tmp_path)
    assert tr.output_tokens.tolist() == [1, 5]


# --------------------------------------------------------------------------
# Trace replay: errors
# --------------------------------------------------------------------------

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_ROW = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    "body, line, value, words",
    [
        (GOOD_ROW + "2023-11-16 18:15:50.9951690,39x6,109\n", 3, "'39x6'", "whole number"),
        (GOOD_ROW * 2 + "2023-11-16 18:15:50.9951690,396,10.5\n", 4, "'10.5'", "whole number"),
        (GOOD_ROW + "2023-11-16 18:15:50.9951690,,109\n", 3, "''", "whole number"),
        (GOOD_ROW + "2023-11-16 18:15:50.9951690,0,109\n", 3, "'0'", ">= 1 prompt token"),
        (GOOD_ROW * 3 + "2023-11-16 18:15:50.9951690,5,-2\n", 5, "'-2'", ">= 0 output tokens"),
        (GOOD_ROW + "2023-13-45 99:15:50.9951690,396,109\n", 3, "'2023-13-45 99:15:50.9951690'", "timestamp"),
        (GOOD_ROW + "\n\nyesterday,396,109\n", 5, "'yesterday'", "timestamp"),  # blank lines counted
        # Beyond int64 a cast warned on stderr and wrapped to a negative count, then said
        # ">= 1 prompt token"; a 2**31-token cell is beyond any model's context anyway.
        (GOOD_ROW + "2023-11-16 18:15:50.9951690,99999999999999999999,109\n", 3,
         "'99999999999999999999'", "must be at most 2,147,483,647 tokens"),
        (GOOD_ROW + "2023-11-16 18:15:50.9951690,396,2147483648\n", 3, "'2147483648'",
         "must be at most 2,147,483,647 tokens"),
    ],
)
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_malformed_row_names_line_and_value(tmp_path, body, line, value, words):
    f = tmp_path / "bad.csv"
    f.write_text(AZURE_HEADER + body)
    with pytest.raises(ScenarioError) as info:
        build(trace_cfg(f), 0, tmp_path)
    err = info.value
    assert err.file == str(f) and err.path == "workload.trace.path"
    msg = str(err)
    assert f"line {line}:" in msg and value in msg and words in msg, msg
    assert "\n" not in msg


def test_a_rate_scale_that_spreads_the_rows_past_the_clock_is_refused(tmp_path):
    """rate_scale 1e-300 put the second row near 1e300 s, where an engine step added to
    the clock vanishes (every latency 0)."""
    f = tmp_path / "t.csv"
    f.write_text(AZURE_HEADER + GOOD_ROW + "2023-11-16 18:15:50.9951690,396,109\n")
    with pytest.raises(ScenarioError, match=r"the rows arrive over 4.31e\+300 s at rate_scale "
                                            r"1e-300, beyond 1e\+09 s") as info:
        build(trace_cfg(f, rate_scale=1e-300), 0, tmp_path)
    assert info.value.path == "workload.trace.rate_scale"


def test_numeric_arrival_column_bad_value(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,1,1\n0.5,1,1\nsoon,1,1\n")
    cols = {"arrival": "arrived_at", "prompt_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"}
    with pytest.raises(ScenarioError, match=r"line 4: column 'arrived_at' must be a number, got 'soon'"):
        build(trace_cfg(f, format="columns", columns=cols), 0, tmp_path)


def test_missing_trace_file(tmp_path):
    with pytest.raises(ScenarioError) as info:
        build(trace_cfg("no/such.csv"), 0, tmp_path)
    assert str(tmp_path / "no" / "such.csv") in str(info.value)
    assert "trace file not found:" in str(info.value)
    assert info.value.path == "workload.trace.path"


def test_missing_column_lists_found_and_expected(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,Context,GeneratedTokens\n" + GOOD_ROW)
    with pytest.raises(ScenarioError) as info:
        build(trace_cfg(f), 0, tmp_path)
    msg = str(info.value)
    assert "missing column(s) 'ContextTokens'" in msg
    assert "expected 'TIMESTAMP', 'ContextTokens', 'GeneratedTokens'" in msg
    assert "found 'TIMESTAMP', 'Context', 'GeneratedTokens'" in msg
    assert "format: columns" in msg


def test_ragged_and_empty_files(tmp_path):
    f = tmp_path / "ragged.csv"
    f.write_text(AZURE_HEADER + GOOD_ROW + "2023-11-16 18:15:47.0,1,2,3\n")
    with pytest.raises(ScenarioError, match="line 3"):
        build(trace_cfg(f), 0, tmp_path)
    f = tmp_path / "header_only.csv"
    f.write_text(AZURE_HEADER)
    with pytest.raises(ScenarioError, match="no data rows"):
        build(trace_cfg(f), 0, tmp_path)
    f = tmp_path / "empty.csv"
    f.write_text("")
    with pytest.raises(ScenarioError, match="file is empty"):
        build(trace_cfg(f), 0, tmp_path)


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rate=st.floats(min_value=0.01, max_value=1e4, allow_nan=False),
    n=st.integers(min_value=1, max_value=3000),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    process=st.sampled_from(["poisson", "gamma", "constant"]),
    cv_=st.floats(min_value=0.05, max_value=8.0),
    lo=st.integers(min_value=1, max_value=500),
    span=st.integers(min_value=0, max_value=5000),
    sigma=st.floats(min_value=0.0, max_value=3.0),
)
def test_property_arrivals_sorted_lengths_bounded(rate, n, seed, process, cv_, lo, span, sigma):
    hi = lo + span
    arrival = {"process": process, "rate_per_s": rate, **({"cv": cv_} if process == "gamma" else {})}
    classes = [
        {"name": "x", "weight": 1.0,
         "prompt_tokens": {"dist": "lognormal", "mean": (lo + hi) / 2, "sigma": sigma, "min": lo, "max": hi},
         "output_tokens": {"dist": "normal", "mean": lo, "std": span / 3 + 1, "min": lo, "max": hi}},
        {"name": "y", "weight": 0.5,
         "prompt_tokens": {"dist": "uniform", "min": lo, "max": hi},
         "output_tokens": {"dist": "fixed", "value": hi}},
    ]
    tr = build(synthetic(arrival, classes, num_requests=n), seed, Path("."))
    assert isinstance(tr, RequestTrace) and len(tr) == n
    assert tr.arrival_s[0] >= 0 and (np.diff(tr.arrival_s) >= 0).all()
    for col in (tr.prompt_tokens, tr.output_tokens):
        assert col.min() >= lo and col.max() <= hi
    assert set(np.unique(tr.class_id)) <= {0, 1}
