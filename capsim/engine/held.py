"""Requests an engine that schedules ahead holds for the step after the one in progress.

An engine whose host work overlaps the GPU (vLLM V1's async scheduling, SGLang's and
TensorRT-LLM's overlap schedulers) composes the next step while this one runs, so a
request submitted during a step waits for the step after it. The replica's loop and its
decode runner (:mod:`capsim.engine.macro.runner`) share one :class:`HeldRequests`.
"""

from __future__ import annotations

from typing import Callable

from capsim.engine.request import Request


class HeldRequests:
    """(submit time s, request) pairs in submission order, handed to ``add`` (the
    scheduler's) when released.

    ``items`` is one list for the replica's life (released in place), so holders may
    keep a reference to it.
    """

    __slots__ = ("items", "add")

    def __init__(self, add: Callable[[Request], None]):
        self.items: list[tuple[float, Request]] = []
        self.add = add

    def release_before(self, t_s: float) -> None:
        """Hand ``add`` the requests submitted before ``t_s``, in submission order."""
        items, keep, add = self.items, [], self.add
        for t, req in items:
            if t < t_s:
                add(req)
            else:
                keep.append((t, req))
        items[:] = keep
