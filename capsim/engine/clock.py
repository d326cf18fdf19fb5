"""The simulation clock: a SimPy environment whose events can fire at an exact instant.

Step by step, a replica's clock is a running float sum (``now + step_s``, one
addition per step). A macro-step computes the same sums ahead of time (a
``cumsum``) and must wake at exactly the instant the step-by-step path reaches:
``env.timeout(when − now)`` can land one ulp off, because ``now + (when − now)``
is not always ``when`` in floating point.

:meth:`Environment.timeout_at` gives that exact instant with SimPy's public API
only. It nudges the delay by ulps until ``now + delay == when`` (nearly always
possible; then it is a plain timeout). Some instants cannot be reached from
``now`` by adding any float (round-half-even steps over them); then it waits in
two hops: to ``t1``, the last float instant reachable below ``when``, then by
``when − t1``, which is exact (Sterbenz: ``t1 ≤ when ≤ 2·t1``), so ``t1 + (when −
t1) == when``. The returned event fires at ``when`` either way; in the two-hop
case it is triggered by the second timeout, one event later at the same instant.
"""

from __future__ import annotations

import math

import simpy


class Environment(simpy.Environment):
    """:class:`simpy.Environment` plus :meth:`timeout_at`.

    Attributes:
        step_trace: the run's :class:`~capsim.engine.step_trace.StepTracer` with
            ``--trace-events`` (read once by each replica as it is built), else None.
    """

    step_trace = None

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        # SimPy binds its event classes (timeout, event, process, ...) to the instance only
        # for names in the instance's own class (BoundClass.bind_early reads
        # ``type(self).__dict__``), so in a subclass every ``env.timeout`` built a bound
        # method anew. Bind those of every class in the MRO once.
        for cls in type(self).__mro__:
            for name, obj in vars(cls).items():
                if type(obj) is simpy.core.BoundClass and name not in self.__dict__:
                    setattr(self, name, getattr(self, name))

    def timeout_at(self, when: float) -> simpy.Event:
        """An event that fires at exactly ``when`` (seconds, ``>= now``)."""
        now = self.now
        delay = when - now
        while now + delay < when:
            delay = math.nextafter(delay, math.inf)
        while now + delay > when:
            delay = math.nextafter(delay, -math.inf)
        if now + delay == when:
            return self.timeout(delay)
        done = self.event()
        first = self.timeout(delay)             # lands on t1 < when, the last reachable instant
        first.callbacks.append(
            lambda _: self.timeout(when - (now + delay)).callbacks.append(
                lambda _: done.succeed()))
        return done

    @staticmethod
    def redirect(waited: simpy.Event, to: simpy.Event) -> None:
        """Whoever waits for ``waited`` (not yet processed) waits for ``to`` instead;
        ``waited`` still fires, for no one. A decode run cut short moves its process's wait
        to the earlier end this way: one event, where an interrupt took two (the
        interruption and the new timeout) and raised into the process. A process so
        redirected must not be interrupted (SimPy would look for it among ``waited``'s
        callbacks)."""
        to.callbacks.extend(waited.callbacks)
        waited.callbacks.clear()
