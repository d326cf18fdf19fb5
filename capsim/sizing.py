"""``capsim size``: the fewest GPUs that meet every SLO target, or what N GPUs sustain.

Two questions, one machinery:

- **fewest GPUs** at a request rate R: for every *fleet option* — a variant
  on one GPU profile at one tensor-parallel degree — search the number of
  replicas with :func:`capsim.search.fewest_passing` (doubling, then
  bisection; GPUs = replicas × TP, up to ``max_gpus``).
- **capacity** of N GPUs: for every option, the highest rate whose run still
  meets every target (:func:`capsim.search.highest_passing`).

A configuration *passes* when the ``cls == "all"`` summary row meets every
``slo.targets`` bound in each of the K replications (independent traces,
seeds ``seed .. seed + K − 1``). All options' searches advance in lock-step,
and each round's pending runs (options × K) go to the runner as one batch.
Every option sees the same K traces at a given rate (common random numbers).

Disaggregated variants (P + D pools) are not searched yet: :func:`fleet_at`
is the hook — a 2-D search over prefill and decode replicas replaces the
1-D one there.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from capsim.config import LoadedScenario, RunConfig, load
from capsim.config_workload import WorkloadConfig
from capsim.confidence import mean_ci
from capsim.errors import ScenarioError
from capsim.hardware import load_hardware
from capsim.parallel import Progress, Runner
from capsim.roofline import StepPricer, attn_pairs
from capsim.search import fewest_passing, highest_passing
from capsim.slo import UPPER_BOUND_TARGETS
from capsim.sweep import TraceCache, offered_rate_per_s
from capsim.task import RunOutcome, RunTask, execute, outcomes_frame

#: How far the capacity search may go from its start rate, both ways (factor).
RATE_RANGE = 64.0
#: Why a disaggregated variant gets no answer yet (see :func:`fleet_at`).
DISAGG_NOT_SIZED = ("disaggregated (prefill + decode pools): sizing searches one replica count "
                    "and does not split pools yet")

Mode = Literal["gpus", "rate"]


# --------------------------------------------------------------------------
# Fleet options
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetOption:
    """One configuration to size: a variant on one GPU profile at one TP degree.

    ``run`` is None and ``problem`` says why when the option cannot run at all
    (the model does not fit, TP does not divide the heads, an SLO floor).
    """

    variant: str
    hardware: str
    tensor_parallel_size: int
    run: RunConfig | None
    problem: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.variant, self.hardware, self.tensor_parallel_size)

    @property
    def label(self) -> str:
        """E.g. ``chunked · h100-sxm TP1``."""
        return f"{self.variant} · {self.hardware} TP{self.tensor_parallel_size}"


def fleet_options(base: LoadedScenario, overrides: list[str], hardware: list[str] | None,
                  tps: list[int] | None) -> list[FleetOption]:
    """Every variant × hardware × TP choice (None: each variant's own), loaded and resolved.

    Raises:
        ScenarioError: an unknown hardware name in ``hardware``.
    """
    for i, name in enumerate(hardware or []):
        try:
            load_hardware(name)
        except ScenarioError as exc:
            raise exc.with_context(file=str(base.path), path=f"sizing.hardware.{i}") from None
    out = []
    for hw in hardware or [None]:
        for tp in tps or [None]:
            out.extend(_options_for(base, overrides, hw, tp))
    return out


def _options_for(base: LoadedScenario, overrides: list[str], hw: str | None,
                 tp: int | None) -> list[FleetOption]:
    extra = _choice_overrides(base, hw, tp)
    try:
        loaded = load(base.path, overrides + extra, base.spec.seed)
    except ScenarioError as exc:
        return [FleetOption(rc.variant, hw or rc.hardware.name,
                            tp or rc.engine.tensor_parallel_size, None, str(exc))
                for rc in base.runs]
    return [FleetOption(rc.variant, rc.hardware.name, rc.engine.tensor_parallel_size, rc)
            for rc in loaded.runs]


def _choice_overrides(base: LoadedScenario, hw: str | None, tp: int | None) -> list[str]:
    """``--set`` strings putting every variant on ``hw`` at TP ``tp`` (over their own choices)."""
    out = []
    if hw is not None:
        out.append(f"hardware={hw}")
        out += [f"variants.{i}.hardware={hw}" for i, v in enumerate(base.spec.variants)
                if v.hardware is not None]
    if tp is not None:
        out.append(f"engine.tensor_parallel_size={tp}")
        out += [f"variants.{i}.engine.tensor_parallel_size={tp}"
                for i, v in enumerate(base.spec.variants) if "tensor_parallel_size" in v.engine]
    return out


def fleet_at(run: RunConfig, replicas: int) -> RunConfig:
    """``run`` with ``replicas`` engine replicas (GPUs = replicas × TP).

    The one place that turns a searched count into a fleet. Disaggregated
    variants (``run.disagg``) are marked :data:`DISAGG_NOT_SIZED` before any
    search; sizing them means returning prefill and decode pool sizes here
    (e.g. ``replace(run, disagg=...)`` with both pools' ``num_replicas``) and
    a 2-D search over (P, D) in :func:`run`.
    """
    return replace(run, cluster=run.cluster.model_copy(update={"num_replicas": replicas}))


# --------------------------------------------------------------------------
# SLO floors: targets no fleet can meet
# --------------------------------------------------------------------------


def slo_floors_ms(run: RunConfig, min_prompt_tokens: int) -> dict[str, float]:
    """Lower bounds of latency metrics that no number of replicas can beat, ms.

    - ITL / TPOT: one decode step of a single sequence at context 1.
    - TTFT: the shortest prompt of the trace prefilled in one step, alone.

    Both from the roofline (:class:`capsim.roofline.StepPricer`); adding
    sequences, context or chunks only lengthens steps.
    """
    pricer = StepPricer(run.model, run.hardware, run.engine.tensor_parallel_size,
                        weight_dtype=run.engine.dtype,
                        kv_cache_dtype_bytes=run.engine.kv_dtype_bytes)
    decode = pricer.cost(decode_seqs=1, decode_ctx_tokens=1, logits_seqs=1).seconds * 1e3
    p = int(min_prompt_tokens)
    prefill = pricer.cost(prefill_tokens=p, prefill_attn_pairs=attn_pairs(p, 0),
                          prefill_kv_tokens=p, logits_seqs=1).seconds * 1e3
    return {"itl": decode, "tpot": decode, "ttft": prefill}


def unreachable(targets: dict[str, float], floors_ms: dict[str, float]) -> list[str]:
    """Targets below their floor, e.g. ``["itl_p99_ms ≤ 2 but one decode step takes 4.7 ms"]``."""
    out = []
    for name, bound in targets.items():
        prefix = name.split("_")[0]
        if name.endswith("_ms") and prefix in floors_ms and bound < floors_ms[prefix]:
            what = ("a lone prefill of the shortest prompt" if prefix == "ttft"
                    else "one decode step")
            out.append(f"{name} ≤ {bound:g} but {what} takes {floors_ms[prefix]:.3g} ms")
    return out


# --------------------------------------------------------------------------
# Evaluations: one configuration × K replications
# --------------------------------------------------------------------------


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
    margin_frac: float = math.nan
    within_noise: bool | None = None
    note: str = ""
    evaluations: int = 0

    @property
    def label(self) -> str:
        return f"{self.variant} · {self.hardware} TP{self.tensor_parallel_size}"


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
         max_gpus: int | None = None) -> SizingPlan:
    """Combine the CLI options with the ``sizing:`` section and check the question.

    Arguments given here override ``sizing:``; ``gpus`` switches to the
    capacity question.

    Raises:
        ScenarioError: no ``slo.targets``; an unknown hardware name; every
            option infeasible (too big for memory, or a target below what any
            fleet can reach — the message says which and why).
    """
    spec, path = base.spec, str(base.path)
    sizing = spec.sizing
    if not spec.slo.targets:
        raise ScenarioError("capsim size needs at least one run-level target to meet, e.g. "
                            "slo: {targets: {itl_p99_ms: 60, ttft_p99_ms: 2000}}",
                            file=path, path="slo.targets")
    gpus = gpus if gpus is not None else (sizing.gpus if sizing else None)
    seeds_k = num_seeds or (sizing.seeds if sizing else 1)
    if seeds_k < 1:
        raise ScenarioError(f"--seeds must be >= 1, got {seeds_k}")
    p = SizingPlan(base=base, options=[], mode="rate" if gpus else "gpus", rate_per_s=0.0,
                   gpus=gpus, max_gpus=max_gpus or (sizing.max_gpus if sizing else 64),
                   seeds=[spec.seed + r for r in range(seeds_k)],
                   rate_tolerance=sizing.rate_tolerance if sizing else 0.02,
                   traces=TraceCache(base.base_dir))
    p.rate_per_s = _start_rate(p, rate_per_s)
    options = fleet_options(base, list(overrides), sizing.hardware if sizing else None,
                            sizing.tensor_parallel_size if sizing else None)
    p.options = _check_options(p, options)
    return p


def _start_rate(p: SizingPlan, rate_per_s: float | None) -> float:
    spec = p.base.spec
    rate = rate_per_s or (spec.sizing.rate_per_s if spec.sizing else None)
    if rate is not None and rate <= 0:
        raise ScenarioError(f"--rate must be > 0 requests/s, got {rate:g}")
    if rate is None:
        rate = offered_rate_per_s(spec.workload, p.traces.get(spec.workload, p.seeds[0]))
    return float(rate)


def _check_options(p: SizingPlan, options: list[FleetOption]) -> list[FleetOption]:
    """Mark options that can never pass (floors, GPU count); raise if none is left."""
    out = []
    for opt in options:
        if opt.run is not None and opt.run.disagg is not None:
            opt = replace(opt, run=None, problem=DISAGG_NOT_SIZED)
        if opt.run is not None:
            trace = p.traces.get(p.workload_at(opt.run.workload, p.rate_per_s), p.seeds[0])
            floors = slo_floors_ms(opt.run, int(trace.prompt_tokens.min()))
            problems = unreachable(p.base.spec.slo.targets, floors)
            tp = opt.tensor_parallel_size
            if p.mode == "rate" and p.gpus % tp:
                problems.append(f"{p.gpus} GPUs is not a multiple of TP {tp}")
            if p.mode == "gpus" and p.max_gpus < tp:
                problems.append(f"max_gpus {p.max_gpus} is below TP {tp}")
            if problems:
                opt = replace(opt, run=None, problem="; ".join(problems))
        out.append(opt)
    if all(o.run is None for o in out):
        raise ScenarioError(f"no configuration can be sized; {out[0].label}: "
                            f"{out[0].problem}", file=str(p.base.path), path="slo.targets")
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
            return int(x), self.p.rate_per_s
        return self.p.gpus // key[2], float(x)

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
                                                 dict(self.p.base.spec.slo.targets))

    def get(self, key, x) -> Evaluation:
        return self.done[(key, *self.config(key, x))]

    def _task(self, key, replicas: int, rate: float, rep: int, seed: int) -> RunTask:
        opt = self.by_key[key]
        trace = self.p.traces.get(self.p.workload_at(opt.run.workload, rate), seed)
        run = replace(fleet_at(opt.run, replicas), seed=seed)
        labels = {"variant": opt.variant, "hardware": opt.hardware,
                  "tensor_parallel_size": opt.tensor_parallel_size, "num_replicas": replicas,
                  "offered_rate_per_s": rate, "replication": rep, "seed": seed}
        return RunTask(labels, run, trace, self.p.base.spec.slo, self.p.base.class_slos)


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
        searches = {k: fewest_passing(max(p.max_gpus // k[2], 1)) for k in ev.by_key}
    else:
        r = p.rate_per_s
        searches = {k: highest_passing(r, p.rate_tolerance, r / RATE_RANGE, r * RATE_RANGE)
                    for k in ev.by_key}
    answers = _lockstep(searches, ev)
    rows = [_row(p, ev, o, answers.get(o.key)) for o in p.options]
    return SizingResult(base=p.base, mode=p.mode, rate_per_s=p.rate_per_s if p.mode == "gpus"
                        else None, gpus=p.gpus, max_gpus=p.max_gpus, seeds=p.seeds,
                        rows=_ranked(rows, p.mode), runs=outcomes_frame(ev.outcomes))


# --------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------


def _row(p: SizingPlan, ev: _Evaluator, opt: FleetOption, answer) -> SizingRow:
    head = dict(rank=0, variant=opt.variant, hardware=opt.hardware,
                tensor_parallel_size=opt.tensor_parallel_size)
    if opt.run is None:
        return SizingRow(**head, status="infeasible", note=opt.problem)
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
    return SizingRow(**head, status="met", **_figures(chosen),
                     within_noise=_within_noise(p, ev, opt, answer, chosen), note=note,
                     evaluations=len(tested))


def _figures(e: Evaluation) -> dict[str, Any]:
    b = e.binding()
    gpus = e.outcomes[0].total.num_gpus
    return dict(num_replicas=e.num_replicas, num_gpus=gpus, rate_per_s=e.rate_per_s,
                cost_per_hour_usd=e.outcomes[0].total.cost_per_hour_usd,
                cost_per_million_output_tokens_usd=e.mean("cost_per_million_output_tokens_usd"),
                output_throughput_tok_per_s=e.mean("output_throughput_tok_per_s"),
                binding=b.name, binding_value=b.worst, binding_bound=b.bound,
                margin_frac=b.margin_frac)


def _not_met(p: SizingPlan, best: Evaluation) -> str:
    failed = [s for s in best.target_stats() if s.margin_frac < 0]
    what = "; ".join(f"{s.name} {s.worst:.4g} vs {s.bound:g}" for s in failed)
    where = (f"within max_gpus = {p.max_gpus}" if p.mode == "gpus"
             else f"at any rate down to {p.rate_per_s / RATE_RANGE:.3g} req/s")
    runs = f", {best.pass_runs}/{len(best.outcomes)} seeds pass" if len(best.outcomes) > 1 else ""
    return (f"cannot meet the SLO targets {where}; best found: "
            f"{best.outcomes[0].total.num_gpus} GPUs at {best.rate_per_s:.3g} req/s{runs}: {what}")


def _within_noise(p: SizingPlan, ev: _Evaluator, opt: FleetOption, answer,
                  chosen: Evaluation) -> bool | None:
    """Could other traces change the answer? None with a single seed.

    Fewest GPUs: one replica fewer passed in some replications, or the
    binding target's 95 % interval at the answer contains its bound.
    Capacity: the binding target's interval contains its bound (the next
    rate tried is within the search tolerance, so it is not evidence).
    """
    if len(p.seeds) < 2:
        return None
    straddles = chosen.binding().ci_straddles_bound
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
    """sizing.csv: one row per fleet option, in rank order."""
    return pd.DataFrame([{**r.__dict__, "configuration": r.label} for r in rows])

