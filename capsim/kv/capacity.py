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

The memory terms are per GPU (:class:`~capsim.kv.memory.MemoryTerms`, computed by
each engine's rule in :mod:`capsim.kv.memory`); ``kv_bytes_per_token`` is summed
over the replica's KV-head shards, so a block of one GPU holds ``block_size ×
kv_bytes_per_token ÷ TP`` bytes and every GPU of the group has the same number of
blocks. :func:`kv_capacity` is the same arithmetic from replica totals (the seed
documents' hand calculations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from capsim.common.errors import ScenarioError
from capsim.kv.blocks import blocks_needed
from capsim.kv.memory import MemoryTerms

GIB = 2**30


@dataclass(frozen=True)
class KVCapacity:
    """KV cache capacity of one replica.

    Attributes:
        num_gpu_blocks: blocks in the pool (identical on every TP GPU).
        block_size: tokens per block.
        kv_bytes_per_token: KV bytes of one token, all layers, all TP shards.
        tensor_parallel_size: GPUs in the replica.
        memory: the start-up memory of one GPU, term by term.

    The ``*_bytes`` properties are the replica's totals (per-GPU term × TP).
    """

    num_gpu_blocks: int
    block_size: int
    kv_bytes_per_token: int
    tensor_parallel_size: int
    memory: MemoryTerms

    @property
    def num_tokens(self) -> int:
        """Token slots in the pool: ``num_gpu_blocks * block_size``."""
        return self.num_gpu_blocks * self.block_size

    @property
    def total_memory_bytes(self) -> int:
        return self.memory.total_bytes * self.tensor_parallel_size

    @property
    def budget_bytes(self) -> int:
        return self.memory.budget_bytes * self.tensor_parallel_size

    @property
    def weight_bytes(self) -> int:
        return self.memory.weight_bytes * self.tensor_parallel_size

    @property
    def kv_cache_bytes(self) -> int:
        """vLLM's "Available KV cache memory" × TP. The pool uses ``num_tokens ×
        kv_bytes_per_token`` of it (the rest is less than one block)."""
        return self.memory.available_kv_bytes * self.tensor_parallel_size

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


def pool_from_terms(memory: MemoryTerms, *, tensor_parallel_size: int, kv_bytes_per_token: int,
                    block_size: int) -> KVCapacity:
    """Blocks of ``block_size`` tokens in one GPU's available KV memory (module
    docstring, step 4).

    Raises:
        ScenarioError: less than one block is left (the message gives the terms). The
            caller adds the YAML path with ``ScenarioError.with_context``.
    """
    page_bytes = block_size * kv_bytes_per_token // tensor_parallel_size
    if memory.available_kv_bytes < page_bytes:
        raise ScenarioError(
            f"{memory.fraction:g} × {_gib(memory.total_bytes)} per GPU = "
            f"{_gib(memory.budget_bytes)} minus weights {_gib(memory.weight_bytes)}, "
            f"activation peak {_gib(memory.activation_peak_bytes)} and other non-KV memory "
            f"{_gib(memory.non_torch_bytes + memory.cudagraph_bytes)} leaves "
            f"{_gib(memory.available_kv_bytes)} for the KV cache, less than one block of "
            f"{block_size} tokens ({page_bytes:,} bytes); raise the memory fraction or "
            "tensor_parallel_size, or lower max_num_batched_tokens / max_num_seqs")
    return KVCapacity(num_gpu_blocks=memory.available_kv_bytes // page_bytes,
                      block_size=block_size, kv_bytes_per_token=kv_bytes_per_token,
                      tensor_parallel_size=tensor_parallel_size, memory=memory)


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
    """vLLM v1's KV arithmetic from replica totals (the seeds' hand calculations).

    Args:
        hbm_bytes: device memory of ONE GPU, bytes (torch's total_memory).
        tensor_parallel_size: GPUs in the replica.
        gpu_memory_utilization: fraction of each GPU vLLM may use, (0, 1].
        weight_bytes: whole-model weight bytes (split evenly over TP).
        kv_bytes_per_token: KV bytes per token summed over all TP shards
            (if TP > num_kv_heads, vLLM replicates heads: pass TP x per-GPU).
        block_size: tokens per block.
        activation_reserve_bytes: peak activations of all GPUs.
        non_torch_bytes: non-torch memory of all GPUs (CUDA context, NCCL).
        cudagraph_bytes: CUDA-graph pool of all GPUs.

    Returns:
        KVCapacity with ``num_gpu_blocks = (ceil(util × HBM) − (weights + reserve +
        non-torch + graphs) ÷ TP) // (block_size × kv_bytes_per_token ÷ TP)``, vLLM's
        per-GPU ``available // page_size // num_layers``.

    Raises:
        ScenarioError: inputs out of range; weights do not fit in the budget; or
            what is left holds less than one block.
    """
    _check_inputs(hbm_bytes, tensor_parallel_size, gpu_memory_utilization,
                  kv_bytes_per_token, block_size)
    tp = tensor_parallel_size
    budget = math.ceil(hbm_bytes * gpu_memory_utilization)
    if weight_bytes >= tp * budget:
        raise ScenarioError(
            f"model weights {_gib(weight_bytes)} do not fit in "
            f"gpu_memory_utilization × HBM × TP = {gpu_memory_utilization} × "
            f"{_gib(hbm_bytes)} × {tp} = {_gib(tp * budget)}; raise "
            f"gpu_memory_utilization or tensor_parallel_size, or use a larger GPU")
    terms = MemoryTerms(total_bytes=hbm_bytes, fraction=gpu_memory_utilization,
                        budget_bytes=budget, weight_bytes=weight_bytes // tp,
                        activation_peak_bytes=activation_reserve_bytes // tp,
                        non_torch_bytes=non_torch_bytes // tp,
                        cudagraph_bytes=cudagraph_bytes // tp,
                        available_kv_bytes=budget - (weight_bytes + activation_reserve_bytes
                                                     + non_torch_bytes + cudagraph_bytes) // tp)
    return pool_from_terms(terms, tensor_parallel_size=tp, kv_bytes_per_token=kv_bytes_per_token,
                           block_size=block_size)
