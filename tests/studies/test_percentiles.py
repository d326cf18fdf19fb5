"""--percentiles on capsim sweep and capsim size: vLLM-named columns in every run's row,
the points averaged over seeds, and the tables at those percentiles."""

from __future__ import annotations

import pandas as pd

#: Two load levels, one variant, two seeds (tests/studies/test_sweep.py's BASE, smaller).
SWEEP = {
    "name": "tiny", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096, "max_num_seqs": 32},
    "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate_per_s": 4},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "uniform", "min": 32, "max": 1500},
                              "output_tokens": {"dist": "uniform", "min": 4, "max": 64}}]},
    "slo": {"targets": {"itl_p99_ms": 40}},
    "sweep": {"workload.arrival.rate_per_s": [2, 8]},
}

ASKED = [f"p{q}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for q in ("50", "99.9")]


def test_sweep_percentiles(tmp_path, run_cli, write_scenario):
    out = tmp_path / "r"
    code, stdout, err = run_cli(["sweep", str(write_scenario(tmp_path, SWEEP)), "-o", str(out),
                                 "--seeds", "2", "--workers", "1", "--percentiles", "50,99.9"])
    assert code == 0, err
    runs = pd.read_csv(out / "summary.csv")
    assert set(ASKED) <= set(runs.columns)
    assert runs["p50_itl_ms"].equals(runs["itl_p50_ms"])
    points = pd.read_csv(out / "points.csv")
    for col in ASKED:
        assert col in points and f"{col}_ci95" in points
    # The point's figure is the mean over its two seeds.
    totals = runs[runs["cls"] == "all"]
    low = totals[totals["offered_rate_per_s"] == totals["offered_rate_per_s"].min()]
    assert points["p99.9_itl_ms"].min() <= low["p99.9_itl_ms"].mean() * (1 + 1e-12)
    html = (out / "index.html").read_text()
    assert ("<th>TTFT p50 ms</th><th>TTFT p99.9 ms</th><th>ITL p50 ms</th><th>ITL p99.9 ms</th>"
            "<th>ITL max ms</th>") in html
    assert "ITL p99.9" in stdout


def test_sweep_without_percentiles_keeps_its_columns(tmp_path, run_cli, write_scenario):
    out = tmp_path / "r"
    code, _, err = run_cli(["sweep", str(write_scenario(tmp_path, SWEEP)), "-o", str(out),
                            "--workers", "1"])
    assert code == 0, err
    for name in ("summary.csv", "points.csv"):
        cols = pd.read_csv(out / name).columns
        assert not [c for c in cols if c.startswith("p") and "_ms" in c], name
    assert "ITL p99 ms" in (out / "index.html").read_text()


def test_size_percentiles(tmp_path, run_cli, write_scenario):
    doc = {k: v for k, v in SWEEP.items() if k != "sweep"}
    doc["sizing"] = {"max_gpus": 2}
    out = tmp_path / "r"
    code, _, err = run_cli(["size", str(write_scenario(tmp_path, doc)), "-o", str(out),
                            "--rate", "2", "--workers", "1", "--percentiles", "50,99.9"])
    assert code == 0, err
    runs = pd.read_csv(out / "summary.csv")
    assert set(ASKED) <= set(runs.columns)
    assert "p99.9_ttft_ms" in pd.read_csv(out / "points.csv")
    assert "TTFT p99.9 ms" in (out / "index.html").read_text()
