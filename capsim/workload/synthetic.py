"""Synthetic workloads: arrival processes, request classes, length distributions,
shared prefixes and multi-turn conversations.

Randomness. :func:`generate` derives independent child streams from
``np.random.SeedSequence(seed)`` (the seed sequence behind
``np.random.default_rng(seed)``) with ``SeedSequence.spawn``:

- stream 0: inter-arrival times,
- stream 1: class choice of each request,
- stream 2: token lengths, split again into one stream per class and, inside
  it, one for prompt lengths and one for output lengths;
- stream 3 (closed loop, which draws no arrival): block b of its rows draws its
  classes and lengths from ``SeedSequence(seed, spawn_key=(3, b))``, split as
  streams 1 and 2 (:func:`closed_loop_trace`).

So editing class ``i``'s output-length distribution changes neither the
arrival times, nor the class of any request, nor the lengths of other classes
or of class ``i``'s prompts. Everything is vectorised numpy (no per-request
Python loop): a million requests take a few tens of milliseconds.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from capsim.common.errors import ScenarioError
from capsim.scenario.workload import (
    ArrivalConfig,
    EmpiricalDist,
    FixedDist,
    LognormalDist,
    NormalDist,
    RequestClass,
    UniformDist,
    WorkloadConfig,
)
from capsim.workload.rate import class_rates, warp
from capsim.profiles.shapes import load_shape
from capsim.workload.replay import load_empirical
from capsim.workload.shapes import draw_pairs
from capsim.workload.trace import MAX_REQUESTS, MAX_SPAN_S, ClosedLoop, RequestTrace

def generate(workload: WorkloadConfig, seed: int, base_dir: Path) -> RequestTrace:
    """Draw the requests of a synthetic ``workload`` (arrival process + classes).

    Args:
        workload: the validated ``workload:`` section, without ``trace``.
        seed: non-negative integer; same seed and config give identical arrays.
        base_dir: directory of the scenario file; relative ``empirical.path``
            files resolve against it.

    Returns:
        A :class:`RequestTrace` in arrival order, ``class_names`` = the
        configured class names (for a closed loop, rows in sending order with NaN
        arrivals: :func:`closed_loop_trace`).

    Raises:
        ScenarioError: unreadable or malformed empirical CSV, a workload that
            yields no request, more than :data:`MAX_REQUESTS` requests, or arrivals
            beyond :data:`~capsim.workload.trace.MAX_SPAN_S`.
    """
    if workload.arrival.closed_loop:
        return closed_loop_trace(workload, seed, base_dir)
    arrival_ss, class_ss, length_ss = np.random.SeedSequence(seed).spawn(3)
    arrival_s, class_weights = _open_arrivals(workload, seed, np.random.default_rng(arrival_ss))
    _check_arrivals(workload, arrival_s)
    rows = _draw_rows(workload, arrival_s, class_ss, length_ss, base_dir, {}, class_weights)
    return RequestTrace(class_names=workload.class_names,
                        warmup_requests=workload.warmup_request_count, **rows)


def _open_arrivals(workload: WorkloadConfig, seed: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Arrival times (s, shape ``(n,)``) of an open loop drawn from ``rng`` (stream 0), and
    each request's class weights ``(n, C)`` when they change over time (else None)."""
    if workload.time_varying:
        return _time_varying_arrivals(workload, seed, rng)
    return sample_arrivals(workload.arrival, rng, num_requests=workload.num_requests,
                           duration_s=workload.duration_s), None


def _check_arrivals(workload: WorkloadConfig, arrival_s: np.ndarray) -> None:
    """Raise :class:`ScenarioError` when the arrivals ``arrival_s`` (s) span more than
    :data:`~capsim.workload.trace.MAX_SPAN_S`, are none, or are all warm-up."""
    n = len(arrival_s)
    if n and float(np.max(arrival_s)) > MAX_SPAN_S:
        field = "num_requests" if workload.num_requests is not None else "duration_s"
        raise ScenarioError(
            f"the {n:,} requests ({field} {getattr(workload, field):g} at rate_per_s "
            f"{workload.arrival.rate_per_s:g}) arrive over {float(np.max(arrival_s)):.3g} s, "
            f"beyond {MAX_SPAN_S:.0e} s (about 32 years) where the clock cannot resolve an "
            "engine step; raise rate_per_s", path="workload.arrival.rate_per_s")
    if n == 0:
        raise ScenarioError(
            f"no request arrives before duration_s={workload.duration_s:g} "
            f"at rate_per_s={workload.arrival.rate_per_s:g}; increase duration_s or the rate",
            path="workload.duration_s",
        )
    if workload.warmup_request_count >= n:
        raise ScenarioError(
            f"all {n} requests arriving before duration_s={workload.duration_s:g} would be "
            f"warm-up; lower warmup_request_count or increase duration_s",
            path="workload.warmup_request_count")


def _draw_rows(workload: WorkloadConfig, arrival_s: np.ndarray,
               class_ss: np.random.SeedSequence, length_ss: np.random.SeedSequence,
               base_dir: Path, empirical: dict, class_weights: np.ndarray | None = None) -> dict:
    """The columns of the requests arriving at ``arrival_s`` (shape ``(n,)``): classes from
    ``class_ss``; lengths, shared prefixes and later conversation turns (appended as rows,
    arrival NaN) from ``length_ss``. ``empirical`` caches the values of empirical length
    files (filled on first use). ``class_weights`` ``(n, C)``: each request's class weights
    when they change over time (classes with their own schedule or bursts)."""
    n = len(arrival_s)
    classes = workload.classes
    weights = np.array([c.weight for c in classes], dtype=np.float64)
    if class_weights is not None:
        weights = class_weights
    class_id = choose_classes(weights, n, np.random.default_rng(class_ss))

    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    prefix_id = np.full(n, -1, dtype=np.int32)
    prefix_tokens = np.zeros(n, dtype=np.int64)
    question_id = np.full(n, -1, dtype=np.int32)
    turns: list[_Turns] = []
    for i, (cls, cls_ss) in enumerate(zip(classes, length_ss.spawn(len(classes)))):
        # Streams 0/1 are the original ones, so adding prefixes or turns never
        # changes the first turns' lengths (common random numbers).
        prompt_ss, output_ss, prefix_ss, conv_ss = cls_ss.spawn(4)
        rows = np.flatnonzero(class_id == i)
        where = f"workload.classes.{i}"
        prompt_rng = np.random.default_rng(prompt_ss)
        output_rng = np.random.default_rng(output_ss)
        prompt[rows], output[rows] = class_lengths(cls, len(rows), prompt_rng, output_rng,
                                                   base_dir=base_dir, where=where,
                                                   empirical=empirical)
        if cls.shared_prefix is not None:
            _apply_prefix(cls.shared_prefix, i, rows, np.random.default_rng(prefix_ss),
                          prompt, prefix_id, prefix_tokens, question_id)
        if cls.conversation is not None:
            turns.append(_Turns(cls, i, rows, np.random.default_rng(conv_ss), prompt_rng,
                                output_rng, base_dir, where))

    samples = np.array([c.n for c in classes], dtype=np.int32)[class_id]
    trace = dict(arrival_s=arrival_s, prompt_tokens=prompt, output_tokens=output,
                 class_id=class_id, prefix_id=prefix_id, prefix_tokens=prefix_tokens,
                 parent=np.full(n, -1, dtype=np.int32), think_s=np.zeros(n), n=samples,
                 question_id=question_id)
    for t in turns:
        trace = t.append_to(trace)
    return trace


# --------------------------------------------------------------------------
# The closed loop's rows
# --------------------------------------------------------------------------

BLOCK_ROWS = 1024
"""A closed loop's rows are drawn in blocks of this many, each from its own stream."""


def closed_loop_trace(workload: WorkloadConfig, seed: int, base_dir: Path) -> RequestTrace:
    """The rows a closed loop (``arrival.process: concurrency``) sends, in sending order.

    The rows are one endless sequence per seed, drawn in blocks of :data:`BLOCK_ROWS`:
    block b's classes and lengths come from ``SeedSequence(seed, spawn_key=(3, b))``
    (stream 3 of the seed, apart from the open loop's streams 0–2), so the first N rows
    are the same however many are drawn. ``num_requests`` takes the first N;
    ``duration_s`` draws a first few blocks and lets the simulation draw more as it
    sends them (:attr:`ClosedLoop.more`), so every variant sends the same requests in
    the same order however fast it serves them.

    Raises:
        ScenarioError: as :func:`generate`.
    """
    rows = ClosedLoopRows(workload, seed, base_dir)
    arrival = workload.arrival
    if workload.num_requests is not None:
        return rows.trace(workload.num_requests, bounded=True)
    first = max(arrival.users * 4, workload.warmup_request_count + arrival.users, BLOCK_ROWS)
    return rows.trace(first, bounded=False)


class ClosedLoopRows:
    """The endless row sequence of a synthetic closed loop. Picklable: a task carries it to
    any worker with the values of its empirical length files, so no file is read there.

    Args:
        workload: the validated ``workload:`` section (``process: concurrency``).
        seed: the trace's seed.
        base_dir: the scenario file's directory (empirical length files, read once).
    """

    def __init__(self, workload: WorkloadConfig, seed: int, base_dir: Path):
        self.workload, self.seed, self.base_dir = workload, seed, Path(base_dir)
        self.empirical: dict = {}          # yaml path → values of an empirical length file

    def block(self, b: int) -> dict:
        """The columns of block ``b`` (:data:`BLOCK_ROWS` rows)."""
        class_ss, length_ss = np.random.SeedSequence(self.seed, spawn_key=(3, b)).spawn(2)
        return _draw_rows(self.workload, np.full(BLOCK_ROWS, np.nan), class_ss, length_ss,
                          self.base_dir, self.empirical)

    def trace(self, n: int, *, bounded: bool) -> RequestTrace:
        """The first ``n`` rows as a closed-loop :class:`RequestTrace`; unless ``bounded``
        (``num_requests``), its loop can draw more (``more``) until ``duration_s``.

        Raises:
            ScenarioError: ``n`` above :data:`MAX_REQUESTS`.
        """
        _check_count(n, "workload.num_requests" if bounded else "workload.duration_s")
        blocks = [self.block(b) for b in range(-(-n // BLOCK_ROWS))]
        cols = {k: np.concatenate([blk[k] for blk in blocks])[:n] for k in blocks[0]}
        wl, arrival = self.workload, self.workload.arrival
        loop = ClosedLoop(users=arrival.users, think_time_s=arrival.think_s,
                          stop_s=wl.duration_s if wl.duration_s is not None else math.inf,
                          more=None if bounded else self.more)
        return RequestTrace(class_names=wl.class_names, closed_loop=loop,
                            warmup_requests=wl.warmup_request_count, **cols)

    def more(self, n: int) -> RequestTrace:
        """At least ``n`` rows: twice as many (up to :data:`MAX_REQUESTS`), so the loop
        draws seldom (O(rows) in all).

        Raises:
            ScenarioError: ``n`` above :data:`MAX_REQUESTS`.
        """
        return self.trace(n if n > MAX_REQUESTS else min(2 * n, MAX_REQUESTS), bounded=False)


def _apply_prefix(spec, class_index: int, rows: np.ndarray, rng: np.random.Generator,
                  prompt: np.ndarray, prefix_id: np.ndarray, prefix_tokens: np.ndarray,
                  question_id: np.ndarray) -> None:
    """Prepend a system prompt of ``spec.tokens`` to every request of the class;
    a ``fraction`` of them share one of the templates, the rest get a private one
    (say, a timestamp at the front), so sharing changes hits, not prompt lengths
    (seed 000's prefix-caching rows: 17,000 prompt tokens in every row).

    Template ids are ``class_index * 1_000_000 + template`` so classes never share. With
    ``questions_per_template`` Q, a sharing request's question is ``template × Q + q`` (q
    uniform in [0, Q)), drawn after the templates so adding Q changes no template.
    """
    uses = rng.random(len(rows)) < spec.fraction
    template = rng.integers(spec.num_templates, size=len(rows))
    chosen = rows[uses]
    prefix_id[chosen] = class_index * 1_000_000 + template[uses]
    prefix_tokens[chosen] = spec.tokens
    prompt[rows] += spec.tokens
    q = spec.questions_per_template
    if q is not None:
        question = rng.integers(q, size=len(rows))
        question_id[chosen] = template[uses] * q + question[uses]


class _Turns:
    """Later turns of a class's conversations, appended as rows after all first turns."""

    def __init__(self, cls, class_index, rows, rng, prompt_rng, output_rng, base_dir, where):
        self.cls, self.class_index, self.rows = cls, class_index, rows
        self.rng, self.prompt_rng, self.output_rng = rng, prompt_rng, output_rng
        self.base_dir, self.where = base_dir, where

    def _lengths(self, dist, rng, k, what):
        return sample_lengths(dist, k, rng, base_dir=self.base_dir,
                              yaml_path=f"{self.where}.{what}")

    def _pauses(self, conv, k: int) -> np.ndarray:
        """``k`` pauses before later turns, s: exponential (chat) or the tool's constant
        latency (agentic; no draw, so the other streams are those of a chat)."""
        if conv.kind == "agentic" or not conv.think_time_s:
            return np.full(k, float(conv.think_time_s))
        return self.rng.exponential(conv.think_time_s, k)

    def append_to(self, trace: dict) -> dict:
        conv = self.cls.conversation
        left = self._lengths(conv.turns, self.rng, len(self.rows), "conversation.turns") - 1
        parents = self.rows[left > 0]
        left = left[left > 0]
        cols = {k: [v] for k, v in trace.items()}
        total = len(trace["arrival_s"])
        prompt_of = trace["prompt_tokens"].copy()
        output_of = trace["output_tokens"].copy()
        while len(parents):
            k = len(parents)
            new_user, out = class_lengths(self.cls, k, self.prompt_rng, self.output_rng,
                                          base_dir=self.base_dir, where=self.where)
            prompt = prompt_of[parents] + output_of[parents] + new_user
            idx = np.arange(total, total + k)
            new = dict(arrival_s=np.full(k, np.nan), prompt_tokens=prompt, output_tokens=out,
                       class_id=np.full(k, self.class_index, dtype=np.int32),
                       prefix_id=_take(cols["prefix_id"], parents),
                       prefix_tokens=_take(cols["prefix_tokens"], parents),
                       parent=parents.astype(np.int32),
                       think_s=self._pauses(conv, k),
                       n=np.full(k, self.cls.n, dtype=np.int32),
                       question_id=np.full(k, -1, dtype=np.int32))
            for key, value in new.items():
                cols[key].append(value)
            prompt_of = np.concatenate([prompt_of, prompt])
            output_of = np.concatenate([output_of, out])
            total += k
            left = left - 1
            parents, left = idx[left > 0], left[left > 0]
        return {k: np.concatenate(v) for k, v in cols.items()}


def _take(chunks: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
    return np.concatenate(chunks)[rows]


def _check_count(n: float, yaml_path: str) -> None:
    if n > MAX_REQUESTS:
        raise ScenarioError(
            f"workload would generate about {n:.3g} requests, more than the limit of "
            f"{MAX_REQUESTS:,}; lower num_requests, duration_s or rate_per_s",
            path=yaml_path,
        )


def _interarrivals(arrival: ArrivalConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` inter-arrival times, seconds (poisson or gamma)."""
    rate = arrival.rate_per_s
    if arrival.process == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    # Gamma(k, theta): mean k*theta, variance k*theta**2, so CV = 1/sqrt(k).
    # k = 1/cv**2 and theta = 1/(rate*k) give mean 1/rate and CV = cv; this
    # is vLLM's benchmark_serving "burstiness" (shape = burstiness = 1/cv**2).
    k = 1.0 / arrival.cv**2
    return rng.gamma(shape=k, scale=1.0 / (rate * k), size=n)


def sample_arrivals(
    arrival: ArrivalConfig,
    rng: np.random.Generator,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Arrival times of a synthetic workload, seconds, shape ``(N,)``, non-decreasing.

    Exactly one of ``num_requests`` (N = num_requests) or ``duration_s``
    (every arrival in ``[0, duration_s)``, none at or beyond it) must be given.

    - poisson: i.i.d. exponential gaps with mean ``1/rate_per_s``; the first
      request arrives after the first gap (not at 0).
    - gamma: i.i.d. Gamma gaps, shape ``k = 1/cv**2``, scale ``1/(rate_per_s*k)``
      (mean ``1/rate_per_s``, coefficient of variation ``cv``); first request
      after the first gap.
    - constant: ``t_i = i / rate_per_s``, starting at 0.
    - ``rate_per_s: .inf`` (poisson or constant, ``num_requests`` only): every
      request at 0, nothing drawn.

    With ``duration_s`` the gaps are drawn in chunks from the same stream, so
    the result is a prefix of the ``num_requests`` sequence for the same rng
    (``np.cumsum`` adds sequentially, so even the floats agree).

    Raises:
        ScenarioError: more than :data:`MAX_REQUESTS` requests would be generated.
        ValueError: both or neither of ``num_requests`` / ``duration_s``.
    """
    if (num_requests is None) == (duration_s is None):
        raise ValueError("give exactly one of num_requests or duration_s")
    if num_requests is not None:
        return _first_arrivals(arrival, rng, num_requests)
    return _arrivals_before(arrival, rng, duration_s)


def _first_arrivals(arrival: ArrivalConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """The first ``n`` arrival times (s) of :func:`sample_arrivals`."""
    _check_count(n, "workload.num_requests")
    if arrival.all_at_once:
        return np.zeros(n)
    if arrival.process == "constant":
        return np.arange(n, dtype=np.float64) / arrival.rate_per_s
    return np.cumsum(_interarrivals(arrival, rng, n))


def _arrivals_before(arrival: ArrivalConfig, rng: np.random.Generator,
                     duration_s: float) -> np.ndarray:
    """The arrival times (s) of :func:`sample_arrivals` in ``[0, duration_s)``."""
    rate = arrival.rate_per_s
    expected = rate * duration_s
    _check_count(expected, "workload.duration_s")
    if arrival.process == "constant":
        t = np.arange(int(math.ceil(expected)) + 1, dtype=np.float64) / rate
        return t[t < duration_s]

    # Draw a few standard deviations more gaps than expected; top up if short.
    cv = arrival.cv if arrival.cv is not None else 1.0
    chunk = int(expected + 6.0 * cv * math.sqrt(expected) + 16)
    gaps = [_interarrivals(arrival, rng, chunk)]
    while True:
        t = np.cumsum(np.concatenate(gaps)) if len(gaps) > 1 else np.cumsum(gaps[0])
        if t[-1] >= duration_s:
            break
        gaps.append(_interarrivals(arrival, rng, max(chunk // 4, 16)))
    return t[: np.searchsorted(t, duration_s, side="left")]


def _time_varying_arrivals(workload: WorkloadConfig, seed: int,
                           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Arrival times under the workload's schedule and bursts (:mod:`capsim.workload.rate`:
    the arrival process at ``rate_per_s`` in operational time, mapped through the inverse
    cumulative rate factor), and each request's class weights ``(n, C)`` when classes have
    their own factors (None when the class mix is constant).

    Raises:
        ScenarioError: the rate factor stays 0 far beyond the last operational arrival.
    """
    arrival, duration = workload.arrival, workload.duration_s
    if duration is not None:
        rates = class_rates(workload, seed, duration)
        horizon_u = rates.total.integral(duration)
        if horizon_u <= 0:
            return np.zeros(0), None
        u = sample_arrivals(arrival, rng, duration_s=horizon_u)
        t = warp(u, rates.total)
        t = t[t < duration]
    else:
        u = sample_arrivals(arrival, rng, num_requests=workload.num_requests)
        horizon = max(float(u[-1]), 1.0)
        for _ in range(64):
            rates = class_rates(workload, seed, horizon)
            if rates.total.cumulative()[-1] >= u[-1]:
                break
            horizon *= 2.0
        else:
            raise ScenarioError("the rate factor stays 0: no request can arrive",
                                path="workload.schedule")
        t = warp(u, rates.total)
    if not any(c.time_varying for c in workload.classes):
        return t, None
    weights = np.array([c.weight for c in workload.classes], dtype=np.float64)
    return t, rates.class_factors[rates.total.piece(t)] * weights


def choose_classes(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Class index of each of ``n`` requests, i.i.d. with probability ∝ ``weights``.

    Inverse-CDF sampling: one uniform per request, ``searchsorted`` into the
    normalised cumulative weights. Returns int32, shape ``(n,)``. ``weights`` of shape
    ``(n, C)`` gives each request its own weights (the same uniform per request: the
    draw is the one-dimensional one when every row is equal).
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim == 2:
        cdf = np.cumsum(weights, axis=1)
        cdf /= cdf[:, -1:]
        cdf[:, -1] = 1.0
        return (cdf <= rng.random(n)[:, None]).sum(axis=1).astype(np.int32)
    cdf = np.cumsum(np.asarray(weights, dtype=np.float64))
    cdf /= cdf[-1]
    cdf[-1] = 1.0  # uniforms are < 1, so every draw lands on a valid class
    return np.searchsorted(cdf, rng.random(n), side="right").astype(np.int32)


def class_lengths(cls: RequestClass, n: int, prompt_rng: np.random.Generator,
                  output_rng: np.random.Generator, *, base_dir: Path, where: str,
                  empirical: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` prompt and output lengths (int64, shape ``(n,)`` each) of request class ``cls``
    (its YAML path ``where``): from its ``shape``, jointly, from ``prompt_rng`` alone
    (:func:`capsim.workload.shapes.draw_pairs`); else each from its distribution and its own
    stream (:func:`sample_lengths`).

    Raises:
        ScenarioError: as :func:`sample_lengths`.
    """
    if cls.shape is not None:
        return draw_pairs(load_shape(cls.shape), n, prompt_rng)
    return (sample_lengths(cls.prompt_tokens, n, prompt_rng, base_dir=base_dir,
                           yaml_path=f"{where}.prompt_tokens", empirical=empirical),
            sample_lengths(cls.output_tokens, n, output_rng, base_dir=base_dir,
                           yaml_path=f"{where}.output_tokens", empirical=empirical))


def _round_clip(x: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
    """Round to the nearest integer (half to even) and clip to ``[lo, hi]``, int64."""
    x = np.clip(x, lo, hi if hi is not None else np.inf)
    return np.rint(x).astype(np.int64)


def sample_lengths(
    dist,
    n: int,
    rng: np.random.Generator,
    *,
    base_dir: Path = Path("."),
    yaml_path: str = "",
    empirical: dict | None = None,
) -> np.ndarray:
    """``n`` token lengths from ``dist``, int64, shape ``(n,)``, each in ``[min, max]``.

    - fixed: ``value`` for every request.
    - uniform: integers in ``[min, max]``, both inclusive.
    - normal: ``Normal(mean, std)``, rounded, clipped to ``[min, max]``.
    - lognormal: ``exp(Normal(mu, sigma))`` with ``mu = ln(mean) - sigma**2/2``,
      so that the (unclipped) mean is ``mean`` tokens, because
      ``E[exp(N(mu, s^2))] = exp(mu + s^2/2)``; rounded, clipped.
    - empirical: draws with replacement from the CSV column ``column`` at
      ``path`` (relative to ``base_dir``); rounded, clipped to
      ``[min, max]`` (max unbounded if not set).

    Args:
        yaml_path: YAML path of ``dist`` for error messages.
        empirical: a cache of empirical files' values by ``yaml_path`` (read on first use).

    Raises:
        ScenarioError: empirical file missing, column missing, a non-numeric
            cell (with its line number) or no values.
    """
    if isinstance(dist, FixedDist):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformDist):
        return rng.integers(dist.min, dist.max, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, NormalDist):
        return _round_clip(rng.normal(dist.mean, dist.std, size=n), dist.min, dist.max)
    if isinstance(dist, LognormalDist):
        mu = math.log(dist.mean) - dist.sigma**2 / 2.0
        return _round_clip(rng.lognormal(mu, dist.sigma, size=n), dist.min, dist.max)
    if isinstance(dist, EmpiricalDist):
        values = None if empirical is None else empirical.get(yaml_path)
        if values is None:
            values = load_empirical(dist, base_dir, yaml_path=f"{yaml_path}.path")
            if empirical is not None:
                empirical[yaml_path] = values
        return _round_clip(values[rng.integers(0, len(values), size=n)], dist.min, dist.max)
    raise TypeError(f"unknown length distribution {type(dist).__name__}")

