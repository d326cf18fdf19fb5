"""The benchmark-result readers on fixtures shaped like each tool's real output.

Every fixture (tests/calibrate/fixtures/, sources in its README) holds the same five
requests, the fifth failed; each reader must return them in the common structure with
vLLM's metric definitions, detect its format from the content, and refuse a file of
another format or a version without the needed fields in one line naming the file, the
format and the missing fields.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from capsim.calibrate.readers import FORMATS, read_result
from capsim.calibrate.replay import ALL_AT_ONCE, CLOSED_LOOP, REDRAWN, SEND_TIMES, replay
from capsim.common.errors import ScenarioError

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# The five requests of every fixture (README): send s, prompt, output, TTFT s, gaps s.
SEND = np.array([0.0, 0.0, 0.131, 0.175, 0.3])
PROMPT = np.array([120, 300, 80, 250, 90])
OUTPUT = np.array([4, 3, 5, 2, 0])
TTFT = np.array([0.110, 0.150, 0.095, 0.140, np.nan])
GAPS = [[0.020, 0.021, 0.019], [0.022, 0.024], [0.018, 0.020, 0.019, 0.021], [0.025], []]
E2E = TTFT + np.array([sum(g) for g in GAPS])
TPOT = (E2E - TTFT) / (OUTPUT - 1.0)
OK = np.array([True, True, True, True, False])

CASES = [  # file, run, format, rate, concurrency, has send times, has ITL gaps
    ("vllm_bench_serve.json", None, "vllm-bench", math.inf, 2, True, True),
    ("sglang_bench_serving.jsonl", 0, "sglang-bench", math.inf, None, False, True),
    ("sglang_bench_serving.jsonl", 1, "sglang-bench", 4.0, 2, False, True),
    ("guidellm_benchmarks.json", 0, "guidellm", None, 1, True, False),
    ("guidellm_benchmarks.json", 1, "guidellm", 4.0, None, True, False),
    ("guidellm_v0.3_benchmarks.json", None, "guidellm", None, 2, True, False),
    ("aiperf/profile_export.jsonl", None, "aiperf", None, 2, True, True),
    ("genai_perf/profile_export.json", None, "genai-perf", None, 2, True, True),
]


@pytest.mark.parametrize("name, run, fmt, rate, concurrency, has_send, has_itl", CASES)
def test_reader_returns_the_common_structure(name, run, fmt, rate, concurrency, has_send,
                                             has_itl):
    m = read_result(FIXTURES / name, run)
    assert m.format == fmt and m.source and m.path.endswith(name)
    n = len(m)                       # GuideLLM 0.3's fixture leaves out the failed request
    assert m.success.tolist() == OK[:n].tolist()
    ok = OK[:n]
    assert m.prompt_tokens[ok].tolist() == PROMPT[:n][ok].tolist()
    assert m.output_tokens[ok].tolist() == OUTPUT[:n][ok].tolist()
    assert m.ttft_s[ok] == pytest.approx(TTFT[:n][ok], abs=1e-6)
    assert m.e2e_s[ok] == pytest.approx(E2E[:n][ok], abs=1e-6)
    assert m.tpot_s[ok] == pytest.approx(TPOT[:n][ok], abs=1e-6)
    assert np.isnan(m.ttft_s[~ok]).all()
    assert (m.send_s is not None) == has_send
    if has_send:
        assert m.send_s == pytest.approx(SEND[:n], abs=1e-6)
    if has_itl:
        assert m.itl_counts.tolist() == [len(g) for g in GAPS][:n]
        assert m.itl_of(np.flatnonzero(ok)) == pytest.approx(
            [g for gs in GAPS[:n] for g in gs], abs=1e-6)
    else:
        assert m.itl_gaps_s is None and m.itl_of(np.arange(n)) is None
    assert m.request_rate_per_s == rate and m.max_concurrency == concurrency
    if fmt != "sglang-bench":                        # SGLang saves no model name
        assert m.model == MODEL
    assert m.duration_s is None or m.duration_s > 0


def test_every_format_is_covered_by_a_fixture():
    assert {c[2] for c in CASES} == {f.key for f in FORMATS}


def test_aiperf_skips_warmup_records_and_reads_run_settings_from_the_summary(tmp_path):
    m = read_result(FIXTURES / "aiperf/profile_export.jsonl")
    assert len(m) == 5                               # the warm-up line is not a request
    shutil.copy(FIXTURES / "aiperf/profile_export.jsonl", tmp_path / "profile_export.jsonl")
    alone = read_result(tmp_path / "profile_export.jsonl")
    assert alone.model is None and alone.max_concurrency is None
    assert "profile_export_aiperf.json" in alone.notes[0]


# -- arrivals ----------------------------------------------------------------------------


def _without(name: str, tmp_path, *keys: str, **changes):
    doc = json.loads((FIXTURES / name).read_text())
    for k in keys:
        doc.pop(k)
    doc.update(changes)
    path = tmp_path / Path(name).name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("name,run", [("vllm_bench_serve.json", None),
                                      ("sglang_bench_serving.jsonl", 0)])
def test_a_request_without_a_usable_ttft_is_counted_failed_and_said(tmp_path, name, run):
    """A request with no error and real lengths but a null TTFT (a client that lost its
    first chunk) cannot be replayed: it counts as failed, and the notes say how many."""
    src = (FIXTURES / name).read_text()
    doc = json.loads(src.splitlines()[run] if run is not None else src)
    before = read_result(FIXTURES / name, run)
    assert not any("no usable TTFT" in n for n in before.notes)
    doc["ttfts"][0] = None
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    m = read_result(path, 0 if run is not None else None)
    assert int(m.success.sum()) == int(before.success.sum()) - 1 and not m.success[0]
    assert "1 request(s) without an error but with no usable TTFT (null, NaN or <= 0) " \
           "counted as failed" in m.notes


def test_send_times_are_replayed_as_arrivals():
    rep = replay(read_result(FIXTURES / "vllm_bench_serve.json"))
    assert rep.arrivals == SEND_TIMES and rep.exact
    assert rep.trace.arrival_s.tolist() == pytest.approx([0.0, 0.0, 0.131, 0.175])
    assert rep.rows.tolist() == [0, 1, 2, 3] and rep.dropped == 1   # the failed one
    assert "closed loop" in rep.note                 # --max-concurrency: said on the page


def test_rate_inf_without_send_times_sends_everything_at_once():
    rep = replay(read_result(FIXTURES / "sglang_bench_serving.jsonl", 0))
    assert rep.arrivals == ALL_AT_ONCE and rep.exact
    assert rep.trace.arrival_s.tolist() == [0.0] * 4


def test_closed_loop_without_send_times_is_reconstructed_from_latencies(tmp_path):
    """vLLM before start_times, --max-concurrency 2: requests 0 and 1 at t = 0, request 2
    when request 0 ends (0.170 s), 3 when 2 ends (0.196 s, request 1), 4 at 0.170 + 0.173."""
    path = _without("vllm_bench_serve.json", tmp_path, "start_times", "latencies")
    m = read_result(path)
    assert m.send_s is None and "E2E = TTFT + Σ ITL" in m.notes[0]
    rep = replay(m)
    assert rep.arrivals == CLOSED_LOOP and not rep.exact
    assert rep.trace.arrival_s == pytest.approx([0.0, 0.0, 0.170, 0.196])
    assert "cannot be replayed exactly" in rep.note


def test_finite_rate_without_send_times_is_redrawn_or_refused():
    m = read_result(FIXTURES / "sglang_bench_serving.jsonl", 1)
    rep = replay(m, seed=3)
    assert rep.arrivals == REDRAWN and not rep.exact and "cannot be replayed" in rep.note
    assert np.array_equal(rep.trace.arrival_s, replay(m, seed=3).trace.arrival_s)   # seeded
    with pytest.raises(ScenarioError, match="request rate 4 without send times"):
        replay(m, allow_redrawn=False)


# -- refusals: one line naming the file, the format and what is missing --------------------


def _error(path, run=None) -> str:
    with pytest.raises(ScenarioError) as exc:
        read_result(path, run)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_vllm_without_save_detailed_names_the_missing_lists(tmp_path):
    path = _without("vllm_bench_serve.json", tmp_path, "input_lens", "output_lens", "ttfts",
                    "itls", "start_times", "generated_texts", "errors")
    message = _error(path)
    assert ("vllm bench serve result: missing per-request input_lens, per-request "
            "output_lens, per-request ttfts, per-request itls (the file holds run statistics "
            "only: 4 completed requests, mean TTFT 123.8 ms, median TTFT 125.0 ms); rerun "
            "vllm bench serve with --save-result --save-detailed") in message


@pytest.mark.parametrize("rate", ["fast", "", "nan", 0, -2.5, True, [4]])
def test_vllm_request_rate_other_than_a_positive_number_or_inf_is_refused(tmp_path, rate):
    """vLLM's main_async (vllm/benchmarks/serve.py @ 009e6d4) saves a number or "inf";
    anything else was read as "no rate" and changed how arrivals are derived."""
    doc = json.loads((FIXTURES / "vllm_bench_serve.json").read_text())
    doc["request_rate"] = rate
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    message = _error(path)
    assert (f"vllm bench serve result: request_rate is {rate!r}: expected a number of "
            'requests per second > 0 or "inf" (all at once)') in message


@pytest.mark.parametrize("rate, expected", [("inf", math.inf), ("Infinity", math.inf),
                                            ("4", 4.0), (2.5, 2.5), (None, None)])
def test_vllm_request_rate_as_saved_is_read(tmp_path, rate, expected):
    doc = json.loads((FIXTURES / "vllm_bench_serve.json").read_text())
    doc["request_rate"] = rate
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    assert read_result(path).request_rate_per_s == expected


def test_sglang_request_rate_word_is_refused_naming_the_run(tmp_path):
    lines = (FIXTURES / "sglang_bench_serving.jsonl").read_text().splitlines()
    line = json.loads(lines[1])
    line["request_rate"] = "fast"
    path = tmp_path / "sglang.jsonl"
    path.write_text(lines[0] + "\n" + json.dumps(line) + "\n")
    assert "sglang.bench_serving result (run 1 of 2" in _error(path, 1)
    assert "request_rate is 'fast'" in _error(path, 1)


def test_sglang_without_output_details_names_the_missing_lists(tmp_path):
    line = json.loads((FIXTURES / "sglang_bench_serving.jsonl").read_text().splitlines()[0])
    for k in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        line.pop(k)
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(line) + "\n")
    message = _error(path)
    assert "sglang.bench_serving result: missing per-request input_lens" in message
    assert "--output-details" in message


def test_guidellm_sampled_requests_are_refused(tmp_path):
    doc = json.loads((FIXTURES / "guidellm_benchmarks.json").read_text())
    doc["benchmarks"][0]["metrics"]["request_totals"]["successful"] = 400
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    message = _error(path, 0)
    assert "GuideLLM result (run 0 of 2: synchronous): holds 5 of" in message
    assert "sampled" in message


def test_guidellm_without_request_timings_names_them(tmp_path):
    doc = json.loads((FIXTURES / "guidellm_benchmarks.json").read_text())
    for r in doc["benchmarks"][1]["requests"]["successful"]:
        del r["info"]["timings"]["first_token_iteration"]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    assert "missing per-request info.timings.request_start, first_token_iteration" in _error(
        path, 1)


def test_aiperf_non_streaming_run_names_time_to_first_token(tmp_path):
    lines = [json.loads(x) for x in (FIXTURES / "aiperf/profile_export.jsonl").read_text()
             .splitlines()]
    for x in lines:
        x["metrics"].pop("time_to_first_token", None)
        x["metrics"].pop("inter_chunk_latency", None)
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    message = _error(path)
    assert "AIPerf result: missing metrics.time_to_first_token" in message
    assert "--streaming" in message


def test_genai_perf_without_streamed_usage_names_the_token_counts(tmp_path):
    doc = json.loads((FIXTURES / "genai_perf/profile_export.json").read_text())
    for r in doc["experiments"][0]["requests"]:
        r["response_outputs"] = [o for o in r["response_outputs"] if "usage" not in o["response"]]
        r["response_timestamps"] = r["response_timestamps"][:len(r["response_outputs"])]
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(doc))
    message = _error(path)
    assert "genai-perf result: missing per-request token counts (usage.prompt_tokens" in message


@pytest.mark.parametrize("name", ["genai_perf/profile_export_genai_perf.json",
                                  "aiperf/profile_export_aiperf.json"])
def test_summaries_point_to_the_per_request_file(name):
    message = _error(FIXTURES / name)
    assert "statistics only: missing per-request records" in message
    assert "profile_export.jsonl (AIPerf)" in message


def test_an_unknown_file_names_the_expected_formats(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"foo": 1, "bar": [1, 2]}))
    message = _error(path)
    assert "not a supported benchmark result (a JSON object with keys foo, bar)" in message
    for expected in ("vllm bench serve", "sglang.bench_serving", "GuideLLM", "AIPerf",
                     "genai-perf"):
        assert expected in message
    path.write_text("{not json")
    assert "malformed JSON" in _error(path)


def test_several_runs_need_run_and_bounds_are_checked():
    message = _error(FIXTURES / "guidellm_benchmarks.json")
    assert "holds 2 runs (0: synchronous; 1: constant 4 req/s); choose one with --run N" in message
    assert "--run 2: the GuideLLM result holds 2 run(s), numbered 0 to 1" in _error(
        FIXTURES / "guidellm_benchmarks.json", 2)


@pytest.mark.parametrize("fixture", ["vllm_bench_serve.json", "sglang_bench_serving.jsonl"])
def test_a_result_saved_with_a_utf8_byte_order_mark_reads_as_without(tmp_path, fixture):
    """A result file re-saved by Windows PowerShell 5 (Out-File -Encoding utf8) starts with
    the UTF-8 byte-order mark EF BB BF: it was refused as "malformed JSON: Unexpected UTF-8
    BOM" by compare and calibrate --from alike."""
    from capsim.calibrate.measured import load_documents

    src = FIXTURES / fixture
    marked = tmp_path / fixture
    marked.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    docs = load_documents(marked)
    assert docs == load_documents(src) and len(docs) >= 1
    run = 0 if fixture.endswith(".jsonl") else None
    got, want = read_result(marked, run), read_result(src, run)
    assert got.format == want.format and len(got) == len(want) == 5
    assert got.prompt_tokens.tolist() == want.prompt_tokens.tolist() == PROMPT.tolist()
