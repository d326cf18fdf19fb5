"""KV capacity arithmetic (vLLM v1 formula) from given memory terms.

"seed 002" is ../shared/seeds/002_be97687ecafaf8fa.txt (Q6: contiguous slabs
vs paged blocks). The Llama-3.1 shapes are from their Hugging Face
config.json files (hidden 4096 / 8192, intermediate 14336 / 28672, 32 / 80
layers, 8 KV heads of 128, vocab 128256) and parameter counts.
"""

from __future__ import annotations

import math

import pytest

from capsim.common.errors import ScenarioError
from capsim.kv import KVCapacity, kv_capacity

KIB, GIB = 2**10, 2**30
LLAMA_8B_PARAMS = 8_030_261_248
LLAMA_70B_PARAMS = 70_553_706_496


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: int = 2) -> int:
    return 2 * layers * kv_heads * head_dim * dtype   # K and V


def pool(pool_bytes: int, kv_per_token: int, block_size: int = 16) -> KVCapacity:
    """A bare KV pool: no weights, no reserve, utilisation 1."""
    return kv_capacity(hbm_bytes=pool_bytes, tensor_parallel_size=1,
                       gpu_memory_utilization=1.0, weight_bytes=0,
                       kv_bytes_per_token=kv_per_token, block_size=block_size,
                       activation_reserve_bytes=0)


def test_llama_8b_kv_bytes_per_token_is_128_kib():
    """Seed 002 Q6/Q8: Llama 3.1 8B holds 128 KiB of KV per token in BF16."""
    assert kv_bytes_per_token(32, 8, 128) == 128 * KIB


def test_seed002_q6_contiguous_slabs_fit_46_requests_in_50_gb():
    """Seed 002 Q6: one 8,192-token slab at 128 KiB/token is exactly 1 GiB,
    and a 50 GB pool holds 50e9 // 2**30 = 46 of them."""
    slab = 8192 * 128 * KIB
    assert slab == GIB
    assert 50 * 10**9 // slab == 46


def test_seed002_q6_paged_pool_same_50_gb():
    """Seed 002 Q6, paged: the 50 GB pool is 50e9 // (16 * 128 KiB) = 23,841
    blocks. Requests that really use all 8,192 tokens still fit 46 (paging
    cannot beat a full slab), but 1,000-token requests need ceil(1000/16) = 63
    blocks each, so 23,841 / 63 = 378 fit -- the seed's "~380" (which divides
    by the exact 1,000 tokens: 50e9 // (1000 * 128 KiB) = 381)."""
    cap = pool(50 * 10**9, 128 * KIB)
    assert cap.num_gpu_blocks == 50 * 10**9 // (16 * 128 * KIB) == 23_841
    assert math.floor(cap.max_concurrency(8192)) == 46
    assert math.floor(cap.max_concurrency(1000)) == 378
    assert 50 * 10**9 // (1000 * 128 * KIB) == 381


def test_llama_8b_on_h100_80gb_util_0_9_by_hand():
    """vLLM-style num_gpu_blocks for Llama-3.1-8B, one 80 GB H100 (80e9 bytes,
    the datasheet figure), gpu_memory_utilization 0.9, BF16, block 16, with an
    activation reserve of 838,860,800 bytes given:

      budget      = ceil(80e9 * 0.9)                      = 72,000,000,000
      weights     = 8,030,261,248 params * 2 B            = 16,060,522,496
      available   = 72e9 - 16,060,522,496 - 838,860,800   = 55,100,616,704
      page        = 16 tokens * 131,072 B                 =      2,097,152
      num_blocks  = 55,100,616,704 // 2,097,152           =         26,274
      tokens      = 26,274 * 16                           =        420,384
      concurrency @ 8,192   = 26,274 / 512                =          51.32x
      concurrency @ 131,072 = 26,274 / 8,192              =           3.21x
    """
    reserve = 838_860_800
    cap = kv_capacity(hbm_bytes=80 * 10**9, tensor_parallel_size=1,
                      gpu_memory_utilization=0.9,
                      weight_bytes=LLAMA_8B_PARAMS * 2,
                      kv_bytes_per_token=kv_bytes_per_token(32, 8, 128),
                      block_size=16, activation_reserve_bytes=reserve)
    assert cap.budget_bytes == 72_000_000_000
    assert cap.weight_bytes == 16_060_522_496
    assert cap.kv_cache_bytes == 55_100_616_704
    assert cap.num_gpu_blocks == 26_274
    assert cap.num_tokens == 420_384
    assert cap.total_memory_bytes == 80 * 10**9
    assert cap.log_lines(8192) == [
        "GPU KV cache size: 420,384 tokens",
        "Maximum concurrency for 8,192 tokens per request: 51.32x",
    ]
    assert cap.log_lines(131072)[1] == (
        "Maximum concurrency for 131,072 tokens per request: 3.21x")


def test_tensor_parallel_matches_vllm_per_gpu_formula():
    """Llama-3.1-70B on 4 x 80 GB at 0.9: our replica-level sizing equals
    vLLM's per-GPU one, available // page_size // num_layers, with KV heads
    (8) and weights split over 4 GPUs (gpu_worker.py, kv_cache_utils.py)."""
    tp, layers, kv_heads, head, block = 4, 80, 8, 128, 16
    weights = LLAMA_70B_PARAMS * 2
    reserve = tp * 1_963_000_000               # activation peak per GPU, times TP
    cap = kv_capacity(hbm_bytes=80 * 10**9, tensor_parallel_size=tp,
                      gpu_memory_utilization=0.9, weight_bytes=weights,
                      kv_bytes_per_token=kv_bytes_per_token(layers, kv_heads, head),
                      block_size=block, activation_reserve_bytes=reserve)
    per_gpu_available = math.ceil(80e9 * 0.9) - weights // tp - reserve // tp
    per_layer_page = 2 * block * (kv_heads // tp) * head * 2
    assert cap.num_gpu_blocks == per_gpu_available // per_layer_page // layers
    assert cap.budget_bytes == 4 * 72_000_000_000
    assert cap.total_memory_bytes == 4 * 80 * 10**9


def test_max_concurrency_rounds_request_up_to_blocks():
    cap = pool(1024 * 16 * 100, 100)   # exactly 1024 blocks of 16 tokens
    assert cap.num_gpu_blocks == 1024
    assert cap.max_concurrency(8192) == 2.0
    assert cap.max_concurrency(8193) == 1024 / 513
    with pytest.raises(ValueError):
        cap.max_concurrency(0)


def test_weights_that_do_not_fit_raise_scenario_error_with_numbers():
    with pytest.raises(ScenarioError) as err:
        kv_capacity(hbm_bytes=16 * GIB, tensor_parallel_size=1,
                    gpu_memory_utilization=0.9, weight_bytes=LLAMA_8B_PARAMS * 2,
                    kv_bytes_per_token=128 * KIB, block_size=16,
                    activation_reserve_bytes=0)
    msg = str(err.value)
    assert msg.startswith("model weights 14.96 GiB do not fit in "
                          "gpu_memory_utilization × HBM × TP = ")
    assert "14.40 GiB" in msg
    located = err.value.with_context(file="s.yaml", path="engine")
    assert str(located).startswith("s.yaml: engine: model weights 14.96 GiB")


def test_less_than_one_block_left_raises():
    with pytest.raises(ScenarioError, match="less than one block of 16 tokens"):
        kv_capacity(hbm_bytes=20 * GIB, tensor_parallel_size=1,
                    gpu_memory_utilization=0.8, weight_bytes=15 * GIB,
                    kv_bytes_per_token=128 * KIB, block_size=16,
                    activation_reserve_bytes=1 * GIB)


def test_tensor_parallel_makes_room_for_weights():
    """The same weights that overflow one 16 GiB GPU fit across two."""
    cap = kv_capacity(hbm_bytes=16 * GIB, tensor_parallel_size=2,
                      gpu_memory_utilization=0.9, weight_bytes=LLAMA_8B_PARAMS * 2,
                      kv_bytes_per_token=128 * KIB, block_size=16,
                      activation_reserve_bytes=0)
    assert cap.num_gpu_blocks == (2 * math.ceil(16 * GIB * 0.9)
                                  - LLAMA_8B_PARAMS * 2) // (16 * 128 * KIB)


@pytest.mark.parametrize("util", [0.0, -0.1, 1.5])
def test_bad_utilisation_raises(util):
    with pytest.raises(ScenarioError, match="gpu_memory_utilization"):
        kv_capacity(hbm_bytes=80 * 10**9, tensor_parallel_size=1,
                    gpu_memory_utilization=util, weight_bytes=0,
                    kv_bytes_per_token=1, block_size=16, activation_reserve_bytes=0)
