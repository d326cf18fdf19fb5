"""``capsim size``: the fewest GPUs that meet every SLO target, or what N GPUs sustain.

Two questions, one machinery:

- **fewest GPUs** at a request rate R: for every *fleet option* — a variant
  on one GPU profile at one tensor-parallel degree — search the number of
  replicas with :func:`capsim.studies.search.fewest_passing` (doubling, then
  bisection; GPUs = replicas × TP, up to ``max_gpus``).
- **capacity** of N GPUs: for every option, the highest rate whose run still
  meets every target (:func:`capsim.studies.search.highest_passing`).

A configuration *passes* when the ``cls == "all"`` summary row meets every
``slo.targets`` bound in each of the K replications (independent traces,
seeds ``seed .. seed + K − 1``). All options' searches advance in lock-step,
and each round's pending runs (options × K) go to the runner as one batch.
Every option sees the same K traces at a given rate (common random numbers).

Fleet options and SLO floors live in :mod:`capsim.studies.fleet`, the judgement of
one configuration in :mod:`capsim.studies.evaluation`.

**Disaggregated options** (a variant with prefill + decode pools, one option per pool
shape × link × ratio of ``sizing.disaggregation``, :mod:`capsim.studies.split_options`)
search the two pool sizes with :func:`capsim.studies.search.fewest_split_passing`:
doubling along the prefill:decode ratio, then a bisection per pool — ``O(log)`` per pool,
monotone in each pool's size. Pool shapes (TP, EP, DP attention), links and ratios are
enumerated, not searched: a bigger TP is not monotonically better (more GPUs per replica,
shorter steps). They are ranked with the co-located options by $/h, then $/M tokens. The
capacity question (``--gpus N``) and N+k headroom are not searched for them.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pandas as pd

from capsim.scenario.load import LoadedScenario
from capsim.scenario.run_config import RunConfig
from capsim.scenario.fleet import MAX_REPLICAS
from capsim.scenario.sweep import check_num_seeds
from capsim.scenario.workload import WorkloadConfig
from capsim.common.errors import ScenarioError
from capsim.studies.evaluation import Evaluation
from capsim.studies.fleet import (DISAGG_NOT_SIZED, FleetOption, fleet_at, fleet_options,
                          shape_label, slo_floors_ms, unreachable)
from capsim.studies.routing_savings import gpus_saved, with_load_only_twins
from capsim.studies.split_options import split_options
from capsim.profiles.trust import Edge, coverage
from capsim.studies.parallel import Progress, Runner
from capsim.studies.search import fewest_passing, fewest_split_passing, highest_passing
from capsim.studies.sweep import offered_rate_per_s
from capsim.workload import TraceCache
from capsim.studies.task import RunOutcome, RunTask, execute, outcomes_frame
from capsim.studies.trust_edge import EdgedSlo, edged_slo

__all__ = ["DISAGG_NOT_SIZED", "FleetOption", "fleet_at", "fleet_options", "slo_floors_ms",
           "unreachable", "SizingRow", "SizingResult", "SizingPlan", "plan", "run", "rows_frame"]

#: How far the capacity search may go from its start rate, both ways (factor).
RATE_RANGE = 64.0

Mode = Literal["gpus", "rate"]


# --------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SizingRow:
    """One fleet option's answer (a row of the ranked table).

    ``status``: "met" (a configuration passed), "not met" (none within the
    search bound; the best one found is described in ``note``) or
    "infeasible" (the option cannot run, or a target is below its floor).
    ``within_noise``: the decision could flip with other traces — at the
    next smaller fleet (or next higher rate) some replications passed, or the
    binding target's 95 % interval contains its bound; None with one seed.
    ``trust``: how its SLO bounds were moved to the pessimistic edge of capsim's
    measured error (``--trust-edge``; "" when they were not).

    ``binding``: for "met", the target that *fails* one replica fewer (capacity:
    at the lowest failing rate tried above the answer) — the one that decided
    the answer; the worst miss there when several fail. Empty when no smaller
    fleet exists (one replica passes) or the capacity search hit its cap.
    ``binding_value`` / ``margin_frac`` are that target at the answer (worst
    replication), ``binding_failed_value`` its worst value where it failed and
    ``binding_failed_at`` there (GPUs, or requests/s). For "not met", the worst
    miss of the best configuration found.
    """

    rank: int
    variant: str
    hardware: str
    tensor_parallel_size: int
    status: str
    num_replicas: int | None = None
    num_gpus: int | None = None
    rate_per_s: float | None = None
    cost_per_hour_usd: float = math.nan
    cost_per_million_output_tokens_usd: float = math.nan
    output_throughput_tok_per_s: float = math.nan
    binding: str = ""
    binding_value: float = math.nan
    binding_bound: float = math.nan
    binding_failed_value: float = math.nan
    binding_failed_at: float = math.nan
    margin_frac: float = math.nan
    within_noise: bool | None = None
    note: str = ""
    evaluations: int = 0
    trust: str = ""
    headroom_replicas: int = 0      # N+k: replicas added to those that met the SLOs
    # N+k with k replicas down, over the day view's windows (NaN: steady load):
    violation_min_with_headroom: float = math.nan     # the answer: N − k serving
    violation_min_without_headroom: float = math.nan  # N − k bought, k down: N − 2k serving
    pipeline_parallel_size: int = 1
    # a disaggregated option (None / "" for a co-located one): the answer's pool sizes,
    # each pool's TP, the KV link and the pools' shapes (``P TP4 + D TP8 · nvlink-4``)
    prefill_replicas: int | None = None
    decode_replicas: int | None = None
    prefill_tp: int | None = None
    decode_tp: int | None = None
    link: str = ""
    pools: str = ""
    # a cache-aware option: GPUs it saves against a load-only router at the same SLO
    # (studies/routing_savings.py), and that baseline's answer
    gpus_saved: int | None = None
    saved_against: str = ""

    @property
    def label(self) -> str:
        if self.pools:
            return f"{self.variant} · {self.hardware} {self.pools}"
        return (f"{self.variant} · {self.hardware} "
                f"{shape_label(self.tensor_parallel_size, self.pipeline_parallel_size)}")

    @property
    def split(self) -> str:
        """``2P3D`` for a disaggregated answer, "" otherwise."""
        if self.prefill_replicas is None:
            return ""
        return f"{self.prefill_replicas}P{self.decode_replicas}D"


@dataclass(frozen=True)
class SizingResult:
    """What ``capsim size`` found.

    Attributes:
        mode: "gpus" (fewest GPUs at ``rate_per_s``) or "rate" (capacity of ``gpus``).
        rows: ranked table (met first; by $/h then $/M tokens, or by rate).
        runs: every run of the search, one row per run × class (summary.csv).
    """

    base: LoadedScenario
    mode: Mode
    rate_per_s: float | None
    gpus: int | None
    max_gpus: int
    seeds: list[int]
    rows: list[SizingRow]
    runs: pd.DataFrame
    trust_edge: Edge = "none"

    @property
    def any_met(self) -> bool:
        return any(r.status == "met" for r in self.rows)


# --------------------------------------------------------------------------
# Planning and running a search
# --------------------------------------------------------------------------


@dataclass
class SizingPlan:
    """A validated sizing question: options, load, seeds, bounds."""

    base: LoadedScenario
    options: list[FleetOption]
    mode: Mode
    rate_per_s: float
    gpus: int | None
    max_gpus: int
    seeds: list[int]
    rate_tolerance: float
    traces: TraceCache
    trust_edge: Edge = "none"
    slos: dict[tuple, EdgedSlo] = field(default_factory=dict)

    def slo(self, key: tuple) -> EdgedSlo:
        """The SLOs option ``key`` is judged by (the scenario's, or moved to the edge)."""
        return self.slos[key]
    headroom: int = 0                # N+k: replicas down while the SLOs must still hold
    percentiles: tuple[float, ...] = ()   # --percentiles: the runs' summary columns

    def workload_at(self, wl: WorkloadConfig, rate_per_s: float) -> WorkloadConfig:
        """``wl`` offering ``rate_per_s``: the synthetic rate, or a trace's ``rate_scale``."""
        if wl.arrival is not None:
            return wl.model_copy(update={"arrival": wl.arrival.model_copy(
                update={"rate_per_s": rate_per_s})})
        at_scale = offered_rate_per_s(wl, self.traces.get(wl, self.seeds[0]))
        native = at_scale / wl.trace.rate_scale
        return wl.model_copy(update={"trace": wl.trace.model_copy(
            update={"rate_scale": rate_per_s / native})})


def plan(base: LoadedScenario, overrides: list[str], *, rate_per_s: float | None = None,
         gpus: int | None = None, num_seeds: int | None = None,
         max_gpus: int | None = None, trust_edge: Edge = "none",
         headroom: int = 0, percentiles: tuple[float, ...] = ()) -> SizingPlan:
    """Combine the CLI options with the ``sizing:`` section and check the question.

    Arguments given here override ``sizing:``; ``gpus`` switches to the
    capacity question. ``trust_edge`` ("median" / "max") judges each option by SLO bounds
    moved to that edge of the measured error of its engine preset on its GPU
    (:mod:`capsim.studies.trust_edge`). ``headroom`` K (N+k sizing): the SLOs must hold
    with K replicas down for the whole window sized for (the peak): a candidate of N
    replicas is run on N − K, and the answer counts all N. ``percentiles``
    (``--percentiles``): every run's summary rows get those columns.

    Raises:
        ScenarioError: a closed loop or all-at-once arrivals (no rate to search); no
            ``slo.targets``; an unknown hardware name; every option infeasible (too big for memory, or a target below what any
            fleet can reach — the message says which and why).
    """
    spec, path = base.spec, str(base.path)
    sizing = spec.sizing
    _check_open_loop(base)
    if not spec.slo.targets:
        raise ScenarioError("capsim size needs at least one run-level target to meet, e.g. "
                            "slo: {targets: {itl_p99_ms: 60, ttft_p99_ms: 2000}}",
                            file=path, path="slo.targets")
    gpus = gpus if gpus is not None else (sizing.gpus if sizing else None)
    seeds_k = num_seeds or (sizing.seeds if sizing else 1)
    check_num_seeds(seeds_k)
    p = SizingPlan(base=base, options=[], mode="rate" if gpus else "gpus", rate_per_s=0.0,
                   gpus=gpus, max_gpus=max_gpus or (sizing.max_gpus if sizing else 64),
                   seeds=[spec.seed + r for r in range(seeds_k)],
                   rate_tolerance=sizing.rate_tolerance if sizing else 0.02,
                   traces=TraceCache(base.base_dir, str(base.path)), trust_edge=trust_edge,
                   percentiles=percentiles)
    p.rate_per_s = _start_rate(p, rate_per_s)
    options = fleet_options(base, list(overrides), sizing.hardware if sizing else None,
                            sizing.tensor_parallel_size if sizing else None,
                            sizing.pipeline_parallel_size if sizing else None)
    options = split_options(base, list(overrides), options,
                            sizing.disaggregation if sizing else None,
                            sizing.hardware if sizing else None)
    if p.mode == "gpus":
        options = with_load_only_twins(options)
    _check_replica_bound(p, options)
    p.headroom = _check_headroom(headroom, p, options)
    _check_rate_ceiling(p, options, rate_per_s is not None)
    p.options = _check_options(p, options)
    p.slos = {o.key: edged_slo(spec.slo, base.class_slos,
                               coverage(o.run.serving_pool.preset.name, o.hardware), trust_edge)
              for o in p.options if o.run is not None}
    return p


def _check_replica_bound(p: SizingPlan, options: list[FleetOption]) -> None:
    """The fleets searched hold at most :data:`~capsim.scenario.fleet.MAX_REPLICAS`
    replicas (the most one run simulates): ``--gpus N`` (its fleet) or the search bound
    ``max_gpus`` (the largest fleet the search may try) over each option's GPUs per
    replica. ``--gpus 1000000000`` simulated fleets of a billion replicas.

    Raises:
        ScenarioError: naming the option or field and its largest valid value.
    """
    gpus, what = (p.gpus, "--gpus") if p.mode == "rate" else (p.max_gpus, "max_gpus")
    for opt in options:
        replicas = gpus // opt.gpus_per_replica
        if replicas > MAX_REPLICAS:
            raise ScenarioError(
                f"{what} {gpus:,} makes up to {replicas:,} replicas of "
                f"{shape_label(opt.tensor_parallel_size, opt.pipeline_parallel_size)} "
                f"({opt.variant}), more than the {MAX_REPLICAS:,} one run simulates; valid: "
                f"{what} <= {MAX_REPLICAS * opt.gpus_per_replica:,}", file=str(p.base.path),
                path="sizing.max_gpus" if what == "max_gpus" else None)


def _check_headroom(k: int, p: SizingPlan, options: list[FleetOption]) -> int:
    """``--headroom K``: >= 0 and smaller than every option's largest fleet.

    Raises:
        ScenarioError: K < 0, or K replicas down leave no replica in some option's fleet
            (``--gpus N``, or the search bound ``max_gpus``).
    """
    path = str(p.base.path)
    if k < 0:
        raise ScenarioError(f"--headroom must be >= 0 replicas, got {k}", file=path)
    if k == 0:
        return 0
    gpus, what = (p.gpus, "--gpus") if p.mode == "rate" else (p.max_gpus, "max_gpus")
    for opt in options:
        fleet = gpus // opt.gpus_per_replica
        if k >= fleet:
            raise ScenarioError(
                f"--headroom {k} is not smaller than the fleet: {what} = {gpus} makes at most "
                f"{fleet} replica(s) of "
                f"{shape_label(opt.tensor_parallel_size, opt.pipeline_parallel_size)} "
                f"({opt.variant}), and "
                f"{k} down would leave none serving; lower --headroom or raise {what}",
                file=path, path="sizing.max_gpus" if what == "max_gpus" else None)
    return k


def _check_open_loop(base: LoadedScenario) -> None:
    """Both searches set a finite request rate: refuse a closed loop and all-at-once arrivals.

    Raises:
        ScenarioError: a variant's workload is ``process: concurrency`` or ``rate_per_s: .inf``.
    """
    for rc in base.runs:                  # a variant may set its own workload
        arrival = rc.workload.arrival
        if arrival is not None and arrival.closed_loop:
            raise ScenarioError(
                "capsim size searches request rates (the fewest GPUs at one rate, or the "
                "highest rate N GPUs sustain); a closed loop (process: concurrency) sends as "
                "fast as the server answers, it has no rate to set. Sweep "
                "workload.arrival.users and cluster.num_replicas with capsim sweep instead, or "
                "size an open-loop arrival", file=str(base.path), path="workload.arrival.process")
        if arrival is not None and arrival.all_at_once:
            raise ScenarioError(
                "capsim size needs a finite request rate; rate_per_s: .inf sends every request "
                "at t = 0 (give a rate, or --rate R)", file=str(base.path),
                path="workload.arrival.rate_per_s")


def _start_rate(p: SizingPlan, rate_per_s: float | None) -> float:
    spec = p.base.spec
    rate = rate_per_s or (spec.sizing.rate_per_s if spec.sizing else None)
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise ScenarioError(f"--rate must be a finite number > 0 requests/s, got {rate:g}")
    if rate is None:
        rate = offered_rate_per_s(spec.workload, p.traces.get(spec.workload, p.seeds[0]))
    return float(rate)


def rate_ceiling_per_s(p: SizingPlan, options: list[FleetOption]) -> tuple[float, str]:
    """The highest request rate any searched fleet could possibly serve, and why.

    Every output token is one token position through every matmul of the model
    (``2 × matmul_params`` FLOP; the first comes from the prompt's last position, and
    at least that position is computed even on a full prefix-cache hit), so a fleet of
    G GPUs completes at most ``G × peak FLOP/s ÷ (2 × matmul_params × mean output
    tokens)`` requests/s, at 100 % of the datasheet peak and ignoring attention and
    the rest of the prompt: a bound no configuration reaches, not an estimate. G is
    ``max_gpus`` (fewest-GPUs search) or ``gpus`` (capacity); the peak is the
    fastest format of each option's GPU, the largest rate over the ``options`` that
    resolved. Returns (rate, explanation); (inf, "") when no option resolved.
    """
    gpus = p.gpus if p.mode == "rate" else p.max_gpus
    best = (math.inf, "") if all(o.run is None for o in options) else (0.0, "")
    for opt in options:
        if opt.run is None:
            continue
        rc, hw = opt.run, opt.run.serving_pool.hardware
        peak = max(hw.peak_flops_per_s.values())
        out_tokens = float(p.traces.get(rc.workload, p.seeds[0]).output_tokens.mean())
        rate = gpus * peak / (2 * rc.model.matmul_params * out_tokens)
        if rate > best[0]:
            why = (f"beyond it even {gpus} {hw.name} GPUs at their {peak / 1e12:,.0f} TFLOP/s "
                   f"peak could not compute the {out_tokens:,.4g} output tokens a request "
                   f"has on average ({rc.model.name}, 2 × {rc.model.matmul_params / 1e9:.3g} B "
                   "FLOP each)")
            best = (rate, why)
    return best


def _check_rate_ceiling(p: SizingPlan, options: list[FleetOption], from_option: bool) -> None:
    """Refuse a rate no fleet could serve before a trace is built at it (a rate of 1e308
    would build 1e308 × duration_s requests, or a burst that says nothing of a rate)."""
    ceiling, why = rate_ceiling_per_s(p, options)
    if p.rate_per_s > ceiling:
        where = ("--rate" if from_option else "sizing.rate_per_s" if p.base.spec.sizing
                 and p.base.spec.sizing.rate_per_s else "workload.arrival.rate_per_s")
        raise ScenarioError(f"{where} {p.rate_per_s:.4g} requests/s: valid: 0 < rate <= "
                            f"{ceiling:,.4g} requests/s; {why}", file=str(p.base.path))


def _shape_words(opt: FleetOption) -> str:
    """``TP 4``, or ``TP 4 × PP 2 = 8 GPUs`` per replica."""
    tp, pp = opt.tensor_parallel_size, opt.pipeline_parallel_size
    return f"TP {tp} × PP {pp} = {tp * pp} GPUs" if pp > 1 else f"TP {tp}"


def _check_options(p: SizingPlan, options: list[FleetOption]) -> list[FleetOption]:
    """Mark options that can never pass (floors, GPU count); raise if none is left."""
    out = []
    for opt in options:
        if opt.run is not None and opt.run.disaggregated and p.mode == "rate":
            opt = replace(opt, run=None, problem=DISAGG_NOT_SIZED)
        if opt.run is not None and opt.split is not None and p.headroom:
            opt = replace(opt, run=None, problem="N+k headroom (--headroom) is not searched "
                          "for a split fleet (which pool loses the replicas?)")
        if opt.run is not None:
            trace = p.traces.get(p.workload_at(opt.run.workload, p.rate_per_s), p.seeds[0])
            floors = slo_floors_ms(opt.run, int(trace.prompt_tokens.min()))
            problems = unreachable(p.base.spec.slo.targets, floors)
            g, shape = opt.gpus_per_replica, _shape_words(opt)
            if p.mode == "rate" and p.gpus % g:
                problems.append(f"{p.gpus} GPUs is not a multiple of {shape}")
            if p.mode == "gpus" and p.max_gpus < g:
                problems.append(f"max_gpus {p.max_gpus} is below {shape}")
            if problems:
                opt = replace(opt, run=None, problem="; ".join(problems))
        out.append(opt)
    if all(o.run is None for o in out):
        raise ScenarioError(f"no configuration can be sized; {out[0].label}: "
                            f"{out[0].problem}", file=str(p.base.path))
    return out


class _Evaluator:
    """Runs configurations (option, replicas, rate) × seeds in batches and remembers them."""

    def __init__(self, p: SizingPlan, runner: Runner, progress: Progress | None):
        self.p, self.runner, self.progress = p, runner, progress
        self.by_key = {o.key: o for o in p.options if o.run is not None}
        self.done: dict[tuple, Evaluation] = {}
        self.outcomes: list[RunOutcome] = []
        self.finished_runs = 0

    def config(self, key, x) -> tuple[int, float]:
        """(replicas, rate) of candidate ``x`` of option ``key``."""
        if self.p.mode == "gpus":
            return (x if isinstance(x, tuple) else int(x)), self.p.rate_per_s
        return self.p.gpus // self.by_key[key].gpus_per_replica - self.p.headroom, float(x)

    def batch(self, pending: list[tuple[tuple, Any]]) -> None:
        todo = [(k, *self.config(k, x)) for k, x in pending]
        todo = [c for c in dict.fromkeys(todo) if c not in self.done]
        tasks = [self._task(k, n, rate, rep, seed) for k, n, rate in todo
                 for rep, seed in enumerate(self.p.seeds)]
        base = self.finished_runs
        total = base + len(tasks)
        results = self.runner.map(execute, tasks, (lambda d, _t: self.progress(base + d, total))
                                  if self.progress else None)
        self.finished_runs = total
        self.outcomes.extend(results)
        k_seeds = len(self.p.seeds)
        for i, (k, n, rate) in enumerate(todo):
            self.done[(k, n, rate)] = Evaluation(k, n, rate,
                                                 tuple(results[i * k_seeds:(i + 1) * k_seeds]),
                                                 dict(self.p.slo(k).slo.targets))

    def get(self, key, x) -> Evaluation:
        return self.done[(key, *self.config(key, x))]

    def _task(self, key, replicas: int, rate: float, rep: int, seed: int) -> RunTask:
        opt = self.by_key[key]
        trace = self.p.traces.get(self.p.workload_at(opt.run.workload, rate), seed)
        run = replace(fleet_at(opt.run, replicas), seed=seed)
        labels = {"variant": opt.variant, "hardware": opt.hardware,
                  "tensor_parallel_size": opt.tensor_parallel_size,
                  "num_replicas": sum(replicas) if isinstance(replicas, tuple) else replicas,
                  "offered_rate_per_s": rate, "replication": rep, "seed": seed,
                  **split_labels(opt, replicas)}
        edged = self.p.slo(key)
        return RunTask(labels, run, trace, edged.slo, edged.class_slos,
                       percentiles=self.p.percentiles)


def _lockstep(searches: dict[tuple, Generator], ev: _Evaluator) -> dict[tuple, Any]:
    """Advance every search together; each round's candidates run as one batch."""
    pending = {k: next(g) for k, g in searches.items()}
    answers: dict[tuple, Any] = {}
    while pending:
        ev.batch(list(pending.items()))
        nxt = {}
        for k, x in pending.items():
            try:
                nxt[k] = searches[k].send(ev.get(k, x).passed)
            except StopIteration as stop:
                answers[k] = stop.value
        pending = nxt
    return answers


def run(p: SizingPlan, runner: Runner, progress: Progress | None = None) -> SizingResult:
    """Search every feasible option and rank the answers."""
    ev = _Evaluator(p, runner, progress)
    if p.mode == "gpus":
        searches = {k: fewest_split_passing(o.split.ratio, max(p.max_gpus // o.gpus_per_replica, 1))
                    if o.split is not None else
                    fewest_passing(max(p.max_gpus // o.gpus_per_replica - p.headroom, 1))
                    for k, o in ev.by_key.items()}
    else:
        r = p.rate_per_s
        searches = {k: highest_passing(r, p.rate_tolerance, r / RATE_RANGE, r * RATE_RANGE)
                    for k in ev.by_key}
    answers = _lockstep(searches, ev)
    if p.headroom and p.mode == "gpus":      # the plain answer with k down, for comparison
        plain_k_down = [(k, a.best - p.headroom) for k, a in answers.items()
                        if a.best is not None and a.best > p.headroom]
        if plain_k_down:
            ev.batch(plain_k_down)
    rows = [_row(p, ev, o, answers.get(o.key)) for o in p.options]
    if p.mode == "gpus":
        rows = gpus_saved(rows, p.options, p.max_gpus)
    return SizingResult(base=p.base, mode=p.mode, rate_per_s=p.rate_per_s if p.mode == "gpus"
                        else None, gpus=p.gpus, max_gpus=p.max_gpus, seeds=p.seeds,
                        rows=_ranked(rows, p.mode), runs=outcomes_frame(ev.outcomes),
                        trust_edge=p.trust_edge)


# --------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------


def split_labels(opt: FleetOption, replicas) -> dict[str, Any]:
    """A disaggregated candidate's run labels: pool sizes and TPs, its pools ({} when
    co-located, so a search without splits writes the columns it always did)."""
    if opt.split is None:
        return {}
    return {"prefill_replicas": replicas[0], "decode_replicas": replicas[1],
            "prefill_tp": opt.run.pool("prefill").engine.tensor_parallel_size,
            "decode_tp": opt.run.pool("decode").engine.tensor_parallel_size,
            "pools": opt.split.label}


def _row(p: SizingPlan, ev: _Evaluator, opt: FleetOption, answer) -> SizingRow:
    head = dict(rank=0, variant=opt.variant, hardware=opt.hardware,
                tensor_parallel_size=opt.tensor_parallel_size,
                pipeline_parallel_size=opt.pipeline_parallel_size)
    if opt.split is not None:
        head.update(link=opt.split.link, pools=opt.split.label)
    if opt.run is None:
        return SizingRow(**head, status="infeasible", note=opt.problem)
    head["trust"] = p.slo(opt.key).note
    if opt.split is not None:
        return _split_row(p, ev, opt, answer, head)
    tested = list(answer.tested)
    if answer.best is None:
        best = max((ev.get(opt.key, x) for x in tested),
                   key=lambda e: (e.pass_runs, e.binding().margin_frac))
        return SizingRow(**head, status="not met", **_figures(best), note=_not_met(p, best),
                         evaluations=len(tested))
    chosen = ev.get(opt.key, answer.best)
    note = ""
    if p.mode == "rate" and answer.capped:
        note = f"still meets the SLOs at {answer.best:g} req/s, the search's upper end"
    failing = _failing_neighbour(p, ev, opt, answer)
    binding = failing.binding() if failing is not None else None
    figures = _figures(chosen, binding.name if binding is not None else None)
    if binding is not None:
        figures.update(binding_failed_value=binding.worst,
                       binding_failed_at=(failing.outcomes[0].total.num_gpus if p.mode == "gpus"
                                          else failing.rate_per_s))
    elif not note:
        note = ("one replica meets every target: no target binds"
                if p.mode == "gpus" else "")
    binding_name = figures["binding"] or None
    if p.headroom:
        figures, why = _with_headroom(figures, p.headroom, opt.gpus_per_replica,
                                      opt.run.pools[0].hardware.price_per_gpu_hour_usd)
        figures.update(_violations_k_down(p, ev, opt, chosen))
        note = "; ".join(n for n in (note, why, _violations_note(p.headroom, figures)) if n)
    bounds = _autoscaler_note(opt.run, figures["num_replicas"])
    if p.headroom and not bounds:
        bounds = _below_min_note(opt.run, chosen.num_replicas, p.headroom)
    note = "; ".join(n for n in (note, bounds) if n)
    return SizingRow(**head, status="met", **figures,
                     within_noise=_within_noise(p, ev, opt, answer, chosen, binding_name),
                     note=note, evaluations=len(tested), headroom_replicas=p.headroom)


def _split_row(p: SizingPlan, ev: _Evaluator, opt: FleetOption, answer,
               head: dict[str, Any]) -> SizingRow:
    """A disaggregated option's row: the minimal (P, D) found, and the target that binds
    where one pool loses a replica (the decode pool first: (P, D − 1), else (P − 1, D_hi))."""
    head.update(prefill_tp=opt.run.pool("prefill").engine.tensor_parallel_size,
                decode_tp=opt.run.pool("decode").engine.tensor_parallel_size)
    tested = list(answer.tested)
    if answer.best is None:
        best = max((ev.get(opt.key, x) for x in tested),
                   key=lambda e: (e.pass_runs, e.binding().margin_frac))
        return SizingRow(**head, status="not met", **_figures(best), note=_not_met(p, best),
                         evaluations=len(tested), prefill_replicas=best.num_replicas[0],
                         decode_replicas=best.num_replicas[1])
    pre, dec = answer.best
    chosen = ev.get(opt.key, answer.best)
    failing = [ev.get(opt.key, x) for x in ((pre, dec - 1), (pre - 1, answer.bracket[1]))
               if answer.tested.get(x) is False]
    binding = failing[0].binding() if failing else None
    figures = _figures(chosen, binding.name if binding is not None else None)
    figures["num_replicas"] = pre + dec
    note = "" if failing else "one replica per pool meets every target: no target binds"
    if binding is not None:
        figures.update(binding_failed_value=binding.worst,
                       binding_failed_at=failing[0].outcomes[0].total.num_gpus)
    flaky = any(ev.get(opt.key, x).pass_runs > 0 for x in ((pre, dec - 1), (pre - 1, dec))
                if x in answer.tested)
    noise = None if len(p.seeds) < 2 else flaky or any(
        s.ci_straddles_bound for s in chosen.target_stats()
        if binding is None or s.name == binding.name)
    return SizingRow(**head, status="met", **figures, within_noise=noise, note=note,
                     evaluations=len(tested), prefill_replicas=pre, decode_replicas=dec)


def _with_headroom(figures: dict[str, Any], k: int, gpus_per_replica: int,
                   price_per_gpu_hour_usd: float) -> tuple[dict[str, Any], str]:
    """The answer with ``k`` spare replicas: the N − k that met the SLOs plus k, priced as
    the answer's fleet plus k replicas paid all the time (a fixed fleet's price × N / (N −
    k); an autoscaled fleet's mean price, not its starting count, plus k) — the same
    tokens, so $/M tokens grow as $/h."""
    serving = figures["num_replicas"]
    spare_gpus = k * gpus_per_replica
    cost = figures["cost_per_hour_usd"]
    scale = (cost + spare_gpus * price_per_gpu_hour_usd) / cost if cost > 0 else math.nan
    out = dict(figures, num_replicas=serving + k, num_gpus=figures["num_gpus"] + spare_gpus,
               cost_per_hour_usd=cost * scale,
               cost_per_million_output_tokens_usd=
               figures["cost_per_million_output_tokens_usd"] * scale)
    return out, f"N+{k}: meets the SLOs with {k} of {serving + k} replicas down"


def _violations_k_down(p: SizingPlan, ev: _Evaluator, opt: FleetOption,
                       chosen: Evaluation) -> dict[str, float]:
    """SLO-violation minutes (mean over seeds) with k replicas down: the answer's N − k
    serving (it was run so), and without the headroom — the N − k that met the SLOs
    bought, k of them down: N − 2k serving (run after the search; none serving when
    N − k ≤ k: every minute). Capacity sizing and a steady load (no day view, the first
    NaN) leave the second NaN."""
    with_ = _mean_violation(chosen)
    without = math.nan
    if p.mode == "gpus" and not math.isnan(with_):     # NaN: no day view (a steady load)
        fewer = chosen.num_replicas - p.headroom
        without = _mean_violation(ev.get(opt.key, fewer)) if fewer >= 1 \
            else chosen.outcomes[0].day_minutes
    return {"violation_min_with_headroom": with_, "violation_min_without_headroom": without}


def _mean_violation(e: Evaluation) -> float:
    return sum(o.violation_minutes for o in e.outcomes) / len(e.outcomes)


def _violations_note(k: int, figures: dict[str, Any]) -> str:
    """The violation minutes of :func:`_violations_k_down` as words ("" without a day view)."""
    a, b = figures["violation_min_with_headroom"], figures["violation_min_without_headroom"]
    if math.isnan(a):
        return ""
    none_left = figures["num_replicas"] - 2 * k < 1     # N − 2k serving: every minute
    without = "" if math.isnan(b) else \
        f", {b:g} without it{' (none left serving)' if none_left else ''}"
    return f"SLO-violation minutes with {k} down: {a:g} with the headroom{without}"


def _autoscaler_note(run: RunConfig, replicas: int) -> str:
    """A sized count outside the variant's ``cluster.autoscaling`` bounds, said ("" inside
    them, or without an autoscaler): candidates are run from that many replicas, but the
    autoscaler keeps the fleet within [min_replicas, max_replicas] over a run."""
    a = run.autoscaling
    if a is None or a.min_replicas <= replicas <= a.max_replicas:
        return ""
    fix = (f"raise cluster.autoscaling.max_replicas to {replicas}" if replicas > a.max_replicas
           else f"lower cluster.autoscaling.min_replicas to {replicas} to pay for fewer")
    return (f"{replicas} replicas is outside the autoscaler's [min_replicas, max_replicas] = "
            f"[{a.min_replicas}, {a.max_replicas}]: it would not keep {replicas}; {fix}")


def _below_min_note(run: RunConfig, serving: int, k: int) -> str:
    """With headroom: the N − k simulated below the autoscaler's ``min_replicas`` were not
    held — its first tick starts replicas up to the minimum — so "k down" was not what was
    tested ("" otherwise; day_in_the_life's N+1 variant, min 2, sized 1 + 1)."""
    a = run.autoscaling
    if a is None or serving >= a.min_replicas:
        return ""
    return (f"the {serving} replica(s) left serving are below the autoscaler's min_replicas "
            f"{a.min_replicas}: its first tick starts more, so {k} down was not held for the "
            "run")


def _failing_neighbour(p: SizingPlan, ev: _Evaluator, opt: FleetOption,
                       answer) -> Evaluation | None:
    """The evaluated configuration just past the answer that failed: one replica fewer
    (the searches always test it when the answer is above 1), or the lowest failing rate
    above the capacity; None when there is none."""
    if p.mode == "gpus":
        fewer = answer.best - 1
        return ev.get(opt.key, fewer) if answer.tested.get(fewer) is False else None
    above = [x for x, ok in answer.tested.items() if not ok and x > answer.best]
    return ev.get(opt.key, min(above)) if above else None


def _figures(e: Evaluation, binding: str | None = "") -> dict[str, Any]:
    """The row's figures at evaluation ``e``; ``binding`` names the target to report
    ("": the one with least headroom at ``e``, None: none)."""
    stats = {s.name: s for s in e.target_stats()}
    b = e.binding() if binding == "" else stats.get(binding) if binding else None
    gpus = e.outcomes[0].total.num_gpus
    n = sum(e.num_replicas) if isinstance(e.num_replicas, tuple) else e.num_replicas
    return dict(num_replicas=n, num_gpus=gpus, rate_per_s=e.rate_per_s,
                cost_per_hour_usd=e.outcomes[0].total.cost_per_hour_usd,
                cost_per_million_output_tokens_usd=e.mean("cost_per_million_output_tokens_usd"),
                output_throughput_tok_per_s=e.mean("output_throughput_tok_per_s"),
                binding=b.name if b else "", binding_value=b.worst if b else math.nan,
                binding_bound=b.bound if b else math.nan,
                margin_frac=b.margin_frac if b else math.nan)


def _not_met(p: SizingPlan, best: Evaluation) -> str:
    failed = [s for s in best.target_stats() if s.margin_frac < 0]
    what = "; ".join(f"{s.name} {'no data' if math.isnan(s.worst) else f'{s.worst:.4g}'} "
                     f"vs {s.bound:g}" for s in failed)
    where = (f"within max_gpus = {p.max_gpus}" if p.mode == "gpus"
             else f"at any rate down to {p.rate_per_s / RATE_RANGE:.3g} req/s")
    runs = f", {best.pass_runs}/{len(best.outcomes)} seeds pass" if len(best.outcomes) > 1 else ""
    return (f"cannot meet the SLO targets {where}; best found: "
            f"{_gpus(best.outcomes[0].total.num_gpus)} at {best.rate_per_s:.3g} req/s{runs}: "
            f"{what}")


def _gpus(n: int) -> str:
    return f"{n} GPU{'' if n == 1 else 's'}"


def _within_noise(p: SizingPlan, ev: _Evaluator, opt: FleetOption, answer,
                  chosen: Evaluation, binding: str | None) -> bool | None:
    """Could other traces change the answer? None with a single seed.

    Fewest GPUs: one replica fewer passed in some replications, or the
    binding target's 95 % interval at the answer contains its bound (any
    target's, when none binds).
    Capacity: the binding target's interval contains its bound (the next
    rate tried is within the search tolerance, so it is not evidence).
    """
    if len(p.seeds) < 2:
        return None
    stats = {s.name: s for s in chosen.target_stats()}
    straddles = (stats[binding].ci_straddles_bound if binding
                 else any(s.ci_straddles_bound for s in stats.values()))
    if p.mode == "rate":
        return straddles
    fewer = answer.best - 1
    flaky = fewer in answer.tested and ev.get(opt.key, fewer).pass_runs > 0
    return flaky or straddles


def _ranked(rows: list[SizingRow], mode: Mode) -> list[SizingRow]:
    order = {"met": 0, "not met": 1, "infeasible": 2}

    def key(r: SizingRow):
        nan_last = lambda v: math.inf if v is None or math.isnan(v) else v  # noqa: E731
        if mode == "gpus":
            return (order[r.status], nan_last(r.cost_per_hour_usd),
                    nan_last(r.cost_per_million_output_tokens_usd))
        return (order[r.status], -(r.rate_per_s or 0.0) if r.status == "met" else 0.0,
                nan_last(r.cost_per_million_output_tokens_usd))

    ranked = sorted(rows, key=key)
    return [replace(r, rank=i + 1 if r.status == "met" else 0) for i, r in enumerate(ranked)]


def rows_frame(rows: list[SizingRow]) -> pd.DataFrame:
    """sizing.csv: one row per fleet option, in rank order. The replica and GPU counts stay
    integers where an option that met nothing leaves them empty (pandas' nullable
    ``Int64``): ``2``, not ``2.0``."""
    frame = pd.DataFrame([{**r.__dict__, "configuration": r.label} for r in rows])
    if not any(r.headroom_replicas for r in rows):      # the columns of sizing without N+k
        frame = frame.drop(columns=["headroom_replicas", "violation_min_with_headroom",
                                    "violation_min_without_headroom"])
    if all(r.gpus_saved is None for r in rows):         # no cache-aware option compared
        frame = frame.drop(columns=["gpus_saved", "saved_against"])
    ints = ("num_replicas", "num_gpus", "prefill_replicas", "decode_replicas", "prefill_tp",
            "decode_tp", "gpus_saved")
    return frame.astype({c: "Int64" for c in ints if c in frame.columns})

