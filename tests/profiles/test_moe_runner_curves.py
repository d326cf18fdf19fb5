"""Which ``efficiency.fused_moe_runners`` keys a GPU profile may hold
(:func:`capsim.profiles.moe_runners.runner_curve_error`): a runner or expert format no
scenario reaches would be a curve silently never read."""

from __future__ import annotations

import pytest

from capsim.profiles.moe_runners import EXPERT_FORMATS, runner_curve_error
from capsim.profiles.quantization import quant_format_names


def test_expert_formats_are_the_quantization_formats():
    assert list(EXPERT_FORMATS) == quant_format_names()


@pytest.mark.parametrize("runner, fmt", [
    ("flashinfer_trtllm", "fp8_block"), ("flashinfer_trtllm", "mxfp4"),  # b200.yaml's
    ("flashinfer_mxfp4", "mxfp4"), ("triton", "bf16"), ("triton", "awq"),
    ("flashinfer_trtllm", None)])
def test_a_runner_some_engine_runs_on_that_format_names_a_curve(runner, fmt):
    assert runner_curve_error(runner, fmt) is None


@pytest.mark.parametrize("runner, fmt, message", [
    ("auto", "mxfp4", "no engine's MoE runner named 'auto' reads a curve here "
                      "(valid: flashinfer_mxfp4, flashinfer_trtllm, triton)"),
    ("marlin", None, "no engine's MoE runner named 'marlin'"),
    ("TRTLLM", "fp8_block", "named 'TRTLLM'"),        # priced with flashinfer_trtllm's curve
    ("flashinfer_mxfp4", "fp8_block",
     "flashinfer_mxfp4 runs no experts of format 'fp8_block' (valid: mxfp4)"),
    ("flashinfer_trtllm", "bf16", "flashinfer_trtllm runs no experts of format 'bf16' "
                                  "(valid: fp8, fp8_channel, fp8_block, nvfp4, mxfp4)"),
    ("triton", "mxfp8", "triton runs no experts of format 'mxfp8'")])
def test_a_curve_no_scenario_reads_is_refused(runner, fmt, message):
    why = runner_curve_error(runner, fmt)
    assert why is not None and message in why
