"""benchmarks/calibration/vllm_fp8_gemm_versions.py without the aiconfigurator mirror: its
least-squares fit on synthetic rows (made from known constants, not measurements) and the
Llama-3.1-70B TP 1 linear shapes it reads from capsim's model profile (hidden 8,192, 64 query
and 8 KV heads of 128, intermediate 28,672: meta-llama/Llama-3.1-70B config.json). The
findings themselves are in benchmarks/calibration/vllm_fp8_gemm_versions.md."""
from __future__ import annotations

import numpy as np
import pytest
from support.scripts import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("benchmarks/calibration/vllm_fp8_gemm_versions.py")


def test_fit_recovers_a_per_element_cost(script):
    """Extra time 10.4 ps per M x K element + 2 us (the H100 fit's order) on M 256-8,192,
    K 1,024-16,384: the fit returns both and R^2 1."""
    m, k = np.meshgrid([256, 1024, 4096, 8192], [1024, 4096, 16384])
    x = (m * k).ravel().astype(float)
    a, c, r2 = script.fit(x, 10.4e-12 * x + 2e-6)
    assert a == pytest.approx(10.4e-12, rel=1e-9)
    assert c == pytest.approx(2e-6, rel=1e-6)
    assert r2 == pytest.approx(1.0)


def test_llama70b_tp1_shapes(script):
    assert script.llama70b_tp1_shapes() == [("qkv", 10240, 8192), ("o", 8192, 8192),
                                            ("gate_up", 57344, 8192), ("down", 8192, 28672)]
