"""results.json and trace_<variant>.json as capsim run writes them."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

#: Two variants, two classes; variant "tight" rejects the long class (prompt 3,000 tokens
#: over max_model_len 2,048), variant "split" is disaggregated (KV transfers).
DOC = {
    "name": "rj", "seed": 7, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 8192},
    "slo": {"ttft_ms": 2000, "targets": {"itl_p99_ms": 100}},
    "workload": {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 6},
                 "classes": [{"name": "short", "weight": 2,
                              "prompt_tokens": {"dist": "fixed", "value": 300},
                              "output_tokens": {"dist": "uniform", "min": 1, "max": 40}},
                             {"name": "long", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 3000},
                              "output_tokens": {"dist": "fixed", "value": 20}}]},
    "variants": [{"name": "tight", "engine": {"max_model_len": 2048}},
                 {"name": "split", "disaggregation": {"prefill": {"num_replicas": 1},
                                                      "decode": {"num_replicas": 1},
                                                      "link": "infiniband-ndr"}}],
}

KEYS = ("request_throughput", "output_throughput", "total_token_throughput", "completed",
        "failed", "total_input_tokens", "total_output_tokens", "request_goodput", "duration",
        "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
        "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "p99.9_itl_ms", "mean_e2el_ms",
        "median_e2el_ms", "max_concurrency", "request_rate", "burstiness", "model_id")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of DOC with --percentiles 50,99,99.9 --trace-events 1:4 (one worker), and
    the same run again without the flags (no figures: no test here reads one)."""
    from capsim.cli.main import main

    d = tmp_path_factory.mktemp("rj")
    (d / "s.yaml").write_text(json.dumps(DOC))
    for out, extra in (("flags", ["--percentiles", "50,99,99.9", "--trace-events", "1:4"]),
                       ("plain", []), ("again", [])):
        main(["run", str(d / "s.yaml"), "-o", str(d / out), "--workers", "1", "--no-charts",
              *extra])                          # JSON, CSV and the page's tables are read
    return d


def test_results_json_has_vllms_keys_per_variant(report):
    doc = json.loads((report / "flags" / "results.json").read_text())
    assert doc["capsim_results"] == 1 and doc["scenario"] == "rj"
    assert doc["percentiles"] == [50, 99, 99.9]
    assert [v["label"] for v in doc["variants"]] == ["tight", "split"]
    for v in doc["variants"]:
        assert set(KEYS) <= set(v), set(KEYS) - set(v)
        assert v["backend"] == "capsim" and v["request_rate"] == 6 and v["burstiness"] == 1.0
        assert v["num_prompts"] == v["completed"] + v["failed"] == 60
        assert "p90_ttft_ms" not in v                       # only the percentiles asked for
        assert set(v["capsim"]["classes"]) == {"short", "long"}


def test_rejections_and_the_summary_are_under_capsim(report):
    doc = json.loads((report / "flags" / "results.json").read_text())
    summary = pd.read_csv(report / "flags" / "summary.csv")
    tight = doc["variants"][0]
    row = summary[(summary["variant"] == "tight") & (summary["cls"] == "all")].iloc[0]
    assert tight["failed"] == tight["capsim"]["rejected"] == row["num_rejected"] > 0
    assert sum(r["count"] for r in tight["capsim"]["reject_reasons"]) == row["num_rejected"]
    assert "max_model_len" in tight["capsim"]["reject_reasons"][0]["example"]
    assert tight["capsim"]["summary"]["kv_peak_frac"] == pytest.approx(row["kv_peak_frac"])
    assert tight["capsim"]["summary"]["cost_per_hour_usd"] == row["cost_per_hour_usd"]
    # Every long request was rejected: its class has no latency, written as null.
    long = tight["capsim"]["classes"]["long"]
    assert long["completed"] == 0 and long["mean_ttft_ms"] is None
    assert tight["p99_itl_ms"] == pytest.approx(row["itl_p99_ms"], rel=1e-12)
    assert tight["request_goodput"] == pytest.approx(row["goodput_req_per_s"], rel=1e-12)


def test_results_json_is_strict_and_deterministic(report):
    text = (report / "plain" / "results.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert text == (report / "again" / "results.json").read_text()
    doc = json.loads(text)
    assert doc["percentiles"] == [50, 90, 99, 99.9]       # the default: what run prints today
    assert "p99.9_e2el_ms" in doc["variants"][1]


def test_percentile_columns_only_when_asked(report):
    plain = pd.read_csv(report / "plain" / "summary.csv")
    flags = pd.read_csv(report / "flags" / "summary.csv")
    assert not [c for c in plain.columns if c.startswith("p") and c.endswith("_ms")]
    added = list(flags.columns[len(plain.columns):])
    assert list(flags.columns[:len(plain.columns)]) == list(plain.columns)
    assert added == [f"p{q}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
                     for q in ("50", "99", "99.9")]
    assert flags["p99_itl_ms"].equals(flags["itl_p99_ms"])       # NaN where a class has none
    html = (report / "flags" / "index.html").read_text()
    assert "p99.9_tpot_ms" in html and 'href="results.json"' in html


def test_results_json_is_no_vllm_measurement(report):
    """The vLLM reader knows the layout, but a capsim file has no per-request token gaps
    (vLLM's --save-detailed lists): it is refused in one line, naming what is missing."""
    from capsim.calibrate.readers import detect, read_result
    from capsim.calibrate.measured import load_documents
    from capsim.common.errors import ScenarioError

    doc = json.loads((report / "plain" / "results.json").read_text())
    one = report / "one.json"
    one.write_text(json.dumps(doc["variants"][1]))
    assert detect(load_documents(one), one).key == "vllm-bench"
    with pytest.raises(ScenarioError, match="per-request input_lens"):
        read_result(one)


def test_trace_files_open_as_chrome_traces(report):
    """Trace Event Format: a traceEvents list; every event has name, ph, ts, pid, tid;
    X events a duration; counters numeric args; instants a scope."""
    names = sorted(p.name for p in (report / "flags").glob("trace_*.json"))
    assert names == ["trace_split.json", "trace_tight.json"]
    assert not list((report / "plain").glob("trace_*.json"))
    for name in names:
        doc = json.loads((report / "flags" / name).read_text())
        events = doc["traceEvents"]
        phases = {e["ph"] for e in events}
        assert {"M", "X", "C"} <= phases <= {"M", "X", "C", "i"}
        for e in events:
            assert {"name", "ph", "ts", "pid", "tid"} <= set(e), e
            assert isinstance(e["ts"], (int, float)) and math.isfinite(e["ts"])
            if e["ph"] == "X":
                assert e["dur"] >= 0 and e["name"] in ("prefill", "decode", "mixed", "step")
                assert 1e6 - 0.2e6 <= e["ts"] + e["dur"] and e["ts"] <= 4e6
            elif e["ph"] == "C":
                assert all(isinstance(v, (int, float)) for v in e["args"].values())
            elif e["ph"] == "i":
                assert e["s"] in ("g", "p", "t") and 1e6 <= e["ts"] <= 4e6
            elif e["ph"] == "M":
                assert e["name"] in ("process_name", "process_sort_index", "thread_name")
    split = json.loads((report / "flags" / "trace_split.json").read_text())["traceEvents"]
    procs = {e["args"]["name"] for e in split if e["name"] == "process_name"}
    assert procs == {"requests", "replica 0 · prefill", "replica 1 · decode"}
    kinds = {e["name"] for e in split if e["ph"] == "i"}
    assert {"kv transfer out", "kv transfer in"} <= kinds
    tight = json.loads((report / "flags" / "trace_tight.json").read_text())["traceEvents"]
    rejected = [e for e in tight if e["name"] == "rejected"]
    assert rejected and all(e["pid"] == 1 for e in rejected)
