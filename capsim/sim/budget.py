"""The work a run would take, estimated before it starts: refuse what would run for hours
or exhaust memory, with the estimate and the field that causes it.

A run lasts at least ``T``: until its last open-loop arrival, and at least as long as its
longest reply takes alone (its output tokens × one decode step of a single sequence at
context 1, the pool's fastest, :func:`~capsim.studies.fleet.slo_floors_ms`'s ITL floor;
÷ (k + 1) with k speculative tokens). Over ``T``:

- **autoscaler ticks**: ``T / interval_s``, at most :data:`MAX_AUTOSCALER_TICKS`;
- **replicas made**: each random failure retires a replica and makes its replacement
  (``engine.fleet``), ``num_replicas × T / (mtbf_s + mttr_s)`` of them beside the first
  ones; a run holds every replica it made, each with its own KV pool, so at most
  :data:`~capsim.scenario.fleet.MAX_REPLICAS` in all;
- **retries**: with ``in_flight: retry`` a request whose replica fails starts again, so the
  longest reply (alone ``S`` seconds) is tried e^(S / mtbf_s) times on average (its
  replica fails as a Poisson process of rate 1 / mtbf_s): at most
  :data:`MAX_EXPECTED_ATTEMPTS`. Past it the run never ends (``mtbf_s`` 1 ms ran until
  the kernel killed a 12 GB worker).

- **router rate limit**: its bucket gains ``rate_per_s × T`` tokens; under one
  (``rate_per_s: 1e-300``) the limit passes its first ``burst`` and refuses every later
  request whatever the rate: a run that measures nothing of it, refused with the least
  rate that adds one.

And the results it would hold: about :data:`RESULT_BYTES_PER_REQUEST` per request
simulated (docs/speed.md: one run of 1,000,000 requests peaked at 840 MiB with its result,
0.86 KiB a request, at about 270 µs of CPU each), every variant's for ``capsim run`` (it
keeps them all for the report), at most :data:`MAX_RESULT_BYTES`.

Public API:
    check_work(loaded, traces)                   every variant of a loaded scenario
    check_run_work(run, trace, at)               one run; ``at(key)`` names a cluster field
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.scenario.admission import RateLimitConfig
from capsim.scenario.fleet import MAX_REPLICAS, AutoscalingConfig, FailuresConfig
from capsim.scenario.run_config import RunConfig
from capsim.workload import RequestTrace

#: Most autoscaler ticks one run may take: each reads every serving replica's signal,
#: measured 7.4 µs of CPU a tick (two replicas, a 5-s run: interval_s 1e-5, 500,000 ticks,
#: added 3.7 s to interval_s 15's 6.5 s), so a million are ~7 s of CPU, more than most whole
#: runs, and still a week's run at 0.61 s (HPA's sync period defaults to 15 s). 10 million
#: let interval_s 1e-6 on a 5-s run tick 5 million times (~35 s) without a word.
MAX_AUTOSCALER_TICKS = 1_000_000

#: Memory a simulated request takes until the report is written, bytes (docs/speed.md,
#: the 1,000,000-request run: 840 MiB with its result).
RESULT_BYTES_PER_REQUEST = 0.86 * 1024

#: Most memory the results of one command may take (a 16 GiB machine's): 19.5 million
#: requests, about 1.5 hours of CPU at docs/speed.md's rate.
MAX_RESULT_BYTES = 16 * 2**30

#: Most times, on average, the longest request may be sent again after failures
#: (``in_flight: retry``): e^(S / mtbf_s) ≤ 100, i.e. its replica lasts at least S / 4.6.
MAX_EXPECTED_ATTEMPTS = 100


def check_work(loaded, traces, seeds: list[int] | None = None, together: bool = True) -> None:
    """:func:`check_run_work` for every variant of ``loaded`` (a
    :class:`~capsim.scenario.load.LoadedScenario`) on its trace in ``traces`` (a
    :class:`~capsim.workload.TraceCache`) for each of ``seeds`` (default: the variant's
    own), naming each fleet field where it was written; and the results' memory, of every
    variant ``together`` (``capsim run`` keeps them all) or of each run alone (a sweep's
    workers return summaries).

    Raises:
        ScenarioError: naming the scenario file and the field's YAML path.
    """
    spec = loaded.spec
    _check_memory(loaded, [len(traces.get(rc.workload, seed)) for rc in loaded.runs
                           for seed in seeds or [rc.seed]], together)
    for i, rc in enumerate(loaded.runs):
        where = f"variants.{i}" if spec.variants else ""
        v = spec.variants[i] if spec.variants else None

        def at(key: str, v=v, where=where) -> str:
            head = key.split(".")[0]
            return f"{where}.cluster.{key}" if v is not None and head in v.cluster \
                else f"cluster.{key}"
        for seed in seeds or [rc.seed]:
            try:
                check_run_work(rc, traces.get(rc.workload, seed), at)
            except ScenarioError as exc:
                raise ScenarioError(exc.message, file=str(loaded.path),
                                    path=exc.path) from None


def _check_memory(loaded, sizes: list[int], together: bool) -> None:
    """The results of runs of ``sizes`` requests, all at once (``together``) or the largest
    alone, within :data:`MAX_RESULT_BYTES`.

    Raises:
        ScenarioError: naming the workload field that sets the request count.
    """
    requests = sum(sizes) if together else max(sizes)
    if requests * RESULT_BYTES_PER_REQUEST <= MAX_RESULT_BYTES:
        return
    wl = loaded.spec.workload
    key = "trace" if wl.trace is not None else \
        "duration_s" if wl.duration_s is not None else "num_requests"
    what = f"{len(sizes)} variant(s)' {requests:,} requests" if together and len(sizes) > 1 \
        else f"{requests:,} requests"
    raise ScenarioError(
        f"{what} would hold about {requests * RESULT_BYTES_PER_REQUEST / 2**30:,.0f} GiB of "
        f"results ({RESULT_BYTES_PER_REQUEST / 1024:.2f} KiB a request), more than "
        f"{MAX_RESULT_BYTES / 2**30:.0f} GiB; valid here: at most "
        f"{int(MAX_RESULT_BYTES / RESULT_BYTES_PER_REQUEST):,} requests in all: lower "
        "duration_s, num_requests or rate_per_s, or run fewer variants at once",
        file=str(loaded.path), path=f"workload.{key}")


def check_run_work(run: RunConfig, trace: RequestTrace, at: Callable[[str], str]) -> None:
    """Refuse a run whose fleet would tick, fail or retry past the module's limits.

    Args:
        run: the resolved variant.
        trace: its requests.
        at: ``cluster.<key>`` → the YAML path the key was written at (``autoscaling``,
            ``pools.1.failures``, ...).

    Raises:
        ScenarioError: naming the field (``….interval_s``, ``….mtbf_s``,
            ``router_rate_limit.rate_per_s``) and the estimate.
    """
    fleets = _fleets(run)
    limit = run.router_rate_limit
    if not len(trace) or limit is None and not any(
            a is not None or f is not None for _, _, a, f in fleets):
        return
    longest_s = _longest_reply_s(run, trace)
    span_s = max(_last_arrival_s(trace), longest_s)
    if limit is not None:
        _check_rate_limit(limit, span_s, at("router_rate_limit"))
    for key, replicas, autoscaling, failures in fleets:
        prefix = f"{key}." if key else ""
        if autoscaling is not None:
            _check_ticks(autoscaling, span_s, at(f"{prefix}autoscaling"))
        if failures is not None and failures.mtbf_s is not None:
            _check_failures(failures, replicas, span_s, longest_s, at(f"{prefix}failures"))


def _fleets(run: RunConfig) -> list[tuple[str, int, AutoscalingConfig | None,
                                          FailuresConfig | None]]:
    """(the key under ``cluster`` ("" or ``pools.J``), replicas at t = 0, autoscaling,
    failures) of each fleet of the run."""
    if run.fleet is not None:
        return [(f"pools.{j}", fp.pool.num_replicas, fp.autoscaling, fp.failures)
                for j, fp in enumerate(run.fleet.pools)]
    return [("", run.num_replicas, run.autoscaling, run.failures)]


def _last_arrival_s(trace: RequestTrace) -> float:
    """The last open-loop arrival, s (0 for a closed loop: its sends depend on the run)."""
    if trace.closed_loop is not None:
        return 0.0
    return float(np.nanmax(trace.arrival_s))    # a conversation's later turns: NaN


def _longest_reply_s(run: RunConfig, trace: RequestTrace) -> float:
    """A lower bound on the longest reply's time alone, s: its output tokens × the
    fastest decode step of any pool of the run, ÷ (k + 1) tokens a speculative step."""
    models = [fp.model for fp in run.fleet.pools] if run.fleet is not None \
        else [run.model] * len(run.pools)
    per_token_s = min(
        pool.pricer(model).cost(decode_seqs=1, decode_ctx_tokens=1, logits_seqs=1).seconds
        / (1 + (pool.spec.k if pool.spec is not None else 0))
        for pool, model in zip(run.pools, models))
    return float(trace.output_tokens.max()) * per_token_s


def _check_ticks(cfg: AutoscalingConfig, span_s: float, at: str) -> None:
    ticks = span_s / cfg.interval_s
    if ticks > MAX_AUTOSCALER_TICKS:
        raise ScenarioError(
            f"interval_s {cfg.interval_s:g} would tick the autoscaler at least {ticks:,.0f} "
            f"times over the run's {span_s:,.4g} s, more than {MAX_AUTOSCALER_TICKS:,} (each "
            f"reads every replica); valid here: interval_s >= "
            f"{_ceil_sig(span_s / MAX_AUTOSCALER_TICKS):g} (Kubernetes HPA's default is 15)",
            path=f"{at}.interval_s")


def _check_rate_limit(cfg: RateLimitConfig, span_s: float, at: str) -> None:
    if cfg.rate_per_s * span_s < 1:
        raise ScenarioError(
            f"rate_per_s {cfg.rate_per_s:g} would add {cfg.rate_per_s * span_s:.3g} token(s) "
            f"to the bucket over the run's {span_s:,.4g} s, less than one request: the limit "
            f"would pass the first burst ({cfg.burst}) and refuse every later request, its "
            f"rate playing no part; valid here: rate_per_s >= "
            f"{_ceil_sig(1 / span_s):g}, or a longer run",
            path=f"{at}.rate_per_s")


def _check_failures(cfg: FailuresConfig, replicas: int, span_s: float, longest_s: float,
                    at: str) -> None:
    cycle_s = cfg.mtbf_s + cfg.mttr_s
    made = replicas + replicas * span_s / cycle_s
    if made > MAX_REPLICAS:
        raise ScenarioError(
            f"mtbf_s {cfg.mtbf_s:g} + mttr_s {cfg.mttr_s:g} would fail and replace "
            f"{replicas} replica(s) about {made - replicas:,.0f} times over the run's "
            f"{span_s:,.4g} s; a run keeps every replica it makes (each its own KV pool), at "
            f"most {MAX_REPLICAS:,}: valid here: mtbf_s + mttr_s >= "
            f"{_ceil_sig(replicas * span_s / (MAX_REPLICAS - replicas)):g}",
            path=f"{at}.mtbf_s")
    if cfg.in_flight == "retry" and longest_s / cfg.mtbf_s > math.log(MAX_EXPECTED_ATTEMPTS):
        attempts = math.exp(min(longest_s / cfg.mtbf_s, 700.0))
        raise ScenarioError(
            f"mtbf_s {cfg.mtbf_s:g} is shorter than the longest reply takes alone "
            f"({longest_s:.4g} s): with in_flight: retry it would be sent about "
            f"{attempts:,.3g} times on average before it finishes (at most "
            f"{MAX_EXPECTED_ATTEMPTS}); valid here: mtbf_s >= "
            f"{_ceil_sig(longest_s / math.log(MAX_EXPECTED_ATTEMPTS)):g}, or in_flight: fail",
            path=f"{at}.mtbf_s")


def _ceil_sig(x: float, digits: int = 2) -> float:
    """``x`` rounded up to ``digits`` significant digits (a bound the message can quote)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.ceil(x / scale) * scale
