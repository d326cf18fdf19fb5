"""Schema of a heterogeneous / multi-model fleet: ``cluster.pools`` behind one router and
``cluster.route`` rules.

::

    cluster:
      router: least_outstanding_tokens       # (default with pools) | round_robin | cost
      pools:
        - name: h100
          hardware: h100-sxm                 # default: the variant's
          model: llama-3.1-8b                # default: the variant's
          num_replicas: 2
          tensor_parallel_size: 1            # default: the variant's engine
          engine: {max_num_batched_tokens: 2048}   # over the variant's engine knobs
          # autoscaling: {...}, failures: {...}  (scenario/fleet.py), per pool
        - name: h200
          hardware: h200-sxm
          num_replicas: 1
      route:                                 # first matching rule wins
        - {class: rag, pool: h200}
        - {min_prompt_tokens: 4096, pool: h200}

A request asks for its class's ``model`` (``workload.classes[i].model``; default: the
variant's model) and is routed only to pools serving that model — as a gateway filters
its endpoints by the request's ``model`` before it scores them (the Gateway API
Inference Extension's one InferencePool per base model, which llm-d's scheduler builds
on; vLLM production-stack's router keeps the endpoints serving the requested model).
A matching ``route`` rule then narrows the choice to one pool (SGLang router's
``bucket`` policy routes by request length the same way); the ``router`` policy picks
among what is left. Each pool is resolved exactly like a co-located variant with the
pool's fields on top (:mod:`capsim.scenario.resolve_pools`), so every memory, TP and
engine rule applies per pool.
"""

from __future__ import annotations

from typing import ClassVar, Any, Optional

from pydantic import ConfigDict, Field, model_validator

from capsim.common.schema import Int, StrictModel
from capsim.scenario.fleet import MAX_REPLICAS, AutoscalingConfig, FailuresConfig
from capsim.scenario.parallel import TensorParallelSize

#: Most pools in one fleet (each adds a router candidate list and a result section).
MAX_POOLS = 16


class FleetPoolConfig(StrictModel):
    """One pool of identical replicas of a heterogeneous fleet."""

    # in error messages
    yaml_example: ClassVar[str] = "{name: h100, hardware: h100-sxm, num_replicas: 2}"

    name: str = Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="the pool's name (route rules, report sections)")
    num_replicas: Int = Field(default=1, gt=0, le=MAX_REPLICAS,
                              description="replicas serving at t = 0")
    hardware: Optional[str] = Field(default=None, description="GPU profile; default: the "
                                                              "variant's")
    model: Optional[str] = Field(default=None, description="model served; default: the "
                                                           "variant's")
    tensor_parallel_size: Optional[TensorParallelSize] = Field(
        default=None, description="GPUs per replica; default: the variant's engine")
    engine: dict[str, Any] = Field(default_factory=dict,
                                   description="engine knobs over the variant's (vLLM names)",
                                   examples=["{max_model_len: 8192, max_num_seqs: 64}"])
    hardware_overrides: dict[str, Any] = Field(default_factory=dict,
                                               examples=["{price_per_gpu_hour_usd: 2.5}"])
    autoscaling: Optional[AutoscalingConfig] = None
    failures: Optional[FailuresConfig] = None


class RouteRule(StrictModel):
    """Send the requests of ``class`` and/or with at least ``min_prompt_tokens`` prompt
    tokens to ``pool`` (both given: both must hold)."""

    yaml_example: ClassVar[str] = "{class: rag, pool: h200}"   # in error messages

    model_config = ConfigDict(populate_by_name=True)

    cls: Optional[str] = Field(default=None, alias="class", min_length=1,
                               description="a workload class name")
    min_prompt_tokens: Optional[Int] = Field(default=None, gt=0)
    pool: str = Field(min_length=1, description="a pool name of cluster.pools")

    @model_validator(mode="after")
    def _one_condition(self):
        if self.cls is None and self.min_prompt_tokens is None:
            raise ValueError("a route rule needs class: NAME and/or min_prompt_tokens: N "
                             "next to pool")
        return self


def check_pools(pools: list[FleetPoolConfig] | None) -> list[FleetPoolConfig] | None:
    """At least one and at most :data:`MAX_POOLS` pools (names are checked unique when the
    variant is resolved, where the error can name the repeated entry's path).

    Raises:
        ValueError: an empty list or too many pools.
    """
    if pools is None:
        return None
    if not pools:
        raise ValueError("give at least one pool, or leave pools out")
    if len(pools) > MAX_POOLS:
        raise ValueError(f"at most {MAX_POOLS} pools (got {len(pools)})")
    return pools
