"""MI325X: the MI300X's measured entries carried over (mi325x.yaml).

Source: AMD's datasheets (MI300X: 1,307.4 / 2,614.9 TFLOPS bf16 / fp8 dense, 5.3 TB/s HBM3;
MI325X: the same peaks, 6.0 TB/s HBM3E) and ROCm's GPU hardware specifications (both CDNA3,
gfx942, 304 CUs): the same die, so the kernels measured on an MI300X (aiter's tables, vLLM PR
19744's all-reduce) price the MI325X as fractions of its own roofline; only the HBM changes.
"""
from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

CARRIED = ("gemm", "gemm_fp8_block", "fused_moe", "grouped_gemm_fp8", "fused_moe_mxfp4",
           "attention_prefill")


@pytest.fixture(scope="module")
def gpus():
    return load_hardware("mi300x"), load_hardware("mi325x")


def test_same_die_same_peaks_faster_hbm(gpus):
    mi300x, mi325x = gpus
    assert mi325x.peak_flops_per_s == mi300x.peak_flops_per_s
    assert mi325x.num_sms == mi300x.num_sms == 304
    assert (mi300x.hbm_bandwidth_bytes_per_s, mi325x.hbm_bandwidth_bytes_per_s) == (5.3e12, 6.0e12)


@pytest.mark.parametrize("entry", CARRIED)
def test_measured_entries_are_the_mi300x_ones(gpus, entry):
    mi300x, mi325x = gpus
    assert getattr(mi325x.efficiency, entry) == getattr(mi300x.efficiency, entry)
    assert entry not in mi325x.derivation.classes
    assert not mi325x.sources[f"efficiency.{entry}"].startswith("derived, uncalibrated: h100")


def test_all_reduce_is_the_mi300x_fit(gpus):
    mi300x, mi325x = gpus
    assert mi325x.custom_all_reduce == mi300x.custom_all_reduce is not None
    assert mi325x.tp_link_bandwidth_bytes_per_s == mi300x.tp_link_bandwidth_bytes_per_s


def test_only_decode_attention_and_elementwise_are_still_derived(gpus):
    """Prefill attention is measured on an MI300X since 2026-12-07 (aiter's fmha v3 table,
    benchmarks/calibration/mi300x_fmha_fwd.py); decode attention and elementwise are not."""
    for hw in gpus:
        assert hw.derivation.from_profile == "h100-sxm"
        assert hw.derivation.classes == ["attention_decode", "elementwise"]


def test_a_weight_bound_decode_step_scales_with_the_bandwidth(gpus):
    """DeepSeek-V3 TP 8, one token: the matmuls and experts read their weights, priced on the
    same curves, so their memory time shrinks by 5.3 / 6.0; the fixed launch times do not."""
    m = load_model("deepseek-v3")
    mem = {}
    for hw in gpus:
        p = StepPricer(m, hw, 8, quantization="fp8_block")
        c = p.cost(decode_seqs=1, decode_ctx_tokens=1000)
        mem[hw.name] = c.memory_s
    ratio = mem["mi325x"] / mem["mi300x"]
    assert 5.3 / 6.0 < ratio < 1.0


def test_the_trust_line_names_the_derived_and_the_same_die_entries():
    """issue 30 item 3: what no kernel of this GPU measured, said in the trust line."""
    from capsim.profiles import trust
    note = trust.derived_note("mi325x")
    assert note == ("; mi325x's attention_decode, elementwise efficiencies "
                    "are derived from h100-sxm, not measured on it; its gemm, gemm_fp8_block, "
                    "fused_moe, grouped_gemm_fp8, fused_moe_mxfp4, attention_prefill "
                    "efficiencies are mi300x's (the same die)")
    assert "same die" not in trust.derived_note("mi300x")


def test_same_die_must_name_entries_the_profile_sets():
    from capsim.profiles.hardware import HardwareProfile
    data = load_hardware("mi325x").model_dump()
    data["derivation"]["same_die"]["classes"].append("gemm_fp8")
    with pytest.raises(ValueError, match="gemm_fp8"):
        HardwareProfile.model_validate(data)


@pytest.mark.parametrize("change, words", [
    # each found by a new user's bad-input sweep: accepted without a word before
    (lambda d: d["same_die"].update(from_profile="h300-sxm"),
     "derivation.same_die.from_profile 'h300-sxm' is not a packaged profile other than this "
     "one (valid: a100-40gb,"),
    (lambda d: d.update(from_profile="h300-sxm"), "derivation.from_profile 'h300-sxm'"),
    (lambda d: d["same_die"].update(from_profile="mi325x"),
     "derivation.same_die.from_profile 'mi325x' is not a packaged profile other than this"),
    (lambda d: d["same_die"]["classes"].append("gemm"), "derivation lists gemm twice"),
    (lambda d: d["same_die"]["classes"].append(d["classes"][0]),
     "twice (each class comes from one place"),
])
def test_a_derivation_names_each_class_once_from_another_packaged_profile(change, words):
    from capsim.profiles.hardware import HardwareProfile
    data = load_hardware("mi325x").model_dump()
    change(data["derivation"])
    with pytest.raises(ValueError, match=None) as err:
        HardwareProfile.model_validate(data)
    assert words in str(err.value)


def test_same_die_from_another_die_is_refused(tmp_path):
    """An MI325X copy whose same_die names the H100 (CUDA, 989.4 bf16 TFLOP/s against
    ROCm, 1,307.4) loaded without a word in a bad-input sweep."""
    import yaml

    from capsim.common.errors import ScenarioError
    data = load_hardware("mi325x").model_dump(mode="json", exclude_none=True)
    data["name"] = "my-mi325x"
    data["derivation"]["same_die"]["from_profile"] = "h100-sxm"
    data["derivation"]["from_profile"] = "a100-80gb"
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as err:
        load_hardware(path)
    assert err.value.path == "derivation.same_die.from_profile"
    assert ("'h100-sxm' is not this GPU's die: its platform cuda and peak bf16 989.4 TFLOP/s "
            "differ from rocm and 1,307.4 here (a same-die profile has this platform and "
            "these peaks; valid: mi300x, mi325x)" in str(err.value))


def test_capsim_hardware_names_what_is_still_derived():
    from click.testing import CliRunner

    from capsim.cli.main import cli
    result = CliRunner().invoke(cli, ["hardware"], terminal_width=400)
    assert result.exit_code == 0
    lines = {ln.split(":")[0].strip(): ln for ln in result.output.splitlines()
             if ln.startswith("  ") and " from " in ln}
    assert lines["mi300x"] == "  mi300x: attention_decode, elementwise from h100-sxm"
    assert lines["mi325x"].endswith("; gemm, gemm_fp8_block, fused_moe, grouped_gemm_fp8, "
                                    "fused_moe_mxfp4, attention_prefill mi300x's (the same die)")
