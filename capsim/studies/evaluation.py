"""One evaluated configuration: K replications judged against the SLO targets.

Used by :mod:`capsim.studies.sizing`: a configuration passes when every replication
meets every ``slo.targets`` bound on its ``cls == "all"`` summary row; the
*binding* target is the one with the least headroom in the worst replication.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from capsim.studies.confidence import mean_ci
from capsim.scenario.slo import UPPER_BOUND_TARGETS
from capsim.studies.task import RunOutcome


@dataclass(frozen=True)
class TargetStat:
    """One SLO target on one evaluated configuration, over its K replications.

    ``worst`` is the replication furthest on the wrong side; ``margin_frac``
    the headroom of the worst replication relative to the bound (negative
    when missed, −inf when the metric is NaN).
    """

    name: str
    bound: float
    mean: float
    ci95: float
    worst: float
    margin_frac: float

    @property
    def ci_straddles_bound(self) -> bool:
        """The 95 % interval of the mean contains the bound (False with one replication)."""
        return not math.isnan(self.ci95) and abs(self.mean - self.bound) <= self.ci95


@dataclass(frozen=True)
class Evaluation:
    """A configuration (option, replicas, rate) run with every replication seed."""

    key: tuple[str, str, int]
    num_replicas: int
    rate_per_s: float
    outcomes: tuple[RunOutcome, ...]
    targets: dict[str, float]

    @property
    def pass_runs(self) -> int:
        return sum(o.total.slo_pass for o in self.outcomes)

    @property
    def passed(self) -> bool:
        """Every replication met every target."""
        return self.pass_runs == len(self.outcomes)

    def mean(self, column: str) -> float:
        return mean_ci([getattr(o.total, column) for o in self.outcomes])[0]

    def target_stats(self) -> list[TargetStat]:
        return [self._stat(n, b) for n, b in self.targets.items()]

    def binding(self) -> TargetStat | None:
        """The target with the least headroom (None without targets)."""
        return min(self.target_stats(), key=lambda s: s.margin_frac, default=None)

    def _stat(self, name: str, bound: float) -> TargetStat:
        values = np.array([getattr(o.total, name) for o in self.outcomes], dtype=np.float64)
        upper = name in UPPER_BOUND_TARGETS
        mean, half = mean_ci(values)
        if np.isnan(values).any():
            return TargetStat(name, bound, mean, half, math.nan, -math.inf)
        worst = float(values.max() if upper else values.min())
        margin = (bound - worst) / bound if upper else (worst - bound) / bound
        return TargetStat(name, bound, mean, half, worst, margin)
