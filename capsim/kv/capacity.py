"""KV cache capacity of one replica, sized the way vLLM v1 sizes it.

vLLM, per GPU (all GPUs of a tensor-parallel group are identical):

1. ``requested_memory = ceil(total_gpu_memory * gpu_memory_utilization)``
   (``vllm/v1/worker/utils.py``, ``request_memory``).
2. A dummy forward of ``max_num_batched_tokens`` tokens plus a dummy sampler
   run measures ``non_kv_cache_memory = weights + torch peak increase
   (activations) + non-torch increase`` (``vllm/v1/worker/gpu_model_runner.py``
   ``profile_run``; ``vllm/utils`` ``memory_profiling``).
3. ``available_kv_cache_memory = requested_memory - non_kv_cache_memory``,
   logged as "Available KV cache memory: X GiB"
   (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``).
4. ``num_blocks = int(available // page_size // num_layers)`` where
   ``page_size = 2 * block_size * num_kv_heads_per_gpu * head_size * dtype``
   (``vllm/v1/core/kv_cache_utils.py``, ``get_num_blocks``); the scheduler
   takes the minimum over workers (``get_kv_cache_configs``).
5. Log "GPU KV cache size: N tokens" with ``N = num_blocks * block_size`` and
   "Maximum concurrency for L tokens per request: C.CCx" with
   ``C = num_blocks / cdiv(L, block_size)`` (``_report_kv_cache_config`` and
   ``get_max_concurrency_for_kv_cache_config`` in ``kv_cache_utils.py``).

Here everything is summed over the replica's TP GPUs: budget ``TP * ceil(HBM
* util)``, whole-model weights, the reserve of all GPUs, and
``kv_bytes_per_token`` of all KV-head shards. Dividing every term by TP gives
vLLM's per-GPU numbers and the same ``num_blocks``. The other non-KV terms
are explicit inputs: ``non_torch_bytes`` (CUDA context, cuBLAS workspaces,
NCCL buffers: what vLLM's profiler logs as "non_torch_memory") and
``cudagraph_bytes`` (the CUDA-graph pool, which vLLM >= 0.11 estimates and
subtracts; earlier versions captured graphs after sizing the cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from capsim.common.errors import ScenarioError
from capsim.kv.blocks import blocks_needed

GIB = 2**30
FP32_BYTES = 4
DEFAULT_MAX_NUM_SEQS = 256  # vLLM SchedulerConfig default for max_num_seqs


@dataclass(frozen=True)
class KVCapacity:
    """KV cache capacity of one replica; all byte fields summed over TP GPUs.

    Attributes:
        num_gpu_blocks: blocks in the pool (identical on every TP GPU).
        block_size: tokens per block.
        kv_bytes_per_token: KV bytes of one token, all layers, all TP shards.
        total_memory_bytes: HBM per GPU x TP.
        budget_bytes: TP x ceil(gpu_memory_utilization x HBM per GPU).
        weight_bytes: model weights (whole model).
        activation_reserve_bytes: peak activations (+ any overhead) of all GPUs.
        kv_cache_bytes: budget - weights - reserve: vLLM's "Available KV cache
            memory" x TP. The pool actually uses ``num_tokens *
            kv_bytes_per_token`` of it (the rest is less than one block).
    """

    num_gpu_blocks: int
    block_size: int
    kv_bytes_per_token: int
    total_memory_bytes: int
    budget_bytes: int
    weight_bytes: int
    activation_reserve_bytes: int
    kv_cache_bytes: int

    @property
    def num_tokens(self) -> int:
        """Token slots in the pool: ``num_gpu_blocks * block_size``."""
        return self.num_gpu_blocks * self.block_size

    def max_concurrency(self, tokens_per_request: int) -> float:
        """Requests of ``tokens_per_request`` tokens that fit at once.

        ``num_gpu_blocks / ceil(tokens_per_request / block_size)``, as vLLM's
        ``get_max_concurrency_for_kv_cache_config`` for full attention.
        """
        if tokens_per_request < 1:
            raise ValueError(f"tokens_per_request must be >= 1, got {tokens_per_request}")
        return self.num_gpu_blocks / blocks_needed(tokens_per_request, self.block_size)

    def log_lines(self, max_model_len: int) -> list[str]:
        """vLLM's two startup lines, verbatim format (``kv_cache_utils.py``).

        Returns:
            ``["GPU KV cache size: 1,234,567 tokens",
            "Maximum concurrency for 8,192 tokens per request: 12.34x"]``.
        """
        conc = self.max_concurrency(max_model_len)
        return [
            f"GPU KV cache size: {self.num_tokens:,} tokens",
            f"Maximum concurrency for {max_model_len:,} tokens per request: {conc:.2f}x",
        ]


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _check_inputs(hbm_bytes: int, tensor_parallel_size: int,
                  gpu_memory_utilization: float, kv_bytes_per_token: int,
                  block_size: int) -> None:
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ScenarioError(f"gpu_memory_utilization must be in (0, 1], "
                            f"got {gpu_memory_utilization}")
    for name, value in (("hbm_bytes", hbm_bytes),
                        ("tensor_parallel_size", tensor_parallel_size),
                        ("kv_bytes_per_token", kv_bytes_per_token),
                        ("block_size", block_size)):
        if value < 1:
            raise ScenarioError(f"{name} must be >= 1, got {value}")


def kv_capacity(*, hbm_bytes: int, tensor_parallel_size: int,
                gpu_memory_utilization: float, weight_bytes: int,
                kv_bytes_per_token: int, block_size: int,
                activation_reserve_bytes: int, non_torch_bytes: int = 0,
                cudagraph_bytes: int = 0) -> KVCapacity:
    """Size one replica's KV pool as vLLM does (module docstring, steps 1-4).

    Args:
        hbm_bytes: device memory of ONE GPU, bytes (torch's total_memory).
        tensor_parallel_size: GPUs in the replica.
        gpu_memory_utilization: fraction of each GPU vLLM may use, (0, 1].
        weight_bytes: whole-model weight bytes (split evenly over TP).
        kv_bytes_per_token: KV bytes per token summed over all TP shards
            (if TP > num_kv_heads, vLLM replicates heads: pass TP x per-GPU).
        block_size: tokens per block.
        activation_reserve_bytes: peak activation + overhead of all GPUs
            (e.g. :func:`activation_reserve_bytes`).
        non_torch_bytes: non-torch memory of all GPUs (CUDA context, NCCL).
        cudagraph_bytes: CUDA-graph pool of all GPUs.

    Returns:
        KVCapacity with ``num_gpu_blocks = (budget - weights - reserve) //
        (block_size * kv_bytes_per_token)``, equal to vLLM's per-GPU
        ``available // page_size // num_layers`` with every term divided by TP.

    Raises:
        ScenarioError: inputs out of range; weights (+ reserve) do not fit in
            the budget; or what is left holds less than one block. The caller
            adds the YAML path with ``ScenarioError.with_context``.
    """
    _check_inputs(hbm_bytes, tensor_parallel_size, gpu_memory_utilization,
                  kv_bytes_per_token, block_size)
    tp = tensor_parallel_size
    budget = tp * math.ceil(hbm_bytes * gpu_memory_utilization)
    if weight_bytes >= budget:
        raise ScenarioError(
            f"model weights {_gib(weight_bytes)} do not fit in "
            f"gpu_memory_utilization × HBM × TP = {gpu_memory_utilization} × "
            f"{_gib(hbm_bytes)} × {tp} = {_gib(budget)}; raise "
            f"gpu_memory_utilization or tensor_parallel_size, or use a larger GPU")
    available = budget - weight_bytes - activation_reserve_bytes - non_torch_bytes - cudagraph_bytes
    page_bytes = block_size * kv_bytes_per_token
    if available < page_bytes:
        raise ScenarioError(
            f"gpu_memory_utilization × HBM × TP = {_gib(budget)} minus model "
            f"weights {_gib(weight_bytes)} minus activation reserve "
            f"{_gib(activation_reserve_bytes)} and other non-KV memory "
            f"{_gib(non_torch_bytes + cudagraph_bytes)} leaves {_gib(available)} for the "
            f"KV cache, less than one block of {block_size} tokens "
            f"({page_bytes:,} bytes); raise gpu_memory_utilization or "
            f"tensor_parallel_size, or lower max_num_batched_tokens")
    return KVCapacity(
        num_gpu_blocks=available // page_bytes,
        block_size=block_size,
        kv_bytes_per_token=kv_bytes_per_token,
        total_memory_bytes=hbm_bytes * tp,
        budget_bytes=budget,
        weight_bytes=weight_bytes,
        activation_reserve_bytes=activation_reserve_bytes,
        kv_cache_bytes=available,
    )


def activation_reserve_bytes(hidden_size: int, intermediate_size: int,
                             vocab_size: int, max_num_batched_tokens: int,
                             tensor_parallel_size: int, dtype_bytes: int = 2,
                             max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> int:
    """Analytic ESTIMATE of vLLM's profiled activation peak, all TP GPUs.

    vLLM measures this (``profile_run``: a dummy forward of
    ``max_num_batched_tokens`` tokens T, then a dummy sampler run on the last
    hidden state of ``R = min(max_num_seqs, T)`` requests). We count the
    tensors alive at the two peaks instead; per GPU, with h = hidden_size,
    I = intermediate_size, V = vocab_size:

    * forward peak, inside one decoder layer's gated MLP (layers run one at a
      time, so only one layer's temporaries are alive): residual stream and
      normed input ``2 * T * h`` (replicated on every TP rank) plus gate_up
      output ``2 * T * I / TP`` plus the activation output ``T * I / TP``, in
      the model dtype: ``T * (2h + 3I / TP) * dtype_bytes``. Attention
      temporaries (QKV, output) are smaller than the MLP's for dense models,
      and FlashAttention keeps no T x T matrix.
    * sampler peak: final hidden ``T * h * dtype_bytes`` plus logits of the R
      sampled rows, gathered to the full vocab in the model dtype and then
      in fp32 twice (logits cast + softmax probs): ``R * V * (dtype_bytes + 8)``.

    Per-GPU peak = max of the two; the result is that times TP. It leaves out
    non-torch memory (CUDA context, NCCL) and CUDA graphs, and allocator
    fragmentation, so it is a lower-side estimate of vLLM's reserve.

    Returns:
        bytes, summed over the ``tensor_parallel_size`` GPUs.
    """
    t, tp = max_num_batched_tokens, tensor_parallel_size
    rows = min(max_num_seqs, t)
    forward = t * (2 * hidden_size * tp + 3 * intermediate_size) * dtype_bytes // tp
    sampler = (t * hidden_size * dtype_bytes
               + rows * vocab_size * (dtype_bytes + 2 * FP32_BYTES))
    return tp * max(forward, sampler)
