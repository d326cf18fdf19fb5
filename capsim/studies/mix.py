"""``capsim size`` for a pooled fleet (``cluster.pools``): the cheapest mix of replicas per
pool that meets every SLO target at a request rate.

A *mix* gives each pool a replica count within ``[lo, hi]``: ``lo`` is 1 for a pool a
route names or the only pool serving a model some class asks for (leaving it out would
strand requests), else 0; ``hi`` and the mix's total GPUs are bounded by ``max_gpus``.
Every mix is priced ($/h = Σ replicas × GPUs per replica × the GPU's hourly price) and the
mixes are tried cheapest first (ties: fewer GPUs, then the pools' order), skipping any
mix whose every pool has at most the replicas of a mix that already failed: as in the
single-fleet search (:mod:`capsim.studies.sizing`), more replicas are assumed never to
turn a pass into a fail, so such a mix fails too. Each round runs the next ``batch``
untried mixes (× K seeds) as one parallel batch; the first that passes in cost order is
the answer, since every cheaper mix was run and failed or is dominated by one that did.
The search is deterministic and bounded by the number of mixes (at most
:data:`MAX_MIXES`).

The *binding* SLO: every mix one replica below the answer in one pool is run (if the
search skipped it) and fails; the target reported is the worst miss of the one closest
to passing — the constraint that stops the mix from shrinking — with the pool that lost
the replica.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import pandas as pd

from capsim.common.errors import ScenarioError
from capsim.metrics.pools import pool_rows
from capsim.scenario.sweep import check_num_seeds
from capsim.scenario.load import LoadedScenario
from capsim.scenario.run_config import RunConfig
from capsim.scenario.workload import WorkloadConfig
from capsim.studies.evaluation import Evaluation
from capsim.studies.parallel import Progress, Runner
from capsim.studies.sweep import offered_rate_per_s
from capsim.sim.simulate import simulate
from capsim.studies.task import RunOutcome, RunTask, execute, outcomes_frame
from capsim.workload import TraceCache

#: Most mixes one search may enumerate (pools × their replica ranges).
MAX_MIXES = 200_000

Mix = tuple[int, ...]


@dataclass(frozen=True)
class PoolAnswer:
    """One pool of the chosen mix."""

    name: str
    hardware: str
    model: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int
    num_replicas: int
    price_per_hour_usd: float
    # The pool's own figures in the answer's run on the first seed (metrics.pools).
    num_requests: int = 0
    num_rejected: int = 0               # of num_requests (any reason: SummaryRow.num_rejected)
    ttft_p99_ms: float = math.nan
    itl_p99_ms: float = math.nan
    cost_per_million_output_tokens_usd: float = math.nan

    @property
    def num_gpus(self) -> int:
        return self.num_replicas * self.gpus_per_replica


@dataclass(frozen=True)
class MixAnswer:
    """A pooled variant's answer.

    ``status``: "met" or "not met" (no mix within ``max_gpus``; ``pools`` then describe the
    best mix found, by passing replications then margin). ``binding``: the target that
    fails one replica below the answer (``binding_pool`` lost it), with its value there
    (``binding_failed_value``) and at the answer (``binding_value``, ``margin_frac``);
    empty when no smaller mix exists.
    """

    variant: str
    status: str
    pools: list[PoolAnswer]
    cost_per_hour_usd: float = math.nan
    cost_per_million_output_tokens_usd: float = math.nan
    output_throughput_tok_per_s: float = math.nan
    binding: str = ""
    binding_pool: str = ""
    binding_bound: float = math.nan
    binding_value: float = math.nan
    binding_failed_value: float = math.nan
    margin_frac: float = math.nan
    evaluations: int = 0
    note: str = ""

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    @property
    def label(self) -> str:
        """E.g. ``2 × h100 + 1 × h200``."""
        return " + ".join(f"{p.num_replicas} × {p.name}" for p in self.pools if p.num_replicas)


@dataclass
class MixPlan:
    """A validated mix-sizing question for the pooled variants of ``base``."""

    base: LoadedScenario
    runs: list[RunConfig]
    rate_per_s: float
    max_gpus: int
    seeds: list[int]
    traces: TraceCache
    batch: int = 4          # mixes per round: fixed, so every backend runs the same mixes
    percentiles: tuple[float, ...] = ()   # --percentiles: the runs' summary columns

    def workload_at(self, wl: WorkloadConfig) -> WorkloadConfig:
        """``wl`` offering the plan's rate (the synthetic rate, or a trace's ``rate_scale``)."""
        if wl.arrival is not None:
            return wl.model_copy(update={"arrival": wl.arrival.model_copy(
                update={"rate_per_s": self.rate_per_s})})
        native = offered_rate_per_s(wl, self.traces.get(wl, self.seeds[0])) / wl.trace.rate_scale
        return wl.model_copy(update={"trace": wl.trace.model_copy(
            update={"rate_scale": self.rate_per_s / native})})


@dataclass(frozen=True)
class MixResult:
    plan: MixPlan
    answers: list[MixAnswer]
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def any_met(self) -> bool:
        return any(a.status == "met" for a in self.answers)


def plan_mix(base: LoadedScenario, *, rate_per_s: float | None = None,
             max_gpus: int | None = None, num_seeds: int | None = None,
             batch: int = 4) -> MixPlan:
    """The mix-sizing question of ``base``'s pooled variants.

    Raises:
        ScenarioError: a variant that is not pooled next to pooled ones, no ``slo.targets``,
            a closed loop, a non-positive rate, or a pool whose replica does not fit in
            ``max_gpus``.
    """
    spec, path = base.spec, str(base.path)
    single = [rc.variant for rc in base.runs if rc.fleet is None]
    if single:
        raise ScenarioError(f"capsim size sizes either pooled fleets (cluster.pools) or single "
                            f"fleets, not both in one scenario; variant {single[0]} has no "
                            "pools: size it in a scenario of its own", file=path,
                            path="variants")
    if not spec.slo.targets:
        raise ScenarioError("capsim size needs at least one run-level target to meet, e.g. "
                            "slo: {targets: {itl_p99_ms: 60, ttft_p99_ms: 2000}}", file=path,
                            path="slo.targets")
    arrival = spec.workload.arrival
    if arrival is not None and (arrival.closed_loop or arrival.all_at_once):
        raise ScenarioError("capsim size needs a finite open-loop request rate", file=path,
                            path="workload.arrival")
    sizing = spec.sizing
    seeds_k = num_seeds or (sizing.seeds if sizing else 1)
    check_num_seeds(seeds_k)
    traces = TraceCache(base.base_dir, path)
    rate = rate_per_s or (sizing.rate_per_s if sizing else None)
    if rate is None:
        rate = offered_rate_per_s(spec.workload, traces.get(spec.workload, spec.seed))
    p = MixPlan(base=base, runs=list(base.runs), rate_per_s=float(rate),
                max_gpus=max_gpus or (sizing.max_gpus if sizing else 64),
                seeds=[spec.seed + r for r in range(seeds_k)], traces=traces, batch=batch)
    for rc in p.runs:
        for fp in rc.fleet.pools:
            if fp.gpus_per_replica > p.max_gpus:
                raise ScenarioError(f"pool {fp.name} needs {fp.gpus_per_replica} GPUs per "
                                    f"replica, more than max_gpus {p.max_gpus}", file=path,
                                    path="sizing.max_gpus")
        try:
            _mixes(rc, p.max_gpus)            # refuses a search too large to enumerate
        except ScenarioError as exc:
            raise exc.with_context(file=path) from None
    return p


def _bounds(run: RunConfig, max_gpus: int) -> list[tuple[int, int]]:
    required = run.fleet.required()
    return [(1 if fp.name in required else 0, max_gpus // fp.gpus_per_replica)
            for fp in run.fleet.pools]


def mix_cost_per_hour(run: RunConfig, mix: Mix) -> float:
    """$/h of ``mix``: Σ replicas × GPUs per replica × the GPU's price per hour."""
    return sum(n * fp.price_per_replica_hour_usd for n, fp in zip(mix, run.fleet.pools))


def _gpus(run: RunConfig, mix: Mix) -> int:
    return sum(n * fp.gpus_per_replica for n, fp in zip(mix, run.fleet.pools))


def _mixes(run: RunConfig, max_gpus: int) -> list[Mix]:
    """Every mix within the bounds, at most ``max_gpus`` GPUs and at least one replica of a
    pool serving each model a class asks for, in search order: $/h, then GPUs, then the
    counts.

    Raises:
        ScenarioError: more than :data:`MAX_MIXES` mixes.
    """
    bounds = _bounds(run, max_gpus)
    size = math.prod(hi - lo + 1 for lo, hi in bounds)
    if size > MAX_MIXES:
        raise ScenarioError(f"{len(bounds)} pools up to {max_gpus} GPUs make {size:,} mixes to "
                            f"search, more than {MAX_MIXES:,}; lower sizing.max_gpus",
                            path="sizing.max_gpus")
    fleet = run.fleet
    asked = [[k for k, fp in enumerate(fleet.pools) if fp.model.name == model]
             for model in set(fleet.class_models)]
    # every model a class asks for keeps a replica somewhere (else its requests are all
    # rejected and the rest of the fleet could "pass" without them)
    out = [m for m in itertools.product(*(range(lo, hi + 1) for lo, hi in bounds))
           if sum(m) > 0 and _gpus(run, m) <= max_gpus
           and all(any(m[k] for k in pools) for pools in asked)]
    return sorted(out, key=lambda m: (round(mix_cost_per_hour(run, m), 9), _gpus(run, m), m))


def _dominated(mix: Mix, failed: list[Mix]) -> bool:
    return any(all(a <= b for a, b in zip(mix, f)) for f in failed)


class _Evaluator:
    """Runs mixes × seeds in batches and remembers them."""

    def __init__(self, p: MixPlan, run: RunConfig, runner: Runner, progress: Progress | None):
        self.p, self.run, self.runner, self.progress = p, run, runner, progress
        self.done: dict[Mix, Evaluation] = {}
        self.outcomes: list[RunOutcome] = []
        self.finished = 0
        self.trace_wl = p.workload_at(run.workload)

    def batch(self, mixes: list[Mix]) -> None:
        todo = [m for m in dict.fromkeys(mixes) if m not in self.done]
        tasks = [self._task(m, rep, seed) for m in todo for rep, seed in enumerate(self.p.seeds)]
        base, total = self.finished, self.finished + len(tasks)
        results = self.runner.map(execute, tasks, (lambda d, _t: self.progress(base + d, total))
                                  if self.progress else None)
        self.finished = total
        self.outcomes.extend(results)
        k = len(self.p.seeds)
        targets = dict(self.p.base.spec.slo.targets)
        for i, m in enumerate(todo):
            self.done[m] = Evaluation((self.run.variant, "mix", 0), sum(m), self.p.rate_per_s,
                                      tuple(results[i * k:(i + 1) * k]), targets)

    def _task(self, mix: Mix, rep: int, seed: int) -> RunTask:
        names = self.run.fleet.names
        run = replace(self.run.with_pool_replicas(dict(zip(names, mix))), seed=seed)
        labels = {"variant": self.run.variant, "mix": _label(names, mix),
                  **{f"replicas.{n}": c for n, c in zip(names, mix)},
                  "offered_rate_per_s": self.p.rate_per_s, "replication": rep, "seed": seed}
        return RunTask(labels, run, self.p.traces.get(self.trace_wl, seed),
                       self.p.base.spec.slo, self.p.base.class_slos,
                       percentiles=self.p.percentiles)


def _label(names: tuple[str, ...], mix: Mix) -> str:
    return " + ".join(f"{c} × {n}" for n, c in zip(names, mix) if c)


def search(run: RunConfig, ev: _Evaluator) -> tuple[Mix | None, int]:
    """The cheapest passing mix of ``run`` (None: none within the bounds) and the mixes run."""
    failed: list[Mix] = []
    order = _mixes(run, ev.p.max_gpus)
    i = 0
    while i < len(order):
        pending = []
        while i < len(order) and len(pending) < ev.p.batch:
            m = order[i]
            i += 1
            if not _dominated(m, failed):
                pending.append(m)
        if not pending:
            break
        ev.batch(pending)
        for m in pending:                   # in cost order: the first pass is the answer
            if ev.done[m].passed:
                return m, len(ev.done)
            failed.append(m)
    return None, len(ev.done)


def run_mix(p: MixPlan, runner: Runner, progress: Progress | None = None) -> MixResult:
    """Search every pooled variant of ``p``; one :class:`MixAnswer` each."""
    answers, outcomes = [], []
    for rc in p.runs:
        ev = _Evaluator(p, rc, runner, progress)
        best, _ = search(rc, ev)
        answer = _binding(rc, ev, best) if best is not None else _not_met(rc, ev)
        answers.append(_with_pool_figures(p, rc, answer))
        outcomes += ev.outcomes
    return MixResult(plan=p, answers=answers, runs=outcomes_frame(outcomes))


def _with_pool_figures(p: MixPlan, run: RunConfig, answer: MixAnswer) -> MixAnswer:
    """``answer`` with each pool's requests, TTFT / ITL p99 and $/M output tokens in the
    answer's mix on the first seed's trace (one more run: the search keeps fleet rows only)."""
    counts = {a.name: a.num_replicas for a in answer.pools}
    mixed = replace(run.with_pool_replicas(counts), seed=p.seeds[0])
    result = simulate(mixed, p.traces.get(p.workload_at(run.workload), p.seeds[0]))
    rows = {name: row for name, row in pool_rows(result, p.base.spec.slo, p.base.class_slos)
            if row.cls == "all"}
    pools = [replace(a, num_requests=rows[a.name].num_requests,
                     num_rejected=rows[a.name].num_rejected, ttft_p99_ms=rows[a.name].ttft_p99_ms, itl_p99_ms=rows[a.name].itl_p99_ms,
                     cost_per_million_output_tokens_usd=rows[a.name].
                     cost_per_million_output_tokens_usd) if a.name in rows else a
             for a in answer.pools]
    return replace(answer, pools=pools)


def _pools(run: RunConfig, mix: Mix) -> list[PoolAnswer]:
    return [PoolAnswer(fp.name, fp.pool.hardware.name, fp.model.name,
                       fp.pool.engine.tensor_parallel_size,
                       fp.pool.engine.pipeline_parallel_size, fp.gpus_per_replica, n,
                       n * fp.price_per_replica_hour_usd)
            for fp, n in zip(run.fleet.pools, mix)]


def _binding(run: RunConfig, ev: _Evaluator, best: Mix) -> MixAnswer:
    """The answer ``best`` with its binding SLO: every mix one replica below it in one pool
    is run (when the search skipped it)."""
    lo = [b[0] for b in _bounds(run, ev.p.max_gpus)]
    names = run.fleet.names
    fewer = {names[i]: tuple(c - (j == i) for j, c in enumerate(best))
             for i in range(len(best)) if best[i] > lo[i] and sum(best) > 1}
    ev.batch(list(fewer.values()))
    chosen = ev.done[best]
    head = dict(variant=run.variant, status="met", pools=_pools(run, best),
                cost_per_hour_usd=mix_cost_per_hour(run, best),
                cost_per_million_output_tokens_usd=chosen.mean(
                    "cost_per_million_output_tokens_usd"),
                output_throughput_tok_per_s=chosen.mean("output_throughput_tok_per_s"),
                evaluations=len(ev.done))
    passing = [n for n, m in fewer.items() if ev.done[m].passed]
    note = (f"one replica fewer in {', '.join(passing)} passes too: the search skipped it "
            "because a larger mix failed (more replicas did not always help here); treat the "
            "answer as within noise" if passing else "")
    failing = [(ev.done[m], n) for n, m in fewer.items() if not ev.done[m].passed]
    if not failing:
        return MixAnswer(**head, note=note or "no smaller mix exists: no target binds")
    fail, pool = max(failing, key=lambda fp: fp[0].binding().margin_frac)
    b = fail.binding()
    at = {s.name: s for s in chosen.target_stats()}[b.name]
    return MixAnswer(**head, binding=b.name, binding_pool=pool, binding_bound=b.bound,
                     binding_value=at.worst, binding_failed_value=b.worst,
                     margin_frac=at.margin_frac, note=note)


def _not_met(run: RunConfig, ev: _Evaluator) -> MixAnswer:
    best_mix, e = max(ev.done.items(), key=lambda kv: (kv[1].pass_runs, kv[1].binding().margin_frac))
    failed = [s for s in e.target_stats() if s.margin_frac < 0]
    what = "; ".join(f"{s.name} {'no data' if math.isnan(s.worst) else f'{s.worst:.4g}'} "
                     f"vs {s.bound:g}" for s in failed)
    return MixAnswer(variant=run.variant, status="not met", pools=_pools(run, best_mix),
                     cost_per_hour_usd=mix_cost_per_hour(run, best_mix),
                     evaluations=len(ev.done),
                     note=f"no mix within max_gpus = {ev.p.max_gpus} meets the SLO targets; "
                          f"best found {_label(run.fleet.names, best_mix)}: {what}")


#: sizing.csv's integer columns, some empty on a pool's row or on the total's.
_INT_COLUMNS = ("tensor_parallel_size", "pipeline_parallel_size", "num_replicas", "num_gpus",
                "num_requests", "num_rejected", "evaluations")


def answers_frame(answers: list[MixAnswer]) -> pd.DataFrame:
    """sizing.csv for mixes: one row per variant × pool of the answer, then its total.
    Integer columns stay integers where a row leaves them empty (pandas' nullable
    ``Int64``), so the CSV reads ``2``, not ``2.0``."""
    rows = []
    for a in answers:
        for p in a.pools:
            rows.append({"variant": a.variant, "status": a.status, "pool": p.name,
                         "hardware": p.hardware, "model": p.model,
                         "tensor_parallel_size": p.tensor_parallel_size,
                         "pipeline_parallel_size": p.pipeline_parallel_size,
                         "num_replicas": p.num_replicas, "num_gpus": p.num_gpus,
                         "cost_per_hour_usd": p.price_per_hour_usd,
                         "cost_per_million_output_tokens_usd":
                             p.cost_per_million_output_tokens_usd,
                         "num_requests": p.num_requests, "num_rejected": p.num_rejected,
                         "ttft_p99_ms": p.ttft_p99_ms,
                         "itl_p99_ms": p.itl_p99_ms})
        rows.append({"variant": a.variant, "status": a.status, "pool": "total",
                     "num_replicas": sum(p.num_replicas for p in a.pools),
                     "num_gpus": a.num_gpus, "cost_per_hour_usd": a.cost_per_hour_usd,
                     "cost_per_million_output_tokens_usd": a.cost_per_million_output_tokens_usd,
                     "output_throughput_tok_per_s": a.output_throughput_tok_per_s,
                     "binding": a.binding, "binding_pool": a.binding_pool,
                     "binding_bound": a.binding_bound, "binding_value": a.binding_value,
                     "binding_failed_value": a.binding_failed_value,
                     "margin_frac": a.margin_frac, "evaluations": a.evaluations, "note": a.note})
    df = pd.DataFrame(rows)
    return df.astype({c: "Int64" for c in _INT_COLUMNS if c in df.columns})
