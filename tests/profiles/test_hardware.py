"""Hardware profiles: datasheet numbers, sources, loading errors, calibration.

Datasheets: A100 (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf),
H100 (nvidia-tensor-core-gpu-datasheet), H200 (hpc-datasheet-sc23-h200),
L40S (l40s-datasheet-28413); URLs are in each profile's ``sources``.
The calibration tests recompute the scalar efficiency fallbacks from Vidur's
measured GEMM timings and check the fitted all-reduce constants against its
collective timings (MIT), in ../shared/reference/vidur_profiling.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import HardwareProfile, hardware_names, list_hardware, load_hardware

GIB = 2**30
NUMERIC_FIELDS = ("peak_flops_per_s", "hbm_bytes", "hbm_bandwidth_bytes_per_s",
                  "pcie_bandwidth_bytes_per_s", "pcie_latency_s", "efficiency",
                  "step_overhead_s", "price_per_gpu_hour_usd")


def test_packaged_profiles():
    assert hardware_names() == ["a100-40gb", "a100-80gb", "a10g", "b200", "h100-pcie", "h100-sxm",
                                "h20", "h200-sxm", "l4", "l40s", "mi300x", "mi325x", "rtx-4090"]


def test_top_level_hardware_folder_is_the_packaged_one(repo_root):
    """The project layout has hardware/*.yaml at the top; it links to the package data."""
    top = sorted(p.name for p in (repo_root / "hardware").glob("*.yaml"))
    assert top == [f"{n}.yaml" for n in hardware_names()]
    assert load_hardware(str(repo_root / "hardware" / "h100-sxm.yaml")) == load_hardware("h100-sxm")


@pytest.mark.parametrize(
    "name, bf16, fp8, hbm_gib, bandwidth, link",
    [
        # Dense (not sparsity) Tensor-Core rates; bandwidth per direction.
        ("a100-80gb", 312e12, None, 80, 2.039e12, 300e9),     # A100 datasheet, SXM column
        ("h100-sxm", 989.4e12, 1978.9e12, 80, 3.35e12, 450e9),  # 1,979 / 3,958 with sparsity
        ("h200-sxm", 989.4e12, 1978.9e12, 141, 4.8e12, 450e9),  # H200 datasheet, SXM column
        ("l40s", 362.05e12, 733e12, 48, 0.864e12, 32e9),       # no NVLink: PCIe Gen4 x16
    ],
)
def test_datasheet_numbers(name, bf16, fp8, hbm_gib, bandwidth, link):
    hw = load_hardware(name)
    assert hw.peak_flops("bf16") == bf16
    assert hw.peak_flops("fp16") == bf16
    if fp8 is None:
        with pytest.raises(ScenarioError, match="fp8"):
            hw.peak_flops("fp8")
    else:
        assert hw.peak_flops("fp8") == fp8
    assert hw.hbm_bytes == hbm_gib * GIB
    assert hw.hbm_bandwidth_bytes_per_s == bandwidth
    assert hw.tp_link_bandwidth_bytes_per_s == link


def test_l40s_has_no_nvlink_so_tp_uses_pcie():
    hw = load_hardware("l40s")
    assert not hw.has_nvlink
    assert hw.tp_link_latency_s == hw.pcie_latency_s


def test_every_number_has_a_source():
    for hw in list_hardware():
        fields = NUMERIC_FIELDS + (("nvlink_bandwidth_bytes_per_s", "nvlink_latency_s")
                                   if hw.has_nvlink else ())
        for field in fields:
            assert hw.sources.get(field), f"{hw.name}: no source for {field}"
        assert hw.sources["peak_flops_per_s"].startswith("https://")
        assert hw.price_per_gpu_hour_usd > 0


def test_default_efficiencies_are_fractions():
    for hw in list_hardware():
        for value in (hw.efficiency.compute, hw.efficiency.memory, hw.efficiency.interconnect):
            assert 0.0 < value <= 1.0


@pytest.mark.parametrize("name", ["a100-80gb", "h100-sxm"])
def test_calibrated_profiles_carry_provenance(name):
    """Shipped A100 / H100 profiles: every operator class has its own entry, and the
    calibration block names the Vidur data, the date and the error per class."""
    hw = load_hardware(name)
    eff = hw.efficiency
    assert eff.gemm.tokens[0] == 1 and eff.gemm.launch_s > 0
    assert eff.attention_prefill.compute_curve is not None
    assert eff.attention_decode.launch_s > 0 and eff.elementwise.launch_s > 0
    assert hw.calibration.date == "2026-11-29"
    assert any("7d47513" in line for line in hw.calibration.data)
    assert {"gemm", "elementwise", "all_reduce"} <= set(hw.calibration.error)
    assert hw.sources["efficiency"].startswith("calibrated 2026-11-29")
    # the GEMM curve dips at the roofline's corner (~128-512 tokens), as measured
    corner = min(eff.gemm.efficiency)
    assert corner < 0.6 < eff.gemm.efficiency[0]


def test_ideal_copy():
    hw = load_hardware("h100-sxm")
    ideal = hw.ideal()
    assert (ideal.efficiency.compute, ideal.efficiency.memory) == (1.0, 1.0)
    assert ideal.efficiency.interconnect == 1.0
    assert ideal.step_overhead_s == 0.0
    # the calibrated per-class entries (curves, launch times) are gone too
    assert hw.efficiency.gemm is not None and hw.efficiency.attention_decode is not None
    assert (ideal.efficiency.gemm, ideal.efficiency.attention_prefill,
            ideal.efficiency.attention_decode, ideal.efficiency.elementwise) == (None,) * 4
    assert ideal.peak_flops_per_s == hw.peak_flops_per_s
    assert hw.efficiency.compute < 1.0          # the original is untouched


# -- errors ---------------------------------------------------------------------------


def test_unknown_name_lists_valid_names():
    with pytest.raises(ScenarioError) as err:
        load_hardware("tpu-v5e")
    assert str(err.value) == ("unknown hardware 'tpu-v5e'; valid: " + ", ".join(hardware_names()))
    assert "b200, h100-pcie" in str(err.value)


def _profile_text(repo_root: Path, **replace: str) -> str:
    text = (repo_root / "hardware" / "a100-80gb.yaml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new, 1)      # first hit: the top-level key
    return text


def test_malformed_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError) as err:
        load_hardware(str(path))
    assert err.value.file == str(path)
    assert "YAML" in err.value.message


def test_invalid_field_names_file_and_dotted_path(tmp_path, repo_root):
    path = tmp_path / "a100.yaml"
    path.write_text(_profile_text(repo_root, **{"compute: 0.73": "compute: 1.7"}))
    with pytest.raises(ScenarioError) as err:
        load_hardware(str(path))
    assert err.value.file == str(path)
    assert err.value.path == "efficiency.compute"


def test_unknown_key_rejected(tmp_path, repo_root):
    path = tmp_path / "a100.yaml"
    path.write_text(_profile_text(repo_root, **{"step_overhead_s:":
                                                "step_overhed_s: 1.0\nstep_overhead_s:"}))
    with pytest.raises(ScenarioError) as err:
        load_hardware(str(path))
    assert err.value.path == "step_overhed_s"


def test_every_shipped_profile_and_link_sources_every_number():
    """Sources are optional in a user's profile, never in a shipped one."""
    from capsim.profiles.links import link_names, load_link

    assert {hw.name: hw.missing_sources() for hw in list_hardware()} \
        == {name: [] for name in hardware_names()}
    assert {n: load_link(n).missing_sources() for n in link_names()} \
        == {n: [] for n in link_names()}


def test_a_user_profile_without_sources_loads_with_one_warning(tmp_path, repo_root, caplog):
    path = tmp_path / "a100.yaml"
    text = "\n".join(line for line in _profile_text(repo_root).splitlines()
                     if not line.strip().startswith("hbm_bandwidth_bytes_per_s: https"))
    path.write_text(text)
    assert load_hardware(str(path)) == load_hardware("a100-80gb").model_copy(
        update={"sources": {k: v for k, v in load_hardware("a100-80gb").sources.items()
                            if k != "hbm_bandwidth_bytes_per_s"}})
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: sources has no entry for hbm_bandwidth_bytes_per_s: the profile is used as it "
        "is; say where each number comes from (a datasheet URL, a measurement, or 'estimate: "
        "why')"]


def test_a_profile_with_no_sources_at_all_warns_on_the_command_line(tmp_path, repo_root,
                                                                    run_cli, write_scenario):
    """Issue 16: a hand-written profile needed ``sources:`` with 10 entries before it loaded.
    Without any it loads; ``validate`` prints one warning naming the file and the fields,
    once however many variants use it, and exits 0."""
    text = _profile_text(repo_root)
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(text[:text.index("\nsources:")] + "\n")
    doc = {"name": "own", "model": "llama-3.1-8b", "hardware": "gpu.yaml",
           "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1},
                        "classes": [{"name": "a", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 16},
                                     "output_tokens": {"dist": "fixed", "value": 4}}]},
           "variants": [{"name": "a"}, {"name": "b", "engine": {"max_num_seqs": 8}}]}
    code, out, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0 and "ok" in out
    assert err == (f"warning: {gpu}: sources has no entry for peak_flops_per_s, hbm_bytes, "
                   "memory_total_gib, num_sms, max_threads_per_sm, compute_capability, "
                   "hbm_bandwidth_bytes_per_s, "
                   "nvlink_bandwidth_bytes_per_s, nvlink_latency_s, pcie_bandwidth_bytes_per_s, "
                   "pcie_latency_s, gpus_per_node, scale_out_link, custom_all_reduce, efficiency, "
                   "step_overhead_s, "
                   "price_per_gpu_hour_usd: the "
                   "profile is used as it is; say where each number comes from (a datasheet "
                   "URL, a measurement, or 'estimate: why')\n")


def test_negative_number_rejected():
    data = load_hardware("h100-sxm").model_dump()
    data["hbm_bandwidth_bytes_per_s"] = -1.0
    with pytest.raises(ValueError):
        HardwareProfile.model_validate(data)


# -- calibration from measured data ----------------------------------------------------


def _gemm_efficiency(csv: Path, peak_flops: float, bandwidth: float) -> tuple[float, float]:
    """(compute, memory) efficiency over one layer's four GEMMs, Vidur medians, TP1.

    compute = Σ 2·tokens·params / Σ time at 4,096 tokens ÷ peak;
    memory  = Σ 2·params bytes / Σ time at 1 token ÷ HBM bandwidth.
    """
    pd = pytest.importorskip("pandas")
    rows = pd.read_csv(csv)
    rows = rows[rows.num_tensor_parallel_workers == 1]
    h, ffn = int(rows.n_embd.iloc[0]), int(rows.n_expanded_embd.iloc[0])
    heads, kv_heads = int(rows.n_head.iloc[0]), int(rows.n_kv_head.iloc[0])
    head_dim = h // heads
    params = {"attn_pre_proj": h * (heads + 2 * kv_heads) * head_dim,
              "attn_post_proj": h * h, "mlp_up_proj": 2 * h * ffn, "mlp_down_proj": h * ffn}

    def total_s(tokens: int) -> float:
        at = rows[rows.num_tokens == tokens]
        return sum(at[f"time_stats.{op}.median"].mean() for op in params) * 1e-3

    weights = sum(params.values())
    return (2 * 4096 * weights / total_s(4096) / peak_flops,
            2 * weights / total_s(1) / bandwidth)


@pytest.mark.parametrize("name, csv", [
    ("a100-80gb", "compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"),
    ("h100-sxm", "compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"),
])
def test_default_efficiencies_come_from_vidur_gemm_timings(name, csv, vidur_profiling):
    """The profile defaults are these measurements rounded to 2 places
    (A100: 0.732 / 0.775; H100: 0.757 / 0.774)."""
    hw = load_hardware(name)
    compute, memory = _gemm_efficiency(vidur_profiling / "data" / "profiling" / csv,
                                       hw.peak_flops("bf16"),
                                       hw.hbm_bandwidth_bytes_per_s)
    assert round(compute, 2) == hw.efficiency.compute
    assert round(memory, 2) == hw.efficiency.memory


@pytest.mark.parametrize("name, sku, large_median_pct, large_p90_pct", [
    ("a100-80gb", "a100_dgx", 18.0, 40.0), ("h100-sxm", "h100_dgx", 20.0, 55.0)])
def test_ring_all_reduce_with_profile_values_matches_vidur(name, sku, large_median_pct,
                                                           large_p90_pct, vidur_profiling):
    """The ring α-β formula with the profile's interconnect and nvlink_latency_s
    (fitted by capsim calibrate) against Vidur's single-node all-reduce medians,
    messages >= 1 MiB (the per-step all-reduce of a 4k-hidden model at >= 128
    tokens): median / p90 absolute error within the stated bounds."""
    pd = pytest.importorskip("pandas")
    from capsim.cost.operators import ring_all_reduce_s

    rows = pd.read_csv(vidur_profiling / "data" / "profiling" / "network" / sku /
                       "all_reduce.csv")
    rows = rows[(rows.devices_per_node == rows.num_workers) & (rows["size"] >= 2**20)]
    hw = load_hardware(name)
    measured = rows["time_stats.all_reduce.median"].to_numpy() * 1e-3
    predicted = ring_all_reduce_s(rows["size"].to_numpy(), rows.num_workers.to_numpy(),
                                  hw.nvlink_bandwidth_bytes_per_s * hw.efficiency.interconnect,
                                  hw.nvlink_latency_s)
    ape = abs(predicted - measured) / measured * 100
    median, p90 = float(pd.Series(ape).median()), float(pd.Series(ape).quantile(0.9))
    print(f"\n{name} all-reduce >= 1 MiB ({len(ape)} rows): median {median:.1f} %, "
          f"p90 {p90:.1f} %")
    assert median < large_median_pct
    assert p90 < large_p90_pct


@pytest.mark.parametrize("name", hardware_names())
def test_operator_rates_answer_every_question_of_a_pricer_at_once(name):
    """HardwareProfile.operator_rates is the profile's per-operator questions asked once:
    each field equals the question it replaces (fp8 KV under vLLM, MXFP4 experts)."""
    hw = load_hardware(name)
    eff = hw.efficiency
    attn = "bf16" if "bf16" in hw.peak_flops_per_s else "fp16"
    r = hw.operator_rates("bf16", "bf16", "bf16", 1, "vllm", "mxfp4", "auto")
    assert r.matmul_peak_flops_per_s == r.expert_peak_flops_per_s == hw.peak_flops("bf16")
    assert r.lm_head_peak_flops_per_s == hw.peak_flops("bf16")
    assert r.attention_peak_flops_per_s == hw.peak_flops(attn)
    assert r.hbm_bandwidth_bytes_per_s == hw.hbm_bandwidth_bytes_per_s
    assert (r.compute, r.memory) == (eff.compute, eff.memory)
    assert r.matmul_curve is r.expert_curve is r.lm_head_curve is eff.matmul_curve("bf16")
    assert r.attention_prefill == eff.kernel("attention_prefill")
    assert r.attention_decode == eff.decode_attention(1, "vllm")
    assert r.elementwise == eff.kernel("elementwise")
    assert r.fused_moe == eff.moe_kernel("mxfp4", "vllm", "auto")
    assert r.step_overhead_s == hw.step_overhead_s
    if "fp8" in hw.peak_flops_per_s:
        fp8 = hw.operator_rates("fp8", "bf16", "bf16", 2)
        assert fp8.matmul_peak_flops_per_s == hw.peak_flops("fp8")
        assert fp8.matmul_curve is eff.matmul_curve("fp8")
        assert fp8.expert_peak_flops_per_s == hw.peak_flops("bf16")
    else:
        with pytest.raises(ScenarioError, match="no 'fp8' peak"):
            hw.operator_rates("fp8", "fp8", "bf16", 2)
