"""The shipped acceptance rows (capsim/profiles/data/speculative/acceptance.yaml): each row's
1 + Σ S_i reproduces its source's mean acceptance length within the row's tolerance.

Sources: the EAGLE-3 rows are vLLM's own regression baselines, tests/v1/spec_decode/
test_acceptance_length.py at 029ba375 (MT-Bench, 80 prompts, k = 3, temperature 0; relative
tolerance 0.05, the test's DEFAULT_RTOL); the MTP rows are DeepSeek-V3's technical report
(arXiv:2412.19437, §5.4.3: second-token acceptance 85-90 %) and vLLM pull request 12755
(DeepSeek-R1, 81-82.3 %); the ShareGPT row is SpecDecode-Bench/simulator's per-position data
(data/llama3.1-8B/combined_sharegpt.jsonl at 2fdccbd6) replayed as chains of 7 drafts.
"""

from __future__ import annotations

import pytest

from capsim.profiles.acceptance import acceptance_row, acceptance_rows


def test_every_row_reproduces_its_sources_mean_acceptance_length():
    rows = acceptance_rows()
    assert len(rows) >= 4
    for row in rows.values():
        assert row.source and row.tolerance <= 0.05
        assert row.tokens_per_step() == pytest.approx(row.mean_acceptance_length,
                                                      rel=row.tolerance), row.name


@pytest.mark.parametrize("name,expected,published", [
    # vLLM test_acceptance_length.py at 029ba375: expected_acceptance_length
    ("eagle3-llama31-8b-mtbench", 2.6049, 2.60),
    ("eagle3-qwen3-8b-mtbench", 2.2554, 2.26),
    ("eagle3-gpt-oss-20b-mtbench", 2.5622, 2.56),
    # DeepSeek-V3 report §5.4.3: 85-90 % → 1.85-1.90 tokens per step at k = 1
    ("mtp-deepseek-v3", 1.875, 1.875),
    # vLLM pull request 12755: 81-82.3 % on DeepSeek-R1 at k = 1
    ("mtp-deepseek-r1", 1.8165, 1.8165),
    # SpecDecode-Bench's ShareGPT acceptance replayed as chains of 7 drafts (derived here)
    ("eagle3-llama31-8b-sharegpt", 2.5822, 2.582),
])
def test_published_rows(name, expected, published):
    row = acceptance_row(name)
    assert row.tokens_per_step() == pytest.approx(expected, abs=5e-5)
    assert row.mean_acceptance_length == published


def test_the_mtp_row_lies_in_the_reports_range():
    row = acceptance_row("mtp-deepseek-v3")
    assert row.method == "mtp" and row.k == 1
    low, high = 1.85 / 1.875 - 1, 1.90 / 1.875 - 1
    assert -row.tolerance <= low < 0 < high <= row.tolerance + 1e-3


def test_eagle3_acceptance_falls_with_position():
    """What the i.i.d. form cannot say: Llama-3.1-8B's EAGLE-3 keeps 71 % of its first
    position's rate at the second and 49 % at the third (0.7296, 0.5208, 0.3545)."""
    s = acceptance_row("eagle3-llama31-8b-mtbench").acceptance_rate_by_position
    assert s[1] / s[0] == pytest.approx(0.714, abs=1e-3)
    assert s[2] / s[0] == pytest.approx(0.486, abs=1e-3)


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: eagle3-gpt-oss-20b-mtbench, "
                                         "eagle3-llama31-8b-mtbench, eagle3-llama31-8b-sharegpt, "
                                         "eagle3-qwen3-8b-mtbench, mtp-deepseek-r1, "
                                         "mtp-deepseek-v3"):
        acceptance_row("eagle3-llama3-70b")


def test_sharegpt_acceptance_is_below_mtbench_and_falls_faster():
    """ShareGPT's EAGLE-3 acceptance on Llama-3.1-8B (SpecDecode-Bench) against vLLM's
    MT-Bench baseline for the same target: lower at every position it shares, and a third
    draft accepted in 22 % of steps against 35 %."""
    share = acceptance_row("eagle3-llama31-8b-sharegpt").acceptance_rate_by_position
    bench = acceptance_row("eagle3-llama31-8b-mtbench").acceptance_rate_by_position
    assert all(s < b for s, b in zip(share, bench))
    assert (share[2], bench[2]) == (0.2234, 0.3545)
