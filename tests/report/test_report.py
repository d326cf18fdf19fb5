"""Tests for capsim.report (a run's report): files, CSV contents, HTML escaping/offline-ness,
atomic writes, figure helpers and the terminal table. All inputs are small and hand-built
(RunResults, timelines, intervals). The sweep report: test_sweep_report.py."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from capsim import report
from capsim.metrics.summary import summarize, weighted_percentile
from capsim.report.cells import fmt, target_status
from capsim.report.run import cdf, figures, timeline
from capsim.report.run.console import summary_table
from capsim.report.style import slug, unique_slugs, variant_colours
from capsim.results.model import (FINISHED, REJECTED, ItlRuns, ReplicaStats, ReplicaTimeline,
                            RequestRecords, RunResult)
from capsim.scenario.slo import RequestSlo, SloConfig

NAN = float("nan")
EVIL = "<b>x&y</b>"
EVIL_ESCAPED = "&lt;b&gt;x&amp;y&lt;/b&gt;"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SLO = SloConfig(ttft_ms=500.0, tpot_ms=50.0, stall_threshold_ms=200.0,
                targets={"itl_max_ms": 300.0, "goodput_fraction": 0.5})
CLASS_SLOS = {"rag": RequestSlo(ttft_ms=2000.0)}


def _timeline(replica: int, bins: int = 6) -> ReplicaTimeline:
    return ReplicaTimeline(
        replica=replica, pool="colocated", bin_s=0.5,
        steps=[10] * bins, busy_s=[0.4] * bins, batch_tokens_mean=[120.0] * bins,
        prefill_tokens=[1000, 0, 600, 0, 0, 0][:bins] + [0] * max(0, bins - 6),
        decode_tokens=[20, 40, 40, 30, 20, 10][:bins] + [0] * max(0, bins - 6),
        kv_used_blocks_max=[10, 40, 80, 60, 30, 0][:bins] + [0] * max(0, bins - 6),
        queue_len_max=[2, 1, 0, 0, 0, 0][:bins] + [0] * max(0, bins - 6),
        running_max=[2, 4, 4, 3, 2, 1][:bins] + [0] * max(0, bins - 6))


def _stats(replica: int) -> ReplicaStats:
    return ReplicaStats(
        replica=replica, pool="colocated", hardware="H100-SXM", tensor_parallel_size=1,
        num_gpu_blocks=100, block_size=16, kv_cache_tokens=1600, steps=60, busy_s=2.4,
        flops=1e15, hbm_bytes=5e12, compute_bound_steps=5, prefill_tokens=1600,
        decode_tokens=160, preemptions=1, peak_kv_used_blocks=80, slot_steps_held=200,
        slot_steps_useful=180, slot_capacity=400)


def make_result(variant: str, *, stall_s: float, replicas: int = 1,
                reject_last: bool = False) -> RunResult:
    """Four requests (classes chat, rag, chat, rag); request 0 arrives at 1.0 s and emits its
    first token at 1.25 s (TTFT 250 ms). ITL: 5,000 gaps of 20 ms, 500 of 30 ms and one
    long gap (``stall_s``), rarer than 1 % so p99 cannot see it."""
    status = [FINISHED, FINISHED, FINISHED, REJECTED if reject_last else FINISHED]
    rej = [s == REJECTED for s in status]
    first = [1.25, 1.9, 2.3, 3.6]
    finish = [1.85, 2.5, 2.9, 4.4]
    records = RequestRecords(
        request_id=[0, 1, 2, 3], class_id=[0, 1, 0, 1], replica=[0, 0, 0, -1 if reject_last else 0],
        arrival_s=[1.0, 1.2, 2.0, 3.0], prompt_tokens=[100, 2000, 120, 3000],
        output_tokens=[21, 11, 31, 41], status=status,
        reject_reason=["kv" if r else "" for r in rej],
        first_scheduled_s=[NAN if r else v for r, v in zip(rej, [1.05, 1.3, 2.05, 3.1])],
        first_token_s=[NAN if r else v for r, v in zip(rej, first)],
        finish_s=[NAN if r else v for r, v in zip(rej, finish)],
        num_preemptions=[0, 1, 0, 0], max_itl_s=[0.03, stall_s, 0.02, 0.03])
    itl = ItlRuns(gap_s=[0.02, 0.03, stall_s, 0.02], count=[3000, 500, 1, 2000], class_id=[0, 1, 1, 0])
    return RunResult(
        variant=variant, seed=7, scheduler="continuous", num_replicas=replicas,
        num_gpus=replicas, hardware="H100-SXM", model="llama-3.1-8b",
        price_per_hour_usd=3.0 * replicas, peak_flops_per_gpu=989e12,
        hbm_bandwidth_per_gpu_bytes_per_s=3.35e12, class_names=["chat", "rag"], sim_end_s=3.0,
        wall_s=0.1, requests=records, itl=itl,
        replicas=[_stats(k) for k in range(replicas)],
        timelines=[_timeline(k) for k in range(replicas)],
        log=["GPU KV cache size: 1,600 tokens",
             "Maximum concurrency for 4,096 tokens per request: 0.39x"])


def _results() -> list[RunResult]:
    return [make_result(EVIL, stall_s=0.45, reject_last=True),
            make_result("chunked 512", stall_s=0.06, replicas=2)]


def _rows(results: list[RunResult]):
    return [row for r in results for row in summarize(r, SLO, CLASS_SLOS)]


@pytest.fixture
def results() -> list[RunResult]:
    return _results()


@pytest.fixture
def rows(results):
    return _rows(results)


def write(out_dir: Path, results, rows, **kw) -> Path:
    return report.write(out_dir, scenario_name="rag_mix <test>",
                        description="chat & rag <script>alert(1)</script>",
                        resolved_yaml="name: rag_mix\nseed: 7\n", results=results, rows=rows,
                        slo=SLO, class_slos=CLASS_SLOS, notes=["note <i>"], **kw)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, Path]:
    """(the folder, what :func:`write` returned) of the report of ``results`` and ``rows``
    (as those fixtures give them) written to REPORTS/rag_mix once, for the tests that only
    read it (each write draws every figure: 1.7 s); the tests that write again or break a
    write write their own."""
    results = _results()
    out = tmp_path_factory.mktemp("reports") / "rag_mix"
    return out, write(out, results, _rows(results))


# --- files and CSVs ---------------------------------------------------------------------------

def test_writes_every_file(written):
    out, index = written
    assert index == out / "index.html"
    names = {p.name for p in out.iterdir()}
    expected = {"index.html", "summary.csv", "requests.csv", "scenario.resolved.yaml",
                "itl_cdf.png", "ttft_cdf.png", "itl_bars.png", "throughput_cost.png",
                "timeline_b-x-y-b.png", "timeline_chunked-512.png"}
    assert expected <= names
    assert (out / "scenario.resolved.yaml").read_text() == "name: rag_mix\nseed: 7\n"
    # No temporary or backup directories left next to the report.
    assert [p.name for p in out.parent.iterdir()] == ["rag_mix"]


def test_pngs_are_valid(written):
    out, _ = written
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 6
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC, p.name
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width >= 600 and height >= 300, (p.name, width, height)


def test_summary_csv_matches_rows(written, rows):
    out, _ = written
    df = pd.read_csv(out / "summary.csv")
    assert len(df) == len(rows) == 6          # 2 variants × (all, chat, rag)
    assert list(df["variant"]) == [r.variant for r in rows]
    assert list(df["cls"]) == [r.cls for r in rows]
    for (_, got), row in zip(df.iterrows(), rows):
        assert got["num_rejected"] == row.num_rejected
        assert got["itl_stalls"] == row.itl_stalls
        assert got["itl_max_ms"] == pytest.approx(row.itl_max_ms)
        assert got["ttft_p99_ms"] == pytest.approx(row.ttft_p99_ms)
        assert bool(got["slo_pass"]) == row.slo_pass
    evil_all = df[(df["variant"] == EVIL) & (df["cls"] == "all")].iloc[0]
    assert evil_all["itl_max_ms"] == pytest.approx(450.0)
    assert evil_all["itl_stalls"] == 1
    assert evil_all["num_rejected"] == 1
    assert not evil_all["slo_pass"]


def test_requests_csv_one_row_per_request(written, results):
    out, _ = written
    df = pd.read_csv(out / "requests.csv")
    assert len(df) == sum(len(r.requests.request_id) for r in results) == 8
    assert df.groupby("variant").size().to_dict() == {EVIL: 4, "chunked 512": 4}
    r0 = df[(df["variant"] == "chunked 512") & (df["request_id"] == 0)].iloc[0]
    assert r0["ttft_ms"] == pytest.approx(250.0)            # 1.25 s − 1.0 s
    assert r0["tpot_ms"] == pytest.approx(600.0 / 20)       # (1.85 − 1.25) s / (21 − 1)
    assert r0["cls"] == "chat"
    rejected = df[(df["variant"] == EVIL) & (df["request_id"] == 3)].iloc[0]
    assert rejected["status"] == REJECTED and math.isnan(rejected["ttft_ms"])


# --- HTML -------------------------------------------------------------------------------------

def test_html_escapes_scenario_strings(written):
    html = written[1].read_text()
    assert EVIL not in html
    assert EVIL_ESCAPED in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "rag_mix &lt;test&gt;" in html
    assert "note &lt;i&gt;" in html


def test_html_is_offline(written):
    out, index = written
    html = index.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html.lower()
    assert "<link" not in html.lower()
    assert "@import" not in html
    # Every referenced image is a relative file name that exists in the report.
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == 6
    for src in srcs:
        assert "/" not in src and (out / src).is_file()


def test_html_header_and_verdict(written):
    html = written[1].read_text()
    assert "capsim 0.1.0" in html
    assert "seed 7" in html
    assert "GPU KV cache size: 1,600 tokens" in html
    assert "scheduler continuous" in html
    # EVIL fails itl_max_ms (450 > 300); chunked passes (60 ms).
    assert re.search(r'<td class="fail em" title="itl_max_ms ≤ 300">450</td>', html)
    assert re.search(r'<td class="pass em" title="itl_max_ms ≤ 300">60.0</td>', html)
    assert "ITL max 450 ms &gt; 300 ms" in html
    assert html.count('<span class="badge fail">FAIL</span>') >= 1
    assert html.count('<span class="badge pass">PASS</span>') >= 1
    # The stall warning names the variant and says p99 does not see it.
    assert "p99 does not show these stalls" in html
    assert "Per request class" in html


def test_html_tables_fit_the_page(written):
    """Issue 16 item 8: the verdict table was wider than 1400 and 1920 px (stall, E2EL and
    preemption columns behind a scrollbar, lost in print). Every table now has at most
    MAX_HTML_COLUMNS value columns (wide sets are stacked tables, each with the variant),
    the verdict's latency columns come first, every verdict column is still shown once,
    header labels wrap, and print drops the scrollbars on a landscape page."""
    from capsim.report.run.table import MAX_HTML_COLUMNS, verdict_columns
    html = written[1].read_text()
    tables = re.findall(r"<table>(.*?)</table>", html, re.S)
    assert len(tables) >= 5                       # verdict ×2, by class ×2, KV
    for t in tables:
        header = re.findall(r"<tr>(.*?)</tr>", t, re.S)[0]
        names = len(re.findall(r'<th class="name"', header))
        verdict = header.count(">verdict</th>")
        assert len(re.findall(r"<th", header)) - names - verdict <= MAX_HTML_COLUMNS
    verdict_table = html[html.index("<h2>Verdict</h2>"):html.index("Per request class")]
    keys = re.findall(r'<th title="([a-z0-9_]+)">', verdict_table)
    assert sorted(keys) == sorted(c.key for c in verdict_columns(SLO))
    assert keys[:2] == ["ttft_p50_ms", "ttft_p99_ms"] and "e2el_p99_ms" in keys
    assert verdict_table.count(">verdict</th>") == 1 and verdict_table.count("<table>") == 2
    # Every block repeats the variant names.
    assert all(t.count(EVIL.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")) == 1
               for t in re.findall(r"<table>(.*?)</table>", verdict_table, re.S))
    css = html[html.index("<style>"):html.index("</style>")]
    assert re.search(r"thead th \{ white-space: normal;", css)
    printing = css[css.index("@media print"):]
    assert ".scroll { overflow: visible;" in printing and "size: A4 landscape" in css
    # Failure text is readable, with units (no "4.667e+05 > 3000").
    assert "ITL max 450 ms &gt; 300 ms" in html and not re.search(r"\de[+-]\d", verdict_table)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt: chromium)")
@pytest.mark.parametrize("width_px", [1400, 1920])
def test_html_tables_fit_in_headless_chromium(tmp_path, written, width_px):
    """Issue 16 item 8, measured: at 1400 and 1920 px no table of index.html overflows its box
    (nothing behind a scrollbar) and the page has no horizontal scroll. A copy of the page gets
    a script writing the measured widths into the DOM, which Chromium prints (--dump-dom)."""
    page = Path(shutil.copytree(written[0], tmp_path / "r")) / written[1].name
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", """<script>
      const over = [...document.querySelectorAll('.scroll')]
        .filter(e => e.scrollWidth > e.clientWidth + 1).length;
      const doc = document.documentElement.scrollWidth - window.innerWidth;
      document.body.insertAdjacentHTML('beforeend',
        `<pre id="probe">${over} ${doc} ${document.querySelectorAll('.scroll').length}</pre>`);
    </script></body>"""), encoding="utf-8")
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width_px},1000",
         "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(\d+) (-?\d+) (\d+)</pre>', out.stdout)
    assert found, out.stderr[-2000:]
    overflowing, page_overflow_px, tables = map(int, found.groups())
    assert overflowing == 0 and page_overflow_px <= 0
    assert tables >= 5


# --- atomic writes ----------------------------------------------------------------------------

def _boom(*args, **kwargs):
    raise RuntimeError("figure failed")


@pytest.mark.parametrize("target", [(figures, "plot_itl_cdf"), (timeline, "plot_timeline")])
def test_failure_leaves_nothing_behind(tmp_path, monkeypatch, results, rows, target):
    monkeypatch.setattr(*target, _boom)
    out = tmp_path / "r"
    with pytest.raises(RuntimeError, match="figure failed"):
        write(out, results, rows)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_previous_report(tmp_path, monkeypatch, results, rows):
    out = tmp_path / "r"
    write(out, results, rows)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(figures, "plot_ttft_cdf", _boom)
    with pytest.raises(RuntimeError):
        write(out, results[:1], rows[:3])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["r"]


def test_rewrite_replaces_old_files(tmp_path, results, rows):
    out = tmp_path / "r"
    write(out, results, rows)
    (out / "stale.txt").write_text("old")
    write(out, results[1:], rows[3:])
    assert not (out / "stale.txt").exists()
    assert not (out / "timeline_b-x-y-b.png").exists()
    assert (out / "timeline_chunked-512.png").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["r"]


def test_variant_without_tokens_still_renders(tmp_path):
    r = make_result("all rejected", stall_s=0.3)
    n = len(r.requests.request_id)
    nan = [NAN] * n
    r = r.model_copy(update={
        "requests": r.requests.model_copy(update={
            "status": [REJECTED] * n, "first_token_s": nan, "finish_s": nan,
            "first_scheduled_s": nan, "reject_reason": ["kv"] * n}),
        "itl": ItlRuns(gap_s=[], count=[], class_id=[]), "timelines": []})
    rows = summarize(r, SLO, CLASS_SLOS)
    html = write(tmp_path / "r", [r], rows).read_text()
    assert "all rejected" in html
    assert (tmp_path / "r" / "itl_cdf.png").read_bytes()[:8] == PNG_MAGIC


# --- figure helpers ---------------------------------------------------------------------------

def test_itl_markers_match_weighted_percentile(results):
    for r in results:
        gaps_ms = np.asarray(r.itl.gap_s) * 1e3
        counts = np.asarray(r.itl.count)
        d = cdf.itl_distribution(r)
        for key, q in (("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9)):
            assert d.markers[key] == pytest.approx(weighted_percentile(gaps_ms, counts, q))
        assert d.markers["max"] == pytest.approx(gaps_ms.max())
        assert d.total == counts.sum()


def test_distribution_exact_and_thinned():
    rng = np.random.default_rng(1)
    values = rng.lognormal(3.0, 0.5, 20_000)
    counts = rng.integers(1, 30, len(values))
    values[-1], counts[-1] = 5_000.0, 3                    # one rare long stall
    d = cdf.distribution(values, counts, max_points=200)
    flat = np.repeat(values, counts)
    for key, q in (("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9)):
        assert d.markers[key] == pytest.approx(np.percentile(flat, q))
    assert d.markers["max"] == 5_000.0
    assert len(d.x_ms) <= 2 * 200 + 2                      # thinned for plotting
    assert np.all(np.diff(d.x_ms) > 0) and np.all(np.diff(d.cdf) >= 0)
    assert d.cdf[-1] == pytest.approx(1.0)
    assert d.ccdf[-1] == pytest.approx(3 / counts.sum())   # P(gap ≥ max) stays on a log axis
    assert d.ccdf_at(d.markers["max"]) == pytest.approx(3 / counts.sum())
    assert d.cdf_at(d.markers["p50"]) == pytest.approx(0.5, abs=0.01)


def test_distribution_ignores_nan_and_zero_counts():
    d = cdf.distribution(np.array([1.0, NAN, 3.0, 9.0]), np.array([1, 5, 1, 0]))
    assert d.total == 2 and list(d.x_ms) == [1.0, 3.0] and d.markers["max"] == 3.0
    assert cdf.distribution(np.array([]), np.array([], dtype=int)).empty


def test_timeline_pooled_tokens_and_kv_percent():
    r = make_result("v", stall_s=0.3, replicas=2)
    width, n = timeline.display_grid(r.timelines, r.sim_end_s)
    assert (width, n) == (0.5, 6)                           # short run: recorded bins kept
    pre, dec = timeline.tokens_per_step(r.timelines, width, n)
    assert pre[0] == pytest.approx(2000 / 20)               # Σ prefill / Σ steps over replicas
    assert dec[1] == pytest.approx(80 / 20)
    kv = timeline.kv_percent(r, r.timelines, width, n)
    assert kv.shape == (2, 6) and kv[0, 2] == pytest.approx(80.0)


def test_timeline_merges_long_and_mixed_bins():
    """2,000 bins of 0.1 s and 1,000 bins of 0.2 s → ≤ DISPLAY_BINS bins; sums and maxima kept."""
    rng = np.random.default_rng(3)

    def tl(replica: int, bin_s: float, bins: int) -> ReplicaTimeline:
        ints = lambda hi: [int(v) for v in rng.integers(0, hi, bins)]   # noqa: E731
        return ReplicaTimeline(replica=replica, pool="colocated", bin_s=bin_s, steps=ints(20),
                               busy_s=[0.05] * bins, batch_tokens_mean=[1.0] * bins,
                               prefill_tokens=ints(5000), decode_tokens=ints(64),
                               kv_used_blocks_max=ints(100), queue_len_max=ints(9),
                               running_max=ints(64))
    tls = [tl(0, 0.1, 2000), tl(1, 0.2, 1000)]
    width, n = timeline.display_grid(tls, 200.0)
    assert n <= timeline.DISPLAY_BINS and n * width >= 200.0 - 1e-9
    assert width / 0.2 == pytest.approx(round(width / 0.2))            # whole recorded bins
    steps = timeline._grid(tls, "steps", width, n, "sum")
    assert steps.sum(axis=1) == pytest.approx([sum(t.steps) for t in tls])
    queue = timeline._grid(tls, "queue_len_max", width, n, "max")
    assert queue.max(axis=1) == pytest.approx([max(t.queue_len_max) for t in tls])
    per = round(width / 0.1)
    assert queue[0, 1] == max(tls[0].queue_len_max[per: 2 * per])


def test_timeline_step_times_mean_and_longest_per_bin():
    """Mean step = Σ busy / Σ steps over replicas; longest = the largest step_max_s of any
    replica in the merged bin; a timeline read from an older result (no step_max_s) counts 0."""
    base = dict(pool="colocated", bin_s=0.5, batch_tokens_mean=[0.0] * 4, prefill_tokens=[0] * 4,
                decode_tokens=[0] * 4, kv_used_blocks_max=[0] * 4, queue_len_max=[0] * 4,
                running_max=[0] * 4)
    a = ReplicaTimeline(replica=0, steps=[10, 0, 4, 2], busy_s=[0.1, 0, 0.3, 0.02],
                        step_max_s=[0.01, 0, 0.2, 0.01], **base)
    b = ReplicaTimeline(replica=1, steps=[10, 5, 0, 2], busy_s=[0.1, 0.05, 0, 0.02],
                        step_max_s=[0.012, 0.01, 0, 0.01], **base)
    old = ReplicaTimeline(replica=2, steps=[1, 0, 0, 0], busy_s=[0.5, 0, 0, 0], **base)
    mean, longest = timeline.step_times_ms([a, b, old], 0.5, 4)
    assert mean.tolist() == pytest.approx([0.7 / 21 * 1e3, 10.0, 75.0, 10.0])
    assert longest.tolist() == pytest.approx([12.0, 10.0, 200.0, 10.0])
    mean, longest = timeline.step_times_ms([a, b], 1.0, 2)           # bins merged in pairs
    assert longest.tolist() == pytest.approx([12.0, 200.0])
    assert mean.tolist() == pytest.approx([0.25 / 25 * 1e3, 0.34 / 8 * 1e3])


def test_gauges_fill_bins_inside_long_steps():
    """A 1.2 s step ends in bin 3 (bin_s 0.5): bins 1-2 lie inside it and take its gauges;
    bin 5 (after the last step) is idle and stays 0."""
    t = ReplicaTimeline(replica=0, pool="colocated", bin_s=0.5, steps=[3, 0, 0, 1, 2, 0],
                        busy_s=[0.3, 0, 0, 1.2, 0.2, 0], batch_tokens_mean=[0.0] * 6,
                        prefill_tokens=[0] * 6, decode_tokens=[0] * 6,
                        kv_used_blocks_max=[10, 0, 0, 70, 20, 0], queue_len_max=[1, 0, 0, 5, 2, 0],
                        running_max=[2, 0, 0, 8, 3, 0])
    assert list(timeline.gauge(t, "kv_used_blocks_max")) == [10, 70, 70, 70, 20, 0]
    assert list(timeline.gauge(t, "running_max")) == [2, 8, 8, 8, 3, 0]
    short = t.model_copy(update={"busy_s": [0.3, 0, 0, 0.2, 0.2, 0]})   # idle gap, short step
    assert list(timeline.gauge(short, "queue_len_max")) == [1, 0, 0, 5, 2, 0]


def test_timeline_many_replicas(tmp_path):
    r = make_result("big", stall_s=0.3, replicas=timeline.MAX_REPLICA_LINES + 2)
    path = tmp_path / "t.png"
    timeline.plot_timeline(r, "#0072B2", path)
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_timeline_link_panel_counts_intervals_exactly():
    """Mean number of open [start, end) intervals per 1-s bin (waiting / in-flight panel)."""
    from capsim.report.run.disagg import interval_occupancy
    occ = interval_occupancy(np.array([0.5, 1.0, 2.25]), np.array([1.5, 3.0, float("nan")]),
                             1.0, 3)
    assert occ.tolist() == pytest.approx([0.5, 1.5, 1.0])


def test_slugs_and_colours():
    assert slug(EVIL) == "b-x-y-b"
    assert slug("Chunked 512 (TP=2)") == "chunked-512-tp-2"
    assert slug("???") == "variant"
    assert unique_slugs(["A b", "a-b", "A b"]) == {"A b": "a-b", "a-b": "a-b-2"}
    colours = variant_colours(["x", "y", "x"])
    assert list(colours) == ["x", "y"] and colours["x"] != colours["y"]


def test_formatting():
    assert fmt(NAN, "ms") == "—"
    assert fmt(1234.5, "ms") == "1,234" or fmt(1234.5, "ms") == "1,235"
    assert fmt(12.34, "ms") == "12.3"
    assert fmt(4.812, "ms") == "4.81"
    assert fmt(0.1234, "ms") == "0.123"
    assert fmt(0.953, "frac") == "95.3%"
    # rag_mix's static variant: 0.1446 % of requests met the SLOs; "0.1%" hid the digits
    assert fmt(0.001446, "frac") == "0.14%" and fmt(7.24e-5, "frac") == "0.0072%"
    assert fmt(0.0099, "frac") == "0.99%" and fmt(0.00996, "frac") == "1.0%"
    assert fmt(0.0, "frac") == "0.0%"
    assert fmt(7, "usd") == "$7.00"
    assert fmt(0.7765, "usd3") == "$0.776" or fmt(0.7765, "usd3") == "$0.777"
    assert fmt(12345, "int") == "12,345"
    assert target_status("itl_max_ms", 450.0, SLO) == "fail"
    assert target_status("goodput_fraction", 0.75, SLO) == "pass"
    assert target_status("goodput_fraction", NAN, SLO) == "fail"
    assert target_status("ttft_p50_ms", 1.0, SLO) is None


# --- console ----------------------------------------------------------------------------------

def test_console_summary_table(rows):
    table = summary_table(rows, SLO)
    assert table.row_count == 2                              # cls == "all" rows only
    console = Console(record=True, width=250, color_system=None)
    console.print(table)
    text = console.export_text()
    assert EVIL in text                                      # printed literally, not as markup
    assert "FAIL" in text and "ITL max 450 ms > 300 ms" in text and "PASS" in text
    for header in ("GPUs", "req/s", "out tok/s", "goodput", "TTFT p99", "TPOT p50",
                   "ITL p50", "ITL p99", "ITL max", "stalls", "preempt", "rejected"):
        assert header in text
    assert text.count("┏") == 1                              # wide enough: one table


@pytest.mark.parametrize("width", [80, 100])
def test_console_summary_folds_and_never_cuts_a_figure(rows, width):
    """Issue 16: at 80 and 100 columns every number showed as "4…". The columns now fold
    into several tables (each repeating the variant); every figure is printed whole."""
    from capsim.report.cells import fmt
    from capsim.report.run.table import console_columns

    big = dict(num_gpus=128, request_throughput_per_s=1234.5, output_throughput_tok_per_s=987654.0,
               ttft_p99_ms=123456.0, tpot_p50_ms=12.345, itl_p50_ms=45.67, itl_p99_ms=1234.0,
               itl_max_ms=98765.0, itl_stalls=43210, preemptions=123456, num_rejected=54321)
    rows = [r.model_copy(update=big) if r.cls == "all" and r.variant != EVIL else r
            for r in rows]
    console = Console(record=True, width=width, color_system=None)
    console.print(summary_table(rows, SLO))
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    assert text.count("┏") >= 2                               # folded
    for row in (r for r in rows if r.cls == "all"):
        for c in console_columns(SLO):
            figure = fmt(getattr(row, c.key), c.kind)
            assert any(f" {figure} " in line for line in lines), (c.key, figure)
        assert sum(row.variant in line for line in lines) >= 2   # the variant in every part
    assert "987,654" in text and "123,456" in text and "98,765" in text


def test_console_summary_with_a_name_wider_than_the_terminal_folds_the_name(rows):
    """A 100-character variant name (the longest allowed) in 80 columns: the name folds,
    no figure is cut."""
    from capsim.report.cells import fmt

    long = "v" * 100
    rows = [r.model_copy(update={"variant": long}) if r.variant == "chunked 512" else r
            for r in rows]
    console = Console(record=True, width=80, color_system=None)
    console.print(summary_table(rows, SLO))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    row = next(r for r in rows if r.variant == long and r.cls == "all")
    assert f" {fmt(row.output_throughput_tok_per_s, 'tok')} " in text
    assert f" {fmt(row.itl_max_ms, 'ms')} " in text


def test_folded_names_break_after_separators_not_inside_words():
    """Issue 16 follow-up: at 80 columns `capsim size` printed "a100-80g" / "b TP1" and a
    header "configurat" / "ion". A capped name now breaks after a separator and a narrow
    rank column leaves its share to the name."""
    from capsim.report.terminal import FoldColumn, FoldedTable

    table = FoldedTable("size", [FoldColumn("#"), FoldColumn("configuration", text=True),
                                 FoldColumn("status", text=True)],
                        [[FoldColumn("GPUs"), FoldColumn("$/M out")],
                         [FoldColumn("binding SLO (worst run)", text=True), FoldColumn("margin")]])
    names = ["chunked-512 · h100-sxm TP1", "chunked-2048 · a100-80gb TP1"]
    for rank, name in enumerate(names, 1):
        table.add_row(str(rank), name, "met", "21", "$0.917",
                      "itl_p99_ms 48.62 (≤ 50); 51.6 at 21 GPUs", "+2.8 %")
    console = Console(record=True, width=80, color_system=None)
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for word in ("configuration", "chunked-512", "chunked-2048", "h100-sxm", "a100-80gb"):
        assert word in text, word


def test_step_time_range_shows_the_stall_threshold_its_legend_names():
    """The step-time panel's legend names the stall threshold; with steps of tens of ms and a
    threshold far above them the line fell off the axis (seen with a 200 ms threshold and a
    ~60 ms top). The shared range now reaches it, with the same 1.5x margin."""
    r = make_result("a", stall_s=0.06)
    lo, hi = timeline.step_time_range_ms([r])
    assert hi < 1000.0
    lo_t, hi_t = timeline.step_time_range_ms([r], stall_threshold_ms=1000.0)
    assert (lo_t, hi_t) == (lo, 1000.0 * 1.5)
    assert timeline.step_time_range_ms([r], stall_threshold_ms=0.001)[0] == 0.001 / 1.5
