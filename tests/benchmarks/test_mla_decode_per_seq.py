"""benchmarks/calibration/mla_decode_per_seq.py without the aiconfigurator mirror: its model
and its fit on rows made from known constants (synthetic, not measurements). The fit to the
real tables is held by tests/profiles/test_mla_decode_aiconfigurator.py (the entries and the
table rows)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from capsim.profiles.hardware import load_hardware
from support.scripts import load_script


@pytest.fixture(scope="module")
def fit_script():
    return load_script("benchmarks/calibration/mla_decode_per_seq.py")


def test_the_model_is_capsims_layer(fit_script):
    """One DeepSeek-V3 layer at TP 8, 1,024 sequences of 512 keys on the H200 with the
    shipped entry: launch 15.77 us + (1,024 x (512 x 1,152 B + 11,392 B) / (4.8 TB/s x
    0.895) + 1,024 x 34.5 ns) = 15.77 + 140.6 + 2.7 + 35.3 = 194.4 us: the µs capsim's
    pricer gives (test_mla_decode_aiconfigurator: 207.0 in the table, -6.1 %)."""
    hw = load_hardware("h200-sxm")
    mla = hw.efficiency.attention_decode_mla
    rows = pd.DataFrame({"batch_size": [1024], "context": [512]})
    us = fit_script.predict_us(rows, hw, 8, mla.launch_s * 1e6, mla.memory, mla.seq_s * 1e9,
                               mla.compute)[0]
    assert us == pytest.approx(194.4, abs=0.1)
    assert us / 207.0 - 1 == pytest.approx(-0.061, abs=0.001)


def test_the_fit_recovers_known_constants(fit_script):
    """Rows priced with launch 12 us, memory 0.8, 40 ns a sequence (batches 1-1,024, 128-16,384
    keys): the fit from the bandwidth-only start (16 us, 0.87, 10 ns) finds them again."""
    hw = load_hardware("h200-sxm")
    b, c = np.meshgrid([1, 8, 64, 256, 1024], [128, 512, 2048, 16384])
    rows = pd.DataFrame({"batch_size": b.ravel(), "context": c.ravel()})
    rows["us"] = fit_script.predict_us(rows, hw, 8, 12.0, 0.8, 40.0,
                                       hw.efficiency.attention_decode_mla.compute)
    launch, memory, seq = fit_script.fit(rows, hw, (16.0, 0.87, 10.0))
    assert (launch, memory, seq) == pytest.approx((12.0, 0.8, 40.0), rel=0.01)
