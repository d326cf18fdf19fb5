"""Routing arrived requests to replicas."""

from __future__ import annotations

from itertools import cycle
from typing import Callable, Sequence

from capsim.engine.replica import Replica


def make_router(policy: str, replicas: Sequence[Replica]) -> Callable[[], Replica]:
    """A function returning the replica for the next request.

    ``round_robin`` cycles through replicas; ``least_outstanding_tokens``
    picks the replica with the fewest prompt + output tokens still to serve
    (lowest index on ties), a load-aware policy like llm-d's / vLLM router's
    least-load routing.
    """
    if policy == "round_robin":
        order = cycle(replicas)
        return lambda: next(order)
    if policy == "least_outstanding_tokens":
        return lambda: min(replicas, key=lambda r: r.outstanding_tokens)
    raise ValueError(f"unknown router {policy!r}")
