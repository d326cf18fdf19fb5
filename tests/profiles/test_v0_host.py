"""vLLM V0's host time per running sequence (issue "Fidelity where nothing was fitted", item 2).

The constant is derived, not fitted to a measured case: from vLLM's v0.5.3 profile (blog
2024-09-05: scheduling 29 %, GPU 38 % of the time on Llama-3-8B / H100) with the API server in
its own process from v0.5.4 (vllm-project/vllm issue 7653), by
benchmarks/calibration/v0_host_per_seq.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from capsim.cost.host import HostTime
from capsim.profiles.engines import HostOverhead, load_engine_preset
from support.scripts import load_script


def _calibration():
    return load_script("benchmarks/calibration/v0_host_per_seq.py")


def test_shipped_per_seq_is_what_the_derivation_gives(tmp_path: Path) -> None:
    """The preset carries the script's figure (to 1 µs): the blog's 0.29 / 0.38 of the GPU's
    seconds in series, less the per-step term, over the sequence-steps of its benchmark."""
    cal = _calibration()
    path = tmp_path / "blog.yaml"
    path.write_text(yaml.safe_dump(cal.SCENARIO))
    preset = load_engine_preset("vllm-0.5").host_overhead
    gpu = cal.run_length_s(0.0, 0.0, path)
    with_step = cal.run_length_s(preset.per_step_s, 0.0, path)
    seq_sum = (cal.run_length_s(preset.per_step_s, 1e-4, path) - with_step) / 1e-4
    derived = (cal.SERIAL_SHARE / cal.GPU_SHARE * gpu - (with_step - gpu)) / seq_sum
    assert preset.per_seq_s == pytest.approx(derived, abs=1e-6)


def test_v0_5_charges_every_running_sequence_in_series() -> None:
    """A 0.5 step of 256 sequences costs the GPU's seconds + per_step_s + 256 × per_seq_s, all
    in series; the 0.6 presets (asynchronous output processing) charge only the serial part,
    41.1 µs, and leave out the 103.2 µs of output processing issue 6913 timed (0.2 ms at batch
    1, 3.4 ms at batch 32: vllm-project/vllm, Llama-3-70B on 4 × H100)."""
    v05 = load_engine_preset("vllm-0.5").host_overhead
    host = HostTime(v05)
    assert host.apply(0.010, 256, 0) == pytest.approx(0.010 + 0.7212e-3 + 256 * 144.4e-6)
    for name in ("vllm-0.6", "vllm-0.6.4"):
        v06 = load_engine_preset(name).host_overhead
        assert v06.per_seq_s == pytest.approx(41.1e-6)
        assert v05.per_seq_s - v06.per_seq_s == pytest.approx((3.4e-3 - 0.2e-3) / 31, abs=1e-7)


def test_every_v0_preset_keeps_the_fitted_host_time_of_a_batch_8_step() -> None:
    """The latency rows (step_vllm_perfbench_latency_bs8_in32_out128_a100 / _h100, fit cases)
    fixed a batch-8 step's host time at 1.05 ms (their mean); per_step_s was refitted to keep
    it with the per-sequence term: 0.7212 ms + 8 × 41.1 µs."""
    for name in ("vllm-0.6", "vllm-0.6.4"):
        host = HostTime(load_engine_preset(name).host_overhead)
        assert host.seconds(8, 0) == pytest.approx(1.05e-3, abs=1e-6)


def test_the_split_is_what_its_derivation_gives(tmp_path: Path) -> None:
    """benchmarks/calibration/v0_host_split.py solves the serial part, per_step_s and 0.5's
    total together; the presets carry its figures (to 0.1 µs / 1 µs)."""
    module = load_script("benchmarks/calibration/v0_host_split.py")
    path = tmp_path / "blog.yaml"
    path.write_text(yaml.safe_dump(_calibration().SCENARIO))
    out = module.solve(path)
    v06 = load_engine_preset("vllm-0.6.4").host_overhead
    assert v06.per_seq_s == pytest.approx(out["serial_per_seq_s"], abs=1e-7)
    assert v06.per_step_s == pytest.approx(out["per_step_s"], abs=1e-6)
    assert load_engine_preset("vllm-0.5").host_overhead.per_seq_s == pytest.approx(
        out["total_per_seq_s"], abs=1e-7)


def test_a_prefill_step_term_is_charged_only_on_steps_with_prompt_tokens() -> None:
    """``per_prefill_step_s`` (what a multi-step window spreads but a prefill step pays whole:
    capsim/scenario/run_config.py Pool.pricer) adds to a step with prompt tokens, in series
    and in both forms, and to no decode step."""
    host = HostTime(HostOverhead(per_step_s=0.105e-3, per_prefill_step_s=0.945e-3))
    assert host.active
    assert host.apply(0.020, 1, 300) == pytest.approx(0.020 + 1.05e-3, rel=1e-12)
    assert host.seconds(1, 300) == pytest.approx(1.05e-3, rel=1e-12)
    assert host.apply(0.010, 4, 0) == pytest.approx(0.010 + 0.105e-3, rel=1e-12)
    assert host.seconds(4, 0) == pytest.approx(0.105e-3, rel=1e-12)


def test_a_multi_step_prefill_step_pays_its_sequences_whole() -> None:
    """Under multi-step a prefill step is a window of its own (vllm/core/scheduler.py
    _schedule_prefills at v0.6.0): its sequences pay the whole per_seq_s, a decode step of the
    window a tenth (capsim/scenario/run_config.py Pool.pricer sets per_prefill_seq_s)."""
    host = HostTime(HostOverhead(per_step_s=0.1e-3, per_seq_s=4e-6, per_prefill_step_s=0.9e-3,
                                 per_prefill_seq_s=36e-6))
    assert host.apply(0.020, 3, 300) == pytest.approx(0.020 + 1.0e-3 + 3 * 40e-6, rel=1e-12)
    assert host.seconds(3, 300) == pytest.approx(1.0e-3 + 3 * 40e-6, rel=1e-12)
    assert host.apply(0.010, 3, 0) == pytest.approx(0.010 + 0.1e-3 + 3 * 4e-6, rel=1e-12)
