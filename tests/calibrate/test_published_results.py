"""The benchmark-client readers on result files published by others.

The files are in tests/calibrate/fixtures/published/ (sources, commits and licences in its
README); the values asserted are quoted from the files themselves or from the statistics
the tool wrote next to them. What the real files showed:

- AIPerf's example run (ai-dynamo/aiperf 7c31f579) was written by a build before today's
  record layout (``timestamp_ns``, ``credit_phase``, ``ttft``): it was refused as "not a
  supported benchmark result" and is now read, its TTFT, latency and inter-chunk figures
  equal to the ones AIPerf computed in ``profile_export_aiperf.json``;
- published ``vllm bench serve`` (InferenceX) and ``sglang.bench_serving`` (DataCrunch)
  results hold run statistics only, the clients' default: refused, naming the missing
  lists, the statistics the file does hold and the flag that saves the lists;
- GuideLLM's own test report is trimmed to 1 of its 47 requests (not by
  ``--sample-requests``): refused saying so, from its JSON and from its YAML twin;
- the statistics summaries and CSVs AIPerf and genai-perf write point to the per-request
  file;
- a capsim ``results.json`` is not a measurement: refused saying so, not "rerun vllm
  bench serve".
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from capsim.calibrate.measured import load_documents
from capsim.calibrate.readers import detect, read_result
from capsim.calibrate.replay import SEND_TIMES, replay
from capsim.common.errors import ScenarioError

PUBLISHED = Path(__file__).parent / "fixtures" / "published"
AIPERF_RUN = PUBLISHED / "aiperf_7c31f579"


def _error(path: Path, run: int | None = None) -> str:
    with pytest.raises(ScenarioError) as exc:
        read_result(path, run)
    message = str(exc.value)
    assert message.startswith(str(path)) and "\n" not in message
    return message


def _ms(values_s: np.ndarray) -> np.ndarray:
    return values_s[np.isfinite(values_s)] * 1e3


# -- AIPerf: ai-dynamo/aiperf examples/artifacts/run1 @ 7c31f579 ----------------------------

def test_aiperf_example_run_is_read_with_aiperfs_own_figures():
    """100 records (``--num-requests 100 --concurrency 100 --request-cancellation-rate
    10``): 11 cancelled, 89 completed; TTFT, request latency and inter-chunk latency as
    AIPerf summarised them in profile_export_aiperf.json (numpy's percentiles, as AIPerf's)."""
    m = read_result(AIPERF_RUN / "profile_export.jsonl")
    assert m.format == "aiperf" and len(m) == 100 and int(m.success.sum()) == 89
    assert m.model == "openai/gpt-oss-20b" and m.max_concurrency == 100
    assert m.request_rate_per_s is None and m.notes == ()
    assert set(m.prompt_tokens[m.success].tolist()) == {550}
    assert m.output_tokens[m.success].mean() == pytest.approx(242.96629213483146, rel=1e-12)
    ttft, e2e = _ms(m.ttft_s), _ms(m.e2e_s)
    assert ttft.mean() == pytest.approx(2343.219436988764, rel=1e-12)
    assert np.percentile(ttft, 50) == pytest.approx(2369.317693, rel=1e-12)
    assert np.percentile(ttft, 99) == pytest.approx(3833.3894000399996, rel=1e-12)
    assert e2e.mean() == pytest.approx(9059.654633033708, rel=1e-12)
    assert np.percentile(e2e, 99) == pytest.approx(9297.609933759999, rel=1e-12)
    gaps = m.itl_of(np.flatnonzero(m.success)) * 1e3
    assert len(gaps) == 21537
    assert gaps.mean() == pytest.approx(27.755153106189347, rel=1e-12)
    assert np.percentile(gaps, 99) == pytest.approx(140.53429476, rel=1e-12)
    # The run's wall time from the summary: 2025-10-03T13:13:39.146443 → 13:13:48.474205.
    assert m.duration_s == pytest.approx(9.328, abs=0.02)
    rep = replay(m)
    assert rep.arrivals == SEND_TIMES and len(rep.trace) == 89 and rep.dropped == 11


def test_aiperf_figures_match_the_summary_file_it_wrote():
    """Every statistic AIPerf wrote for the records the reader reads, recomputed."""
    records = json.loads((AIPERF_RUN / "profile_export_aiperf.json").read_text())["records"]
    m = read_result(AIPERF_RUN / "profile_export.jsonl")
    ours = {"ttft": _ms(m.ttft_s), "request_latency": _ms(m.e2e_s),
            "inter_chunk_latency": m.itl_of(np.flatnonzero(m.success)) * 1e3,
            "output_sequence_length": m.output_tokens[m.success].astype(float)}
    for tag, values in ours.items():
        stats = records[tag]
        assert stats["count"] == len(values), tag
        assert stats["avg"] == pytest.approx(values.mean(), rel=1e-9), tag
        for q in (1, 25, 50, 75, 90, 99):
            assert stats[f"p{q}"] == pytest.approx(np.percentile(values, q), rel=1e-9), (tag, q)


def test_aiperf_earlier_and_current_record_names_read_the_same(tmp_path):
    """The same records renamed as today's AIPerf writes them (request_start_ns,
    request_end_ns, benchmark_phase, time_to_first_token) give the same run."""
    lines = []
    for line in (AIPERF_RUN / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        meta = r["metadata"]
        meta["request_start_ns"] = meta.pop("timestamp_ns")
        meta["benchmark_phase"] = meta.pop("credit_phase")
        if "ttft" in r["metrics"]:
            r["metrics"]["time_to_first_token"] = r["metrics"].pop("ttft")
            meta["request_end_ns"] = meta["request_start_ns"] + round(
                r["metrics"]["request_latency"]["value"] * 1e6)
        lines.append(json.dumps(r))
    now = tmp_path / "run" / "profile_export.jsonl"
    now.parent.mkdir()
    now.write_text("\n".join(lines) + "\n")
    shutil.copy(AIPERF_RUN / "profile_export_aiperf.json", now.parent)
    old, new = read_result(AIPERF_RUN / "profile_export.jsonl"), read_result(now)
    for column in ("send_s", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s", "success",
                   "itl_gaps_s", "itl_counts"):
        np.testing.assert_array_equal(getattr(old, column), getattr(new, column), column)
    assert new.duration_s == pytest.approx(old.duration_s, abs=1e-6)


def test_aiperf_warmup_records_of_the_earlier_layout_are_skipped(tmp_path):
    lines = (AIPERF_RUN / "profile_export.jsonl").read_text().splitlines()
    warm = json.loads(lines[20])
    warm["metadata"]["credit_phase"] = "warmup"
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join([json.dumps(warm), *lines]) + "\n")
    m = read_result(path)
    assert len(m) == 100 and int(m.success.sum()) == 89
    assert "no profile_export_aiperf.json next to the records" in m.notes[0]


def test_aiperf_example_run_compares_end_to_end(tmp_path, write_scenario, run_cli):
    """``capsim compare`` on the published records: the measured side of the table is
    AIPerf's own TTFT and request latency."""
    scenario = write_scenario(tmp_path, {
        "name": "aiperf-example", "model": "gpt-oss-20b", "hardware": "h100-sxm",
        "engine": {"max_num_seqs": 128, "max_model_len": 4096},
        "workload": {"num_requests": 1, "arrival": {"process": "constant", "rate_per_s": 1.0},
                     "classes": [{"name": "a", "weight": 1,
                                  "prompt_tokens": {"dist": "fixed", "value": 550},
                                  "output_tokens": {"dist": "fixed", "value": 250}}]}})
    out = tmp_path / "cmp"
    code, stdout, stderr = run_cli(["compare", str(AIPERF_RUN / "profile_export.jsonl"),
                                    str(scenario), "-o", str(out)])
    assert code == 0, stderr
    assert "AIPerf" in stdout and "100 requests, 89 successful" in stdout
    summary = pd.read_csv(out / "summary.csv").set_index(["metric", "stat"])
    assert summary.loc[("ttft", "p50"), "measured_ms"] == pytest.approx(2369.317693, rel=1e-9)
    assert summary.loc[("ttft", "mean"), "measured_ms"] == pytest.approx(2343.219436988764,
                                                                         rel=1e-9)
    assert summary.loc[("e2e", "p99"), "measured_ms"] == pytest.approx(9297.609933759999,
                                                                       rel=1e-9)
    assert summary.loc[("ttft", "p50"), "n_measured"] == 89
    assert np.isfinite(summary.loc[("ttft", "p50"), "simulated_ms"])


@pytest.mark.parametrize("name", ["profile_export_aiperf.json", "profile_export_aiperf.csv"])
def test_aiperf_statistics_files_point_to_the_records(name):
    message = _error(AIPERF_RUN / name)
    assert "holds statistics only" in message and "profile_export.jsonl (AIPerf)" in message


def test_aiperf_summary_without_its_input_config_still_points_to_the_records(tmp_path):
    doc = json.loads((AIPERF_RUN / "profile_export_aiperf.json").read_text())
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(doc["records"]))            # the statistics alone
    assert "holds statistics only" in _error(path)


# -- vllm bench serve: SemiAnalysisAI/InferenceX @ 24b02df5 -----------------------------

def test_inferencex_vllm_result_holds_statistics_only():
    """``request_rate: "inf"``, ``max_concurrency: 4``, 40 completed requests, mean TTFT
    330.7963805680629 ms, median 124.30587713606656 ms; saved without --save-detailed (and
    with the old ``"request_goodput:"`` key, colon included)."""
    path = PUBLISHED / "inferencex_gpt-oss-120b_concurrency_4.json"
    docs = load_documents(path)
    assert detect(docs, path).key == "vllm-bench" and "request_goodput:" in docs[0]
    message = _error(path)
    assert ("vllm bench serve result: missing per-request input_lens, per-request "
            "output_lens, per-request ttfts, per-request itls (the file holds run statistics "
            "only: 40 completed requests, mean TTFT 330.8 ms, median TTFT 124.3 ms); rerun "
            "vllm bench serve with --save-result --save-detailed") in message


# -- sglang.bench_serving: datacrunch-research/h200-benchmarks @ c091ef53 -----------------

def test_datacrunch_sglang_runs_are_listed_from_their_statistics():
    """Seven appended runs (rates 1–16 req/s on random 1024/1024, 4 and 8 on ShareGPT)."""
    path = PUBLISHED / "datacrunch_h200_llama_3_3_70b_online_output.jsonl"
    message = _error(path)
    assert "sglang.bench_serving result holds 7 runs (0: request rate 1.0, 300 completed, " \
           "dataset random; " in message
    assert "6: request rate 8.0, 2,400 completed, dataset sharegpt); choose one with --run N" \
        in message


def test_datacrunch_sglang_run_names_what_it_lacks():
    path = PUBLISHED / "datacrunch_h200_llama_3_3_70b_online_output.jsonl"
    message = _error(path, 4)
    assert "(run 4 of 7: request rate 16.0, 3,200 completed, dataset random)" in message
    assert ("per-request itls (the file holds run statistics only: 3,200 completed requests, "
            "median TTFT 614.2 ms, mean E2E 149037.3 ms); rerun python -m "
            "sglang.bench_serving with --output-file FILE --output-details") in message


# -- GuideLLM: vllm-project/guidellm tests/unit/entrypoints/assets @ a1fe883a ---------------

@pytest.mark.parametrize("name", ["guidellm_benchmarks_stripped.json",
                                  "guidellm_benchmarks_stripped.yaml"])
def test_guidellm_trimmed_report_is_refused_saying_so(name):
    """GuideLLM's own test report: a synchronous benchmark whose request_totals count 46
    successful + 1 incomplete, of which the lists keep one."""
    path = PUBLISHED / name
    assert detect(load_documents(path), path).key == "guidellm"
    message = _error(path)
    assert ("GuideLLM result: holds 1 of 47 requests (request_totals counts more than the "
            "request lists hold: sampled or trimmed)") in message


def test_a_scenario_given_as_the_result_is_said_to_be_one(tmp_path, write_scenario):
    """YAML is read now (GuideLLM's report), so a scenario in the result's place parses:
    it is named for what it is, not 'malformed JSON'."""
    path = write_scenario(tmp_path, {"name": "s", "model": "llama-3.1-8b",
                                     "workload": {"num_requests": 1}})
    assert "a capsim scenario, not a benchmark result" in _error(path)


def test_a_malformed_yaml_report_is_one_line(tmp_path):
    path = tmp_path / "benchmarks.yaml"
    path.write_text("benchmarks: [\n  {a: 1\n")
    assert "malformed YAML at line" in _error(path)


# -- genai-perf: a statistics summary (wellflat/k8s-dev, no licence: not copied) ------------

K8S_DEV = Path("/work/.mirror/wellflat+k8s-dev/repo")
GENAI_PERF_SUMMARY = ("e17e8f5bba3c89386751c0d8695764102d939e44",
                      "bench/etl/profile_export_genai_perf.json")


def test_genai_perf_published_summary_points_to_the_raw_export(tmp_path):
    """genai-perf 'profile' of openai/gpt-oss-20b (request_count 35, TTFT avg 1524.6 ms):
    statistics only. The repository has no licence, so the file is read from a local
    mirror when there is one."""
    git = shutil.which("git")
    if git is None or not K8S_DEV.is_dir():
        pytest.skip("wellflat/k8s-dev is not mirrored here (unlicensed: not a fixture)")
    commit, name = GENAI_PERF_SUMMARY
    text = subprocess.run([git, "-C", str(K8S_DEV), "show", f"{commit}:{name}"],
                          capture_output=True, text=True, check=False).stdout
    if not text:
        pytest.skip(f"{commit[:8]}:{name} is not in the mirror")
    path = tmp_path / "profile_export_genai_perf.json"
    path.write_text(text)
    doc = json.loads(text)
    assert doc["request_count"]["avg"] == 35.0 and math.isclose(
        doc["time_to_first_token"]["avg"], 1524.6265132)
    message = _error(path)
    assert "holds statistics only" in message and "profile_export.json (genai-perf)" in message


# -- capsim's own results.json ------------------------------------------------------------

CAPSIM_VARIANT = {"backend": "capsim", "model_id": "llama-3.1-8b", "num_prompts": 10,
                  "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
                  "completed": 10, "failed": 0, "mean_ttft_ms": 41.5,
                  "capsim": {"variant": "base", "seed": 0}}


def test_a_capsim_results_json_is_said_to_be_simulated(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"capsim_results": 1, "capsim_version": "0", "scenario": "s",
                                "percentiles": [50, 99], "variants": [CAPSIM_VARIANT]}))
    message = _error(path)
    assert "a capsim run report's results.json (1 variant(s)): capsim's own simulated " \
           "statistics" in message
    assert "no measured requests" in message and "rerun vllm bench serve" not in message


def test_one_variant_of_a_capsim_results_json_is_said_to_be_simulated(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(CAPSIM_VARIANT))
    message = _error(path)
    assert "vllm bench serve result: a capsim results.json variant: capsim's own " in message
    assert "rerun vllm bench serve" not in message


def test_compare_refuses_a_capsim_results_json_in_one_line(tmp_path, write_scenario, run_cli):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"capsim_results": 1, "variants": [CAPSIM_VARIANT]}))
    scenario = write_scenario(tmp_path, {
        "name": "s", "model": "llama-3.1-8b", "hardware": "h100-sxm",
        "workload": {"num_requests": 1, "arrival": {"process": "constant", "rate_per_s": 1.0},
                     "classes": [{"name": "a", "weight": 1,
                                  "prompt_tokens": {"dist": "fixed", "value": 10},
                                  "output_tokens": {"dist": "fixed", "value": 10}}]}})
    code, _stdout, stderr = run_cli(["compare", str(path), str(scenario), "-o",
                                     str(tmp_path / "cmp")])
    assert code == 2 and "Traceback" not in stderr
    assert "capsim run report's results.json" in stderr
    assert not (tmp_path / "cmp").exists()
