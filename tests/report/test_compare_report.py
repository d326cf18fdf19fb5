"""``capsim compare``'s page and terminal table, end to end through the CLI.

Inputs are the reader fixtures (tests/calibrate/fixtures/, real key names, five requests)
and a small scenario; checked: the files of the page, the error table (terminal, HTML,
summary.csv), the arrival statement, offline / escaped HTML, the -o rules shared with
``capsim run``, and one-line errors (exit 2) for bad input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "calibrate" / "fixtures"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SCENARIO = {
    "name": "lab", "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_num_seqs": 16, "max_num_batched_tokens": 512, "max_model_len": 4096},
    "workload": {"num_requests": 1, "arrival": {"process": "constant", "rate_per_s": 1.0},
                 "classes": [{"name": "a", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 100},
                              "output_tokens": {"dist": "fixed", "value": 10}}]},
    "variants": [{"name": "chunked"}, {"name": "small", "engine": {"max_model_len": 200}}],
}


#: The variant the tests replay (the scenario has two: compare asks which).
CHUNKED = ["--variant", "chunked"]


@pytest.fixture
def scenario(tmp_path, write_scenario):
    return write_scenario(tmp_path, SCENARIO)


def test_compare_writes_the_page_and_prints_the_table(tmp_path, scenario, run_cli):
    out = tmp_path / "cmp"
    doc = json.loads((FIXTURES / "vllm_bench_serve.json").read_text())
    doc["model_id"] = "<b>x&y</b>"                     # the page escapes what the file says
    result = tmp_path / "vllm_bench_serve.json"
    result.write_text(json.dumps(doc))
    code, stdout, stderr = run_cli(["compare", str(result), str(scenario), "-o", str(out),
                                    "--variant", "chunked"])
    assert code == 0, stderr
    assert {p.name for p in out.iterdir()} == {"index.html", "summary.csv", "requests.csv",
                                               "compare_cdf.png", "scenario.resolved.yaml"}
    assert (out / "compare_cdf.png").read_bytes()[:8] == PNG_MAGIC
    for label in ("TTFT", "TPOT", "ITL", "E2E", "p50", "p90", "p99", "mean", "measured",
                  "simulated", "error"):
        assert label in stdout
    assert "closed loop" in stdout                  # --max-concurrency 2, send times saved
    assert "simulating variant chunked of lab" in stdout

    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns) == ["metric", "stat", "measured_ms", "simulated_ms",
                                     "error_pct", "n_measured", "n_simulated"]
    assert len(summary) == 16 and set(summary.metric) == {"ttft", "tpot", "itl", "e2e"}
    ttft = summary[summary.metric == "ttft"].set_index("stat")
    assert ttft.loc["p50", "measured_ms"] == pytest.approx(125.0)   # 95, 110 | 140, 150 ms
    assert ttft.loc["mean", "n_measured"] == 4
    row = summary.iloc[0]
    assert row.error_pct == pytest.approx((row.simulated_ms - row.measured_ms)
                                          / row.measured_ms * 100)
    assert len(pd.read_csv(out / "requests.csv")) == 4

    html = (out / "index.html").read_text()
    assert "http" not in html and "<script" not in html
    assert "&lt;b&gt;x&amp;y&lt;/b&gt;" in html and "<b>x&y" not in html
    assert 'src="compare_cdf.png"' in html
    assert "vllm-project/vllm vllm/benchmarks/serve.py @ 009e6d4a" in html


def test_guidellm_has_no_measured_itl_and_a_chosen_run(tmp_path, scenario, run_cli):
    out = tmp_path / "g"
    code, _stdout, stderr = run_cli(["compare", str(FIXTURES / "guidellm_benchmarks.json"),
                                    str(scenario), "--run", "1", "--variant", "chunked",
                                    "-o", str(out)])
    assert code == 0, stderr
    summary = pd.read_csv(out / "summary.csv")
    itl = summary[summary.metric == "itl"]
    assert itl.measured_ms.isna().all() and (itl.n_measured == 0).all()
    assert itl.simulated_ms.notna().all()
    assert "no measured ITL distribution" in (out / "index.html").read_text()


def test_several_variants_need_variant(tmp_path, scenario, run_cli):
    """Issue 31 item 11: with several variants compare simulated the first (rag_mix's
    static, TPOT -100 % "by construction"); a result file does not say how the server was
    configured, so it asks: one line naming the variants, exit 2, nothing written."""
    out = tmp_path / "c"
    code, stdout, err = run_cli(["compare", str(FIXTURES / "vllm_bench_serve.json"),
                                 str(scenario), "-o", str(out)])
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert err == (f"error: {scenario}: the scenario has 2 variants and a result file does "
                   "not say which the server ran: choose one with --variant (valid: chunked, "
                   "small)\n")
    assert not out.exists()
    code, _, err = run_cli(["compare", str(FIXTURES / "vllm_bench_serve.json"),
                            str(scenario), "-o", str(out), "--variant", "big"])
    assert code == 2 and "--variant 'big': no such variant; valid: chunked, small" in err
    # One variant: no need to name it (test_a_static_batching_variant_is_said).


def test_redrawn_arrivals_are_said(tmp_path, scenario, run_cli):
    code, stdout, _ = run_cli(["compare", str(FIXTURES / "sglang_bench_serving.jsonl"),
                               str(scenario), "--run", "1", "--variant", "chunked",
                               "-o", str(tmp_path / "s")])
    assert code == 0
    assert "cannot be replayed" in stdout and "compare distributions, not single" in stdout


def test_a_static_batching_variant_is_said(tmp_path, write_scenario, run_cli):
    """Static batching returns each reply whole: its TPOT / ITL read -100 % against any
    streaming server, which the page and terminal say instead of leaving it bare."""
    doc = {**SCENARIO, "variants": [{"name": "static", "engine": {
        "scheduler": "static", "max_num_batched_tokens": 4096}}]}
    code, stdout, _ = run_cli(["compare", str(FIXTURES / "vllm_bench_serve.json"),
                               str(write_scenario(tmp_path, doc)), "-o", str(tmp_path / "s")])
    assert code == 0
    assert "Variant 'static' runs static batching" in stdout
    assert "TPOT is 0 by construction (-100 %) and its ITL n/a (held replies" in stdout
    # No simulated gap: the ITL rows have none (issue 31 item 9), TPOT is 0 ms.
    summary = pd.read_csv(tmp_path / "s" / "summary.csv")
    itl = summary[summary.metric == "itl"]
    assert (itl.n_simulated == 0).all() and itl.simulated_ms.isna().all()
    assert (summary[summary.metric == "tpot"].simulated_ms == 0).all()


def test_rejected_requests_are_counted(tmp_path, scenario, run_cli):
    code, stdout, _ = run_cli(["compare", str(FIXTURES / "vllm_bench_serve.json"),
                               str(scenario), "--variant", "small", "-o", str(tmp_path / "r")])
    assert code == 0
    assert "2 successful request(s) rejected by the simulated engine" in stdout


def test_out_dir_rules_are_those_of_capsim_run(tmp_path, scenario, run_cli, monkeypatch):
    result = str(FIXTURES / "vllm_bench_serve.json")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    code, _, stderr = run_cli(["compare", result, str(scenario), "-o", str(busy), *CHUNKED])
    assert code == 2 and "is not a capsim report" in stderr and stderr.count("\n") == 1
    assert (busy / "notes.txt").read_text() == "keep me"
    earlier = tmp_path / "earlier"
    assert run_cli(["compare", result, str(scenario), "-o", str(earlier), *CHUNKED])[0] == 0
    assert run_cli(["compare", result, str(scenario), "-o", str(earlier), *CHUNKED])[0] == 0
    monkeypatch.chdir(tmp_path)
    assert run_cli(["compare", result, str(scenario), *CHUNKED])[0] == 0
    assert (tmp_path / "reports" / "compare-vllm-bench-serve" / "index.html").exists()


@pytest.mark.parametrize("args, message", [
    (["{fixtures}/aiperf/profile_export_aiperf.json"], "holds statistics only"),
    (["{fixtures}/guidellm_benchmarks.json"], ("holds 2 runs (0: synchronous; 1: constant 4 "
                                              "req/s); choose one with --run N")),
    (["{fixtures}/vllm_bench_serve.json", "--variant", "nope"],
     "--variant 'nope': no such variant; valid: chunked, small"),
    (["{tmp}/missing.json"], "cannot read file"),
    # {} read "(a JSON object with keys ); expected ...".
    (["{tmp}/empty.json"], "empty.json: not a supported benchmark result (an empty JSON "
                           "object); expected a vllm bench serve"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, scenario, run_cli, args, message):
    (tmp_path / "empty.json").write_text("{}")
    args = [a.format(fixtures=FIXTURES, tmp=tmp_path) for a in args]
    variant = [] if "--variant" in args else CHUNKED
    code, _, stderr = run_cli(["compare", args[0], str(scenario), *args[1:], *variant,
                               "-o", str(tmp_path / "out")])
    assert code == 2 and message in stderr and stderr.startswith("error: ")
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, message", [
    # A gap list that is a number was a traceback (TypeError in len()).
    ({"itls": [5, 5, 5, 5, 5]}, "vllm bench serve result: itls[0] is 5, not a list of one "
                                "request's chunk gaps (s) as vllm bench serve saves them"),
    # A count beyond int64 wrapped negative (a numpy cast warning on stderr, then "no
    # successful request to replay").
    ({"input_lens": [1e20] * 5}, "vllm bench serve result: request 0's input_lens is 1e+20, "
                                 "not a token count (a whole number from 0 to 2,147,483,647)"),
    # A negative count dropped its request as failed without a word; a fractional one was
    # truncated.
    ({"input_lens": [100, -10, 100, 100, 100]},
     "vllm bench serve result: request 1's input_lens is -10, not a token count (a whole "
     "number from 0 to 2,147,483,647)"),
    ({"output_lens": [10, 10, 10.5, 10, 10]},
     "vllm bench serve result: request 2's output_lens is 10.5, not a token count (a whole "
     "number from 0 to 2,147,483,647)"),
    # Every successful request longer than the variant's max_model_len (4,096): the table
    # and page were all "—" and the exit code 0.
    ({"input_lens": [10**9] * 5}, "variant 'chunked' of lab rejects every one of the 4 "
                                  "successful requests, e.g. prompt + output = 1000000004 "
                                  "tokens exceeds max_model_len 4096: nothing to compare; "
                                  "choose another --variant or raise its limits"),
])
def test_a_malformed_or_unusable_result_exits_2_with_one_line(tmp_path, scenario, run_cli,
                                                              change, message):
    doc = json.loads((FIXTURES / "vllm_bench_serve.json").read_text())
    result = tmp_path / "r.json"
    result.write_text(json.dumps({**doc, **change}))
    code, _, stderr = run_cli(["compare", str(result), str(scenario), "-o", str(tmp_path / "out"),
                               *CHUNKED])
    assert code == 2 and stderr == f"error: {result}: {message}\n"
    assert not (tmp_path / "out").exists()


def test_a_field_of_the_wrong_shape_anywhere_in_a_result_is_one_line(tmp_path, scenario, run_cli,
                                                                     monkeypatch):
    """Whatever a reader trips over deep in a hand-edited file (here: a TypeError raised
    while reading the per-request lists) is one line naming the file and the format."""
    from capsim.calibrate.readers import serving_bench

    def trip(*_args):
        raise TypeError("'int' object is not iterable")
    monkeypatch.setattr(serving_bench, "_columns", trip)
    code, _, stderr = run_cli(["compare", str(FIXTURES / "vllm_bench_serve.json"), str(scenario),
                               "-o", str(tmp_path / "out"), *CHUNKED])
    assert code == 2 and stderr == (
        f"error: {FIXTURES / 'vllm_bench_serve.json'}: vllm bench serve result: not laid out as "
        "vllm bench serve writes it (TypeError: 'int' object is not iterable)\n")
    assert not (tmp_path / "out").exists()
