"""Held-out accuracy of the calibrated roofline on Microsoft Vidur's measurements (MIT).

Reads ../shared/reference/vidur_profiling (see its README); skipped when
../shared is absent. Splits are by model or by token range, never row by
row: fit on some models (or ranges), predict the others, print the median
and p90 absolute percentage error and hold them to the stated bounds.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.calibrate import class_errors, fit_profile, load_vidur, predict
from capsim.profiles.hardware import load_hardware

#: Held-out models: the 70B-class shapes; fit on the 7B-34B ones.
BIG = ("Llama-2-70b-hf", "Meta-Llama-3-70B", "Qwen-72B")


# Every test reads a100 or h100: without ../shared the vidur_profiling fixture skips them all.
@pytest.fixture(scope="module")
def a100(vidur_profiling):
    return load_vidur(vidur_profiling, "a100", "a100_dgx").observations


@pytest.fixture(scope="module")
def h100(vidur_profiling):
    return load_vidur(vidur_profiling, "h100", "h100_dgx").observations


def _held_out(train, test, base, label):
    fitted = fit_profile(train, base)
    errors = class_errors(test, predict(test, fitted))
    for op_class, err in errors.items():
        print(f"\n{label} held-out {op_class}: n={err.n} median {err.median_pct:.1f} % "
              f"p90 {err.p90_pct:.1f} %", end="")
    return errors


@pytest.mark.parametrize("device, bounds", [
    ("a100", {"gemm": (7, 20), "elementwise": (12, 35)}),
    ("h100", {"gemm": (8, 25), "elementwise": (15, 35)}),
])
def test_held_out_models(device, bounds, a100, h100, request):
    """GEMMs and elementwise kernels of 70B-class models, predicted from a fit on
    7B-34B models (A100: 4 models, 20,000 rows; H100: 3 models)."""
    obs = {"a100": a100, "h100": h100}[device]
    obs = obs[obs.op_class.isin(["gemm", "elementwise"])]
    big = obs.group.isin(BIG)
    base = load_hardware({"a100": "a100-80gb", "h100": "h100-sxm"}[device])
    errors = _held_out(obs[~big], obs[big], base, device)
    for op_class, (median, p90) in bounds.items():
        assert errors[op_class].median_pct < median, op_class
        assert errors[op_class].p90_pct < p90, op_class


def test_held_out_attention_token_ranges(a100):
    """Prefill chunks of 1,025-2,048 tokens and decode batches of 33-64 sequences,
    predicted from a fit on the other chunk sizes / batch sizes (A100, 70B layout)."""
    prefill = a100[a100.op_class == "attention_prefill"]
    decode = a100[a100.op_class == "attention_decode"]
    test_p = prefill.tokens.between(1025, 2048)
    test_d = decode.batch.between(33, 64)
    train = np.concatenate([prefill[~test_p].index, decode[~test_d].index])
    test = np.concatenate([prefill[test_p].index, decode[test_d].index])
    errors = _held_out(a100.loc[train], a100.loc[test], load_hardware("a100-80gb"), "a100")
    assert errors["attention_prefill"].median_pct < 12
    assert errors["attention_prefill"].p90_pct < 25
    assert errors["attention_decode"].median_pct < 16
    assert errors["attention_decode"].p90_pct < 30


@pytest.mark.parametrize("device", ["a100", "h100"])
def test_held_out_all_reduce_group_size(device, a100, h100):
    """The ring all-reduce formula fitted on 2- and 8-GPU timings predicts 4 GPUs."""
    obs = {"a100": a100, "h100": h100}[device]
    obs = obs[obs.op_class == "all_reduce"]
    four = obs.workers == 4
    base = load_hardware({"a100": "a100-80gb", "h100": "h100-sxm"}[device])
    errors = _held_out(obs[~four], obs[four], base, device)
    assert errors["all_reduce"].median_pct < 25
    assert errors["all_reduce"].p90_pct < 60


@pytest.mark.parametrize("name, device, network", [
    ("a100-80gb", "a100", "a100_dgx"), ("h100-sxm", "h100", "h100_dgx")])
def test_shipped_profiles_reproduce_their_recorded_error(name, device, network, a100, h100):
    """The error written in each shipped profile's calibration block is what the
    profile gives on the Vidur data today (no refit: predictions only)."""
    obs = {"a100": a100, "h100": h100}[device]
    hw = load_hardware(name)
    errors = class_errors(obs, predict(obs, hw))
    for op_class, err in errors.items():
        recorded = hw.calibration.error[op_class].after
        print(f"\n{name} {op_class}: median {err.median_pct:.1f} % p90 {err.p90_pct:.1f} %",
              end="")
        assert err.n == recorded.n
        assert err.median_pct == pytest.approx(recorded.median_pct, abs=0.05)
        assert err.p90_pct == pytest.approx(recorded.p90_pct, abs=0.05)
    assert hw.calibration.date and any("Vidur" in line for line in hw.calibration.data)
