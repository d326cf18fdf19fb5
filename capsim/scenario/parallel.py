"""The parallel sizes a scenario gives (vLLM ``--tensor-parallel-size``,
``--pipeline-parallel-size``): integers >= 1, a size below 1 refused saying what it counts."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, Strict


def _at_least_one(name: str, meaning: str):
    def check(value: Any) -> Any:
        # Before the type check, so a non-integer still reads "expected an integer".
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(f"{name} must be >= 1 ({meaning}), got {value}")
        return value
    return BeforeValidator(check)


TensorParallelSize = Annotated[int, Strict(), Field(gt=0), _at_least_one(
    "tensor_parallel_size", "the GPUs each layer is split over; 1: no tensor parallelism")]
"""GPUs per replica (per pipeline stage with pipeline parallelism)."""

PipelineParallelSize = Annotated[int, Strict(), Field(gt=0), _at_least_one(
    "pipeline_parallel_size", "the stages the layers are split over, of tensor_parallel_size "
    "GPUs each; 1: no pipeline parallelism")]
"""Pipeline stages per replica."""
