"""``capsim compare`` without the printing: replay a measured run, simulate it, compare.

The measured requests are replayed (:mod:`capsim.calibrate.replay`) through one
scenario variant; then, for TTFT, TPOT, ITL and E2E, the measured and the simulated
distributions are summarised by p50 / p90 / p99 / mean (numpy's linear interpolation,
:func:`capsim.metrics.summary.weighted_percentile`) with error % = (simulated −
measured) ÷ measured × 100.

Both sides cover the same requests: the successful measured ones the simulated engine
finished (a request it rejects, e.g. longer than ``max_model_len``, leaves both
distributions and is counted in :attr:`Comparison.rejected`). Definitions are vLLM's
(``vllm/benchmarks/serve.py``), as :mod:`capsim.metrics.summary` uses them: TTFT, E2E per
request, TPOT = (E2E − TTFT) ÷ (output tokens − 1) over replies of two or more tokens,
ITL = every gap pooled. Measured ITL gaps are the client's gaps between streamed chunks.

Public API:
    METRICS, STATS, Samples, ErrorRow, Comparison, compare, summary_stats, request_table
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from capsim.calibrate.measured import MeasuredRun
from capsim.calibrate.replay import Replay, replay
from capsim.calibrate.serving import request_latencies, simulate_replay
from capsim.metrics.summary import held_runs, weighted_percentile
from capsim.results.model import RunResult
from capsim.scenario.run_config import RunConfig

#: Metric key → label, in table order.
METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}
#: Statistic key → percentile (None = mean).
STATS = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "mean": None}


@dataclass(frozen=True)
class Samples:
    """One side of one metric: ``values_s`` (seconds) each repeated ``counts`` times (the
    simulator records ITL as weighted runs); ``counts`` None = once each."""

    values_s: np.ndarray
    counts: np.ndarray | None = None

    @property
    def total(self) -> int:
        """Number of finite samples (weighted)."""
        finite = np.isfinite(self.values_s)
        return int(finite.sum() if self.counts is None else self.counts[finite].sum())


@dataclass(frozen=True)
class ErrorRow:
    """One line of the error table (milliseconds; error in percent of measured)."""

    metric: str
    stat: str
    measured_ms: float
    simulated_ms: float
    error_pct: float
    n_measured: int
    n_simulated: int


@dataclass(frozen=True)
class Comparison:
    """A measured run, its replay through one variant and the comparison.

    Attributes:
        samples: metric key → (measured, simulated) :class:`Samples`; the measured side
            is None where the file has no such data (GuideLLM saves no ITL gaps).
        rows: the error table, ``len(METRICS) × len(STATS)`` rows, NaN where a side is missing.
        rejected: successful measured requests the simulated engine rejected.
    """

    measured: MeasuredRun
    replay: Replay
    result: RunResult
    samples: dict[str, tuple[Samples | None, Samples]]
    rows: list[ErrorRow]
    rejected: int


def summary_stats(samples: Samples | None) -> dict[str, float]:
    """p50 / p90 / p99 / mean of ``samples`` in ms (NaN for none)."""
    values_ms = np.asarray([] if samples is None else samples.values_s, np.float64) * 1e3
    counts = np.ones(len(values_ms), np.int64) if samples is None or samples.counts is None \
        else np.asarray(samples.counts, np.int64)
    keep = np.isfinite(values_ms) & (counts > 0)
    values_ms, counts = values_ms[keep], counts[keep]
    if not len(values_ms):
        return {k: float("nan") for k in STATS}
    return {k: (weighted_percentile(values_ms, counts, q) if q is not None
                else float(np.average(values_ms, weights=counts))) for k, q in STATS.items()}


def _error_pct(measured: float, simulated: float) -> float:
    if not np.isfinite(measured) or measured == 0:
        return float("nan")
    return (simulated - measured) / measured * 100.0


def _samples(run: MeasuredRun, rep: Replay, result: RunResult,
             keep: np.ndarray) -> dict[str, tuple[Samples | None, Samples]]:
    """(measured, simulated) samples over the trace rows ``keep`` (bool ``(M,)``)."""
    sim_ttft, sim_tpot, sim_e2e = request_latencies(result)
    rows = rep.rows[keep]
    two = keep & (rep.trace.output_tokens > 1)
    itl = result.itl
    # Held replies (static batching) show the client no gap: no simulated ITL, as in the
    # run report (capsim.metrics.summary.held_runs).
    cls = (np.asarray(itl.class_id, np.int64) == 0) & ~held_runs(result)
    measured_itl = run.itl_of(rows)
    return {
        "ttft": (Samples(run.ttft_s[rows]), Samples(sim_ttft[keep])),
        "tpot": (Samples(run.tpot_s[rep.rows[two]]), Samples(sim_tpot[two])),
        "itl": (None if measured_itl is None else Samples(measured_itl),
                Samples(np.asarray(itl.gap_s, np.float64)[cls],
                        np.asarray(itl.count, np.int64)[cls])),
        "e2e": (Samples(run.e2e_s[rows]), Samples(sim_e2e[keep])),
    }


def compare(run_config: RunConfig, run: MeasuredRun, *, seed: int = 0) -> Comparison:
    """Replay ``run`` through the variant ``run_config`` and compare the distributions.

    ``seed`` seeds re-drawn arrivals (a finite-rate run without send times).

    Raises:
        ScenarioError: the run cannot be replayed (see :func:`capsim.calibrate.replay.replay`).
    """
    rep = replay(run, seed=seed, allow_redrawn=True)
    result = simulate_replay(run_config, rep)
    finished = np.isfinite(request_latencies(result)[2])
    keep = rep.measured & finished
    samples = _samples(run, rep, result, keep)
    rows = []
    for metric, (meas, sim) in samples.items():
        m, s = summary_stats(meas), summary_stats(sim)
        rows += [ErrorRow(metric, stat, m[stat], s[stat], _error_pct(m[stat], s[stat]),
                          0 if meas is None else meas.total, sim.total) for stat in STATS]
    return Comparison(run, rep, result, samples, rows,
                      int((rep.measured & ~finished).sum()))


def request_table(c: Comparison) -> pd.DataFrame:
    """One row per replayed request: its measured row, arrival, lengths, and measured /
    simulated TTFT, TPOT and E2E in ms (NaN where missing or rejected)."""
    sim_ttft, sim_tpot, sim_e2e = request_latencies(c.result)
    run, rows = c.measured, c.replay.rows
    return pd.DataFrame({
        "measured_row": rows, "class": np.asarray(c.replay.trace.class_names)[
            c.replay.trace.class_id],
        "arrival_s": c.replay.trace.arrival_s, "prompt_tokens": c.replay.trace.prompt_tokens,
        "output_tokens": c.replay.trace.output_tokens,
        "status": np.asarray(c.result.requests.status),
        "measured_ttft_ms": run.ttft_s[rows] * 1e3, "simulated_ttft_ms": sim_ttft * 1e3,
        "measured_tpot_ms": run.tpot_s[rows] * 1e3, "simulated_tpot_ms": sim_tpot * 1e3,
        "measured_e2e_ms": run.e2e_s[rows] * 1e3, "simulated_e2e_ms": sim_e2e * 1e3,
    })
