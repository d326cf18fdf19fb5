"""The sglang-0.4 preset: SGLang 0.4.7-0.4.9's defaults as read from the sglang 0.4.7.post1,
0.4.8.post1, 0.4.9.post2/post3 and 0.4.9.post6 wheels on PyPI (python/sglang/srt/
server_args.py ServerArgs.__post_init__, the same rule in all five)."""

from __future__ import annotations

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.tiered_fraction import TieredFraction

H100_MIB = 79.19 * 1024          # the h100-sxm profile's total (torch's 79.19 GiB)
H200_MIB = 143_155               # the h200-sxm profile's 139.8 GiB
MI300X_MIB = 192 * 1024


@pytest.fixture(scope="module")
def rule():
    return load_engine_preset("sglang-0.4").memory.static_fraction_tiers


def test_sglang_04_loads_with_its_own_rule():
    p = load_engine_preset("sglang-0.4")
    assert p.label == "sglang-0.4 (SGLang 0.4.9.post6)"
    assert p.scheduler.policy == "sglang" and p.memory.rule == "sglang"
    assert isinstance(p.memory.fraction_rule, TieredFraction)
    assert p.memory.static_fraction is None
    assert "mem_fraction_static" not in p.defaults          # chosen by the tier rule
    assert p.host_overhead.overlap == "async"               # disable_overlap_schedule False
    assert p.host_overhead.serial_with_speculation          # EAGLE turns the overlap off
    assert p.scheduler.knobs["min_new_token_ratio_factor"] == 0.14   # global_config.py


@pytest.mark.parametrize("tp, reserve_mib, fraction", [
    (1, 10_240, 0.874), (2, 10_752, 0.867), (4, 11_776, 0.855), (8, 13_824, 0.830)])
def test_mem_fraction_static_on_an_80_gb_h100(rule, tp, reserve_mib, fraction):
    """Below 90 GiB: (9.5 + TP / 2) GiB reserved; on 81,090.56 MiB, TP 1: 10,240 MiB and
    (81,090.56 - 10,240) / 81,090.56 = 0.8737 -> 0.874; TP 8: 13,824 MiB -> 0.830."""
    assert rule.reserve_mib(H100_MIB, 8192, tp) == pytest.approx(reserve_mib)
    assert rule.fraction(H100_MIB, 8192, tp) == fraction
    assert fraction == round((H100_MIB - reserve_mib) / H100_MIB, 3)


def test_mem_fraction_static_counts_pipeline_stages(rule):
    """parallel_size = tp_size x pp_size: TP 4 x PP 2 reserves what TP 8 does."""
    assert rule.reserve_mib(H100_MIB, 8192, 4, pp=2) == rule.reserve_mib(H100_MIB, 8192, 8)


def test_mem_fraction_static_by_gpu_tier(rule):
    """H200 (below 160 GiB) TP 8: (12 + 4) GiB = 16,384 MiB, (143,155 - 16,384) / 143,155 =
    0.886 (0.5's rule gives 0.896); above 160 GiB a flat 32 GiB at any TP: MI300X 0.833; a
    24 GB GPU (below 35 GiB) TP 1: 2.9 GiB, (24,000 - 2,969.6) / 24,000 = 0.876."""
    assert rule.fraction(H200_MIB, 8192, 8) == 0.886
    assert rule.fraction(MI300X_MIB, 16_384, 1) == rule.fraction(MI300X_MIB, 16_384, 8) == 0.833
    assert rule.reserve_mib(24_000, 2048, 1) == pytest.approx(2.9 * 1024)
    assert rule.fraction(24_000, 2048, 1) == 0.876


def test_reserve_ignores_the_chunk_and_adds_drafter_and_dp_attention(rule):
    """0.4's reserve does not follow chunked_prefill_size; +2,048 MiB with any drafter,
    +4,096 MiB with DP attention (whatever the rank count)."""
    assert rule.reserve_mib(H100_MIB, 32_768, 1) == rule.reserve_mib(H100_MIB, 2048, 1)
    assert rule.reserve_mib(H100_MIB, 8192, 1, drafter="eagle") == 12_288
    assert rule.reserve_mib(H200_MIB, 8192, 8, dp_attention_ranks=8) == 20_480
    assert rule.reserve_mib(H200_MIB, 8192, 8, dp_attention_ranks=2) == 20_480


@pytest.mark.parametrize("hw, gib, chunk", [
    ("l4", 22.0, 2048), ("a100-40gb", 39.4, 8192), ("h100-sxm", 79.2, 8192),
    ("h200-sxm", 139.8, 8192), ("b200", 178.0, 16384), ("mi300x", 192.0, 16384)])
def test_chunked_prefill_size_by_gpu_memory(hw, gib, chunk):
    """chunked_prefill_size: 2,048 below 35 GiB, 8,192 below 160 (0.4 has no 4,096 tier:
    a 40 GB A100 gets 8,192, where 0.5 gives 4,096), 16,384 above."""
    d = load_engine_preset("sglang-0.4").defaults_for(hw, gib, {})
    assert d["max_num_batched_tokens"] == chunk
    assert d["max_num_seqs"] == 4096


def test_speculation_caps_running_requests_at_48():
    """__post_init__: EAGLE / EAGLE3 set max_running_requests 48 when unset."""
    p = load_engine_preset("sglang-0.4")
    assert p.defaults_for("h200-sxm", 139.8, {"speculative": {"method": "eagle"}})[
        "max_num_seqs"] == 48


def test_a_preset_with_a_bad_tier_is_refused(tmp_path):
    """A tier with a negative reserve names the field and the file."""
    from pathlib import Path

    import capsim
    text = (Path(capsim.__file__).parent / "profiles/data/engines/sglang-0.4.yaml").read_text()
    text = text.replace("base_gib: 32,", "base_gib: -32,")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=r"bad\.yaml: memory\.static_fraction_tiers\."
                                            r"tiers\.5\.base_gib: must be >= 0 "):
        load_engine_preset(str(path))


def test_both_fraction_rules_are_refused(tmp_path):
    """A preset gives 0.5's rule or 0.4's, not both: one line naming the file and memory."""
    from pathlib import Path

    import capsim
    data = Path(capsim.__file__).parent / "profiles/data/engines"
    doc = yaml.safe_load((data / "sglang-0.4.yaml").read_text())
    doc["memory"]["static_fraction"] = yaml.safe_load(
        (data / "sglang-0.5.yaml").read_text())["memory"]["static_fraction"]
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match=r"both\.yaml: memory: .*give static_fraction "
                                            r"\(SGLang 0\.5's rule\) or static_fraction_tiers"):
        load_engine_preset(str(path))
