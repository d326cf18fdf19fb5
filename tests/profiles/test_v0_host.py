"""vLLM 0.5's host time per running sequence (issue "Fidelity where nothing was fitted", item 2).

The constant is derived, not fitted to a measured case: from vLLM's v0.5.3 profile (blog
2024-09-05: scheduling 29 %, GPU 38 % of the time on Llama-3-8B / H100) with the API server in
its own process from v0.5.4 (vllm-project/vllm issue 7653), by
benchmarks/calibration/v0_host_per_seq.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from capsim.cost.host import HostTime
from capsim.profiles.engines import HostOverhead, load_engine_preset

ROOT = Path(__file__).resolve().parents[2]


def _calibration():
    spec = importlib.util.spec_from_file_location(
        "v0_host_per_seq", ROOT / "benchmarks" / "calibration" / "v0_host_per_seq.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    """A 0.5 step of 256 sequences costs the GPU's seconds + 1.05 ms + 256 × per_seq_s; the
    0.6 presets (asynchronous output processing) charge no per-sequence term."""
    v05 = load_engine_preset("vllm-0.5").host_overhead
    host = HostTime(v05)
    assert host.apply(0.010, 256, 0) == pytest.approx(0.010 + 1.05e-3 + 256 * v05.per_seq_s)
    for name in ("vllm-0.6", "vllm-0.6.4"):
        assert load_engine_preset(name).host_overhead.per_seq_s == 0.0


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
