"""``trtllm-bench``'s engine settings chosen from the dataset, as data and one rule.

``trtllm-bench throughput`` (PyTorch backend) picks ``max_batch_size`` and
``max_num_tokens`` itself when the command gives neither: from the model, its weight and
KV formats, the GPUs and the dataset's mean prompt and output lengths. A preset's
``dataset_tuning:`` holds the rule's constants (:class:`DatasetTuning`);
:func:`bench_batch_limits` is the rule; ``capsim.scenario.bench_settings`` feeds it the
scenario's workload and applies the result.

The rule (TensorRT-LLM, read and paraphrased, no code copied):

- ``tensorrt_llm/bench/build/tuning.py`` ``calc_engine_setting`` at
  04cba882084a25665e7f80f5bda71b35b9790b6f (the version beside ``build.py`` of 1.0.0rc4,
  000a01de66f0eab4ab05640711f0253f50f5209c; the dense-model arithmetic is the same in the
  earlier stored versions): KV bytes per token = 2 × layers × max(TP, KV heads) × head
  size × KV element bytes; the weights = parameters × weight element bytes; the KV memory
  = ``kv_cache_free_gpu_mem_fraction`` × (device memory × TP × PP − the weights); the
  requests that fit = that ÷ (bytes per token × (mean ISL + mean OSL));
- ``finetune_setting`` (same file): batch = min(requests, ``max_batch_size_cap``) ÷ PP;
  tokens = min(batch × (1 + ISL ÷ OSL), ``max_num_tokens_cap``); each rounded up to a
  multiple that grows with it, with a floor (:class:`Rounding`);
- ``tensorrt_llm/bench/build/build.py`` ``get_benchmark_engine_settings`` at 000a01de: the
  rule runs for the tuned weight formats only (``TUNED_QUANTS``); any other format gets
  ``BuildConfig``'s defaults (``untuned``);
- ``tensorrt_llm/bench/build/utils.py`` ``get_device_memory`` at 7ed07f06: the device's
  total memory in GiB (NVML). capsim uses the GPU profile's ``memory_total_gib`` (the
  engines' view; NVML reports about 0.5 GiB more on an H100 SXM), which moves the result
  only across a rounding step.

Public API:
    Rounding, UntunedDefaults, DatasetTuning
    bench_batch_limits(tuning, model, ...) -> (max_batch_size, max_num_tokens)
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from capsim.common.schema import Bool, Int, StrictModel
from capsim.profiles.models import ModelShape
from capsim.profiles.quantization import quant_format_names

GIB = 2**30

#: ``weight_bytes_per_param`` key of 16-bit weights (no quantization format).
UNQUANTIZED = "none"


class Rounding(StrictModel):
    """Below ``below`` (None: any value), round up to a multiple of ``multiple``."""

    below: Int | None = Field(None, gt=0)
    multiple: Int = Field(gt=0)


class UntunedDefaults(StrictModel):
    """What a weight format the rule does not tune gets (``BuildConfig`` defaults)."""

    max_batch_size: Int = Field(gt=0)
    max_num_tokens: Int = Field(gt=0)


class DatasetTuning(StrictModel):
    """The constants of trtllm-bench's settings rule (the module docstring has the rule).

    ``weight_bytes_per_param``: bytes per parameter of each weight format the rule tunes
    (capsim's format names; ``none`` = 16-bit weights); a format not listed gets
    ``untuned``. ``batch_steps`` / ``token_steps``: the rounding of the batch size and the
    token budget, first matching step wins; ``min_batch_size`` / ``min_num_tokens`` their
    floors. ``unchunked_floor``: without chunked context the token budget is raised to the
    dataset's longest prompt + the batch size (one whole prompt beside a full batch of
    decodes), as ``get_settings`` does from TensorRT-LLM PR 4133 on.
    """

    rule: Literal["trtllm_bench"]
    weight_bytes_per_param: dict[str, float] = Field(min_length=1)
    untuned: UntunedDefaults
    max_batch_size_cap: Int = Field(gt=0)
    max_num_tokens_cap: Int = Field(gt=0)
    batch_steps: list[Rounding] = Field(min_length=1)
    min_batch_size: Int = Field(gt=0)
    token_steps: list[Rounding] = Field(min_length=1)
    min_num_tokens: Int = Field(gt=0)
    unchunked_floor: Bool

    @model_validator(mode="after")
    def _known_formats_and_open_steps(self) -> "DatasetTuning":
        valid = [UNQUANTIZED, *quant_format_names()[1:]]
        unknown = sorted(set(self.weight_bytes_per_param) - set(valid))
        if unknown:
            raise ValueError(f"weight_bytes_per_param: unknown weight format(s) "
                             f"{', '.join(unknown)}; valid: {', '.join(valid)}")
        for name in ("batch_steps", "token_steps"):
            if getattr(self, name)[-1].below is not None:
                raise ValueError(f"the last entry of {name} must have no 'below' (it rounds "
                                 "every larger value)")
        return self


def _rounded_up(value: float, steps: list[Rounding], floor: int) -> int:
    step = next(s for s in steps if s.below is None or value < s.below)
    return max(floor, step.multiple * math.ceil(value / step.multiple))


def bench_batch_limits(tuning: DatasetTuning, model: ModelShape, weight_format: str | None,
                       kv_dtype_bytes: int, memory_total_bytes: int, tensor_parallel_size: int,
                       pipeline_parallel_size: int, kv_fraction: float, mean_isl: int,
                       mean_osl: int) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench picks before the unchunked floor.

    Args:
        weight_format: capsim's weight format (``EngineConfig.weight_format``; None for
            16-bit weights).
        kv_dtype_bytes: bytes per KV element.
        memory_total_bytes: one GPU's memory, bytes.
        kv_fraction: ``kv_cache_free_gpu_mem_fraction`` (the engine's
            ``free_gpu_memory_fraction``).
        mean_isl, mean_osl: the dataset's mean prompt and output lengths, tokens (rounded
            up, as trtllm-bench's dataset metadata).

    Raises:
        ValueError: the weights fill the GPUs, or not one request of mean length fits the
            KV memory (trtllm-bench refuses to run).
    """
    key = weight_format or UNQUANTIZED
    if key not in tuning.weight_bytes_per_param:
        return tuning.untuned.max_batch_size, tuning.untuned.max_num_tokens
    gpus = tensor_parallel_size * pipeline_parallel_size
    kv_heads = max(tensor_parallel_size, model.num_key_value_heads)
    per_token_gib = (2 * model.num_hidden_layers * kv_heads * model.head_dim
                     * kv_dtype_bytes / GIB)
    weights_gib = model.params_total * tuning.weight_bytes_per_param[key] / GIB
    total_gib = memory_total_bytes / GIB * gpus
    if total_gib < weights_gib:
        raise ValueError(f"the weights ({weights_gib:,.2f} GiB by trtllm-bench's estimate) "
                         f"exceed the {gpus} GPUs' {total_gib:,.2f} GiB")
    requests = (kv_fraction * (total_gib - weights_gib)
                / (per_token_gib * (mean_isl + mean_osl)))
    if requests < 1:
        raise ValueError(f"not one request of {mean_isl} + {mean_osl} tokens fits the KV "
                         f"memory by trtllm-bench's estimate ({requests:.2f})")
    batch = min(requests, tuning.max_batch_size_cap) / pipeline_parallel_size
    tokens = min(batch * (1 + mean_isl / mean_osl), tuning.max_num_tokens_cap)
    return (_rounded_up(batch, tuning.batch_steps, tuning.min_batch_size),
            _rounded_up(tokens, tuning.token_steps, tuning.min_num_tokens))
