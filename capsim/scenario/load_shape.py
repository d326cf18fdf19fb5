"""Schema of time-varying load: a rate ``schedule`` and random ``bursts``.

Both multiply the arrival rate (``workload.arrival.rate_per_s``, or a replayed trace's
``rate_scale``) by a factor that changes over time; ``t = 0`` is the start of the run,
taken as 00:00 of the day::

    workload:
      duration_s: 86400
      arrival: {process: poisson, rate_per_s: 12}       # the rate at factor 1
      schedule: {kind: diurnal, peak: 1.0, trough: 0.25, peak_hour: 20}
      bursts: {kind: on_off, on_s: 120, off_s: 3600, factor: 2.5}
      classes:
        - name: rag
          weight: 1
          schedule: {kind: piecewise, step_s: 3600, factors: [0.1, 0.1, ..., 1.0]}

- ``piecewise``: ``factors[k]`` holds over ``[k·step_s, (k+1)·step_s)``, repeating
  after ``len(factors)·step_s`` (24 factors at ``step_s: 3600`` = one per hour).
- ``diurnal``: ``trough + (peak − trough)·(1 + cos(2π(t/period_s − peak_hour/24)))/2``,
  held constant over each ``resolution_s`` (the cosine at the middle of the piece).
- ``on_off`` bursts: an "off" period (factor 1) and an "on" one (``factor``) alternate,
  each lasting an exponential time of mean ``off_s`` / ``on_s`` (a two-state
  Markov-modulated Poisson process, Fischer & Meier-Hellstern, *The Markov-modulated
  Poisson process (MMPP) cookbook*, Performance Evaluation 18(2), 1993); the run starts off.
- ``markov`` bursts: ``states`` each with a ``factor`` and a mean holding time ``mean_s``
  (exponential); on leaving a state the next one is drawn from its row of ``transitions``
  (default: uniformly among the other states); the run starts in state 0.

A class's own ``schedule`` / ``bursts`` multiply the workload's for that class only;
the validators here only say *what would be valid* (the loader adds the YAML path).
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal, Optional, Union

from pydantic import BeforeValidator, Field, field_validator, model_validator

from capsim.common.schema import MAX_SECONDS, Float, StrictModel, check_tag

SECONDS_PER_DAY = 86400.0

#: Most pieces a rate factor may have over the run (a year in 30-second pieces): each is a
#: pair of floats for every request class, and a burst chain draws its pieces one by one
#: in Python (about 10^5 a second); a ``step_s`` of 1e-9 asked for 6e10 (a MemoryError),
#: an ``on_s`` of 1e-9 never ended.
MAX_RATE_PIECES = 1_000_000


def pieces_problem(shape, horizon_s: float) -> tuple[str, str] | None:
    """(the key to name, why) when ``shape`` (a schedule or bursts) would cut a run of
    about ``horizon_s`` seconds into more than :data:`MAX_RATE_PIECES` pieces; else None."""
    if isinstance(shape, PiecewiseSchedule):
        key, length = ("step_s" if shape.durations_s is None else "durations_s",
                       shape.shortest_s)
    elif isinstance(shape, DiurnalSchedule):
        key, length = "resolution_s", shape.resolution_s
    elif isinstance(shape, OnOffBursts):
        key, length = "on_s", (shape.on_s + shape.off_s) / 2
    else:
        key, length = "states", sum(s.mean_s for s in shape.states) / len(shape.states)
    pieces = horizon_s / length
    if pieces <= MAX_RATE_PIECES:
        return None
    what = f"{key} {getattr(shape, key):g}" if key not in ("states", "durations_s") else \
        f"states' mean holding time {length:g} s" if key == "states" else \
        f"a piece of {length:g} s"
    return key, (f"{what} cuts the run's ~{horizon_s:,.4g} s into ~{pieces:,.3g} pieces, more "
                 f"than {MAX_RATE_PIECES:,}; valid here: pieces of >= "
                 f"{horizon_s / MAX_RATE_PIECES:.3g} s")


def _check_factors(factors: list[float]) -> list[float]:
    """Factors are finite (the base model refuses .inf / .nan) and >= 0 (each its own path:
    ``factors.3``), one at least > 0."""
    if not any(f > 0 for f in factors):
        raise ValueError("every factor is 0: no request would ever arrive; give at least "
                         "one factor > 0")
    return factors


class PiecewiseSchedule(StrictModel):
    """Factor ``factors[k]`` over ``[k·step_s, (k+1)·step_s)``, repeating; or, with
    ``durations_s``, over the k-th of pieces of those lengths (a benchmark's load stages,
    inference-perf's ``load.stages`` of ``rate`` × ``duration``), repeating."""

    kind: Literal["piecewise"]
    step_s: float = Field(default=3600.0, gt=0, le=MAX_SECONDS,
                          description="length of each piece, s")
    factors: list[Annotated[Float, Field(ge=0)]] = Field(
        min_length=1, description="rate factor of each piece, >= 0")
    durations_s: Optional[list[Annotated[Float, Field(gt=0, le=MAX_SECONDS)]]] = Field(
        default=None, description="length of each piece, s (one per factor), instead of "
                                  "step_s")

    @field_validator("factors")
    @classmethod
    def _factors(cls, factors: list[float]) -> list[float]:
        return _check_factors(factors)

    @model_validator(mode="after")
    def _durations(self):
        if self.durations_s is None:
            return self
        if "step_s" in self.model_fields_set:
            raise ValueError("give step_s (every piece as long) or durations_s (one length "
                             "per factor), not both")
        if len(self.durations_s) != len(self.factors):
            raise ValueError(f"durations_s has {len(self.durations_s)} lengths for "
                             f"{len(self.factors)} factors; give one per factor")
        return self

    @property
    def period_s(self) -> float:
        """The schedule repeats after this many seconds."""
        if self.durations_s is not None:
            return float(sum(self.durations_s))
        return self.step_s * len(self.factors)

    @property
    def shortest_s(self) -> float:
        """The shortest piece, s."""
        return min(self.durations_s) if self.durations_s is not None else self.step_s


class DiurnalSchedule(StrictModel):
    """A cosine day: ``peak`` at ``peak_hour``, ``trough`` twelve hours away."""

    # in error messages
    yaml_example: ClassVar[str] = "{kind: diurnal, peak: 1.0, trough: 0.25, peak_hour: 20}"

    kind: Literal["diurnal"]
    peak: float = Field(default=1.0, gt=0, description="factor at peak_hour")
    trough: float = Field(ge=0, description="factor half a period from the peak")
    peak_hour: float = Field(ge=0, lt=24, description="hour of the peak, [0, 24)")
    period_s: float = Field(default=SECONDS_PER_DAY, gt=0, le=MAX_SECONDS)
    resolution_s: float = Field(default=60.0, gt=0, le=MAX_SECONDS,
                                description="the factor is held constant over pieces this long")

    @model_validator(mode="after")
    def _check_levels(self):
        if self.trough > self.peak:
            raise ValueError(f"trough ({self.trough:g}) must be <= peak ({self.peak:g})")
        if self.resolution_s > self.period_s:
            raise ValueError(f"resolution_s ({self.resolution_s:g}) must be <= period_s "
                             f"({self.period_s:g})")
        return self

    def factor_at(self, t_s):
        """The factor at time(s) ``t_s`` (float or numpy array)."""
        import numpy as np
        phase = 2.0 * math.pi * (np.asarray(t_s) / self.period_s - self.peak_hour / 24.0)
        return self.trough + (self.peak - self.trough) * (1.0 + np.cos(phase)) / 2.0


SCHEDULE_KINDS = ("piecewise", "diurnal")


Schedule = Annotated[Union[PiecewiseSchedule, DiurnalSchedule], Field(discriminator="kind"),
                     BeforeValidator(check_tag("kind", SCHEDULE_KINDS))]
"""A deterministic rate factor over time: ``piecewise`` or ``diurnal``."""


class OnOffBursts(StrictModel):
    """Off (factor 1) and on (``factor``) periods of exponential length, starting off."""

    # in error messages
    yaml_example: ClassVar[str] = "{kind: on_off, on_s: 60, off_s: 600, factor: 3}"

    kind: Literal["on_off"]
    on_s: float = Field(gt=0, le=MAX_SECONDS, description="mean length of a burst, s")
    off_s: float = Field(gt=0, le=MAX_SECONDS, description="mean time between bursts, s")
    factor: float = Field(gt=0, description="rate factor during a burst")

    def chain(self) -> tuple[list[float], list[float], list[list[float]]]:
        """(factors, mean holding times, transition matrix) of the equivalent chain."""
        return [1.0, self.factor], [self.off_s, self.on_s], [[0.0, 1.0], [1.0, 0.0]]


class BurstState(StrictModel):
    """One state of a Markov-modulated arrival rate."""

    factor: float = Field(ge=0, description="rate factor in this state")
    mean_s: float = Field(gt=0, le=MAX_SECONDS, description="mean holding time, s (exponential)")


class MarkovBursts(StrictModel):
    """A continuous-time Markov chain over ``states``, starting in state 0."""

    kind: Literal["markov"]
    states: list[BurstState] = Field(min_length=2)
    transitions: Optional[list[list[Float]]] = Field(
        default=None, description="row i: probability of moving to each state on leaving "
                                  "state i (diagonal 0); default uniform over the others")

    @model_validator(mode="after")
    def _check_chain(self):
        n = len(self.states)
        if not any(s.factor > 0 for s in self.states):
            raise ValueError("every state has factor 0: no request would ever arrive")
        if self.transitions is None:
            return self
        if len(self.transitions) != n or any(len(row) != n for row in self.transitions):
            raise ValueError(f"transitions must be a {n}×{n} matrix (one row and one column "
                             "per state)")
        for i, row in enumerate(self.transitions):
            if any(p < 0 for p in row) or row[i] != 0 or abs(sum(row) - 1.0) > 1e-9:
                raise ValueError(f"transitions row {i} must be probabilities >= 0 summing to "
                                 f"1 with 0 on the diagonal (got {row})")
        return self

    def chain(self) -> tuple[list[float], list[float], list[list[float]]]:
        """(factors, mean holding times, transition matrix)."""
        n = len(self.states)
        matrix = self.transitions or [[0.0 if j == i else 1.0 / (n - 1) for j in range(n)]
                                      for i in range(n)]
        return [s.factor for s in self.states], [s.mean_s for s in self.states], matrix


BURST_KINDS = ("on_off", "markov")

Bursts = Annotated[Union[OnOffBursts, MarkovBursts], Field(discriminator="kind"),
                   BeforeValidator(check_tag("kind", BURST_KINDS))]
"""A random rate factor over time: ``on_off`` or ``markov``."""
