"""The fidelity benchmark's 2026 line (issue 30 item 7): which cases and rows it is over
(``fidelity_2026`` cases, test rows, predicted TTFT / TPOT-ITL / throughput rows), its N and its
format; and the data behind it (benchmarks/fidelity/supplementary_cases.yaml)."""

from __future__ import annotations

import math

import pytest
import yaml

from conftest import REPO, load_fidelity, shared_or_skip

SUPPLEMENTARY = REPO / "benchmarks" / "fidelity" / "supplementary_cases.yaml"
SPLIT = REPO / "benchmarks" / "fidelity" / "fit_test_split.yaml"
#: The line acceptance/fidelity-2026.sh reads, with its three numbers as groups.
LINE = (r"^fidelity 2026 \(test rows, (\d+) cases\): TTFT ([0-9.]+ %|n/a), "
        r"TPOT/ITL ([0-9.]+ %|n/a), throughput ([0-9.]+ %|n/a)$")


@pytest.fixture(scope="module")
def fidelity():
    """benchmarks/fidelity.py as a module."""
    return load_fidelity("fidelity_2026_line")


def _row(fidelity, case, quantity, measured, predicted, split="test"):
    return fidelity.Row(case, "load_latency_throughput", quantity, measured, predicted,
                        "sglang", "h200-sxm", fidelity.PROJECT, split)


def test_kind_2026_is_the_field_with_a_reason(fidelity):
    assert fidelity.kind_2026({"id": "a", "fidelity_2026": "MoE on 8 x H200"})
    assert not fidelity.kind_2026({"id": "b"})
    assert not fidelity.kind_2026({"id": "c", "fidelity_2026": ""})


def test_line_is_over_test_rows_of_2026_cases_only(fidelity):
    """Rows of a case without the field, fit rows, unpredicted rows and rows of other
    families (E2EL) are left out; N counts the cases left with a row."""
    cases = [{"id": "moe", "fidelity_2026": "MoE"}, {"id": "moe2", "fidelity_2026": "B200"},
             {"id": "old"}, {"id": "fitted", "fidelity_2026": "MoE"},
             {"id": "e2el_only", "fidelity_2026": "H200"}]
    rows = [
        # moe: TTFT -50 %, TPOT +10 %, throughput -20 %
        _row(fidelity, "moe", "c8 mean_ttft_ms", 200.0, 100.0),
        _row(fidelity, "moe", "c8 mean_tpot_ms", 10.0, 11.0),
        _row(fidelity, "moe", "c8 output_tput_per_gpu_tok_s", 100.0, 80.0),
        # moe2: TTFT +30 %, TPOT -30 %, a TPOT with no prediction (left out)
        _row(fidelity, "moe2", "median_ttft_ms", 100.0, 130.0),
        _row(fidelity, "moe2", "median_tpot_ms", 10.0, 7.0),
        _row(fidelity, "moe2", "c1 median_tpot_ms", 10.0, math.nan),
        # not of the kind, fit, E2EL only: none of them counts
        _row(fidelity, "old", "median_ttft_ms", 100.0, 500.0),
        _row(fidelity, "fitted", "median_tpot_ms", 10.0, 90.0, split="fit"),
        _row(fidelity, "e2el_only", "llama8B_tp1 median_ms", 834.0, 1000.0),
    ]
    line = fidelity.line_2026(rows, cases)
    # TTFT |-50|, |+30| -> 40; TPOT |+10|, |-30| -> 20; throughput |-20| -> 20
    assert line == ("fidelity 2026 (test rows, 2 cases): TTFT 40.0 %, TPOT/ITL 20.0 %, "
                    "throughput 20.0 %")


def test_line_says_na_without_rows(fidelity):
    assert fidelity.line_2026([], [{"id": "x", "fidelity_2026": "MoE"}]) == (
        "fidelity 2026 (test rows, 0 cases): TTFT n/a, TPOT/ITL n/a, throughput n/a")


def test_line_matches_what_the_acceptance_script_reads(fidelity):
    import re
    rows = [_row(fidelity, "moe", "mean_ttft_ms", 100.0, 150.0)]
    line = fidelity.line_2026(rows, [{"id": "moe", "fidelity_2026": "MoE"}])
    assert re.match(LINE, line), line
    # the acceptance script's own patterns (../shared/acceptance/fidelity-2026.sh)
    assert re.search(r"(\d+) cases", line).group(1) == "1"
    assert re.search(r"TTFT ([0-9.]+) %", line).group(1) == "50.0"
    assert re.search(r"TPOT/ITL ([0-9.]+) %", line) is None          # no TPOT row: n/a


def test_the_2026_cases_are_marked_test_and_cited():
    """Every case of the kind says why, names its source (a repository and path or a URL) and
    carries scored points that are among its published points; the 14 added on 2026-12-06
    are test (no constant may be fitted to them: issue 30 item 6)."""
    cases = yaml.safe_load(SUPPLEMENTARY.read_text())
    split = yaml.safe_load(SPLIT.read_text())
    marked = [c for c in cases if c.get("fidelity_2026")]
    assert len(marked) == 22
    for case in marked:
        assert isinstance(case["fidelity_2026"], str) and len(case["fidelity_2026"]) > 10
        assert case["source"].get("url") or (case["source"].get("repo")
                                             and case["source"].get("path")), case["id"]
        measured = case["measured"]
        if "scored_points" in measured:
            labels = {p["label"] for p in measured["points"]}
            assert set(measured["scored_points"]) <= labels, case["id"]
    scored = [c["id"] for c in marked if "scored_points" in c["measured"]]
    assert len(scored) == 14 and all(c in split["test"] for c in scored)


def test_shared_cases_are_not_of_the_kind(fidelity):
    shared_or_skip("reference/measured/cases.yaml", "the measured cases")
    shared = [c for c in fidelity.read_cases() if c.get("collected") != fidelity.PROJECT]
    assert shared and not any(fidelity.kind_2026(c) for c in shared)


def test_scored_points_read_the_named_runs_and_skip_what_cannot_be_written(fidelity):
    """A case's ``scored_points`` / ``scored_quantities`` pick runs and figures out of its
    published ``points`` (InferenceX PR 3363's B200 table: c1 mean TTFT 160.36 ms, mean TPOT
    7.18 ms, 17.01 output tok/s per GPU); a run listed as not expressible has no variant."""
    measured = {"scored_points": ["c1", "c64", "eagle_c1"],
                "scored_quantities": ["mean_ttft_ms", "mean_tpot_ms",
                                      "output_tput_per_gpu_tok_s"],
                "points": [{"label": "c1", "mean_ttft_ms": 160.36, "mean_tpot_ms": 7.18,
                            "output_tput_per_gpu_tok_s": 17.01, "total_tput_per_gpu_tok_s": 33.89},
                           {"label": "c2", "mean_ttft_ms": 177.91},
                           {"label": "c64", "mean_ttft_ms": 1170.32},
                           {"label": "eagle_c1", "mean_tpot_ms": 5.0}]}
    points = fidelity.scored_points(skip=("eagle_c1",))(measured)
    assert [p.variant for p in points] == ["c1", "c64"]
    assert points[0].fields == {"mean_ttft_ms": 160.36, "mean_tpot_ms": 7.18,
                                "output_tput_per_gpu_tok_s": 17.01}
    assert points[1].name("mean_ttft_ms") == "c64 mean_ttft_ms"

    class Row:                       # the SummaryRow fields the new keys read
        output_throughput_tok_per_s = 1360.0
        tpot_mean_ms = 9.5

    class Run:
        num_gpus = 8

    fields = fidelity.SUMMARY_FIELDS
    assert fidelity.summary_value(Row(), fields["output_tput_per_gpu_tok_s"], Run()) == 170.0
    assert fidelity.summary_value(Row(), fields["mean_tpot_ms"], Run()) == 9.5
    assert fidelity.SUMMARY_FAMILY["mean_tpot_ms"] == "tpot_itl"
    assert fidelity.SUMMARY_FAMILY["output_tput_per_gpu_tok_s"] == "throughput"


def test_every_2026_case_has_an_entry_and_a_scenario(fidelity):
    """Each scored 2026 case has its entry (benchmarks/fidelity.py CASES_2026) and its scenario
    under benchmarks/fidelity/supplementary/, named after the case."""
    cases = yaml.safe_load(SUPPLEMENTARY.read_text())
    for case in cases:
        if "scored_points" in case.get("measured", {}):
            entry = fidelity.ENTRIES[case["id"]]
            assert entry.scenario == f"supplementary/{case['id']}.yaml"
            assert (fidelity.SCENARIOS / entry.scenario).is_file()
