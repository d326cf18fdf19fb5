"""SGLang 0.5.6-0.5.9's block-fp8 linears on gfx942 (the sglang-0.5 preset's
``untuned_fp8_gemm``): aiter's Triton gemm_a8w8_blockscale on its generic gfx942 config, one
128 x 128 output tile per workgroup over the whole K loop (fp8_utils.py of the 0.5.7 wheel;
aiter/ops/triton/configs/gemm/gfx942-GEMM-A8W8_BLOCKSCALE.json at v0.1.9.post1). The step:
DeepSeek-V3 fp8_block, TP 8, one decode over 1,500 tokens of context (the SGLang cookbook's
MI300X c1 runs); k_step_s 1.964 us from ROCm/aiter PR 1930's MI300X TPOT before / after
tuning the N 2,112 / K 7,168 shape (6.71 ms a step over 61 layers and 56 K steps)."""

from __future__ import annotations

import pytest

from capsim.cost.gemm_floor import k_loop_floor_s
from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model

STEP = dict(decode_seqs=1, decode_ctx_tokens=1500)
K_STEP_S = 1.964e-6


def _pricer(rule: bool, hardware: str = "mi300x", model: str = "deepseek-v3",
            quantization: str | None = "fp8_block", dp_attention: bool = False,
            preset: str = "sglang-0.5") -> StepPricer:
    p = load_engine_preset(preset)
    return StepPricer(load_model(model), load_hardware(hardware), 8,
                      quantization=quantization, engine=p.engine, all_reduce=p.tp_all_reduce,
                      dp_attention=dp_attention, shared_experts_fusion=p.shared_experts_fusion,
                      absorbed_bmm_dequant=p.absorbed_bmm_dequant,
                      untuned_fp8_gemm=p.untuned_fp8_gemm if rule else None)


def _rows(pricer: StepPricer, **step) -> dict[str, float]:
    return {op.name: op.seconds for op in pricer.breakdown(**(step or STEP))}


def test_the_preset_reads_the_generic_config():
    rule = load_engine_preset("sglang-0.5").untuned_fp8_gemm
    assert (rule.block_m, rule.block_n, rule.block_k, rule.k_step_s) == (128, 128, 128, K_STEP_S)
    assert rule.hardware == ["mi300x", "mi325x"]
    assert load_engine_preset("sglang-0.5.10").untuned_fp8_gemm is None   # aiter PR 2024 on


def test_each_decode_linear_costs_its_k_chain():
    """Per layer: the fused q_a + kv_a projection K 7,168 (56 steps), q_b K 1,536 (12),
    o_proj K 16 heads x 128 = 2,048 (16); the 3 dense layers' gate/up K 7,168 (56) and down
    K 18,432 / 8 = 2,304 (18). By construction the first is PR 1930's 6.71 ms a step."""
    rows = _rows(_pricer(True))
    assert rows["q_a_kv_a_proj"] == pytest.approx(61 * 56 * K_STEP_S, rel=1e-9)
    assert rows["q_a_kv_a_proj"] * 1e3 == pytest.approx(6.709, abs=0.001)
    assert rows["q_b_proj"] == pytest.approx(61 * 12 * K_STEP_S, rel=1e-9)
    assert rows["o_proj"] == pytest.approx(61 * 16 * K_STEP_S, rel=1e-9)
    assert rows["gate_up_proj"] == pytest.approx(3 * 56 * K_STEP_S, rel=1e-9)
    assert rows["down_proj"] == pytest.approx(3 * 18 * K_STEP_S, rel=1e-9)
    base = _rows(_pricer(False))
    for name in ("kv_b_proj", "router", "experts", "attention_decode", "lm_head"):
        assert rows[name] == pytest.approx(base[name], rel=1e-12)


def test_the_c1_decode_step_and_the_fast_path_agree():
    """Computed from capsim's MI300X profile at 43eee3e: the c1 decode step 8.398 -> 16.997 ms
    (measured 23.9 ms, the SGLang cookbook's DeepSeek-V3.1 run: still short)."""
    with_rule, without = _pricer(True), _pricer(False)
    assert without.cost(**STEP).seconds * 1e3 == pytest.approx(8.398, abs=0.001)
    assert with_rule.cost(**STEP).seconds * 1e3 == pytest.approx(16.997, abs=0.001)
    secs, _ = with_rule.decode_costs([1, 4], [1500, 1500], [3, 2])
    assert secs[0] == pytest.approx(with_rule.cost(**STEP).seconds, rel=1e-9)


def test_the_floor_holds_flat_in_rows_until_the_tiles_fill_the_gpu():
    """17 column tiles of N 2,112: one wave of 304 compute units up to 17 row tiles of 128
    (2,176 rows); an 8,192-token prefill chunk is 64 x 17 tiles, 4 waves."""
    wave = 56 * K_STEP_S
    assert k_loop_floor_s((wave, 17.0), 1, 128, 304) == pytest.approx(wave)
    assert k_loop_floor_s((wave, 17.0), 2176, 128, 304) == pytest.approx(wave)
    assert k_loop_floor_s((wave, 17.0), 2177, 128, 304) == pytest.approx(2 * wave)
    assert k_loop_floor_s((wave, 17.0), 8192, 128, 304) == pytest.approx(4 * wave)
    assert k_loop_floor_s((wave, 17.0), 0, 128, 304) == 0.0


def test_dp_attention_runs_the_whole_o_proj_k_on_each_gpu():
    """SGLang's DP attention keeps all 128 heads on a GPU: o_proj's K is 16,384 (128 steps)."""
    rows = _rows(_pricer(True, dp_attention=True))
    assert rows["o_proj"] == pytest.approx(61 * 128 * K_STEP_S, rel=1e-9)


@pytest.mark.parametrize("case", [
    dict(hardware="h200-sxm"),                        # CUDA: DeepGEMM / CUTLASS
    dict(model="llama-4-scout", quantization=None),   # bf16 weights
    dict(preset="sglang-0.5.10"),                     # aiter with DeepSeek's gfx942 configs
])
def test_it_applies_only_to_block_fp8_on_gfx942_before_the_configs(case):
    rule, plain = _pricer(True, **case), _pricer(False, **case)
    assert rule.cost(**STEP).seconds == pytest.approx(plain.cost(**STEP).seconds, rel=1e-12)


def test_the_mi325x_is_gfx942_too():
    assert _rows(_pricer(True, hardware="mi325x"))["q_a_kv_a_proj"] == pytest.approx(
        61 * 56 * K_STEP_S, rel=1e-9)


def test_the_preset_names_only_matmuls_capsim_prices():
    """LAYER_MATMULS (capsim/profiles/engines.py) is every name layer_matmuls gives, so a
    preset's list is checked against what the pricer can price."""
    from capsim.cost.operators import layer_matmuls
    from capsim.profiles.engines import LAYER_MATMULS
    names = {op.name for m in ("deepseek-v3", "llama-3.1-8b", "qwen3-30b-a3b", "llama-4-scout")
             for op in layer_matmuls(load_model(m), 1)}
    assert names <= set(LAYER_MATMULS)
    assert {"q_a_kv_a_proj", "q_b_proj", "kv_b_proj", "qkv_proj", "shared_expert",
            "router"} <= names


def test_a_preset_naming_an_unknown_matmul_is_refused(tmp_path):
    import yaml
    from capsim.common.errors import ScenarioError
    from pathlib import Path
    import capsim
    preset = Path(capsim.__file__).parent / "profiles" / "data" / "engines" / "sglang-0.5.yaml"
    data = yaml.safe_load(preset.read_text())
    data["untuned_fp8_gemm"]["matmuls"] = ["q_a_proj"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as err:
        load_engine_preset(str(path))
    assert "untuned_fp8_gemm.matmuls" in str(err.value)
    assert "unknown layer matmul(s) q_a_proj; valid: qkv_proj" in str(err.value)
