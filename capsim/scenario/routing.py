"""Schema of the cache-aware routers' knobs: ``cluster.router_options``.

.. code-block:: yaml

    cluster:
      num_replicas: 4
      router: prefix_aware          # or kv_scorer, session_affinity
      router_options: {cache_threshold: 0.5, balance_abs_threshold: 32}

``prefix_aware`` is SGLang router's ``cache_aware`` policy, ``kv_scorer`` llm-d's
weighted scorers, ``session_affinity`` sticky routing by conversation; the simulation is
:mod:`capsim.engine.cache_router`. Every default below is the named router's own default,
cited where it is set.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from capsim.common.schema import Int, StrictModel

#: Routers that keep their own view of which prefixes they sent where (read the
#: ``router_options`` below).
CACHE_ROUTERS = ("prefix_aware", "kv_scorer")
#: Routers that need requests to carry a conversation id.
CONVERSATION_ROUTERS = ("session_affinity",)
#: Every router that picks a replica of one pool by what it holds (not ``cost``, which picks
#: among pools); engine/cache_router.py.
KV_ROUTERS = CACHE_ROUTERS + CONVERSATION_ROUTERS
#: The ``router_options`` each cache-aware router reads (engine/cache_router.py:
#: ``PrefixAwareRouter``, ``KVScorerRouter``); a key given to a router that ignores it is
#: refused rather than silently dropped.
OPTIONS_READ = {
    "prefix_aware": ("cache_threshold", "balance_abs_threshold", "balance_rel_threshold",
                     "max_tree_size_blocks"),
    "kv_scorer": ("scorer_weights", "prefix_match", "max_tree_size_blocks"),
}


class ScorerWeights(StrictModel):
    """Weights of llm-d's scorers (``kv_scorer``): each replica's score is Σ weight × scorer
    score, each scorer in [0, 1], and the highest total wins (llm-d's ``max-score-picker``).

    Defaults: llm-d-inference-scheduler ``config/charts/epplib/templates/_config.yaml`` at
    520af47896e5f06e43d09aca281a1149187b0ffd (``queue-scorer`` 2,
    ``kv-cache-utilization-scorer`` 2, ``prefix-cache-scorer`` 3)."""

    yaml_example: ClassVar[str] = "{queue: 2, kv_cache_utilization: 2, prefix_cache: 3}"

    queue: float = Field(default=2.0, ge=0, description="queue-scorer weight: (max − own "
                         "waiting) ÷ (max − min waiting), 1 when all are equal")
    kv_cache_utilization: float = Field(default=2.0, ge=0, description="kv-cache-utilization-"
                                        "scorer weight: 1 − the KV blocks in use ÷ all")
    prefix_cache: float = Field(default=3.0, ge=0, description="prefix-cache-scorer weight: "
                                "the prompt's blocks the router saw go there ÷ its blocks")

    @model_validator(mode="after")
    def _one_weight_counts(self):
        # All 0: every replica scores 0 and the tie goes to replica 0 every time.
        if not (self.queue or self.kv_cache_utilization or self.prefix_cache):
            raise ValueError("every weight is 0, so every replica would score 0 and the first "
                             "would take every request; give at least one weight > 0, e.g. "
                             f"{self.yaml_example}")
        return self


class RouterOptions(StrictModel):
    """The knobs of the cache-aware routers (``cluster.router: prefix_aware`` or
    ``kv_scorer``).

    SGLang router's ``CacheAwareConfig`` defaults (``sgl-router/src/policies/mod.rs`` at
    08fc57426c9d59569eef21a05bb1106bb2c92537; the rule is ``cache_aware.rs`` at
    026f853ba7ae08a457a2e127b85a26256a29e300): ``cache_threshold`` 0.5,
    ``balance_abs_threshold`` 32, ``balance_rel_threshold`` 1.1, ``max_tree_size`` 10000
    nodes (capsim's nodes are KV blocks: ``max_tree_size_blocks``)."""

    yaml_example: ClassVar[str] = ("{cache_threshold: 0.5, balance_abs_threshold: 32, "
                                   "balance_rel_threshold: 1.1}")

    cache_threshold: float = Field(
        default=0.5, ge=0, le=1, description="prefix_aware: above this share of the prompt's "
        "blocks matched, go to the replica holding the longest match; else to the replica "
        "the router has sent the fewest blocks")
    balance_abs_threshold: Int = Field(
        default=32, ge=0, description="prefix_aware: requests in flight; the fleet is "
        "imbalanced when the busiest replica has more than this many above the idlest")
    balance_rel_threshold: float = Field(
        default=1.1, ge=1, description="prefix_aware: ... and more than this many times "
        "the idlest's; then the idlest replica takes the request")
    max_tree_size_blocks: Int = Field(
        default=10000, gt=0, description="blocks the router remembers per replica, least "
        "recently sent forgotten first (SGLang's max_tree_size, llm-d's LRU capacity)")
    scorer_weights: ScorerWeights = Field(default_factory=ScorerWeights,
                                          description="kv_scorer: each scorer's weight")
    prefix_match: Literal["approximate", "precise"] = Field(
        default="approximate", description="kv_scorer: approximate (the router's own record "
        "of what it sent where, llm-d's prefix-cache-scorer) or precise (the blocks each "
        "replica's prefix cache holds now, llm-d's precise-prefix-cache-scorer)")


class SaturationConfig(StrictModel):
    """The gateway's saturation detector (``cluster.saturation``): while the pool is
    saturated, an arriving request of a ``sheddable`` class is dropped (rejected at once,
    ``shed``); ``critical`` and ``standard`` ones pass.

    The Gateway API Inference Extension's rule, as llm-d's router keeps it
    (llm-d-inference-scheduler at 520af47896e5f06e43d09aca281a1149187b0ffd,
    ``pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/``): each
    replica scores max(waiting ÷ ``queue_depth_threshold``, KV use ÷
    ``kv_cache_util_threshold``), the pool is saturated when the mean score over the
    serving replicas is >= 1 (no replica serving: saturated). Defaults: ``config.go``
    there (5 requests, 0.8)."""

    yaml_example: ClassVar[str] = "{queue_depth_threshold: 5, kv_cache_util_threshold: 0.8}"

    queue_depth_threshold: Int = Field(default=5, gt=0, description="waiting requests per "
                                       "replica at which it counts as saturated")
    kv_cache_util_threshold: float = Field(default=0.8, gt=0, le=1, description="KV cache "
                                           "use at which a replica counts as saturated")
