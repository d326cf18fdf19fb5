"""Shared measuring code for the speed benchmarks (scripts that print figures, not tests).

Every measurement runs in a fresh Python process so that its peak memory is its
own: the child builds the trace, notes its peak resident set size, runs
``simulate`` once and reports (as JSON) wall seconds, the growth of the peak
resident set during the run, engine steps, simulated output tokens and the
number of SimPy events the run scheduled. The *floor* is a bare SimPy loop
(``yield env.timeout(dt)``) with the same number of events: no simulator can
process its events faster than SimPy itself.

Benchmarks describe a run by a scenario path plus ``--set`` overrides; ``macro``
selects macro-steps (``simulate(..., macro_steps=True)``, the default path) or
the step-by-step reference path.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared/reference/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
MIB = 2**20


@dataclass
class Figures:
    """One measured run."""

    label: str
    wall_s: float
    peak_mib: float          # growth of the peak resident set during simulate()
    state_mib: float         # the same, until the run ended (before the result is built)
    sim_s: float
    steps: int
    out_tokens: int
    requests: int
    events: int
    floor_s: float = float("nan")   # bare SimPy loop with ``events`` events

    @property
    def tokens_per_s(self) -> float:
        return self.out_tokens / self.wall_s

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s

    @property
    def floor_ratio(self) -> float:
        return self.wall_s / self.floor_s


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024    # Linux: KiB


def child(job: dict) -> dict:
    """Run one simulation in this process and return its figures (called in the child)."""
    import capsim.sim.simulate as sim
    from capsim import workload
    from capsim.engine.clock import Environment
    from capsim.scenario.load import load

    envs: list[Environment] = []

    class CountingEnvironment(Environment):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            envs.append(self)

    sim.Environment = CountingEnvironment                # count the events the run schedules
    state_peak = [0]
    shared_fields = sim._shared_fields

    def _shared_fields(*args, **kwargs):                 # the run is over: note its peak
        state_peak[0] = _peak_rss_bytes()
        return shared_fields(*args, **kwargs)

    sim._shared_fields = _shared_fields
    loaded = load(ROOT / job["scenario"], job["sets"])
    run = loaded.runs[job.get("variant", 0)]
    trace = workload.build(run.workload, run.seed, loaded.base_dir)
    before = _peak_rss_bytes()
    t0 = time.perf_counter()
    result = sim.simulate(run, trace, macro_steps=job["macro"])
    wall = time.perf_counter() - t0
    peak = _peak_rss_bytes() - before
    rec = result.requests
    done = rec.status == "finished"
    out_tokens = int((rec.output_tokens[done] * (rec.n[done] if len(rec.n) else 1)).sum())
    return {"wall_s": wall, "peak_mib": peak / MIB, "state_mib": (state_peak[0] - before) / MIB,
            "sim_s": result.sim_end_s,
            "steps": sum(r.steps for r in result.replicas), "out_tokens": out_tokens,
            "requests": len(trace), "events": next(envs[0]._eid)}


def measure(label: str, scenario: str, sets: list[str], macro: bool,
            variant: int = 0) -> Figures:
    """Run one simulation in a fresh process; add the bare-SimPy floor for its events."""
    job = {"scenario": scenario, "sets": sets, "macro": macro, "variant": variant}
    out = subprocess.run([sys.executable, __file__, json.dumps(job)],
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    if out.returncode:                      # show the child's own last line, not our traceback
        lines = out.stderr.strip().splitlines() or [f"exit code {out.returncode}"]
        sys.exit(f"error: {label} run failed: {lines[-1]}")
    fig = Figures(label=label, **json.loads(out.stdout.strip().splitlines()[-1]))
    fig.floor_s = floor_seconds(fig.events)
    return fig


def floor_seconds(events: int, repeats: int = 3) -> float:
    """Wall seconds of a bare SimPy process yielding ``events`` timeouts (best of ``repeats``)."""
    import simpy

    def loop(env, n):
        timeout = env.timeout
        for _ in range(n):
            yield timeout(0.001)

    best = float("inf")
    for _ in range(repeats):
        env = simpy.Environment()
        env.process(loop(env, max(events - 2, 1)))      # + the process' start and end events
        t0 = time.perf_counter()
        env.run()
        best = min(best, time.perf_counter() - t0)
    return best


def table(title: str, figs: list[Figures]) -> str:
    """The figures side by side, one column per run."""
    rows = [
        ("wall seconds", lambda f: f"{f.wall_s:.2f}"),
        ("peak memory growth (MiB)", lambda f: f"{f.peak_mib:.0f}"),
        ("  of which until the run ended", lambda f: f"{f.state_mib:.0f}"),
        ("simulated seconds", lambda f: f"{f.sim_s:,.0f}"),
        ("requests", lambda f: f"{f.requests:,}"),
        ("engine steps", lambda f: f"{f.steps:,}"),
        ("SimPy events", lambda f: f"{f.events:,}"),
        ("output tokens / wall-s", lambda f: f"{f.tokens_per_s:,.0f}"),
        ("engine steps / wall-s", lambda f: f"{f.steps_per_s:,.0f}"),
        ("events / wall-s", lambda f: f"{f.events_per_s:,.0f}"),
        ("bare-SimPy floor, same events (s)", lambda f: f"{f.floor_s:.3f}"),
        ("ratio to the floor", lambda f: f"{f.floor_ratio:.1f}x"),
    ]
    width = max(14, *(len(f.label) for f in figs))
    lines = [title, f"{'':36}" + "".join(f"{f.label:>{width + 2}}" for f in figs)]
    for name, fmt in rows:
        lines.append(f"{name:36}" + "".join(f"{fmt(f):>{width + 2}}" for f in figs))
    if len(figs) == 2 and figs[0].wall_s > 0:
        lines.append(f"{'speed-up of ' + figs[0].label:36}"
                     f"{figs[1].wall_s / figs[0].wall_s:>{width + 2}.2f}x")
        lines.append(f"{figs[0].label + ' vs floor of ' + figs[1].label + ' events':36}"
                     f"{figs[0].wall_s / figs[1].floor_s:>{width + 2}.2f}x")
    return "\n".join(lines)


def compare(title: str, scenario: str, sets: list[str], step_by_step: bool = True) -> list[Figures]:
    """Measure the macro-step path (and the step-by-step path) and print them side by side."""
    figs = [measure("macro-steps", scenario, sets, macro=True)]
    if step_by_step:
        figs.append(measure("step-by-step", scenario, sets, macro=False))
    print(table(title, figs), flush=True)
    return figs


def machine() -> str:
    """One line naming the CPU, cores, Python and SimPy."""
    import platform

    import simpy
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"SimPy {simpy.__version__}, load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]))))
