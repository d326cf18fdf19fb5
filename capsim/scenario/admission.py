"""Schema of the router's request limits (load shedding at the gateway):
``cluster.router_rate_limit`` and ``cluster.router_max_queued_requests``.

.. code-block:: yaml

    cluster:
      router_max_queued_requests: 64          # requests waiting behind the router, at most
      router_rate_limit: {rate_per_s: 20, burst: 40}

A request over a limit is rejected at once (the gateway's HTTP 429), with a reason that
starts ``queue_full:`` or ``rate_limited:``. The engines' own limits are engine knobs
(``engine.max_waiting_requests``, ``engine.max_inflight_requests``:
:class:`~capsim.scenario.schema.EngineConfig`); the simulation is
:mod:`capsim.engine.router` (the router's) and :meth:`capsim.engine.replica.Replica.refusal`
(a replica's).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from capsim.common.schema import Int, StrictModel


class RateLimitConfig(StrictModel):
    """A token bucket in front of the router, as gateways rate-limit: it holds at most
    ``burst`` tokens (full at t = 0) and gains ``rate_per_s`` per second; each arriving
    request takes one, and one that finds less than a whole token is rejected
    (``rate_limited``). Over any T seconds at most ``burst + rate_per_s × T`` requests
    pass.

    Envoy's ``type.v3.TokenBucket`` (``max_tokens`` = ``burst``, also the initial content;
    ``tokens_per_fill`` / ``fill_interval`` = ``rate_per_s``, refilled continuously here;
    the local rate-limit filter answers 429) and NGINX's ``limit_req rate=R burst=B
    nodelay`` (a bucket of B + 1; 503 unless ``limit_req_status 429``) are this bucket.
    """

    # in error messages
    yaml_example: ClassVar[str] = "{rate_per_s: 20, burst: 40}"

    rate_per_s: float = Field(gt=0, description="tokens (requests) added per second")
    burst: Int = Field(gt=0, description="the most tokens the bucket holds (requests that "
                                         "may arrive at once)")
