"""Schema of a fleet that changes over the run: ``cluster.autoscaling`` (and its
provisioning delay).

::

    cluster:
      num_replicas: 2                  # replicas serving at t = 0
      router: least_outstanding_tokens
      autoscaling:
        signal: running                # queue | running | kv_use | schedule
        target: 48                     # per replica: running sequences
        min_replicas: 1
        max_replicas: 8
        interval_s: 15
        scale_down_cooldown_s: 300
        provisioning: {storage_bandwidth_bytes_per_s: 1.0e9}   # or {delay_s: 90}

The policy is Kubernetes' Horizontal Pod Autoscaler's (kubernetes.io/docs/tasks/
run-application/horizontal-pod-autoscale, "Algorithm details"): every ``interval_s``
(HPA's ``--horizontal-pod-autoscaler-sync-period``, default 15 s) the desired count is
``ceil(Σ signal over serving replicas / target)``, left unchanged when the ratio of the
mean to ``target`` is within ``tolerance`` of 1 (HPA's default 0.1); a scale-down takes
the highest recommendation of the last ``scale_down_cooldown_s`` (HPA's downscale
stabilization window, default 300 s), a scale-up acts at once. Signals are vLLM's
metrics: ``queue`` = ``vllm:num_requests_waiting``, ``running`` =
``vllm:num_requests_running``, ``kv_use`` = ``vllm:kv_cache_usage_perc`` as a fraction,
read off the serving (ready) replicas only, as HPA reads pod metrics: while none serves
there is no recommendation; ``schedule`` takes the count from ``replicas`` per ``step_s``
instead.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from capsim.common.schema import MAX_SECONDS, Int, StrictModel

#: Most replicas one run simulates: each holds its own KV pool in memory (an 8B model on an
#: H100 costs ~1.6 MB of block tables per replica: 10,000 replicas took 15.9 GB), and 1,024
#: replicas of 8 GPUs are already a 8,192-GPU fleet.
MAX_REPLICAS = 1024


class Provisioning(StrictModel):
    """Overrides of the startup profile (``capsim/profiles/data/startup/``): any term,
    or the whole delay with ``delay_s``."""

    profile: str = Field(default="vllm-v1", min_length=1)
    delay_s: Optional[float] = Field(default=None, ge=0, le=MAX_SECONDS,
                                     description="the whole delay, s")
    storage_bandwidth_bytes_per_s: Optional[float] = Field(default=None, gt=0)
    process_start_s: Optional[float] = Field(default=None, ge=0, le=MAX_SECONDS)
    engine_init_s: Optional[float] = Field(default=None, ge=0, le=MAX_SECONDS)
    cuda_graph_capture_s: Optional[float] = Field(default=None, ge=0, le=MAX_SECONDS)
    node_provision_s: Optional[float] = Field(default=None, ge=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _whole_or_terms(self):
        terms = [k for k in ("storage_bandwidth_bytes_per_s", "process_start_s", "engine_init_s",
                             "cuda_graph_capture_s", "node_provision_s")
                 if getattr(self, k) is not None]
        if self.delay_s is not None and terms:
            raise ValueError(f"delay_s replaces the whole delay; remove {', '.join(terms)} or "
                             "delay_s")
        return self


class ReplicaSchedule(StrictModel):
    """``replicas[k]`` over ``[k·step_s, (k+1)·step_s)``, repeating."""

    yaml_example: ClassVar[str] = "{step_s: 3600, replicas: [1, 1, 2, 3]}"   # in error messages

    step_s: float = Field(default=3600.0, gt=0, le=MAX_SECONDS)
    replicas: list[Int] = Field(min_length=1)


SIGNALS = ("queue", "running", "kv_use", "schedule")


class AutoscalingConfig(StrictModel):
    """An HPA-style autoscaler over one pool of identical replicas."""

    # in error messages
    yaml_example: ClassVar[str] = "{signal: running, target: 12, min_replicas: 1, max_replicas: 4}"

    signal: Literal["queue", "running", "kv_use", "schedule"]
    target: Optional[float] = Field(
        default=None, gt=0, description="per replica: waiting requests, running sequences "
                                        "or KV fraction (kv_use, <= 1)")
    min_replicas: Int = Field(default=1, ge=1)
    max_replicas: Int = Field(ge=1, le=MAX_REPLICAS)
    interval_s: float = Field(default=15.0, gt=0, le=MAX_SECONDS)
    scale_down_cooldown_s: float = Field(default=300.0, ge=0, le=MAX_SECONDS)
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    schedule: Optional[ReplicaSchedule] = None
    provisioning: Provisioning = Field(default_factory=Provisioning)

    @model_validator(mode="after")
    def _check(self):
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must be <= max_replicas "
                             f"({self.max_replicas})")
        if self.signal == "schedule":
            if self.schedule is None:
                raise ValueError("signal: schedule needs schedule: {step_s, replicas: [...]}")
            if self.target is not None:
                raise ValueError("signal: schedule takes no target; remove target")
            bad = [n for n in self.schedule.replicas
                   if not self.min_replicas <= n <= self.max_replicas]
            if bad:
                raise ValueError(f"schedule.replicas must lie in [min_replicas, max_replicas] = "
                                 f"[{self.min_replicas}, {self.max_replicas}] (got {bad[0]})")
            return self
        if self.schedule is not None:
            raise ValueError(f"schedule applies to signal: schedule (got signal: "
                             f"{self.signal}); remove it")
        if self.target is None:
            raise ValueError(f"signal: {self.signal} needs target (per replica)")
        if self.signal == "kv_use" and self.target > 1:
            raise ValueError(f"target for kv_use is a fraction of the KV cache, <= 1 "
                             f"(got {self.target:g})")
        return self


class FailureAt(StrictModel):
    """One replica failure at a given time."""

    yaml_example: ClassVar[str] = "{replica: 0, at_s: 72000, repair_s: 1800}"   # in error messages

    replica: Int = Field(ge=0, description="the replica's index")
    at_s: float = Field(ge=0, le=MAX_SECONDS, description="when it fails, s")
    repair_s: float = Field(gt=0, le=MAX_SECONDS, description="how long until it serves again, s")


class FailuresConfig(StrictModel):
    """Replica failures: at given times (``at``) and/or drawn from ``mtbf_s`` / ``mttr_s``
    (exponential times to failure and to repair, from the run's seed).

    ``in_flight``: what happens to the requests queued and running on a failed replica —
    ``retry`` sends them again through the router (their prefill is redone elsewhere,
    tokens already streamed are streamed again; a retried request's TTFT counts from its
    first arrival), ``fail`` counts them as failed (not finished, with the reason).
    """

    # in error messages
    yaml_example: ClassVar[str] = (
        "{at: [{replica: 0, at_s: 72000, repair_s: 1800}], in_flight: retry}")

    at: list[FailureAt] = Field(default_factory=list)
    mtbf_s: Optional[float] = Field(default=None, gt=0, le=MAX_SECONDS,
                                    description="mean time between failures per replica, s")
    mttr_s: Optional[float] = Field(default=None, gt=0, le=MAX_SECONDS,
                                    description="mean time to repair, s")
    in_flight: Literal["retry", "fail"] = "retry"

    @model_validator(mode="after")
    def _check(self):
        if (self.mtbf_s is None) != (self.mttr_s is None):
            raise ValueError("give mtbf_s and mttr_s together (random failures need both)")
        if not self.at and self.mtbf_s is None:
            raise ValueError("give at: [{replica, at_s, repair_s}, ...] or mtbf_s + mttr_s")
        return self
