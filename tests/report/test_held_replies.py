"""Static batching's held replies (issue 31 item 9): a reply returned whole when its batch
ends shows the client no gap between tokens, so its ITL is n/a — NaN in summary.csv, "n/a
(held replies)" in the terminal and the report, never coloured as passing, failing an ITL
target — and a scenario whose targets bound neither TTFT nor E2EL is warned about.

Why n/a and not 0: ``vllm bench serve`` adds no ITL for a reply that arrives in one chunk
(vllm/benchmarks/serve.py, ``calculate_metrics``: ``itls += outputs[i].itl``, empty for one
chunk; TPOT = (latency − ttft) ÷ (output_len − 1) = 0); capsim's static scheduler holds
every reply until its batch ends (capsim/engine/scheduler/static.py, seed 002 Q1).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from rich.console import Console

from capsim.profiles.policies import label_holds_replies
from capsim.scenario.slo import RequestSlo, SloConfig, unbounded_wait_warning

DOC = {
    "name": "held", "model": "llama-3.1-8b", "hardware": "h100-sxm", "seed": 42,
    "engine": {"max_num_seqs": 16, "max_model_len": 8192},
    "workload": {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 6},
                 "classes": [{"name": "chat", "weight": 1,
                              "prompt_tokens": {"dist": "fixed", "value": 800},
                              "output_tokens": {"dist": "fixed", "value": 120}}]},
    "slo": {"targets": {"itl_p99_ms": 60}},               # ITL only: no TTFT / E2EL bound
    "variants": [{"name": "static", "engine": {"scheduler": "static"}}, {"name": "chunked"}],
}
ITL = ["itl_mean_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "itl_p999_ms", "itl_max_ms"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One ``capsim run`` of DOC: (stdout, stderr, report directory)."""
    import yaml
    from capsim.cli.main import main

    d = tmp_path_factory.mktemp("held")
    path = d / "held.yaml"
    path.write_text(yaml.safe_dump(DOC, sort_keys=False))
    out = d / "r"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "120")
        import io
        import contextlib
        so, se = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se), \
                pytest.raises(SystemExit) as exc:
            main(["run", str(path), "-o", str(out), "--workers", "1", "--no-charts"])
            raise SystemExit(0)
    assert exc.value.code == 0, se.getvalue()
    return so.getvalue(), se.getvalue(), out


def test_summary_csv_has_no_itl_for_held_replies(ran):
    _, _, out = ran
    s = pd.read_csv(out / "summary.csv").set_index(["variant", "cls"])
    static, chunked = s.loc[("static", "all")], s.loc[("chunked", "all")]
    assert static[ITL].isna().all()                 # written empty, not 0
    assert static.itl_stalls == 0 and static.tpot_p50_ms == 0      # vLLM's TPOT formula
    assert static.ttft_p99_ms == static.e2el_p99_ms > 1000         # the wait, up front
    assert chunked[ITL].notna().all() and chunked.itl_p50_ms > 1
    # An ITL-only SLO no longer passes a variant whose users wait seconds for anything.
    assert not static.slo_pass and static.slo_failed == "ITL p99 n/a (held replies)"
    assert chunked.slo_pass
    line = next(l for l in (out / "summary.csv").read_text().splitlines()
                if l.startswith("static,all,"))
    assert ",,,,,," in line                          # the six ITL columns, empty
    requests = pd.read_csv(out / "requests.csv")
    held = requests[requests.variant == "static"]
    assert held.max_itl_ms.isna().all() and (held.tpot_ms == 0).all()


def test_terminal_says_n_a_and_why(ran):
    stdout, stderr, _ = ran
    row = next(l for l in stdout.splitlines() if l.startswith("│ static "))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells.count("n/a") == 3                   # ITL p50, p99, max
    assert "FAIL ITL p99 n/a (held replies)" in stdout
    assert "static: ITL n/a (held replies): static batching returns each reply whole" in stdout
    assert "TTFT = E2EL (p99 " in stdout


def test_terminal_cells_of_held_itl_are_never_green():
    from capsim.report.run.console import summary_table
    from capsim.results.model import SummaryRow

    fields = {k: 0.0 for k, f in SummaryRow.model_fields.items()
              if f.annotation is float}
    fields.update({k: 0 for k, f in SummaryRow.model_fields.items() if f.annotation is int})
    row = SummaryRow(variant="static", cls="all", slo_pass=False,
                     slo_failed="ITL p99 n/a (held replies)",
                     **{**fields, **dict.fromkeys(ITL, math.nan)})
    slo = SloConfig(targets={"itl_p99_ms": 60, "itl_max_ms": 150})
    cells = summary_table([row], slo, held=frozenset({"static"})).rows[0]
    itl = cells[7:10]                                    # after variant … TTFT p99, TPOT p50
    assert [c.plain for c in itl] == ["n/a"] * 3
    # ITL p99 and max are bounded: red, as the verdict fails them; ITL p50 is not: dim.
    assert [str(c.style) for c in itl] == ["dim", "bold red", "bold red"]
    # Without ``held`` the NaN cells read "—" (no data), as before.
    plain = summary_table([row], slo).rows[0]
    assert [c.plain for c in plain[7:10]] == ["—"] * 3


def test_report_cells_read_held_replies_not_pass(ran):
    _, _, out = ran
    html = (out / "index.html").read_text()
    assert '<td class="fail held" title="itl_p99_ms ≤ 60">n/a (held replies)</td>' in html
    assert '<td class="na held" title="itl_max_ms">n/a (held replies)</td>' in html
    assert "its ITL is n/a (no gap between tokens reaches the client" in html


def test_run_and_validate_warn_when_nothing_bounds_the_wait(ran, tmp_path, run_cli,
                                                            write_scenario):
    _, stderr, _ = ran
    assert stderr.count("warning: ") == 1
    assert "variant static: static batching holds each reply whole" in stderr
    code, _, err = run_cli(["validate", str(write_scenario(tmp_path, DOC))])
    assert code == 0
    assert "slo.targets bound neither TTFT nor E2EL" in err and "ttft_p99_ms" in err


@pytest.mark.parametrize("slo, class_slos, warned", [
    ({"targets": {"itl_p99_ms": 60}}, {}, True),
    ({"tpot_ms": 50, "targets": {"goodput_fraction": 0.9}}, {}, True),   # TPOT 0 passes
    ({"targets": {"output_throughput_tok_per_s": 500}}, {}, True),
    ({"targets": {"itl_p99_ms": 60, "ttft_p99_ms": 3000}}, {}, False),
    ({"targets": {"e2el_p99_ms": 9000}}, {}, False),
    ({"ttft_ms": 1000, "targets": {"goodput_fraction": 0.9}}, {}, False),
    ({"targets": {"goodput_req_per_s": 2}}, {"rag": {"e2el_ms": 9000}}, False),
    ({"ttft_ms": 1000}, {}, False),                  # no targets: no verdict to mislead
])
def test_unbounded_wait_warning(slo, class_slos, warned):
    warning = unbounded_wait_warning(SloConfig(**slo),
                                     {k: RequestSlo(**v) for k, v in class_slos.items()},
                                     ["static"])
    assert (warning is not None) == warned
    assert unbounded_wait_warning(SloConfig(**slo), {}, []) is None   # no static variant


def test_scheduler_labels_that_hold_replies():
    assert label_holds_replies("static") and label_holds_replies("static+static")
    for label in ("continuous", "continuous+chunked(2048)", "static+continuous",
                  "trtllm(GUARANTEED_NO_EVICT, 8192)+chunked(8192)", "sglang", ""):
        assert not label_holds_replies(label), label
