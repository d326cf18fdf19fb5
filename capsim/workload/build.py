"""From a scenario's ``workload:`` section to its request trace, once per (workload, seed).

:func:`build` generates a synthetic workload (:mod:`capsim.workload.synthetic`) or
replays a trace file (:mod:`capsim.workload.replay`); :class:`TraceCache` builds
each distinct (workload section, seed) once, so every variant of a scenario, and
every sweep point at one load level, replays the same requests (common random
numbers). The CLI's ``run`` / ``validate`` and the sweep / sizing studies share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.scenario.workload import WorkloadConfig
from capsim.workload.replay import load_trace
from capsim.workload.synthetic import generate
from capsim.workload.trace import ClosedLoop, RequestTrace


def build(workload: WorkloadConfig, seed: int, base_dir: Path) -> RequestTrace:
    """Generate (or replay) the requests described by ``workload``.

    Args:
        workload: the validated ``workload:`` section.
        seed: non-negative integer; same seed and config give identical arrays
            (a replayed trace ignores it).
        base_dir: directory of the scenario file; relative CSV paths
            (``trace.path``, ``empirical.path``) resolve against it.

    Returns:
        A :class:`RequestTrace` in arrival order (a closed loop's: in sending order,
        arrivals NaN, with its :class:`~capsim.workload.trace.ClosedLoop`). Synthetic
        workloads have ``class_names`` = the configured class names; a replayed trace
        has one class, ``trace.class_name``.

    Raises:
        ScenarioError: unreadable or malformed CSV (with file, line number and
            value), a workload that yields no request or only warm-up requests, or more
            than :data:`~capsim.workload.trace.MAX_REQUESTS` requests.
    """
    base_dir = Path(base_dir)
    if workload.trace is None:
        return generate(workload, seed, base_dir)
    arrival, k = workload.arrival, workload.warmup_request_count
    if arrival is None:                                 # replayed at its timestamps
        trace = load_trace(workload.trace, base_dir, num_requests=workload.num_requests,
                           duration_s=workload.duration_s)
    else:                                               # sent by a closed loop, in file order
        rows = load_trace(workload.trace, base_dir, num_requests=workload.num_requests)
        if (rows.parent >= 0).any():
            raise ScenarioError("a closed loop sends each trace line as its own request, but "
                                "this trace's lines carry session_id (conversations sent turn "
                                "after turn); remove workload.arrival to replay it",
                                path="workload.arrival")
        trace = replace(rows, arrival_s=np.full(len(rows), np.nan), closed_loop=ClosedLoop(
            users=arrival.users, think_time_s=arrival.think_s,
            stop_s=workload.duration_s if workload.duration_s is not None else math.inf))
    if k >= len(trace):
        raise ScenarioError(f"must be < the trace's {len(trace)} requests: with {k} warm-up "
                            "requests no request would be measured",
                            path="workload.warmup_request_count")
    return replace(trace, warmup_requests=k) if k else trace


@dataclass
class TraceCache:
    """One trace per (workload section, seed): the common random numbers of a scenario
    (its variants) or of a sweep's load level.

    Args:
        base_dir: the scenario file's directory (relative trace paths).
        scenario: the scenario file, named by errors that come without a file.
    """

    base_dir: Path
    scenario: str | None = None
    traces: dict[tuple[str, int], RequestTrace] = field(default_factory=dict)

    def get(self, wl: WorkloadConfig, seed: int) -> RequestTrace:
        """Build (once) or reuse the trace of ``wl`` with ``seed``.

        Raises:
            ScenarioError: from :func:`build`, naming the scenario file when the
                error names no file of its own (e.g. a trace file that is not there).
        """
        key = (wl.model_dump_json(), seed)
        if key not in self.traces:
            try:
                self.traces[key] = build(wl, seed, self.base_dir)
            except ScenarioError as err:
                raise err.with_context(file=self.scenario) from None
        return self.traces[key]
