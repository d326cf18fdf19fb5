"""The shipped scenarios end to end, through the CLI, asserting what the report must show."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from capsim.cli.main import main

def run_scenario(path: Path, out: Path, *extra: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    with pytest.raises(SystemExit) as exc:
        main(["run", str(path), "-o", str(out), *extra])
        raise SystemExit(0)
    assert exc.value.code == 0
    return read_report(out)


def read_report(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary.csv by variant and class, requests.csv) of the report in ``out``."""
    summary = pd.read_csv(out / "summary.csv")
    requests = pd.read_csv(out / "requests.csv", keep_default_na=False, na_values=[""])
    return summary.set_index(["variant", "cls"]), requests


@pytest.fixture(scope="module")
def rag_mix(rag_mix_run):
    return read_report(rag_mix_run[0])


def test_rag_mix_unchunked_stalls_on_long_prefills_and_chunking_caps_it(rag_mix):
    """Seeds 000 / 002 Q10: unchunked continuous batching keeps p50 ITL near a decode step,
    but its max ITL jumps by a whole multi-thousand-token RAG prefill; chunking caps it."""
    s, _ = rag_mix
    cont, c2048, c512 = (s.loc[(v, "all")] for v in ("continuous", "chunked-2048", "chunked-512"))
    # p50 is one decode step (a few ms for Llama-3.1-8B on an H100) for all three.
    for row in (cont, c2048, c512):
        assert 4.0 < row.itl_p50_ms < 15.0
    # A 3,000–8,000-token prefill at ≈ 20 µs/token is 60–160 ms on top of a decode step.
    assert cont.itl_max_ms > 100.0
    assert cont.itl_max_ms > 5 * c512.itl_max_ms
    assert c512.itl_max_ms < c2048.itl_max_ms < cont.itl_max_ms
    assert cont.itl_stalls > 0 and c512.itl_stalls == 0


def test_rag_mix_static_batching_wastes_most_slot_steps(rag_mix):
    """Seed 000 / pack Q1: run-to-completion holds slots for the longest reply."""
    s, _ = rag_mix
    static = s.loc[("static", "all")]
    assert static.slot_occupancy < 0.5
    assert static.ttft_p99_ms > 10 * s.loc[("chunked-512", "all")].ttft_p99_ms
    assert not static.slo_pass


def test_rag_mix_accounts_for_every_request(rag_mix):
    s, requests = rag_mix
    for variant in ("static", "continuous", "chunked-2048", "chunked-512"):
        row = s.loc[(variant, "all")]
        assert row.num_finished + row.num_rejected == row.num_requests
        sub = requests[requests.variant == variant]
        assert len(sub) == row.num_requests
        done = sub[sub.status == "finished"]
        assert (done.ttft_ms > 0).all() and (done.e2el_ms >= done.ttft_ms).all()
        # Per-class rows add up to the total.
        assert s.loc[(variant, "chat")].num_requests + s.loc[(variant, "rag")].num_requests \
            == row.num_requests


def test_azure_conv_replay_whole_trace(tmp_path, scenarios_dir, azure_conv_trace):
    """The real Azure LLM inference 2023 conversation trace, all 19,366 requests (skipped
    without ../shared)."""
    s, requests = run_scenario(scenarios_dir / "azure_conv_replay.yaml", tmp_path / "az",
                               "--set", f"workload.trace.path={azure_conv_trace}",
                               "--no-charts")          # the CSVs are read, not the figures
    with azure_conv_trace.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    out_tokens = sum(int(r["GeneratedTokens"]) for r in rows)
    row = s.loc[("default", "all")]
    assert row.num_requests == len(rows) == 19366
    assert row.num_finished + row.num_rejected == 19366
    assert row.num_rejected == 0          # max prompt 14,050 + reply fits max_model_len 16,384
    done = requests[requests.status == "finished"]
    span_s = (done.arrival_s + done.e2el_ms / 1e3).max() - requests.arrival_s.min()
    assert row.output_throughput_tok_per_s == pytest.approx(out_tokens / span_s, rel=1e-9)
    assert out_tokens / span_s == pytest.approx(4_088_665 / 3502, rel=0.01)
    # Sane latencies for 4 H100s at ~5.5 req/s of Llama-3.1-8B.
    assert 10 < row.ttft_p50_ms < 1000
    assert 3 < row.itl_p50_ms < 30
    assert row.itl_max_ms < 2000
    assert 0 < row.gpu_busy_frac < 1
