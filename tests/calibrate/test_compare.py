"""capsim.calibrate.compare: replay a measured run, simulate it, compare the distributions.

- replaying a result simulated with the same profile gives it back: 0 % error on every
  TTFT, TPOT and E2E statistic and on the mean ITL (Σ gaps = Σ (E2E − TTFT));
- a slower profile shows up as positive errors;
- both sides cover the same requests: a request the simulated engine rejects leaves both;
- failed requests that produced tokens load the replay but are not compared;
- the statistics are numpy's (linear interpolation), also over weighted ITL runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.calibrate.compare import (METRICS, STATS, Samples, compare, request_table,
                                      summary_stats)
from capsim.calibrate.measured import MeasuredRun
from capsim.calibrate.readers import read_result
from capsim.calibrate.replay import replay
from capsim.calibrate.serving import scaled_profile
from capsim.scenario.load import load


def test_replaying_a_run_with_its_own_profile_gives_it_back(bench_result):
    run, path = bench_result(1.0, 0.0, "16")
    c = compare(run.with_hardware(scaled_profile(run.pool().hardware, 1.0, 0.0)),
                read_result(path))
    assert len(c.rows) == len(METRICS) * len(STATS) and c.rejected == 0
    for r in c.rows:
        assert r.n_measured == r.n_simulated > 0
        if r.metric != "itl" or r.stat == "mean":
            assert r.error_pct == pytest.approx(0.0, abs=1e-6), r
    assert c.replay.exact


def test_a_slower_simulated_gpu_shows_positive_errors(bench_result):
    run, path = bench_result(1.0, 0.0, "16")
    slow = run.with_hardware(scaled_profile(run.pool().hardware, 1.5, 0.0))
    errors = {(r.metric, r.stat): r.error_pct for r in compare(slow, read_result(path)).rows}
    assert errors[("tpot", "p50")] > 20 and errors[("itl", "mean")] > 20
    assert errors[("e2e", "mean")] > 20


def test_requests_the_engine_rejects_leave_both_sides(bench_result, bench_scenario):
    _, path = bench_result(1.0, 0.0)
    measured = read_result(path)
    small = load(bench_scenario, ["engine.max_model_len=1500"]).runs[0]
    c = compare(small, measured)
    too_long = int(((measured.prompt_tokens + measured.output_tokens) > 1500).sum())
    assert too_long > 0 and c.rejected == too_long
    ttft = {r.stat: r for r in c.rows if r.metric == "ttft"}
    assert ttft["p50"].n_measured == ttft["p50"].n_simulated == len(measured) - too_long
    table = request_table(c)
    assert (table.status == "rejected").sum() == too_long
    assert list(table.columns[:3]) == ["measured_row", "class", "arrival_s"]


def test_failed_requests_with_tokens_load_the_replay_but_are_not_compared():
    run = MeasuredRun(path="p", format="guidellm", label="GuideLLM", source="s", run_label="",
                      send_s=np.array([0.0, 0.1, 0.2, 0.3]),
                      prompt_tokens=np.array([100, 100, 100, 0]),
                      output_tokens=np.array([10, 10, 5, 0]),
                      ttft_s=np.array([0.1, 0.1, np.nan, np.nan]),
                      e2e_s=np.array([0.3, 0.3, np.nan, np.nan]),
                      success=np.array([True, True, False, False]))
    rep = replay(run)
    assert len(rep.trace) == 3 and rep.dropped == 1
    assert rep.trace.class_id.tolist() == [0, 0, 1] and rep.measured.sum() == 2
    assert rep.rows.tolist() == [0, 1, 2]


def test_summary_stats_are_numpy_percentiles_also_when_weighted():
    values = np.array([0.004, 0.001, 0.010, 0.002])
    counts = np.array([3, 1, 2, 5])
    flat = np.repeat(values, counts) * 1e3
    got = summary_stats(Samples(values, counts))
    for stat, q in STATS.items():
        want = np.mean(flat) if q is None else np.percentile(flat, q)
        assert got[stat] == pytest.approx(want, rel=1e-12)
    assert all(np.isnan(v) for v in summary_stats(None).values())
    assert summary_stats(Samples(np.array([np.nan, 0.002])))["p50"] == pytest.approx(2.0)


@pytest.mark.parametrize("insert", [b"\xff", b"\\udcff"])
def test_a_result_with_a_byte_that_is_not_utf8_is_read_alike_by_compare_and_calibrate(
        tmp_path, run_cli, bench_scenario, repo_root, insert):
    """Issue 31: a model id with one stray byte — raw (0xff), or as the JSON escape of half
    a surrogate pair that Python writes for an undecodable byte — crashed capsim compare
    (UnicodeEncodeError writing its report) while calibrate --from read the file. Both read
    through load_documents: the byte becomes U+FFFD (a raw one with a warning), both write
    their report."""
    src = (repo_root / "tests/calibrate/fixtures/vllm_bench_serve.json").read_bytes()
    at = src.index(b'"meta-llama/Llama-3.1-8B-Instruct"') + 1
    path = tmp_path / "result.json"
    path.write_bytes(src[:at] + insert + src[at:])
    code, _, err = run_cli(["compare", str(path), str(bench_scenario), "-o",
                            str(tmp_path / "cmp")])
    assert code == 0, err
    assert "Traceback" not in err and "\ufffdmeta-llama" in \
        (tmp_path / "cmp" / "index.html").read_text(encoding="utf-8")
    warned = f"warning: {path}: bytes that are not UTF-8 (the first, 0xff, at offset {at}) " \
             "read as U+FFFD\n"
    assert err == (warned if insert == b"\xff" else "")
    code, _, err = run_cli(["calibrate", "--hardware", "h100-sxm", "--from", str(path),
                            "--scenario", str(bench_scenario), "-o", str(tmp_path / "cal")])
    assert code == 0 and "Traceback" not in err
