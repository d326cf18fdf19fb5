"""The batch limits a benchmark front end picks from its dataset, applied to a variant's engine.

A preset with ``dataset_tuning:`` (``trtllm-bench``) models a benchmark command that
chooses ``max_batch_size`` / ``max_num_tokens`` (capsim's ``max_num_seqs`` /
``max_num_batched_tokens``) and ``max_seq_len`` (``max_model_len``) from the dataset it
is given. TensorRT-LLM 1.0's ``trtllm-bench throughput`` (read, paraphrased; no code
copied):

- ``tensorrt_llm/bench/benchmark/utils/general.py`` ``get_settings`` at
  0171265edef1c67ef334e0db2427148161aa2815: both given → used as they are; else the rule
  of :func:`capsim.profiles.bench_tuning.bench_batch_limits` over the dataset's mean ISL
  and OSL and ``--kv_cache_free_gpu_mem_fraction``; then, without chunked prefill, the
  token budget is raised to the longest prompt + the batch size;
- ``tensorrt_llm/bench/benchmark/throughput.py`` at
  000a01de66f0eab4ab05640711f0253f50f5209c (1.0.0rc4): a ``--max_batch_size`` or
  ``--max_num_tokens`` given alone replaces its half of the result; ``max_seq_len`` is the
  dataset's longest prompt + output unless given;
- ``tensorrt_llm/bench/utils/data.py`` ``create_dataset_from_stream``: the mean ISL and OSL
  rounded up, the longest prompt, the longest prompt + output.

capsim reads the dataset's lengths off the workload's classes (:func:`dataset_lengths`):
the stated mean of each length distribution (clipped to its bounds; clipping a normal or
log-normal moves the sample mean a little), its bound as the longest, a shared prefix
added at its share, classes weighted by ``weight``. A trace, ``empirical`` lengths or
conversations state no such figures: the scenario then gives both knobs.

Public API:
    DatasetLengths, dataset_lengths(workload) -> DatasetLengths | None
    tuned_knobs(preset, engine, model, hw, workload, user, path, at) -> dict
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capsim.common.errors import ScenarioError
from capsim.profiles.bench_tuning import bench_batch_limits
from capsim.profiles.engines import EnginePreset
from capsim.profiles.hardware import HardwareProfile
from capsim.profiles.models import ModelShape
from capsim.scenario.schema import EngineConfig
from capsim.scenario.workload import FixedDist, RequestClass, UniformDist, WorkloadConfig

#: The knobs trtllm-bench derives, in capsim's names (its --max_batch_size, --max_num_tokens).
BATCH_KNOBS = ("max_num_seqs", "max_num_batched_tokens")


@dataclass(frozen=True)
class DatasetLengths:
    """A dataset's length figures as trtllm-bench's metadata holds them, tokens."""

    mean_isl: int
    mean_osl: int
    max_isl: int
    max_seq_len: int


def _mean_and_max(dist: Any) -> tuple[float, int] | None:
    """A length distribution's mean and largest value (None for ``empirical``)."""
    if isinstance(dist, FixedDist):
        return float(dist.value), dist.value
    if isinstance(dist, UniformDist):
        return (dist.min + dist.max) / 2, dist.max
    if hasattr(dist, "mean"):                     # normal, lognormal: clipped to [min, max]
        return min(max(dist.mean, dist.min), dist.max), dist.max
    return None


def _class_lengths(c: RequestClass) -> tuple[float, float, int, int] | None:
    """(mean ISL, mean OSL, longest prompt, longest prompt + output) of one class."""
    prompt, output = _mean_and_max(c.prompt_tokens), _mean_and_max(c.output_tokens)
    if prompt is None or output is None or c.conversation is not None:
        return None
    prefix_mean = c.shared_prefix.fraction * c.shared_prefix.tokens if c.shared_prefix else 0
    prefix_max = c.shared_prefix.tokens if c.shared_prefix else 0
    return (prompt[0] + prefix_mean, output[0], prompt[1] + prefix_max,
            prompt[1] + prefix_max + output[1])


def dataset_lengths(workload: WorkloadConfig) -> DatasetLengths | None:
    """The workload's mean and longest lengths (classes weighted by ``weight``), or None
    when it does not state them (a trace, ``empirical`` lengths, conversations)."""
    if workload.classes is None:
        return None
    rows = [(c.weight, _class_lengths(c)) for c in workload.classes]
    if any(r is None for _, r in rows):
        return None
    total = sum(w for w, _ in rows)
    return DatasetLengths(
        mean_isl=math.ceil(sum(w * r[0] for w, r in rows) / total),
        mean_osl=math.ceil(sum(w * r[1] for w, r in rows) / total),
        max_isl=max(r[2] for _, r in rows), max_seq_len=max(r[3] for _, r in rows))


def tuned_knobs(preset: EnginePreset, engine: EngineConfig, model: ModelShape,
                hw: HardwareProfile, workload: WorkloadConfig, user: set[str], path: Path,
                at: str) -> dict[str, int]:
    """The engine knobs ``preset``'s ``dataset_tuning`` sets on ``engine`` (the merged
    knobs; ``user``: those the scenario gave, which stay): ``max_num_seqs``,
    ``max_num_batched_tokens`` and ``max_model_len`` as trtllm-bench would pick them for
    this workload; {} for a preset without it.

    Raises:
        ScenarioError: at ``at`` (the field naming the preset) when the workload states no
            lengths and the scenario did not give both batch knobs, or when trtllm-bench's
            estimate finds the GPUs too small.
    """
    tuning = preset.dataset_tuning
    if tuning is None:
        return {}
    lengths = dataset_lengths(workload)
    out: dict[str, int] = {}
    if lengths is not None and "max_model_len" not in user:
        out["max_model_len"] = min(lengths.max_seq_len, model.max_position_embeddings)
    if all(k in user for k in BATCH_KNOBS):
        return out
    if lengths is None:
        raise ScenarioError(
            f"preset {preset.name} picks max_num_seqs and max_num_batched_tokens from the "
            "dataset's mean and longest lengths, which this workload does not state (a "
            "trace, empirical lengths or conversations): give engine.max_num_seqs and "
            "engine.max_num_batched_tokens (trtllm-bench's --max_batch_size and "
            "--max_num_tokens)", file=str(path), path=at)
    try:
        batch, tokens = bench_batch_limits(
            tuning, model, engine.weight_format, engine.kv_dtype_bytes, hw.memory_total_bytes,
            engine.tensor_parallel_size, engine.pipeline_parallel_size,
            getattr(engine, preset.memory.fraction_knob), lengths.mean_isl, lengths.mean_osl)
    except ValueError as exc:
        raise ScenarioError(f"trtllm-bench would not start: {exc} (preset {preset.name})",
                            file=str(path), path=at) from None
    if tuning.unchunked_floor and not engine.chunked:
        tokens = max(tokens, lengths.max_isl + batch)
    out.update({k: v for k, v in zip(BATCH_KNOBS, (batch, tokens)) if k not in user})
    return out
