"""KV-cache transfers over shared links: a fluid model with max-min fair sharing.

Every replica of a disaggregated variant has one network *port* per
direction whose capacity is ``TP × link bandwidth`` (each of its GPUs sends
or receives its own KV shard over its own link: NVLink ports, PCIe slot or
NIC). A transfer from prefill replica p to decode replica d is a *flow*
through p's egress port and d's ingress port. Concurrent flows share ports
max-min fairly (progressive filling, Bertsekas & Gallager, "Data Networks",
§6.5.2): each flow gets an equal share of its tightest port, and what a flow
cannot use elsewhere is handed to the others. So two transfers over one link
each take twice as long, and three prefill replicas sending to one decode
replica share that replica's ingress.

A transfer takes ``latency_s`` (fixed, not shared) and then its bytes flow.
Alone on its ports it therefore takes ``latency + bytes / min(cap_p, cap_d)``
(:meth:`capsim.profiles.links.LinkProfile.transfer_time_s`).

:class:`FairShareNetwork` is pure Python (no SimPy) so tests drive it with
explicit times; :class:`KVLink` runs it inside a SimPy environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import simpy

_REL_TOL = 1e-9        # a flow with less than this fraction of its bytes left is done
_TIME_TOL_S = 1e-9     # ... or with less than 1 ns left at its rate: below the float resolution
                       # of a clock at hundreds of seconds, so waiting for it would never end


@dataclass(eq=False)
class Flow:
    """One transfer's bytes in flight.

    Attributes:
        ports: port indices it crosses (egress of the sender, ingress of the receiver).
        total_bytes: bytes to move, > 0.
        remaining_bytes: bytes not yet moved.
        rate_bytes_per_s: current max-min fair rate.
        on_done: called with the finish time (s) when the last byte arrives.
    """

    ports: tuple[int, ...]
    total_bytes: float
    on_done: Callable[[float], None]
    remaining_bytes: float = field(init=False)
    rate_bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        self.remaining_bytes = self.total_bytes


class FairShareNetwork:
    """Ports of fixed capacity shared max-min fairly by the flows crossing them.

    Args:
        capacities_bytes_per_s: one capacity per port, each > 0.

    Usage: ``add(flow, now)``; ``next_finish_s()`` says when the next flow
    ends under the current rates; ``advance(now)`` moves every flow's bytes
    forward to ``now`` and returns the flows that finished (rates are then
    recomputed). Times are absolute seconds and must not go backwards.

    Statistics: ``port_bytes[p]`` (bytes that crossed port p) and
    ``port_busy_s[p]`` (time with at least one flow on p).
    """

    def __init__(self, capacities_bytes_per_s: list[float]):
        if any(c <= 0 for c in capacities_bytes_per_s):
            raise ValueError(f"port capacities must be > 0, got {capacities_bytes_per_s}")
        self.capacities = list(capacities_bytes_per_s)
        self.flows: list[Flow] = []
        self.port_bytes = [0.0] * len(self.capacities)
        self.port_busy_s = [0.0] * len(self.capacities)
        self._t = 0.0

    def add(self, flow: Flow, now: float) -> None:
        """Start ``flow`` at ``now`` (others are advanced to ``now`` first)."""
        if flow.total_bytes <= 0:
            raise ValueError("a flow must carry > 0 bytes")
        done = self.advance(now)
        if done:
            raise RuntimeError("advance() flows to their finish time before adding new ones")
        self.flows.append(flow)
        self._allocate()

    def advance(self, now: float) -> list[Flow]:
        """Move bytes forward to ``now``; remove and return the flows that finished."""
        dt = now - self._t
        if dt < 0:
            raise ValueError(f"time went backwards: {now} < {self._t}")
        if dt > 0:
            self._move(dt)
        self._t = now
        done = [f for f in self.flows if _finished(f)]
        if done:
            self.flows = [f for f in self.flows if not _finished(f)]
            for f in done:
                self.port_bytes_add(f.ports, f.remaining_bytes)
                f.remaining_bytes = 0.0
            self._allocate()
        return done

    def port_bytes_add(self, ports: tuple[int, ...], nbytes: float) -> None:
        for p in ports:
            self.port_bytes[p] += nbytes

    def next_finish_s(self) -> float:
        """Absolute time at which the first active flow ends at current rates (inf if none)."""
        return self._t + min((f.remaining_bytes / f.rate_bytes_per_s for f in self.flows),
                             default=float("inf"))

    def _move(self, dt: float) -> None:
        busy = set()
        for f in self.flows:
            moved = min(f.remaining_bytes, f.rate_bytes_per_s * dt)
            f.remaining_bytes -= moved
            self.port_bytes_add(f.ports, moved)
            busy.update(f.ports)
        for p in busy:
            self.port_busy_s[p] += dt

    def _allocate(self) -> None:
        """Max-min fair rates by progressive filling (ties: lowest port index first)."""
        left = list(self.capacities)
        count = [0] * len(left)
        for f in self.flows:
            for p in f.ports:
                count[p] += 1
        unfixed = list(self.flows)
        while unfixed:
            share, port = min((left[p] / count[p], p) for p in range(len(left)) if count[p])
            still = []
            for f in unfixed:
                if port in f.ports:
                    f.rate_bytes_per_s = share
                    for p in f.ports:
                        left[p] -= share
                        count[p] -= 1
                else:
                    still.append(f)
            unfixed = still


def _finished(f: Flow) -> bool:
    return f.remaining_bytes <= max(_REL_TOL * f.total_bytes, f.rate_bytes_per_s * _TIME_TOL_S)


class KVLink:
    """A :class:`FairShareNetwork` driven by a SimPy environment.

    Args:
        env: the simulation.
        capacities_bytes_per_s: one capacity per port.
        latency_s: fixed delay of every transfer before its bytes flow (s, >= 0).

    :meth:`send` starts a transfer; its ``on_done(t)`` runs when the last
    byte arrives. A timer event is scheduled for the next finish only; a
    newer allocation makes older timers stale (they do nothing), so no
    process polls.
    """

    def __init__(self, env: simpy.Environment, capacities_bytes_per_s: list[float],
                 latency_s: float):
        self.env = env
        self.net = FairShareNetwork(capacities_bytes_per_s)
        self.latency_s = latency_s
        self.in_flight = 0              # transfers started and not yet done (latency included)
        self.started = 0
        self.completed = 0
        self._generation = 0

    def send(self, nbytes: float, ports: tuple[int, ...], on_done: Callable[[float], None],
             latency_s: float | None = None) -> None:
        """Move ``nbytes`` through ``ports``; ``on_done(finish_s)`` when done.

        ``latency_s`` overrides the link's fixed delay for this transfer
        (0 when layer-wise overlap already hid it).
        """
        self.in_flight += 1
        self.started += 1
        delay = self.latency_s if latency_s is None else latency_s

        def start(_event=None) -> None:
            self._sync()
            self.net.add(Flow(ports=ports, total_bytes=nbytes, on_done=self._done(on_done)),
                         self.env.now)
            self._arm()

        if nbytes <= 0:
            self.env.timeout(delay).callbacks.append(lambda _e: self._done(on_done)(self.env.now))
        elif delay > 0:
            self.env.timeout(delay).callbacks.append(start)
        else:
            start()

    def _done(self, on_done: Callable[[float], None]) -> Callable[[float], None]:
        def finish(t: float) -> None:
            self.in_flight -= 1
            self.completed += 1
            on_done(t)
        return finish

    def _sync(self) -> None:
        """Advance the network to now and run the callbacks of finished flows."""
        for flow in self.net.advance(self.env.now):
            flow.on_done(self.env.now)

    def _arm(self) -> None:
        self._generation += 1
        t = self.net.next_finish_s()
        if t == float("inf"):
            return
        gen = self._generation
        ev = self.env.timeout(max(0.0, t - self.env.now))
        ev.callbacks.append(lambda _e: self._on_timer(gen))

    def _on_timer(self, gen: int) -> None:
        if gen != self._generation:
            return
        self._sync()
        self._arm()
