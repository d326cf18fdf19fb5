"""The ``disaggregation:`` section of a variant: prefill and decode pools and the KV link.

A disaggregated variant (DistServe, OSDI'24; Splitwise, ISCA'24) runs
prompts on a *prefill* pool and replies on a *decode* pool; each prompt's KV
cache crosses ``link`` in between::

    variants:
      - name: 1P1D
        disaggregation:
          prefill: {num_replicas: 1, tensor_parallel_size: 1,
                    engine: {max_num_batched_tokens: 8192}}
          decode:  {num_replicas: 1, hardware: h200-sxm}
          link: nvlink-4               # a name (capsim/profiles/data/links) or numbers:
          # link: {bandwidth_gbit_per_s: 400, latency_s: 3.0e-5}
          router: least_kv             # decode side: least_kv | round_robin
          layerwise_overlap: false

Each pool is resolved like a co-located variant
(:func:`capsim.scenario.resolve_colocated.resolve_colocated`). Arrivals reach the prefill
pool through the variant's ``cluster.router``.
"""

from __future__ import annotations

from typing import ClassVar, Any, Literal

from pydantic import Field, ValidationError, field_validator

from capsim.common.schema import Bool, Int, StrictModel, error_text
from capsim.profiles.links import LinkNumbers
from capsim.scenario.parallel import TensorParallelSize

ROLES = ("prefill", "decode")


class PoolConfig(StrictModel):
    """One pool of identical replicas (each a tensor-parallel engine)."""

    # in error messages
    yaml_example: ClassVar[str] = "{num_replicas: 1, engine: {max_num_batched_tokens: 8192}}"

    num_replicas: Int = Field(gt=0, description="replicas in the pool, >= 1")
    tensor_parallel_size: TensorParallelSize | None = Field(
        default=None, description="GPUs per replica; default: the variant's")
    hardware: str | None = Field(default=None, description="GPU profile; default: the variant's")
    engine: dict[str, Any] = Field(default_factory=dict,
                                   description="engine overrides for this pool (vLLM names)",
                                   examples=["{max_num_batched_tokens: 8192}"])


class DisaggregationConfig(StrictModel):
    """Prefill pool + decode pool + the link the KV cache crosses."""

    # in error messages
    yaml_example: ClassVar[str] = (
        "{prefill: {num_replicas: 1}, decode: {num_replicas: 3}, link: nvlink-4}")

    prefill: PoolConfig
    decode: PoolConfig
    link: str | LinkNumbers = Field(description="link name, or {bandwidth_gbit_per_s, latency_s}")
    router: Literal["least_kv", "round_robin"] = "least_kv"
    layerwise_overlap: Bool = False

    @field_validator("link", mode="before")
    @classmethod
    def _link(cls, value: Any) -> Any:
        if isinstance(value, dict):
            try:
                return LinkNumbers.model_validate(value)
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ValueError(f"{where + ': ' if where else ''}"
                                 f"{error_text(err, LinkNumbers)}") from None
        if not isinstance(value, str):
            raise ValueError("give a link name (e.g. infiniband-ndr) or "
                             "{bandwidth_gbit_per_s: ..., latency_s: ...}")
        return value

