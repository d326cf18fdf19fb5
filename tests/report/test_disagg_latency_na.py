"""The P:D report's latency panel says why a static-batching variant has no ITL bars (issue
31's new-user polish), as the ITL charts do: "ITL n/a", the replies held until the batch
ends (capsim/engine/scheduler/static.py; vLLM's bench adds no ITL for a reply that arrives
in one chunk, see tests/report/test_held_replies.py)."""

from __future__ import annotations

import pytest

from capsim.report.run import disagg, split_table

DOC = {
    "name": "pd", "model": "llama-3.1-8b", "hardware": "h100-sxm", "seed": 1,
    "engine": {"max_num_seqs": 8, "max_model_len": 4096},
    "workload": {"num_requests": 24, "arrival": {"process": "poisson", "rate_per_s": 8},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 300},
                              "output_tokens": {"dist": "fixed", "value": 20}}]},
    "variants": [{"name": "static", "engine": {"scheduler": "static"}},
                 {"name": "chunked"},
                 {"name": "1P1D", "disaggregation": {"prefill": {"num_replicas": 1},
                                                     "decode": {"num_replicas": 1},
                                                     "link": "infiniband-ndr"}}],
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    import yaml

    from capsim.metrics.summary import summarize
    from capsim.scenario.load import load
    from capsim.sim.simulate import simulate
    from capsim.workload import TraceCache

    d = tmp_path_factory.mktemp("pd")
    (d / "pd.yaml").write_text(yaml.safe_dump(DOC, sort_keys=False))
    loaded = load(d / "pd.yaml", [])
    cache = TraceCache(loaded.base_dir, str(loaded.path))
    results = [simulate(rc, cache.get(rc.workload, rc.seed)) for rc in loaded.runs]
    rows = [row for r in results for row in summarize(r, loaded.spec.slo, loaded.class_slos)
            if row.cls == "all"]
    return results, rows


def test_the_static_variant_alone_gets_the_note(ran):
    results, rows = ran
    by_name = {r.variant: r for r in results}
    ordered = split_table.ordered(rows, results)
    notes = disagg.latency_notes(ordered, by_name)
    assert [ordered[i].variant for i, _ in notes] == ["static"]
    assert notes[0][1].startswith("ITL n/a: replies held")


def test_the_panel_draws_it_where_the_bars_are_missing(ran, monkeypatch, tmp_path):
    results, rows = ran
    drawn = {}
    monkeypatch.setattr(disagg, "save", lambda fig, path: drawn.setdefault("fig", fig))
    disagg.plot_ratio(rows, results, {r.variant: "#333" for r in results},
                      tmp_path / "x.png")
    ax_lat = drawn["fig"].axes[1]
    (note,) = [t for t in ax_lat.texts if t.get_text().startswith("ITL n/a")]
    static_x = [r.variant for r in split_table.ordered(rows, results)].index("static")
    assert note.get_position()[0] == pytest.approx(static_x + 0.05)
    assert "the wait is in TTFT" in note.get_text()


@pytest.mark.parametrize("cls", [None, "chat"])
def test_results_json_has_no_itl_for_held_replies(ran, cls):
    """results.json (bench_fields) wrote ITL 0 ms for the static variant while summary.csv
    left it empty: now null (strict JSON's "no value"), as summary.csv; TPOT stays vLLM's
    formula, (E2EL - TTFT) / (tokens - 1) = 0 for a reply returned whole."""
    from capsim.metrics.bench import bench_fields
    from capsim.metrics.summary import request_frame

    results, _ = ran
    by_name = {r.variant: r for r in results}
    static = bench_fields(by_name["static"], request_frame(by_name["static"]), (99.0,), None,
                          cls=cls)
    assert static["mean_itl_ms"] is None and static["p99_itl_ms"] is None
    assert static["mean_tpot_ms"] == 0.0
    chunked = bench_fields(by_name["chunked"], request_frame(by_name["chunked"]), (99.0,),
                           None, cls=cls)
    assert chunked["mean_itl_ms"] > 1 and chunked["p99_itl_ms"] >= chunked["mean_itl_ms"]
