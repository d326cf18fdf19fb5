"""Routing arrived requests to replicas, and the limits in front of the router.

:func:`make_router` picks the replica for the next request. :class:`RouterGate` is the
gateway's load shedding before it (``cluster.router_rate_limit``,
``cluster.router_max_queued_requests``, :mod:`capsim.scenario.admission`): a request over
a limit is rejected at once, with a reason that starts ``rate_limited:`` or
``queue_full:`` (:data:`~capsim.results.model.RATE_LIMITED`,
:data:`~capsim.results.model.QUEUE_FULL`).
"""

from __future__ import annotations

import math
from collections import deque
from itertools import cycle
from typing import Callable, Sequence

from capsim.engine.cache_router import make_kv_router
from capsim.engine.replica import Replica
from capsim.engine.request import WAITING, Request
from capsim.results.model import QUEUE_FULL, RATE_LIMITED, SHED
from capsim.scenario.admission import RateLimitConfig
from capsim.scenario.routing import RouterOptions, SaturationConfig
from capsim.scenario.run_config import RunConfig

#: Tokens a bucket may lack and still pass a request: float rounding of the refill (ten
#: refills of 0.1 token sum to 0.9999999999999999), never a modelled quantity.
_ROUNDING_TOKENS = 1e-9


def make_router(policy: str, replicas: Sequence[Replica], options: RouterOptions | None = None,
                block_size: int = 1) -> Callable[[Request], Replica]:
    """A function returning the replica for the next request (given it).

    ``round_robin`` cycles through replicas; ``least_outstanding_tokens``
    picks the replica with the fewest prompt + output tokens still to serve
    (lowest index on ties), a load-aware policy like llm-d's / vLLM router's
    least-load routing; ``prefix_aware``, ``kv_scorer`` and ``session_affinity`` pick by
    what each replica holds (:mod:`capsim.engine.cache_router`, reading ``options`` and
    the replicas' KV ``block_size``, tokens).
    """
    if policy == "round_robin":
        order = cycle(replicas)
        return lambda req: next(order)
    if policy == "least_outstanding_tokens":
        return lambda req: min(replicas, key=lambda r: r.outstanding_tokens)
    pick = make_kv_router(policy, options, block_size).pick
    return lambda req: pick(req, replicas)


class TokenBucket:
    """A token bucket of ``burst`` tokens, full at t = 0, refilled at ``rate_per_s``
    (continuously; Envoy's ``TokenBucket`` refills ``tokens_per_fill`` per
    ``fill_interval``). Over any T seconds it passes at most ``burst + rate_per_s × T``
    requests."""

    __slots__ = ("rate_per_s", "burst", "tokens", "last_s")

    def __init__(self, rate_per_s: float, burst: int):
        self.rate_per_s, self.burst = rate_per_s, burst
        self.tokens, self.last_s = float(burst), 0.0

    def take(self, now_s: float) -> bool:
        """One token for a request arriving at ``now_s`` (s, never earlier than the last
        call): True if the bucket had it (it is taken), False if not (nothing taken)."""
        self.tokens = min(self.burst, self.tokens + (now_s - self.last_s) * self.rate_per_s)
        self.last_s = now_s
        if self.tokens < 1.0 - _ROUNDING_TOKENS:
            return False
        self.tokens = max(0.0, self.tokens - 1.0)
        return True


class RouterGate:
    """The router's limits, checked as each request arrives (before the engine's server
    path): the token bucket first (a gateway rate-limits before anything else), then the
    requests waiting behind the router.

    Args:
        rate_limit: ``cluster.router_rate_limit`` (None: no bucket).
        max_queued: ``cluster.router_max_queued_requests`` (None: no limit): an arrival that
            finds this many requests waiting is rejected. Waiting: in a serving replica's
            queue (:attr:`Replica.num_waiting`), held at the router while none serves, or
            passed by the router less than ``before_s`` ago and not at a replica yet (on its
            way through the engine's server path).
        before_s: the longest server path of the run's engines (``request_before_s``), s.
    """

    def __init__(self, rate_limit: RateLimitConfig | None, max_queued: int | None,
                 before_s: float = 0.0, saturation: SaturationConfig | None = None,
                 sheddable: Sequence[bool] = ()):
        self.bucket = (TokenBucket(rate_limit.rate_per_s, rate_limit.burst)
                       if rate_limit is not None else None)
        self.max_queued, self.before_s = max_queued, before_s
        self._on_the_way: deque[tuple[float, Request]] = deque()   # (passed at s, request)
        self.saturation = saturation if any(sheddable) else None
        self.sheddable = tuple(sheddable)

    def refusal(self, now_s: float, serving: Sequence[Replica], held: int,
                class_id: int = 0) -> str:
        """Why a request of class ``class_id`` arriving at ``now_s`` is turned away ("" if
        it passes; it then took a token). ``serving``: the replicas taking requests;
        ``held``: requests held at the router."""
        sat = self.saturation
        if sat is not None and self.sheddable[class_id]:
            level = pool_saturation(serving, sat)
            if level >= 1.0:
                return (f"{SHED}: a sheddable request while the pool is saturated "
                        f"({level:.2f}; cluster.saturation)")
        bucket = self.bucket
        if bucket is not None and not bucket.take(now_s):
            return (f"{RATE_LIMITED}: the router's token bucket is empty "
                    f"(cluster.router_rate_limit: {bucket.rate_per_s:g}/s, burst {bucket.burst})")
        limit = self.max_queued
        if limit is not None:
            waiting = held + sum(rep.num_waiting for rep in serving) + self._in_server_path(now_s)
            if waiting >= limit:
                return (f"{QUEUE_FULL}: {waiting} requests wait behind the router "
                        f"(cluster.router_max_queued_requests {limit})")
        return ""

    def passed(self, now_s: float, req: Request) -> None:
        """``req``, which passed at ``now_s``, went on to the cluster (unless it was
        rejected there at once): it waits in the server path until it reaches a replica."""
        if self.max_queued is not None and self.before_s > 0 and req.state == WAITING:
            self._on_the_way.append((now_s, req))

    def _in_server_path(self, now_s: float) -> int:
        """Requests passed less than ``before_s`` ago that no replica holds yet."""
        way = self._on_the_way
        while way and way[0][0] <= now_s - self.before_s:
            way.popleft()
        return sum(1 for _, req in way if req.replica < 0 and req.state == WAITING)


def pool_saturation(serving: Sequence[Replica], sat: SaturationConfig) -> float:
    """The gateway's pool saturation: the mean over ``serving`` of max(waiting ÷
    ``queue_depth_threshold``, KV use ÷ ``kv_cache_util_threshold``); >= 1 is saturated,
    and so is a pool with no replica serving (inf). The Gateway API Inference Extension's
    utilization detector (:class:`~capsim.scenario.routing.SaturationConfig`)."""
    if not serving:
        return math.inf
    q, kv = sat.queue_depth_threshold, sat.kv_cache_util_threshold
    total = 0.0
    for r in serving:
        used = r.kv_load()[0]
        total += max(r.num_waiting / q, used / r.alloc.num_blocks / kv)
    return total / len(serving)


def make_gate(run: RunConfig) -> RouterGate | None:
    """The router's limits of ``run``; None when it has none (nothing is checked).
    Sheddable classes (``workload.classes.N.criticality``) are dropped while the pool is
    saturated (``cluster.saturation``, its defaults when not given)."""
    classes = run.workload.classes or ()
    sheddable = tuple(c.criticality == "sheddable" for c in classes)
    if run.router_rate_limit is None and run.router_max_queued_requests is None \
            and not any(sheddable):
        return None
    before_s = max(p.preset.host_overhead.request_before_s for p in run.pools)
    return RouterGate(run.router_rate_limit, run.router_max_queued_requests, before_s,
                      run.saturation or SaturationConfig(), sheddable)
