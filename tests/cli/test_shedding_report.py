"""Requests shed by a limit reach every table of ``capsim run``: the terminal's warning,
summary.csv's per-kind column, requests.csv's reason, the report's alert."""

from __future__ import annotations

import pandas as pd


def test_shed_requests_are_counted_in_every_table(tmp_path, run_cli, scenarios_dir):
    out_dir = tmp_path / "r"
    code, out, err = run_cli(["run", str(scenarios_dir / "kv_allocators.yaml"), "-o",
                              str(out_dir), "--set", "workload.num_requests=200",
                              "--no-charts"])
    assert code == 0 and err == ""
    summary = pd.read_csv(out_dir / "summary.csv").query("cls == 'all'").set_index("variant")
    assert [c for c in summary.columns if c.startswith("rejected_")] == ["rejected_queue_full"]
    assert (summary.rejected_queue_full == summary.num_rejected).all()
    assert (summary.num_finished + summary.num_rejected == 200).all()
    shed = int(summary.loc["reserve-max_model_len", "num_rejected"])
    assert shed > 0 and summary.loc["paged", "num_rejected"] == 0
    requests = pd.read_csv(out_dir / "requests.csv")
    mine = requests[requests.variant == "reserve-max_model_len"]
    assert len(mine) == 200 and (mine.status == "rejected").sum() == shed
    assert mine.reject_reason.dropna().str.startswith("queue_full: ").all()
    line = (f"warning: reserve-max_model_len: {shed:,} of 200 requests rejected, e.g. "
            f"queue_full: 16 requests wait at replica 0 (engine.max_waiting_requests 16); "
            f"by kind: queue_full {shed:,}")
    assert line in out
    html = (out_dir / "index.html").read_text()
    assert f"that finished. By kind: queue_full {shed:,}." in html


def test_validate_says_where_requests_are_shed(run_cli, scenarios_dir):
    code, out, _ = run_cli(["validate", str(scenarios_dir / "kv_allocators.yaml"), "--set",
                            "cluster.router_rate_limit={rate_per_s: 20, burst: 40}"])
    assert code == 0
    assert ("  paged: 1 × a100-80gb TP1, continuous chunked, max_num_seqs 512, "
            "max_num_batched_tokens 8192, sheds beyond 16 waiting per replica; 20/s, burst 40 "
            "at the router\n") in out
    code, out, _ = run_cli(["validate", str(scenarios_dir / "hetero_fleet.yaml"), "--set",
                            "cluster.router_max_queued_requests=64"])
    assert code == 0 and "sheds beyond 64 waiting at the router" in out
