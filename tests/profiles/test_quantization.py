"""Weight quantization formats: bytes of each format, checked by hand and against public
checkpoints, and the peak each format computes at on each GPU.

Checkpoint sizes (Hugging Face file listings; the GB there are 10^9 bytes, two decimals):
- hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4: 4.68 + 1.05 = 5.73 GB
  (https://huggingface.co/hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4/tree/main)
- nvidia/Llama-3.1-8B-Instruct-FP8 (ModelOpt FP8, per-tensor scales): 5 + 4.08 = 9.08 GB
  (https://huggingface.co/nvidia/Llama-3.1-8B-Instruct-FP8/tree/main). Only a bf16 LM head
  adds up to it: an fp8 one would make 8.56 GB.
"""

from __future__ import annotations

import pytest

from capsim.common.errors import ScenarioError
from capsim.kv.memory import weight_bytes_per_gpu
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.profiles.quantization import KEPT_16BIT, load_quant_format, quant_format_names

K = N = 4096
KN = K * N


@pytest.mark.parametrize("name, expected", [
    ("bf16", 2 * KN),
    ("fp8", KN + 4),                                  # one fp32 scale per tensor
    ("fp8_channel", KN + 4 * N),                      # one fp32 scale per output channel
    ("fp8_block", KN + 4 * 32 * 32),                  # fp32 per 128 x 128 block
    ("int8", KN + 4 * N),
    ("awq", KN // 2 + 2 * 32 * N + 32 * N // 2),      # fp16 scale + 4-bit zero per 128 inputs
    ("gptq", KN // 2 + 2 * 32 * N),                   # symmetric: no zeros on the GPU
    ("nvfp4", KN // 2 + KN // 16 + 8),                # e4m3 per 16, two fp32 per tensor
    ("mxfp4", KN // 2 + KN // 32),                    # e8m0 per 32
])
def test_bytes_of_a_4096_square_weight_by_hand(name, expected):
    assert load_quant_format(name).tensor_bytes(K, N) == expected


def test_every_format_is_listed_and_sourced():
    names = quant_format_names()
    assert names == ["bf16", "fp8", "fp8_channel", "fp8_block", "int8", "awq", "gptq", "nvfp4",
                     "mxfp4"]
    for name in names[1:]:
        fmt = load_quant_format(name)
        assert fmt.quantized and fmt.vllm_method and "layout" in fmt.sources, name
    assert KEPT_16BIT == ("embedding", "lm_head", "norms", "biases", "router")


LLAMA8B_LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096)
LLAMA8B_16BIT = 2 * 128_256 * 4096 * 2 + (2 * 32 + 1) * 4096 * 2   # embedding, LM head, norms


def test_llama_3_1_8b_awq_int4_matches_the_public_checkpoint():
    """0.5 B per weight + an fp16 scale and a 4-bit zero per 128 inputs = 0.5195 B; the
    embedding, LM head and norms stay bf16: 5,727,854,592 bytes; the Hub lists 5.73 GB."""
    assert LLAMA8B_LINEAR == 6_979_321_856
    w = weight_bytes_per_gpu(load_model("llama-3.1-8b"), 1, 2, quant=load_quant_format("awq"))
    assert w == LLAMA8B_LINEAR * (0.5 + 2 / 128 + 0.5 / 128) + LLAMA8B_16BIT == 5_727_854_592
    assert round(w / 1e9, 2) == 5.73


def test_llama_3_1_8b_fp8_per_tensor_matches_the_public_checkpoint():
    w = weight_bytes_per_gpu(load_model("llama-3.1-8b"), 1, 2, quant=load_quant_format("fp8"))
    assert w == LLAMA8B_LINEAR + 32 * 4 * 4 + LLAMA8B_16BIT
    assert round(w / 1e9, 2) == 9.08


@pytest.mark.parametrize("name, per_weight", [
    ("gptq", 0.5 + 2 / 128), ("nvfp4", 0.5 + 1 / 16),
    ("fp8_block", None), ("int8", None),
])
def test_weight_bytes_of_each_format_on_llama_3_1_8b(name, per_weight):
    w = weight_bytes_per_gpu(load_model("llama-3.1-8b"), 1, 2, quant=load_quant_format(name))
    if name == "nvfp4":
        assert w == LLAMA8B_LINEAR * per_weight + 32 * 4 * 8 + LLAMA8B_16BIT
    elif name == "fp8_block":      # K and N blocks: 32x48 + 32x32 + 32x224 + 112x32 per layer
        assert w == LLAMA8B_LINEAR + 4 * 32 * (32 * 48 + 32 * 32 + 32 * 224 + 112 * 32) \
            + LLAMA8B_16BIT
    elif name == "int8":           # per output channel: 6144 + 4096 + 28672 + 4096 per layer
        assert w == LLAMA8B_LINEAR + 4 * 32 * (6144 + 4096 + 28672 + 4096) + LLAMA8B_16BIT
    else:
        assert w == LLAMA8B_LINEAR * per_weight + LLAMA8B_16BIT


def test_mxfp4_stores_only_the_experts_and_a_dense_model_is_refused():
    """vLLM's Mxfp4Config quantizes FusedMoE layers only (linear layers fall back to
    UnquantizedLinearMethod: vllm/model_executor/layers/quantization/mxfp4.py at 007d5005,
    formats.yaml mxfp4 groups). Issue 31: a dense Llama's linears were priced at 4 bits."""
    with pytest.raises(ScenarioError, match="quantization mxfp4 stores only a mixture-of-"
                                            "experts model's experts in mxfp4"):
        weight_bytes_per_gpu(load_model("llama-3.1-8b"), 1, 2, quant=load_quant_format("mxfp4"))
    moe = load_model("qwen3-30b-a3b")
    bf16 = weight_bytes_per_gpu(moe, 1, 2)
    mx = weight_bytes_per_gpu(moe, 1, 2, quant=load_quant_format("mxfp4"))
    experts = moe.moe_layers * moe.num_experts * moe.expert_params     # every layer MoE
    assert bf16 - mx == pytest.approx(experts * (2 - (0.5 + 1 / 32)), rel=1e-9)


def test_tensor_parallel_shards_the_quantized_layers_and_the_vocabulary():
    model, awq = load_model("llama-3.1-8b"), load_quant_format("awq")
    one = weight_bytes_per_gpu(model, 1, 2, quant=awq)
    two = weight_bytes_per_gpu(model, 2, 2, quant=awq)
    norms = (2 * 32 + 1) * 4096 * 2                       # replicated on every GPU
    assert two == (one - norms) / 2 + norms


@pytest.mark.parametrize("fmt, gpu, dtype", [
    ("awq", "a100-80gb", "bf16"), ("gptq", "l4", "bf16"),     # weight-only: Marlin, 16-bit math
    ("fp8", "h100-sxm", "fp8"), ("fp8_block", "h200-sxm", "fp8"), ("int8", "a100-80gb", "int8"),
    ("nvfp4", "b200", "fp4"), ("mxfp4", "b200", "fp4"),
    ("mxfp4", "h100-sxm", "bf16"),                              # Hopper: MXFP4 weight-only
])
def test_the_peak_each_format_computes_at(fmt, gpu, dtype):
    assert load_quant_format(fmt).compute_dtype(load_hardware(gpu)) == dtype


@pytest.mark.parametrize("fmt, gpu, needs", [
    ("nvfp4", "h100-sxm", "fp4"), ("fp8", "a100-80gb", "fp8"), ("int8", "a10g", "int8"),
    ("fp8_block", "mi300x", None),
])
def test_a_format_the_gpu_cannot_run_is_refused(fmt, gpu, needs):
    if needs is None:                                  # CDNA 3 has fp8 tensor cores
        assert load_quant_format(fmt).compute_dtype(load_hardware(gpu)) == "fp8"
        return
    with pytest.raises(ScenarioError) as err:
        load_quant_format(fmt).compute_dtype(load_hardware(gpu))
    assert str(err.value).startswith(f"quantization {fmt} needs {needs} tensor cores; "
                                     f"hardware '{gpu}' has ")


def test_unknown_format_lists_the_valid_ones():
    with pytest.raises(ScenarioError, match="unknown quantization 'int3'; valid: bf16, fp8, "):
        load_quant_format("int3")
