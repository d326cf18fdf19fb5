"""Schema of a scenario's ``workload:`` section.

The scenario loader embeds :class:`WorkloadConfig` as field ``workload`` and
turns pydantic errors into one-line messages carrying the YAML path; the
validators here only have to say *what would be valid*. Nothing in this
module reads files: paths (``trace.path``, ``empirical.path``) are kept as
given and resolved by :func:`capsim.workload.build` against the scenario
file's directory.

Two ways to describe traffic (exactly one must be given)::

    workload:                         workload:
      num_requests: 2000                trace:
      arrival: {process: poisson,         path: traces/conv.csv
                rate_per_s: 8.0}          format: azure
      classes:                            rate_scale: 1.0
        - name: chat
          weight: 1
          prompt_tokens: {dist: fixed, value: 512}
          output_tokens: {dist: fixed, value: 128}

and two ways to send it: open loop (``poisson`` / ``gamma`` / ``constant`` at
``rate_per_s``, whatever the server does; ``rate_per_s: .inf`` sends every request
at t = 0, as ``vllm bench serve --request-rate inf``) or a closed loop
(``process: concurrency``: ``users`` requests in flight, each end releasing the
next request ``think_time_s`` later, as ``vllm bench serve --max-concurrency``,
genai-perf / AIPerf ``--concurrency`` and GuideLLM's ``concurrent`` profile). A
closed loop may also send a trace's rows (in file order, timestamps ignored).
``warmup_request_count: K`` (genai-perf / AIPerf ``--warmup-request-count``)
leaves the first K requests sent out of every metric.

Token lengths are integers: every sampled value is rounded to the nearest
integer and clipped to ``[min, max]`` (``min`` >= 1, because a request has at
least one prompt token and always produces at least one output token).
"""

from __future__ import annotations

import math
from typing import ClassVar, Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from capsim.common.errors import ScenarioError
from capsim.common.schema import MAX_SECONDS, MAX_TOKENS, Bool, Float, Int, StrictModel, check_tag
from capsim.profiles.shapes import shape_names
from capsim.scenario.load_shape import Bursts, Schedule, pieces_problem

# --------------------------------------------------------------------------
# Length distributions (discriminated on ``dist``)
# --------------------------------------------------------------------------


class _Bounded(StrictModel):
    """Mixin check: ``min <= max`` when both are set."""

    @model_validator(mode="after")
    def _check_bounds(self):
        lo = getattr(self, "min", None)
        hi = getattr(self, "max", None)
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min must be ≤ max (got min={lo}, max={hi})")
        return self


class FixedDist(StrictModel):
    """Every request gets exactly ``value`` tokens."""

    dist: Literal["fixed"]
    value: Int = Field(ge=1, le=MAX_TOKENS, description="token count, >= 1")


class UniformDist(_Bounded):
    """Integers drawn uniformly from ``[min, max]``, both ends inclusive."""

    dist: Literal["uniform"]
    min: Int = Field(ge=1, le=MAX_TOKENS)
    max: Int = Field(ge=1, le=MAX_TOKENS)


class NormalDist(_Bounded):
    """Normal(``mean``, ``std``) in tokens, rounded and clipped to ``[min, max]``.

    Clipping piles the mass of both tails onto ``min``/``max``, so the sample
    mean differs from ``mean`` when the bounds are within a few ``std``.
    """

    dist: Literal["normal"]
    mean: float
    std: float = Field(ge=0)
    min: Int = Field(ge=1, le=MAX_TOKENS)
    max: Int = Field(ge=1, le=MAX_TOKENS)


MAX_LOGNORMAL_SIGMA = 20.0
"""The largest ``sigma`` of a log-normal length: beyond it, even at a mean of ``MAX_TOKENS``
(ln 2^31 = 21.5), a draw reaches one token with probability P(Z > (σ²/2 − 21.5)/σ) <
1e-18 (z > 8.9), so every length would be the distribution's ``min`` — a typo, not a
workload (fits to measured prompt and reply lengths have σ of 0.3–2). Larger values also
overflowed ``σ²`` in floats (a traceback at σ = 1e300)."""


class LognormalDist(_Bounded):
    """Log-normal whose **mean in tokens** is ``mean``; ``sigma`` is the std of ln(X).

    The underlying normal has ``mu = ln(mean) - sigma**2 / 2`` so that
    ``E[X] = exp(mu + sigma**2 / 2) = mean`` (standard log-normal moment
    identity). The median is ``mean * exp(-sigma**2 / 2)``. Samples are
    rounded and clipped to ``[min, max]``; clipping shifts the mean when the
    bounds cut the tail.
    """

    # in error messages
    yaml_example: ClassVar[str] = "{dist: lognormal, mean: 600, sigma: 0.8, min: 16, max: 4096}"

    dist: Literal["lognormal"]
    mean: float = Field(gt=0, description="mean of the distribution, tokens")
    sigma: float = Field(ge=0, le=MAX_LOGNORMAL_SIGMA, description="standard deviation of ln(X)")
    min: Int = Field(ge=1, le=MAX_TOKENS)
    max: Int = Field(ge=1, le=MAX_TOKENS)


class EmpiricalDist(_Bounded):
    """Sample with replacement from column ``column`` of the CSV at ``path``.

    ``path`` is relative to the scenario file's directory. Values are rounded
    and clipped to ``[min, max]`` (``min`` defaults to 1, ``max`` to no limit).
    """

    dist: Literal["empirical"]
    path: str = Field(min_length=1)
    column: str = Field(min_length=1)
    min: Int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: Optional[Int] = Field(default=None, ge=1, le=MAX_TOKENS)


LENGTH_DISTS = ("fixed", "uniform", "normal", "lognormal", "empirical")


LengthDist = Annotated[
    Union[FixedDist, UniformDist, NormalDist, LognormalDist, EmpiricalDist],
    Field(discriminator="dist"),
    BeforeValidator(check_tag("dist", LENGTH_DISTS)),
]
"""One of fixed | uniform | normal | lognormal | empirical, chosen by ``dist``."""


# --------------------------------------------------------------------------
# Synthetic arrivals and request classes
# --------------------------------------------------------------------------


CLOSED_LOOP = "concurrency"
"""The closed loop: a fixed number of requests in flight."""


MAX_GAMMA_CV = 100.0
"""The largest ``cv`` of gamma inter-arrival times: the gaps are Gamma(k = 1/cv²), and at
cv = 100 (k = 1e-4, vLLM bench's ``--burstiness`` 1e-4) P(gap < 1e-9 of the mean) ≈
1 − k·ln 1e9 ≈ 0.998: nearly every request arrives at one of a handful of instants, which
``rate_per_s: .inf`` says plainly; far beyond, k underflows (``cv: 1e300`` was an
OverflowError traceback)."""


class ArrivalConfig(StrictModel):
    """How synthetic requests (or a closed loop's trace rows) are sent.

    Open loop, at ``rate_per_s`` requests/s:

    - ``poisson``: exponential inter-arrival times with mean ``1/rate_per_s``.
    - ``gamma``: Gamma inter-arrival times with mean ``1/rate_per_s`` and
      coefficient of variation ``cv`` (cv > 1 is burstier than Poisson,
      cv < 1 smoother; cv = 1 is Poisson).
    - ``constant``: exactly ``1/rate_per_s`` apart, first request at t = 0.

    ``rate_per_s: .inf`` (poisson or constant, with ``num_requests``) sends every
    request at t = 0 (``vllm bench serve --request-rate inf``); it is the only
    non-finite number a scenario takes.

    Closed loop, ``process: concurrency``: ``users`` requests in flight. The first
    ``users`` requests are sent at t = 0; each time one ends (finished or rejected)
    the next one is sent ``think_time_s`` later (a constant pause; 0 = at once, as
    the benchmark clients do). The run stops sending after ``num_requests`` requests
    or at ``duration_s`` (a request due at or after it is not sent).
    """

    yaml_example: ClassVar[str] = "{process: poisson, rate_per_s: 5}"   # in error messages

    process: Literal["poisson", "gamma", "constant", "concurrency"]
    rate_per_s: Optional[float] = Field(
        default=None, gt=0, allow_inf_nan=True,
        description="open loop: mean arrival rate, requests/s (.inf: all at t = 0)")
    cv: Optional[float] = Field(
        default=None, gt=0, le=MAX_GAMMA_CV, description="gamma only: CV of inter-arrival times"
    )
    users: Optional[Int] = Field(
        default=None, gt=0, description="concurrency only: requests in flight")
    think_time_s: Optional[float] = Field(
        default=None, ge=0, le=MAX_SECONDS,
        description="concurrency only: pause between a request's end "
                                        "and the next request, s")

    @field_validator("rate_per_s", mode="before")
    @classmethod
    def _check_rate(cls, rate: Any) -> Any:
        if isinstance(rate, float) and math.isnan(rate):
            raise ValueError("must be a number > 0 requests/s, or .inf to send every request "
                             "at t = 0")
        return rate

    @model_validator(mode="after")
    def _check_process(self):
        p = self.process
        if p != "gamma" and self.cv is not None:
            raise ValueError(
                f"cv only applies to process: gamma (got process: {p}); remove cv"
            )
        if p == CLOSED_LOOP:
            if self.users is None:
                raise ValueError("users is required for process: concurrency "
                                 "(requests in flight, >= 1)")
            if self.rate_per_s is not None:
                raise ValueError("process: concurrency has no rate_per_s: users requests are "
                                 "in flight and each end sends the next; remove rate_per_s")
            return self
        for key in ("users", "think_time_s"):
            if getattr(self, key) is not None:
                raise ValueError(f"{key} only applies to process: concurrency (got process: "
                                 f"{p}); remove {key}")
        if self.rate_per_s is None:
            raise ValueError(f"rate_per_s is required for process: {p} (requests/s, > 0)")
        if p == "gamma" and self.cv is None:
            raise ValueError("cv is required for process: gamma (coefficient of variation, > 0)")
        if self.all_at_once and p == "gamma":
            raise ValueError("rate_per_s: .inf (every request at t = 0) applies to process: "
                             "poisson or constant, not gamma")
        return self

    @property
    def closed_loop(self) -> bool:
        """``process: concurrency``."""
        return self.process == CLOSED_LOOP

    @property
    def all_at_once(self) -> bool:
        """``rate_per_s: .inf``: every request arrives at t = 0."""
        return self.rate_per_s == math.inf

    @property
    def think_s(self) -> float:
        """The closed loop's pause, seconds (0 when not given)."""
        return self.think_time_s or 0.0


class SharedPrefix(StrictModel):
    """A shared system prompt prepended to a class's prompts (prefix caching).

    ``tokens`` are added in front of the sampled ``prompt_tokens``; a request
    uses one of ``num_templates`` distinct prompts (uniformly) with
    probability ``fraction``.

    ``questions_per_template: Q`` makes the tokens after the shared prompt one of Q fixed
    questions of its template (uniformly), so whole prompts repeat, as inference-perf's
    ``shared_prefix`` data (``num_groups`` = ``num_templates``, ``num_prompts_per_group``
    = Q: kubernetes-sigs/inference-perf ``inference_perf/datagen/shared_prefix_datagen.py``
    at 0ba9aceba3bcd4ece035c83de353d688e4059315 pre-generates num_groups × Q prompts and
    cycles through them). Unset: every request's own tokens are its own.
    """

    yaml_example: ClassVar[str] = "{tokens: 300, fraction: 1.0}"   # in error messages

    tokens: Int = Field(gt=0, description="system-prompt length, tokens")
    fraction: float = Field(default=1.0, ge=0, le=1)
    num_templates: Int = Field(default=1, gt=0)
    questions_per_template: Optional[Int] = Field(
        default=None, gt=0, le=1_000_000, description="fixed questions after each template "
        "(inference-perf's num_prompts_per_group): whole prompts repeat")


MAX_TURNS = 1000
"""Most turns a conversation may have: turn T's prompt holds every earlier prompt and reply,
so at 1,000 turns of even 100 tokens each it is 200,000 tokens, past every packaged
model's context; the generator adds one turn to every live conversation per pass (10^7
turns never ended)."""


class Conversation(StrictModel):
    """Multi-turn conversations: each turn's prompt is the previous prompt +
    reply + new user tokens (``prompt_tokens`` samples the new user tokens).

    The next turn arrives ``think_time_s`` (exponential with that mean) after
    the previous reply completes: a closed loop, as real chat users behave.

    ``kind: agentic`` is an agent's tool-call loop: each turn's reply is a tool call (give
    short ``output_tokens``), the next turn's new tokens are the tool's result
    (``prompt_tokens``) and it arrives ``think_time_s`` after the reply, a constant (the
    tool's latency, not a person's pause); the growing context is the shared prefix every
    turn reuses (the Manus agents' 100:1 input to output, llm-d's "KV-Cache Wins You Can
    See", 2025-09-24).
    """

    turns: LengthDist = Field(description="turns per conversation, >= 1")
    think_time_s: float = Field(default=5.0, ge=0, le=MAX_SECONDS,
                                description="mean pause between turns, s (agentic: the "
                                            "tool's latency, constant)")
    kind: Literal["chat", "agentic"] = Field(
        default="chat", description="chat: exponential pauses; agentic: tool-call turns, "
                                    "constant pauses")

    @field_validator("turns")
    @classmethod
    def _at_most_max_turns(cls, turns: LengthDist) -> LengthDist:
        most = getattr(turns, "value", None) or getattr(turns, "max", None)
        if most is not None and most > MAX_TURNS:
            raise ValueError(f"at most {MAX_TURNS:,} turns per conversation (turn T's prompt "
                             f"holds the T - 1 turns before it), got up to {most:,}")
        return turns


def _check_shape(name: Any) -> Any:
    """A shipped workload shape's name (:func:`capsim.profiles.shapes.shape_names`)."""
    if isinstance(name, str):
        names = shape_names()
        if name not in names:
            raise ValueError(f"unknown workload shape {name!r}; valid: {', '.join(names)}")
    return name


class RequestClass(StrictModel):
    """One request class: its share of traffic and its token lengths, either two
    distributions (``prompt_tokens`` and ``output_tokens``) or a shipped ``shape`` naming a
    public dataset's lengths (``shape: sharegpt``, drawn jointly by
    :mod:`capsim.workload.shapes`; ``capsim shapes`` lists them)."""

    # in error messages
    yaml_example: ClassVar[str] = (
        "{name: chat, weight: 1, prompt_tokens: {dist: fixed, value: 200}, "
        "output_tokens: {dist: fixed, value: 20}}")

    name: str = Field(min_length=1)
    weight: float = Field(gt=0, description="relative share; normalised over classes")
    prompt_tokens: Optional[LengthDist] = None
    output_tokens: Optional[LengthDist] = None
    shape: Annotated[Optional[str], BeforeValidator(_check_shape)] = Field(
        default=None, min_length=1,
        description="a shipped workload shape (prompt and output lengths of a public "
                    "dataset) instead of prompt_tokens and output_tokens")
    shared_prefix: Optional[SharedPrefix] = None
    conversation: Optional[Conversation] = None
    n: Int = Field(default=1, gt=0, description="parallel samples per request (SamplingParams.n)")
    # vLLM's request priority (lower is served first; needs engine.scheduling_policy:
    # priority) and the gateway's criticality (Gateway API Inference Extension: sheddable
    # requests are dropped while the pool is saturated, cluster.saturation).
    priority: Int = Field(default=0, description="vLLM request priority: lower first, with "
                                                 "engine.scheduling_policy: priority")
    criticality: Literal["critical", "standard", "sheddable"] = "standard"
    # The client's --ignore-eos (vllm bench serve, sglang.bench_serving, InferenceX): capsim's
    # outputs always run to output_tokens; the flag says the engine is told so (SGLang then
    # admits by its ignore-EOS memory check; capsim/engine/scheduler/sglang_ignore_eos.py).
    ignore_eos: Bool = Field(default=False, description="the client sends ignore_eos (the "
                                                        "engine knows each output's length)")
    model: Optional[str] = Field(
        default=None, min_length=1, description="the model its requests ask for (a pool of "
                                                "cluster.pools must serve it); default: the "
                                                "variant's model")
    slo: Optional[dict[str, Float]] = Field(
        default=None, description="per-class SLO override (validated by the scenario loader)"
    )
    schedule: Optional[Schedule] = Field(
        default=None, description="this class's rate factor over time (scenario/load_shape.py), "
                                  "times the workload's")
    bursts: Optional[Bursts] = Field(
        default=None, description="this class's random rate factor, times the workload's")

    @model_validator(mode="after")
    def _check_lengths(self):
        given = [k for k in ("prompt_tokens", "output_tokens") if getattr(self, k) is not None]
        if self.shape is not None and given:
            raise ValueError(f"give either shape ({self.shape}) or prompt_tokens and "
                             f"output_tokens, not both; remove {' and '.join(given)}")
        if self.shape is None and len(given) < 2:
            missing = [k for k in ("prompt_tokens", "output_tokens") if k not in given]
            raise ValueError(f"missing {' and '.join(missing)}: give prompt_tokens and "
                             "output_tokens, or a shape such as shape: sharegpt")
        return self

    @property
    def time_varying(self) -> bool:
        """The class has its own schedule or bursts."""
        return self.schedule is not None or self.bursts is not None


# --------------------------------------------------------------------------
# Trace replay
# --------------------------------------------------------------------------


class TraceColumns(StrictModel):
    """Names of the CSV columns holding arrival time and token counts.

    The arrival column holds either seconds (numbers) or timestamps (strings
    such as ``2023-11-16 18:15:46.6805900``).
    """

    arrival: str = Field(min_length=1)
    prompt_tokens: str = Field(min_length=1)
    output_tokens: str = Field(min_length=1)


AZURE_COLUMNS = TraceColumns(
    arrival="TIMESTAMP", prompt_tokens="ContextTokens", output_tokens="GeneratedTokens"
)
"""Column names of the Azure LLM inference trace 2023 (Splitwise, ISCA'24)."""


class TraceConfig(StrictModel):
    """Replay requests from a CSV file instead of generating them.

    ``format: azure`` reads the Azure 2023 columns (TIMESTAMP, ContextTokens,
    GeneratedTokens); ``format: mooncake`` a Mooncake JSON Lines trace (timestamp ms,
    input_length, output_length, hash_ids: :mod:`capsim.workload.mooncake`), whose requests
    carry their prompt blocks so prefix caches and routers see its sharing, and whose lines
    may carry AIPerf's ``session_id`` and ``delay``: conversations
    (:mod:`capsim.workload.sessions`);
    ``format: columns`` requires ``columns`` to name them
    (e.g. Vidur's ``splitwise_*.csv``: arrived_at, num_prefill_tokens,
    num_decode_tokens). ``columns`` given with ``format: azure`` overrides the
    Azure names. ``rate_scale: 2`` replays the same requests twice as fast.
    """

    yaml_example: ClassVar[str] = "{path: trace.csv, format: azure}"   # in error messages

    path: str = Field(min_length=1, description="CSV (or Mooncake JSON Lines) path, relative "
                                                "to the scenario file")
    format: Literal["azure", "columns", "mooncake"] = "azure"
    columns: Optional[TraceColumns] = None
    rate_scale: float = Field(default=1.0, gt=0, description="inter-arrival times are divided by it")
    schedule: Optional[Schedule] = Field(
        default=None, description="a time-varying factor on rate_scale (scenario/load_shape.py)")
    class_name: str = Field(default="trace", min_length=1)

    @model_validator(mode="after")
    def _check_columns(self):
        if self.format == "mooncake" and self.columns is not None:
            raise ValueError("format: mooncake reads its own keys (timestamp, input_length, "
                             "output_length, hash_ids, session_id, delay); remove columns")
        if self.format == "columns" and self.columns is None:
            raise ValueError(
                "format: columns needs columns: {arrival: ..., prompt_tokens: ..., output_tokens: ...}"
            )
        return self

    @property
    def resolved_columns(self) -> TraceColumns:
        """The column names to read: ``columns`` if given, else the Azure names."""
        return self.columns if self.columns is not None else AZURE_COLUMNS


# --------------------------------------------------------------------------
# The workload section
# --------------------------------------------------------------------------


class WorkloadConfig(StrictModel):
    """The ``workload:`` section: synthetic (``arrival`` + ``classes``) or ``trace``.

    Synthetic: exactly one of ``num_requests`` (that many requests) or
    ``duration_s`` (all requests arriving in ``[0, duration_s)``; in a closed
    loop, every request sent before ``duration_s``). ``rate_per_s: .inf`` needs
    ``num_requests``.
    Trace: at most one of them — ``num_requests`` keeps the first N rows,
    ``duration_s`` keeps rows arriving before it (after ``rate_scale``). With
    ``arrival: {process: concurrency, ...}`` the rows are sent by the closed loop in
    file order instead (their timestamps ignored) and ``duration_s`` stops it.

    ``warmup_request_count``: the first K requests sent are simulated but left out of
    every metric and summary (genai-perf / AIPerf ``--warmup-request-count``); it must
    leave at least one request of ``num_requests``.
    """

    num_requests: Optional[Int] = Field(default=None, gt=0)
    duration_s: Optional[float] = Field(default=None, gt=0, le=MAX_SECONDS)
    warmup_request_count: Int = Field(
        default=0, ge=0, description="first requests sent that no metric counts")
    arrival: Optional[ArrivalConfig] = None
    classes: Optional[list[RequestClass]] = Field(default=None, min_length=1)
    trace: Optional[TraceConfig] = None
    schedule: Optional[Schedule] = Field(
        default=None, description="rate factor over time, every class (scenario/load_shape.py)")
    bursts: Optional[Bursts] = Field(
        default=None, description="random rate factor over time, every class")

    @model_validator(mode="after")
    def _check_source(self):
        closed = self.arrival is not None and self.arrival.closed_loop
        if self.trace is not None and (self.classes is not None or
                                       (self.arrival is not None and not closed)):
            raise ValueError("give either trace or arrival + classes, not both (a trace "
                             "brings its own arrival times; only arrival: {process: "
                             "concurrency, users: N} may send its rows)")
        if self.trace is None:
            missing = [k for k in ("arrival", "classes") if getattr(self, k) is None]
            if missing:
                raise ValueError(
                    f"missing {' and '.join(missing)}: give arrival + classes "
                    "(synthetic requests) or trace (replay a CSV)"
                )
            if (self.num_requests is None) == (self.duration_s is None):
                raise ValueError(
                    "give exactly one of num_requests or duration_s for synthetic arrivals"
                )
            names = [c.name for c in self.classes]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"class names must be unique; repeated: {', '.join(dupes)}")
        elif self.num_requests is not None and self.duration_s is not None:
            raise ValueError(
                "with trace give at most one of num_requests (first N rows) "
                "or duration_s (rows arriving before it)"
            )
        self._check_time_varying(closed)
        return self

    def _check_time_varying(self, closed: bool) -> None:
        """Schedules and bursts shape an open loop's arrival rate only."""
        if self.trace is not None and (self.schedule is not None or self.bursts is not None):
            raise ValueError("a replayed trace takes its time-varying rate as "
                             "trace.schedule (a factor on rate_scale); remove workload."
                             + ("schedule" if self.schedule is not None else "bursts"))
        shaped = self.time_varying or (self.trace is not None and self.trace.schedule is not None)
        if shaped and closed:
            raise ValueError("schedule and bursts shape an open loop's arrival rate; process: "
                             "concurrency sends a request as one ends (no rate); remove them "
                             "or use an open-loop arrival")
        if shaped and self.arrival is not None and self.arrival.all_at_once:
            raise ValueError("rate_per_s: .inf sends every request at t = 0, which no "
                             "schedule or bursts can shape; give a finite rate_per_s")

    @property
    def time_varying(self) -> bool:
        """A synthetic workload whose rate changes over time (schedule or bursts, of the
        workload or of a class)."""
        return (self.schedule is not None or self.bursts is not None
                or any(c.time_varying for c in self.classes or ()))

    @field_validator("warmup_request_count")
    @classmethod
    def _check_warmup(cls, k: int, info: ValidationInfo) -> int:
        n = info.data.get("num_requests")
        if n is not None and k >= n:
            raise ValueError(f"must be < num_requests ({n}): no request would be measured")
        return k

    @field_validator("arrival")
    @classmethod
    def _check_all_at_once(cls, arrival: ArrivalConfig | None,
                           info: ValidationInfo) -> ArrivalConfig | None:
        if arrival is not None and arrival.all_at_once and info.data.get("duration_s"):
            raise ValueError("rate_per_s: .inf sends every request at t = 0: give "
                             "num_requests, not duration_s")
        return arrival

    @field_validator("classes")
    @classmethod
    def _check_turns(cls, classes: list[RequestClass] | None,
                     info: ValidationInfo) -> list[RequestClass] | None:
        arrival = info.data.get("arrival")
        if arrival is not None and arrival.closed_loop:
            for i, c in enumerate(classes or []):
                if c.conversation is not None:
                    raise ValueError(
                        f"classes.{i} ({c.name}) has conversation turns, which process: "
                        "concurrency cannot send (a conversation is its own closed loop: each "
                        "turn follows the previous reply); remove conversation or use an "
                        "open-loop arrival")
        return classes

    @field_validator("trace")
    @classmethod
    def _check_trace_loop(cls, trace: TraceConfig | None,
                          info: ValidationInfo) -> TraceConfig | None:
        arrival = info.data.get("arrival")
        if trace is not None and arrival is not None and arrival.closed_loop \
                and trace.rate_scale != 1.0:
            raise ValueError("rate_scale has no effect in a closed loop (process: concurrency "
                             "sends the rows in file order, timestamps ignored); remove it")
        return trace

    @property
    def class_names(self) -> tuple[str, ...]:
        """Class names in ``class_id`` order (the trace's ``class_name`` for replay)."""
        if self.trace is not None:
            return (self.trace.class_name,)
        return tuple(c.name for c in self.classes)


def check_rate_pieces(workload: WorkloadConfig) -> None:
    """A synthetic workload's schedules and bursts cut the run into at most
    :data:`~capsim.scenario.load_shape.MAX_RATE_PIECES` pieces (the run's length:
    ``duration_s``, or ``num_requests`` at ``rate_per_s``).

    Raises:
        ScenarioError: naming the shape's field (``workload.schedule.step_s``, …).
    """
    arrival = workload.arrival
    rate = arrival.rate_per_s if arrival is not None else None
    horizon = workload.duration_s or (
        workload.num_requests / rate if workload.num_requests and rate and math.isfinite(rate)
        else None)
    if horizon is None or workload.trace is not None:
        return
    shapes = [(key, getattr(workload, key)) for key in ("schedule", "bursts")]
    shapes += [(f"classes.{i}.{key}", getattr(c, key)) for i, c in
               enumerate(workload.classes or ()) for key in ("schedule", "bursts")]
    for where, shape in shapes:
        problem = pieces_problem(shape, horizon) if shape is not None else None
        if problem is not None:
            raise ScenarioError(problem[1], path=f"workload.{where}.{problem[0]}")
