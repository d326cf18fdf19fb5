"""Short labels shared by the terminal, the report and ``capsim validate``."""

from __future__ import annotations


def parallel_label(tensor_parallel_size: int, pipeline_parallel_size: int = 1) -> str:
    """A replica's GPU shape: ``TP2``, or ``TP2 × PP2`` with pipeline stages (vLLM's
    ``tensor_parallel_size`` × ``pipeline_parallel_size`` GPUs)."""
    tp = f"TP{tensor_parallel_size}"
    return f"{tp} × PP{pipeline_parallel_size}" if pipeline_parallel_size > 1 else tp
