"""``capsim run --no-charts``: no PNG is drawn, every other file of the report is the same."""

from __future__ import annotations

import re

import pytest

from capsim.report.run.page import NO_CHARTS_NOTE

#: Every view of the page that draws a figure: a colocated variant, an autoscaled one under a
#: piecewise schedule (the day view) and a 1P1D split (the P:D and KV transfer figures).
DOC = {
    "name": "nocharts", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "engine": {"max_model_len": 4096, "max_num_seqs": 32},
    "workload": {"duration_s": 60, "arrival": {"process": "poisson", "rate_per_s": 2.0},
                 "schedule": {"kind": "piecewise", "step_s": 15, "factors": [1, 3, 3, 1]},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "uniform", "min": 100, "max": 1500},
                              "output_tokens": {"dist": "uniform", "min": 20, "max": 200}}]},
    "variants": [
        {"name": "fixed"},
        {"name": "autoscaled", "cluster": {"num_replicas": 1, "autoscaling": {
            "signal": "running", "target": 8, "min_replicas": 1, "max_replicas": 3,
            "provisioning": {"delay_s": 10}}}},
        {"name": "split", "disaggregation": {"prefill": {"num_replicas": 1},
                                             "decode": {"num_replicas": 1},
                                             "link": "infiniband-ndr"}},
    ],
}


@pytest.fixture(scope="module")
def both_reports(tmp_path_factory, write_scenario):
    """(the report folder with charts, the one with --no-charts) of DOC."""
    from capsim.cli.main import main

    path = write_scenario(tmp_path_factory.mktemp("nocharts"), DOC)
    out = {}
    for name, extra in (("charts", []), ("bare", ["--no-charts"])):
        with pytest.raises(SystemExit) as exc:
            main(["run", str(path), "-o", str(path.parent / name), "--workers", "1", *extra])
            raise SystemExit(0)
        assert exc.value.code == 0
        out[name] = path.parent / name
    return out["charts"], out["bare"]


def test_no_charts_draws_no_png_and_writes_every_other_file_the_same(both_reports):
    charts, bare = both_reports
    pngs = sorted(p.name for p in charts.glob("*.png"))
    # the four run figures, the day view's, the split's two and one timeline per variant
    assert pngs == ["day.png", "disagg_ratio.png", "itl_bars.png", "itl_cdf.png",
                    "kv_transfer.png", "throughput_cost.png", "timeline_autoscaled.png",
                    "timeline_fixed.png", "timeline_split.png", "ttft_cdf.png"]
    assert list(bare.glob("*.png")) == []
    others = sorted(p.name for p in charts.iterdir() if p.suffix != ".png")
    assert others == sorted(p.name for p in bare.iterdir())
    assert {"day.csv", "summary.csv", "requests.csv", "results.json"} <= set(others)
    for name in others:
        if name != "index.html":
            assert (bare / name).read_bytes() == (charts / name).read_bytes(), name


def _without(html: str, *patterns: str) -> str:
    """html with every match of each pattern (DOTALL) removed, and the wall-clock parts
    (the stamp, each variant's wall seconds) blanked, runs of white space made one."""
    html = re.sub(r"generated [^<]*<", "generated <", html)
    html = re.sub(r"s in [0-9.,]+ s wall", "s in wall", html)
    for pattern in patterns:
        html = re.sub(pattern, "", html, flags=re.DOTALL)
    return re.sub(r"\s+", " ", html)


def test_no_charts_page_says_so_and_keeps_everything_else(both_reports):
    charts, bare = both_reports
    page, full = (bare / "index.html").read_text(), (charts / "index.html").read_text()
    assert "<img" not in page and full.count("<img") == 10
    note = f'<div class="notes"><b>Notes</b><ul><li>{NO_CHARTS_NOTE}</li></ul></div>'
    assert note in page and NO_CHARTS_NOTE not in full
    assert "<h2>Figures</h2>" not in page and "<h2>Figures</h2>" in full   # no empty heading
    # the same page less the figures' section and the note: every table, alert and log is there
    assert _without(page, re.escape(note)) == _without(
        full, r"<section>\s*<h2>Figures</h2>.*?</section>\s*")
