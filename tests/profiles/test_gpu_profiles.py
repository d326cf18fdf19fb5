"""The GPU profiles added for the GPUs people buy in 2026: datasheet peaks, memory, links.

Each row below is the datasheet (or, where the vendor publishes none, the cited
specification) as printed, with sparsity where the vendor prints it so, halved here
to the dense rate the profiles hold. The URL of each is in the profile's ``sources``.
"""

from __future__ import annotations

import numpy as np
import pytest

from capsim.cost.operators import curve_efficiency
from capsim.profiles.hardware import load_hardware

GIB = 2**30
T = 1e12

#: name: (printed peaks in TFLOPS, printed with sparsity?, HBM GB, bandwidth TB/s,
#:        scale-up link bidirectional GB/s or None, datasheet host)
DATASHEETS = {
    # NVIDIA HGX page, HGX B200 column, per GPU (sparse): FP4 18 PF, FP8 9 PF, BF16 4.5 PF,
    # 180 GB HBM3E, 7.7 TB/s, NVLink 5 1.8 TB/s
    "b200": ({"bf16": 4500, "fp8": 9000, "int8": 9000, "fp4": 18000}, True, 180, 7.7, 1800,
             "nvidia.com/en-us/data-center/hgx"),
    # H20 partner specification (dense): BF16 148, FP8 / INT8 296; 96 GB HBM3, 4.0 TB/s, NVLink 900
    "h20": ({"bf16": 148, "fp8": 296, "int8": 296}, False, 96, 4.0, 900, "willitrunai.com"),
    # H100 datasheet, PCIe column (sparse): BF16 1,513, FP8 3,026; 80 GB HBM2e, 2 TB/s; no NVSwitch
    "h100-pcie": ({"bf16": 1513, "fp8": 3026, "int8": 3026}, True, 80, 2.0, None,
                  "nvidia-tensor-core-gpu-datasheet"),
    # A100 datasheet, 40GB SXM column (dense): BF16 312, INT8 624; 40 GB HBM2, 1,555 GB/s
    "a100-40gb": ({"bf16": 312, "int8": 624}, False, 40, 1.555, 600, "nvidia-a100-datasheet"),
    # L4 datasheet (sparse): BF16 242, FP8 485, INT8 485; 24 GB GDDR6, 300 GB/s
    "l4": ({"bf16": 242, "fp8": 485, "int8": 485}, True, 24, 0.3, None, "l4-gpu-datasheet"),
    # A10G (AWS; no NVIDIA datasheet): 70 TFLOPS bf16 tensor; 24 GB GDDR6, 600 GB/s
    "a10g": ({"bf16": 70}, False, 24, 0.6, None, "baseten.co"),
    # Ada whitepaper appendix, RTX 4090, FP32 accumulate (dense): BF16 165.2, FP8 330.3; 1,008 GB/s
    "rtx-4090": ({"bf16": 165.2, "fp8": 330.3}, False, 24, 1.008, None, "nvidia-ada-gpu-architecture"),
    # AMD MI300X data sheet (dense): BF16 1,307.4, FP8 / INT8 2,614.9; 192 GB HBM3, 5.3 TB/s;
    # 7 Infinity Fabric links x 128 GB/s
    "mi300x": ({"bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, False, 192, 5.3, 896,
               "amd-instinct-mi300x-data-sheet"),
    # AMD MI325X data sheet: same compute; 256 GB HBM3E, 6 TB/s
    "mi325x": ({"bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, False, 256, 6.0, 896,
               "instinct-mi325x-datasheet"),
}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_peaks_memory_and_links_match_the_datasheet(name):
    peaks, sparse, hbm_gb, tb_s, link_gb_s, host = DATASHEETS[name]
    hw = load_hardware(name)
    expected = {dtype: tflops * T / (2 if sparse else 1) for dtype, tflops in peaks.items()}
    expected["fp16"] = expected["bf16"]
    assert hw.peak_flops_per_s == pytest.approx(expected, rel=1e-9)
    assert hw.hbm_bytes == hbm_gb * GIB                     # "GB" read as GiB (convention)
    assert hw.hbm_bandwidth_bytes_per_s == pytest.approx(tb_s * T)
    if link_gb_s is None:
        assert not hw.has_nvlink and hw.tp_link_bandwidth_bytes_per_s == hw.pcie_bandwidth_bytes_per_s
    else:
        assert hw.tp_link_bandwidth_bytes_per_s == pytest.approx(link_gb_s * 1e9 / 2)
    assert host in hw.sources["peak_flops_per_s"]
    assert hw.scale_up_link
    # what the engines see is a little less than the datasheet capacity, never more
    assert 0.9 * hw.hbm_bytes < hw.memory_total_bytes < hw.hbm_bytes


def test_only_blackwell_has_an_fp4_peak():
    """FP4 (NVFP4 / MXFP4) tensor cores are Blackwell's; Hopper, Ada, Ampere and CDNA 3 have none."""
    assert load_hardware("b200").peak_flops("fp4") == 9.0e15
    for name in sorted(set(DATASHEETS) - {"b200"}):
        assert "fp4" not in load_hardware(name).peak_flops_per_s, name


@pytest.mark.parametrize("name, memory_gib, source", [
    ("a100-40gb", 39.50, "CoSeR/issues/10"),             # PyTorch OOM message
    ("rtx-4090", 23.64, "VGen/issues/104"),              # PyTorch OOM message
    ("mi300x", 191.69, "205,822,885,888"),               # ROCm total bytes
])
def test_memory_seen_by_the_engine_from_logs(name, memory_gib, source):
    hw = load_hardware(name)
    assert hw.memory_total_gib == memory_gib
    assert source in hw.sources["memory_total_gib"]


def test_memory_estimates_say_so():
    for name in ("b200", "h20", "h100-pcie", "l4", "a10g", "mi325x"):
        assert load_hardware(name).sources["memory_total_gib"].startswith("estimate"), name


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_gemm_curves_are_the_closest_measured_gpu_moved_to_this_corner(name):
    """e(n) = e_src(n x ridge_src / ridge), ridge = bf16 peak / bandwidth (FLOP/byte), the
    rule tests/profiles/test_derived_efficiency.py checks between the two calibrated GPUs;
    attention and elementwise entries carried over unchanged. A curve or entry the profile no
    longer lists as derived (measured on the GPU: mi300x's gemm, b200's attention) must cite
    its own source."""
    hw = load_hardware(name)
    src = load_hardware(hw.derivation.from_profile)
    assert src.calibration is not None
    ratio = ((src.peak_flops("bf16") / src.hbm_bandwidth_bytes_per_s)
             / (hw.peak_flops("bf16") / hw.hbm_bandwidth_bytes_per_s))
    for key in ("gemm", "gemm_fp8"):
        mine, theirs = getattr(hw.efficiency, key), getattr(src.efficiency, key)
        if mine is None:
            assert key not in hw.derivation.classes
            continue
        if key not in hw.derivation.classes:     # measured on this GPU (its sources say where)
            assert not hw.sources[f"efficiency.{key}"].startswith("derived"), name
            continue
        moved = curve_efficiency(theirs, np.array(theirs.tokens, dtype=float) * ratio)
        assert mine.tokens == theirs.tokens and mine.launch_s == theirs.launch_s
        assert mine.efficiency == np.round(moved, 3).tolist()
    for key in ("attention_prefill", "attention_decode", "elementwise"):
        if key not in hw.derivation.classes:     # measured on this GPU (b200's attention)
            assert not hw.sources[f"efficiency.{key}"].startswith("derived"), name
            continue
        assert getattr(hw.efficiency, key) == getattr(src.efficiency, key)


def test_closest_measured_gpu_by_family():
    """Hopper / Blackwell / CDNA 3 from the H100 SXM; Ampere and Ada from the A100 80GB."""
    from_h100 = {"b200", "h20", "h100-pcie", "mi300x", "mi325x"}
    for name in DATASHEETS:
        expected = "h100-sxm" if name in from_h100 else "a100-80gb"
        assert load_hardware(name).derivation.from_profile == expected, name


def test_h20_turns_compute_bound_at_an_eighth_of_the_h100_tokens():
    """The H20's corner (148 TFLOPS / 4.0 TB/s = 37 FLOP/byte) is 8x below the H100's, so
    its GEMM curve dips at 32-64 tokens where the H100's dips at 256-512."""
    h20, h100 = load_hardware("h20"), load_hardware("h100-sxm")
    assert h20.peak_flops("bf16") / h20.hbm_bandwidth_bytes_per_s == pytest.approx(37.0)
    dip = lambda hw: hw.efficiency.gemm.tokens[int(np.argmin(hw.efficiency.gemm.efficiency))]
    assert (dip(h100), dip(h20)) == (512, 64)


def test_prices_have_a_source_and_the_h20_says_it_is_a_placeholder():
    for name in DATASHEETS:
        hw = load_hardware(name)
        assert hw.price_per_gpu_hour_usd > 0
        src = hw.sources["price_per_gpu_hour_usd"]
        assert "https://" in src or src.startswith("placeholder"), name
    assert load_hardware("h20").sources["price_per_gpu_hour_usd"].startswith("placeholder")
