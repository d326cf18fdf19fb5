"""SGLang 0.3's serial host time per step and per running sequence.

SGLang 0.3.0 has no overlap scheduler: the scheduler's per-request Python loops
(python/sglang/srt/managers/tp_worker.py forward_decode_batch and handle_finished_requests,
schedule_batch.py prepare_for_decode, the BatchTokenIDOut pickled to the detokenizer by
controller_single.py, in the PyPI sglang-0.3.0 wheel) run between forwards. The two terms are
fitted jointly to the decode rows of the `fit` case load_sglang030_a100_llama31_8b_sharegpt_
rps4_rps8 by benchmarks/calibration/sglang03_host_per_seq.py.
"""

from __future__ import annotations

import pytest

from capsim.cost.host import HostTime
from capsim.profiles.engines import load_engine_preset
from support.scripts import load_script

CASE = "load_sglang030_a100_llama31_8b_sharegpt_rps4_rps8"


def _calibration():
    return load_script("benchmarks/calibration/sglang03_host_per_seq.py")


def test_preset_carries_the_joint_fit_and_names_its_case() -> None:
    """0.50 ms per step + 35 µs per running sequence, in series, both fitted to the 8B case."""
    preset = load_engine_preset("sglang-0.3")
    host = preset.host_overhead
    assert (host.per_step_s, host.per_seq_s, host.overlap) == (0.50e-3, 35.0e-6, "serial")
    assert preset.fitted_to["host_overhead.per_step_s"] == [CASE]
    assert preset.fitted_to["host_overhead.per_seq_s"] == [CASE]
    assert "sglang03_host_per_seq.py" in preset.sources["host_overhead.per_step_s"]
    assert "tp_worker.py" in preset.sources["host_overhead.per_seq_s"]
    # a decode step of 16 sequences on a 10 ms GPU step: 10 + 0.50 + 16 x 0.035 ms
    assert HostTime(host).apply(0.010, 16, 0) == pytest.approx(0.01106)


def test_shipped_terms_are_the_fine_grid_minimum() -> None:
    """The shipped point scores no worse than its eight neighbours on the script's fine grid
    (±0.02 ms per step, ±1 µs per sequence): the script's fit, checked where it lands."""
    cal = _calibration()
    host = load_engine_preset("sglang-0.3").host_overhead
    best = cal.loss(host.per_step_s, host.per_seq_s)
    for d_step in (-1, 0, 1):
        for d_seq in (-1, 0, 1):
            if d_step or d_seq:
                other = cal.loss(host.per_step_s + d_step * cal.FINE_STEP_S,
                                 host.per_seq_s + d_seq * cal.FINE_SEQ_S)
                assert best <= other, (d_step, d_seq)
    assert best == pytest.approx(0.01495, abs=5e-5)


def test_fit_rows_at_the_shipped_terms() -> None:
    """capsim against the measured rows (sgl-project/sglang benchmark/benchmark_vllm_060/
    README.md at 120affb9) with the fit: 4 req/s TPOT 13.83 vs 13.17 ms, 8 req/s TPOT 16.50
    vs 17.85 ms, offline 4,240 vs 4,281.5 tok/s."""
    cal = _calibration()
    host = load_engine_preset("sglang-0.3").host_overhead
    rows = cal.case_rows(host.per_step_s, host.per_seq_s)
    assert rows[("rps_4", "tpot_p50_ms")] == pytest.approx(13.83, abs=0.01)
    assert rows[("rps_8", "tpot_p50_ms")] == pytest.approx(16.50, abs=0.01)
    assert rows[("rps_inf", "output_throughput_tok_per_s")] == pytest.approx(4239.8, abs=0.5)


@pytest.mark.parametrize("name", ["sglang-0.4", "sglang-0.5", "sglang-0.5.10"])
def test_overlapped_presets_keep_the_first_per_step_fit(name: str) -> None:
    """The 0.4 / 0.5 presets (overlap scheduler, another code path) keep 0.3's first fit,
    0.58 ms per step alone, and no per-sequence term: not measured for them."""
    preset = load_engine_preset(name)
    assert preset.host_overhead.per_step_s == pytest.approx(0.58e-3)
    assert preset.host_overhead.per_seq_s == 0.0
    assert "first fit" in preset.sources["host_overhead.per_step_s"]
