"""The shipped disaggregation scenarios end to end through the CLI: rag_mix's 1P1D variants
and disagg_ratio's P:D sweep, asserting what the report must show (issue 3)."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import pandas as pd
import pytest

from capsim.cli.main import main

def run_scenario(path: Path, out: Path) -> pd.DataFrame:
    printed = io.StringIO()
    with pytest.raises(SystemExit) as exc, contextlib.redirect_stdout(printed):
        main(["run", str(path), "-o", str(out)])
        raise SystemExit(0)
    assert exc.value.code == 0
    return read_report(out, printed.getvalue())


def read_report(out: Path, printed: str) -> pd.DataFrame:
    """summary.csv of the disaggregation report in ``out`` (its figures and section checked),
    with the run's stdout (``printed``) saved beside it as stdout.txt."""
    (out.parent / "stdout.txt").write_text(printed)
    for png in ("disagg_ratio.png", "kv_transfer.png"):
        assert (out / png).stat().st_size > 10_000
    html = (out / "index.html").read_text()
    assert "Prefill / decode disaggregation" in html
    return pd.read_csv(out / "summary.csv").set_index(["variant", "cls"])


@pytest.fixture(scope="module")
def rag_mix(rag_mix_run):
    return read_report(*rag_mix_run)


@pytest.fixture(scope="module")
def ratio(tmp_path_factory, scenarios_dir):
    return run_scenario(scenarios_dir / "disagg_ratio.yaml",
                        tmp_path_factory.mktemp("ratio") / "report")


def test_rag_mix_1p1d_removes_the_prefill_stalls_on_the_same_two_gpus(rag_mix):
    s = rag_mix
    # The co-located variants that stream (static batching holds each reply until its batch
    # ends: no gap reaches the client, ITL n/a (NaN, issue 31 item 9), the wait is in its
    # TTFT; docs/how-it-works/metrics.md).
    colo = [v for v in ("continuous", "chunked-2048", "chunked-512")]
    assert math.isnan(s.loc[("static", "all")].itl_p99_ms)
    nv, ib = s.loc[("disagg-1P1D-nvlink", "all")], s.loc[("disagg-1P1D-ib", "all")]
    for row in (nv, ib):
        assert row.num_gpus == 2 and row.disagg == "1P1D"
        assert row.num_finished == row.num_requests and row.itl_stalls == 0
        assert row.cost_per_hour_usd == s.loc[("chunked-512", "all")].cost_per_hour_usd
        # No prefill ever shares a step with a decode: p99 ITL is the lowest of the streams.
        assert all(row.itl_p99_ms < s.loc[(v, "all")].itl_p99_ms for v in colo)
        # One GPU prefills instead of two: TTFT pays for it.
        assert row.ttft_p99_ms > s.loc[("chunked-2048", "all")].ttft_p99_ms
        assert row.kv_backpressure_p99_ms == 0.0      # one decode GPU has room for this load
    assert nv.itl_max_ms < s.loc[("continuous", "all")].itl_max_ms / 5
    # Same prompts, same bytes; InfiniBand (50 GB/s) is 9× slower than NVLink 4 (450 GB/s).
    assert ib.kv_transfer_gib == pytest.approx(nv.kv_transfer_gib)
    assert ib.kv_transfer_p99_ms > 5 * nv.kv_transfer_p99_ms
    assert ib.second_token_p99_ms > nv.second_token_p99_ms
    assert ib.itl_max_ms > nv.itl_max_ms
    # The RAG class moves the long prompts: its transfers dominate the tail.
    assert s.loc[("disagg-1P1D-ib", "rag")].kv_transfer_p50_ms > \
        5 * s.loc[("disagg-1P1D-ib", "chat")].kv_transfer_p50_ms


def test_the_terminal_shows_the_pools_of_each_split(ratio, tmp_path_factory):
    """After the summary, `capsim run` prints one line per disaggregated variant: pool
    busy, batch fill, stranded, KV transfer / wait and token 1→2 p99 (ms)."""
    out = next(tmp_path_factory.getbasetemp().glob("ratio*/stdout.txt")).read_text()
    table = out[out.index("prefill / decode pools"):]
    assert "colocated-chunked-512" not in table
    for header in ("prefill busy", "decode batch fill", "prefill stranded",
                   "KV transfer p99", "KV transfer wait p99", "Token 1→2 p99"):
        assert header in table
    line_3p1d = next(line for line in table.splitlines() if "3P1D" in line)
    s = ratio.loc[("3P1D", "all")]
    assert f"{s.decode_slot_occupancy:.1%}" in line_3p1d            # 77.6%
    assert f"{s.kv_backpressure_p99_ms:,.0f}" in line_3p1d          # 1,209


def test_disagg_ratio_2p2d_wins_and_the_others_show_why(ratio):
    s = ratio
    one, two, three = (s.loc[(v, "all")] for v in ("1P3D", "2P2D", "3P1D"))
    for row in (one, two, three):
        assert row.num_gpus == 4
        assert row.num_finished + row.num_rejected == row.num_requests
    # 1P3D: one prefill GPU cannot keep up; the queue grows, TTFT explodes, decode idles along.
    assert one.prefill_busy_frac > 0.95 and one.ttft_p99_ms > 10_000 and not one.slo_pass
    assert one.decode_slot_occupancy < two.decode_slot_occupancy
    # 3P1D: one decode GPU fills its batch to max_num_seqs; prefilled requests wait for room
    # (back-pressure) with their KV held on the prefill side, and prefill GPUs sit stranded.
    assert three.kv_backpressure_p99_ms > 100 and three.second_token_p99_ms > 100
    assert three.stranded_prefill_frac > 0.01
    assert three.decode_slot_occupancy > two.decode_slot_occupancy
    assert three.itl_max_ms > s.loc[("colocated-chunked-512", "all")].itl_max_ms
    # 2P2D balances both pools: it passes every target with the lowest ITL p99 of the splits.
    assert two.slo_pass and two.kv_backpressure_p99_ms < 1.0
    assert two.itl_p99_ms < min(three.itl_p99_ms,
                                s.loc[("colocated-chunked-512", "all")].itl_p99_ms)
    assert two.goodput_req_per_s >= max(one.goodput_req_per_s, three.goodput_req_per_s)
