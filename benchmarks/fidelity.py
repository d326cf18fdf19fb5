"""Fidelity benchmark: capsim's predictions of measured public cases, and the error.

Usage (from the repository root, capsim importable):

    python benchmarks/fidelity.py [--kind KIND] [--case ID] [--only PATTERN] [--fidelity-2026]
                                  [--markdown] [--json PATH]
                                  [--trust capsim/profiles/data/trust.yaml]

The cases are ``../shared/reference/measured/cases.yaml`` next to this checkout (read,
never copied; without it the script exits 2) and the project-collected supplementary cases of
``benchmarks/fidelity/supplementary_cases.yaml`` (same schema, ``collected: project``; vLLM V1
serving runs and tensor-parallel rows the shared set lacks; a case id appears once in the two
files). Supplementary rows are printed apart and count in the per-kind summaries and the trust
table, marked as project-collected.

The fit/test protocol: ``benchmarks/fidelity/fit_test_split.yaml`` assigns every case to
``fit`` (a shipped constant was fitted to it; its header gives the rule) or ``test``; the
profiles' ``fitted_to:`` name only ``fit`` cases (:func:`check_fitted_to`). Test rows and fit
rows are printed apart, and per trust family their median |error| per engine family and per
load band (:func:`load_fraction`: a serving row's rate over capsim's saturation throughput of
the configuration; below 50 %, 50-80 %, above 80 %); the last two lines are
``fidelity (test rows): TTFT a %, TPOT/ITL b %, E2EL c %, throughput d %, KV e %`` (median
|error| over the test rows, :func:`headline`), then ``fidelity 2026 (test rows, N cases): TTFT a
%, TPOT/ITL b %, throughput c %`` over the test rows of the cases of the 2026 kind (those with a
``fidelity_2026`` field, :func:`line_2026`). A quantity a profile value was fitted to within
a case is also predicted but not scored, listed with the gaps (:attr:`Entry.fitted`).

Each case has a row in :data:`ENTRIES`: its
scenario file in ``benchmarks/fidelity/`` (``supplementary/`` for the supplementary cases;
named after the case id; the header says how the case was expressed and what was assumed) and a predictor that turns capsim's output into
the case's measured quantities:

- ``kv_capacity``: the resolved pool's memory terms (:func:`memory_terms`), read against
  the engine's start-up log lines;
- ``load_latency_throughput`` and the fixed-batch / first-token ``kernel_step_timing``
  cases: the scenario's variants simulated, their summary row (all requests) read against
  the published medians, means and throughputs (:data:`SUMMARY_FIELDS`);
- Vidur's per-operator timings: the roofline's per-operator breakdown (:func:`vidur_linear_ops`).

Inputs are each case's configuration only (flags, model, GPU, workload as published); a
figure the engine logged or measured is never fed back as an input. Error % =
(predicted - measured) / measured x 100, signed. The run is deterministic (every scenario
has a seed) and prints one row per quantity (case, quantity, measured, predicted, error),
then per kind the count, median and max |error| (and per kv_capacity quantity the median
signed error), then what capsim cannot express, one line each. ``--markdown`` prints the
summaries as GitHub markdown instead (per kind, per memory term, per case); ``--only PATTERN``
(a shell pattern over case ids) and ``--fidelity-2026`` (the 2026 kind) select cases; ``--json PATH``
also writes every quantity, the summaries and the gaps as JSON; ``--trust PATH`` writes the
per engine preset × GPU error table every capsim run shows (:func:`trust_table`). Exit 0;
exit 2 with one line naming the file and the key for a split that lists a case twice, in both
lists, in neither or that is no measured case, a ``fitted_to`` naming an unknown or ``test``
case, or a supplementary case repeating an id.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

from capsim.common.yamlio import load_yaml
from capsim.cost.pricer import StepPricer
from capsim.metrics.summary import summarize
from capsim.profiles.trust import FAMILIES
from capsim.results.model import SummaryRow
from capsim.scenario.load import LoadedScenario, load
from capsim.scenario.run_config import Pool, RunConfig
from capsim.scenario.workload import ArrivalConfig
from capsim.sim.simulate import simulate
from capsim.workload import TraceCache

ROOT = Path(__file__).resolve().parents[1]
CASES_YAML = ROOT.parent / "shared" / "reference" / "measured" / "cases.yaml"
SCENARIOS = ROOT / "benchmarks" / "fidelity"
SUPPLEMENTARY_YAML = SCENARIOS / "supplementary_cases.yaml"
#: Every measured case → ``fit`` (a shipped constant was fitted to it) or ``test``.
SPLIT_YAML = SCENARIOS / "fit_test_split.yaml"
FIT, TEST = "fit", "test"
#: The profiles whose ``fitted_to:`` name the cases their constants were fitted to.
PROFILE_DATA = ROOT / "capsim" / "profiles" / "data"
#: ``collected`` of a case from the shared reference set / from SUPPLEMENTARY_YAML.
SHARED, PROJECT = "shared", "project"
KINDS = ("kv_capacity", "load_latency_throughput", "kernel_step_timing")
GIB = 2**30
NAN = float("nan")


class Compared(NamedTuple):
    """One measured quantity of a case and capsim's prediction of it (NaN: not predicted),
    and the scenario variant that predicted it."""

    name: str
    measured: float
    predicted: float
    variant: str


@dataclass(frozen=True)
class Point:
    """One measured configuration of a case.

    Attributes:
        variant: the scenario variant that expresses it.
        fields: measured figures (a mapping out of the case's ``measured`` section).
        label: prefix of its quantity names ("" when the names are unique without one).
        only: compare only quantities whose name starts with one of these ("": all).
    """

    variant: str
    fields: Mapping[str, Any]
    label: str = ""
    only: tuple[str, ...] = ()

    def wants(self, quantity: str) -> bool:
        return not self.only or quantity.startswith(self.only)

    def name(self, quantity: str) -> str:
        return f"{self.label} {quantity}".strip()


Predictor = Callable[[dict, LoadedScenario], list[Compared]]


# -- kv_capacity ------------------------------------------------------------------------


def memory_terms(pool: Pool, max_model_len: int) -> dict[str, float]:
    """capsim's start-up memory figures of one pool, per GPU (its engine preset's memory
    rule, :mod:`capsim.kv.memory`).

    Keys: ``total`` (device memory the engine sees), ``requested`` (the budget the rule
    divides), ``weights``, ``activation_peak``, ``non_torch``, ``cudagraph`` (charged to the
    budget), ``cudagraph_pool`` (the captured graphs), ``cudagraph_estimate`` (the engine's
    start-up estimate of them) and ``available_kv`` in GiB per GPU; ``kv_blocks`` and
    ``kv_tokens`` of the pool (the whole TP group); ``max_concurrency`` (requests of
    ``max_model_len`` tokens, x).
    """
    kv = pool.kv
    g = kv.memory.gib()
    return {
        "total": g["total"], "requested": g["budget"], "weights": g["weights"],
        "activation_peak": g["activation_peak"], "non_torch": g["non_torch"],
        "cudagraph": g["cudagraph"], "cudagraph_pool": g["cudagraph_pool"],
        "cudagraph_estimate": g["cudagraph_estimate"], "available_kv": g["available_kv"],
        "kv_blocks": kv.num_gpu_blocks,
        "kv_tokens": kv.num_tokens,
        "max_concurrency": kv.max_concurrency(max_model_len),
    }


#: Start-up log wording (vLLM V1 0.19, V0 0.6 one-line format, PR #10511's breakdown) →
#: quantity; group 1 is the number. V0 printed "GB" for GiB (bytes / 2**30).
LOG_PATTERNS = {
    "total_gib": r"total_(?:gpu_)?memory[= ]([\d.]+) ?GiB",
    "requested_gib": r"(?:worker requested memory: |can use )([\d.]+) ?GiB",
    "weights_gib": r"(?:Model loading took |Loading model weights took |model weights take )"
                   r"([\d.]+) ?Gi?B",
    "torch_peak_gib": r"peak_torch_memory=([\d.]+) ?GiB",     # V0: weights + activations
    "activation_peak_gib": r"(?:torch peak memory increase: |PyTorch activation peak memory )"
                           r"([\d.]+) ?GiB",
    "non_torch_gib": r"(?:non-torch forward increase memory: |non_torch_memory[= ])([\d.]+) ?GiB",
    "cudagraph_estimate_gib": r"Estimated CUDA graph memory: ([\d.]+) ?GiB",
    "cudagraph_gib": r"Graph capturing finished in \d+ secs, took ([\d.]+) ?GiB",
    "available_kv_gib": r"(?:Available KV cache memory: |available_kv_cache_memory |kv_cache_size=)"
                        r"([\d.]+) ?GiB",
    "kv_cache_blocks": r"GPU blocks: (\d+)",
    "kv_cache_tokens": r"(?:GPU KV cache size: |stored in KV cache \(|KV Cache is allocated\. #tokens: )"
                       r"([\d,]+)",
}
CONCURRENCY_LINE = r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"

#: Structured fields of cases.yaml (results_raw.csv rows, sweeps) → quantity.
FIELD_QUANTITIES = {
    "kv_cache_blocks": "kv_cache_blocks",
    "gpu_kv_cache_tokens": "kv_cache_tokens",
    "available_kv_gib": "available_kv_gib",
    "weights_gib": "weights_gib",
    "non_torch_forward_gib": "non_torch_gib",
}

#: Quantity → the memory_terms key that predicts it.
TERMS = {
    "total_gib": "total", "requested_gib": "requested", "weights_gib": "weights",
    "activation_peak_gib": "activation_peak", "non_torch_gib": "non_torch",
    "cudagraph_estimate_gib": "cudagraph_estimate", "cudagraph_gib": "cudagraph_pool",
    "available_kv_gib": "available_kv",
    "kv_cache_blocks": "kv_blocks", "kv_cache_tokens": "kv_tokens",
}

#: Logged quantities not scored: the torch-visible total is an input (the hardware
#: profile's ``memory_total_gib``).
INPUTS_OR_UNMODELLED = ("total_gib",)

#: vLLM V1's init snapshot is taken before the budget: its non-torch memory (CUDA context,
#: NCCL) is not charged to the KV budget. Only its total_memory is read.
INIT_SNAPSHOT = "log_worker_init"


def measured_memory(fields: Mapping[str, Any], max_model_len: int) -> dict[str, float]:
    """The start-up quantities stated in ``fields`` (log lines and structured numbers).

    A quantity found in several fields keeps its first value. ``max_concurrency@L`` takes L
    from its log line, else ``max_model_len`` (the point's configuration).
    """
    found: dict[str, float] = {}
    for key, value in fields.items():
        if key == "max_concurrency":                         # a structured row: "291.82x"
            found.setdefault(f"max_concurrency@{max_model_len}", float(str(value).rstrip("x")))
        elif isinstance(value, str):
            for quantity, pattern in LOG_PATTERNS.items():
                match = re.search(pattern, value)
                if match and (key != INIT_SNAPSHOT or quantity == "total_gib"):
                    found.setdefault(quantity, float(match.group(1).replace(",", "")))
            match = re.search(CONCURRENCY_LINE, value)
            if match:
                found.setdefault(f"max_concurrency@{match.group(1).replace(',', '')}",
                                 float(match.group(2)))
        elif key in FIELD_QUANTITIES and isinstance(value, (int, float)):
            found.setdefault(FIELD_QUANTITIES[key], float(value))
    order = list(LOG_PATTERNS)          # memory terms first, then pool size, then concurrency
    return dict(sorted(found.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order
                       else len(order) + int(kv[0].split("@")[1])))


def predicted_memory(quantity: str, pool: Pool, max_model_len: int) -> float:
    """capsim's value of one start-up quantity (names as :func:`measured_memory`)."""
    if quantity.startswith("max_concurrency@"):
        return memory_terms(pool, int(quantity.split("@")[1]))["max_concurrency"]
    terms = memory_terms(pool, max_model_len)
    if quantity == "torch_peak_gib":                         # V0's peak includes the weights
        return terms["weights"] + terms["activation_peak"]
    return terms[TERMS[quantity]]


def kv_capacity(points: Callable[[dict], list[Point]]) -> Predictor:
    """Predictor of a start-up case: every quantity each point's fields state."""

    def predict(case: dict, loaded: LoadedScenario) -> list[Compared]:
        runs = {run.variant: run for run in loaded.runs}
        out = []
        for point in points(case["measured"]):
            pool = runs[point.variant].pool()
            max_len = pool.engine.max_model_len
            for quantity, value in measured_memory(point.fields, max_len).items():
                if point.wants(quantity) and quantity not in INPUTS_OR_UNMODELLED:
                    out.append(Compared(point.name(quantity), value,
                                        float(predicted_memory(quantity, pool, max_len)),
                                        point.variant))
        return out

    return predict


# -- load_latency_throughput, fixed-batch and first-token timings ---------------------------

SummaryField = str | Callable[[SummaryRow, RunConfig], float]

#: Measured keys → the SummaryRow field (cls "all") that predicts them, or a function of it
#: (and of the variant's run).
SUMMARY_FIELDS: dict[str, SummaryField] = {
    "median_e2e_latency_ms": "e2el_p50_ms",
    "median_ttft_ms": "ttft_p50_ms",
    "median_tpot_ms": "tpot_p50_ms",
    "median_itl_ms": "itl_p50_ms",
    "mean_ttft_ms": "ttft_mean_ms",
    "mean_itl_ms": "itl_mean_ms",
    "request_throughput_req_s": "request_throughput_per_s",
    "tput_req_s": "request_throughput_per_s",
    "output_token_throughput_tok_s": "output_throughput_tok_per_s",
    "output_tput_tok_s": "output_throughput_tok_per_s",
    "input_tput_tok_s": lambda r, _: r.total_throughput_tok_per_s - r.output_throughput_tok_per_s,
    # NIM's concurrency sweep (genai-perf averages over the measured requests; throughput =
    # output tokens/s of all users in steady state).
    "ttft_ms": "ttft_mean_ms",
    "itl_ms": "itl_mean_ms",
    "throughput_tokens_per_s": lambda r, run: closed_loop_tok_s(r, run),
    # vLLM benchmark_latency: one batch, all of whose requests end at the same step.
    "median_ms": "e2el_p50_ms",
    # TensorRT-LLM first-token latency: one request with one output token.
    "first_token_latency_ms": "ttft_p50_ms",
    # InferenceX (utils/process_result.py): "TPOT (ms)" (statistic unstated; median and mean
    # agree to ~0.1 % on its fixed-range closed loops) and total tok/s / the deployment's GPUs.
    "tpot_ms": "tpot_p50_ms",
    "tput_per_gpu_tok_s": lambda r, run: r.total_throughput_tok_per_s / run.num_gpus,
    # A single request's decode rate, tokens/s = 1000 / TPOT (ms).
    "decode_tok_s": lambda r, _: 1e3 / r.tpot_p50_ms,
    # InferenceX tables of its public API ("Mean latency"): mean TPOT, and output tok/s over the
    # run's duration divided by the deployment's GPUs.
    "mean_tpot_ms": "tpot_mean_ms",
    "output_tput_per_gpu_tok_s": lambda r, run: r.output_throughput_tok_per_s / run.num_gpus,
}


def summary_value(row: SummaryRow, how: SummaryField, run: RunConfig) -> float:
    return float(how(row, run) if callable(how) else getattr(row, how))


def closed_loop_tok_s(row: SummaryRow, run: RunConfig) -> float:
    """A closed loop's steady-state output tokens/s, by Little's law: users × output tokens
    per request ÷ (mean E2E latency + think time), over the measured requests. (The summary's
    throughput, measured requests' tokens ÷ first measured arrival → last completion, is low
    by about users ÷ measured requests: that span includes the last requests' time in the
    system; a benchmark client's measurement windows are not.) An open-loop run: the summary's."""
    arrival = run.workload.arrival
    if arrival is None or not arrival.closed_loop:
        return row.output_throughput_tok_per_s
    tokens_per_request = row.output_throughput_tok_per_s / row.request_throughput_per_s
    return arrival.users * tokens_per_request / (row.e2el_mean_ms / 1e3 + arrival.think_s)


def serving(points: Callable[[dict], list[Point]]) -> Predictor:
    """Predictor of a simulated case: each point's variant is simulated once and its summary
    row read through :data:`SUMMARY_FIELDS`, the figures capsim prints (no per-case stand-in)."""
    fields = SUMMARY_FIELDS

    def predict(case: dict, loaded: LoadedScenario) -> list[Compared]:
        pts = points(case["measured"])
        rows = summary_rows(loaded, [p.variant for p in pts])
        runs = {run.variant: run for run in loaded.runs}
        return [Compared(p.name(key), float(value),
                         summary_value(rows[p.variant], fields[key], runs[p.variant]),
                         p.variant)
                for p in pts for key, value in p.fields.items() if key in fields and p.wants(key)]

    return predict


#: (scenario file, variant) → its summary row, so a variant is simulated once per
#: :func:`evaluate` (which empties it: a caller may change the model between calls).
_SIMULATED: dict[tuple[str, str], SummaryRow] = {}


def summary_rows(loaded: LoadedScenario, variants: list[str]) -> dict[str, SummaryRow]:
    """Simulate the named variants of ``loaded`` once each; their summary rows (all requests)."""
    traces = TraceCache(loaded.base_dir, str(loaded.path))
    rows = {}
    for run in loaded.runs:
        if run.variant in variants:
            key = (str(loaded.path), run.variant)
            if key not in _SIMULATED:
                result = simulate(run, traces.get(run.workload, run.seed))
                _SIMULATED[key] = summarize(result, loaded.spec.slo, loaded.class_slos)[0]
            rows[run.variant] = _SIMULATED[key]
    return rows


# -- load bands ----------------------------------------------------------------------------

#: A serving row's load: the variant's request rate ÷ the configuration's saturation
#: throughput (below 0.5, 0.5-0.8, above 0.8); rows of no load (start-up memory, fixed-batch
#: and per-operator timings) are NO_LOAD.
BANDS = ("below 50 %", "50-80 %", "above 80 %")
NO_LOAD = "no load (start-up, fixed batch)"
#: Open-loop rates at or above this are "all at once" (the scenarios write 1e9 req/s).
ALL_AT_ONCE_RATE = 1e6


def _all_at_once(run: RunConfig, traces: TraceCache) -> bool:
    arrival = run.workload.arrival
    if arrival is None:                                    # a replayed trace: its own times
        return float(traces.get(run.workload, run.seed).arrival_s.max()) == 0.0
    return not arrival.closed_loop and (arrival.rate_per_s or 0.0) >= ALL_AT_ONCE_RATE


def load_fraction(loaded: LoadedScenario, run: RunConfig) -> float:
    """The variant's offered load ÷ the configuration's saturation throughput, in requests/s.

    The saturation throughput is capsim's: the same variant with every request of its workload
    arriving at once (constant arrivals at 1e9 req/s; a replayed trace's rows at t = 0). The
    offered load is the Poisson / constant rate of an open loop, or a replayed trace's own
    rate ((rows − 1) / its arrival span); a closed loop offers what it achieves (capsim's
    request throughput of the variant). A variant whose requests all arrive at once is the saturation
    run itself: 1. Measured figures are not used."""
    traces = TraceCache(loaded.base_dir, str(loaded.path))
    if _all_at_once(run, traces):
        return 1.0
    key = (str(loaded.path), f"{run.variant} (saturation)")
    arrival = run.workload.arrival
    if key not in _SIMULATED:
        if arrival is None:        # a replayed trace with its own times: its rows at t = 0
            trace, saturated = traces.get(run.workload, run.seed), run
            at_once = np.where(np.isnan(trace.arrival_s), trace.arrival_s, 0.0)
            trace = dataclasses.replace(trace, arrival_s=at_once)
        else:
            workload = run.workload.model_copy(
                update={"arrival": ArrivalConfig(process="constant", rate_per_s=1e9)})
            saturated = dataclasses.replace(run, workload=workload)
            trace = traces.get(workload, run.seed)
        result = simulate(saturated, trace)
        _SIMULATED[key] = summarize(result, loaded.spec.slo, loaded.class_slos)[0]
    capacity = _SIMULATED[key].request_throughput_per_s
    if arrival is None:            # the trace's own rate: requests over its arrival span
        times = traces.get(run.workload, run.seed).arrival_s
        offered = (len(times) - 1) / float(times.max() - times.min())
    else:
        offered = (summary_rows(loaded, [run.variant])[run.variant].request_throughput_per_s
                   if arrival.closed_loop else arrival.rate_per_s)
    return offered / capacity


def band_of(fraction: float) -> str:
    return BANDS[0] if fraction < 0.5 else BANDS[1] if fraction <= 0.8 else BANDS[2]


# -- kernel_step_timing: Vidur per-operator GEMMs -------------------------------------------

#: Vidur mlp.csv operator → capsim's matmul of the same weights.
VIDUR_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj",
             "mlp_up_proj": "gate_up_proj", "mlp_down_proj": "down_proj"}


def vidur_linear_ops(case: dict, loaded: LoadedScenario) -> list[Compared]:
    """Per-layer GEMM time vs tokens in the step (ms): capsim's roofline breakdown of a step of
    N tokens, each matmul divided by its execution count (layers), against Vidur's medians."""
    return _vidur_rows(case["measured"]["rows"], loaded.runs[0], "")


def vidur_tables(case: dict, loaded: LoadedScenario) -> list[Compared]:
    """:func:`vidur_linear_ops` for a case of several tables (every measured key holding a
    list of rows), each predicted by the scenario variant of the key's name (also its label;
    at TP > 1 the pricer's matmuls are one GPU's shard, as Vidur's rows)."""
    runs = {run.variant: run for run in loaded.runs}
    return [c for key, rows in case["measured"].items() if isinstance(rows, list)
            for c in _vidur_rows(rows, runs[key], key)]


def _vidur_rows(rows: list[dict], run: RunConfig, label: str) -> list[Compared]:
    pricer: StepPricer = run.pool().pricer(run.model)
    out = []
    for row in rows:
        n = row["num_tokens"]
        ops = {op.name: op.seconds / op.count * 1e3 for op in pricer.breakdown(prefill_tokens=n)}
        out += [Compared(f"{label} {vidur}_ms@{n}".strip(), row[vidur], ops[ours], run.variant)
                for vidur, ours in VIDUR_OPS.items()]
    return out


# -- the cases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """How one measured case is predicted.

    Attributes:
        scenario: file in benchmarks/fidelity/ (None: the case cannot be expressed).
        predict: (case, loaded scenario) → compared quantities.
        not_expressed: (what, reason) for the parts of the case left out.
        fitted: (variant, what capsim fits to it) for the case's configurations a profile
            value was fitted to: predicted, but not scored (a fit's own data is no check).
    """

    scenario: str | None
    predict: Predictor | None
    not_expressed: tuple[tuple[str, str], ...] = ()
    fitted: tuple[tuple[str, str], ...] = ()


def _one(measured: dict) -> list[Point]:
    """The whole case is one configuration, the scenario's only variant."""
    return [Point("default", measured)]


def _llama8b_tp1_sweep(m: dict) -> list[Point]:
    """The log at max_model_len 8192, plus the concurrency lines of the max_model_len sweep."""
    return [Point("max_model_len_8192", m)] + [
        Point(f"max_model_len_{row['max_model_len']}", row, only=("max_concurrency",))
        for row in m["max_model_len_sweep"] if row["max_model_len"] != 8192]


def _qwen_rows(m: dict) -> list[Point]:
    """The TP 1 log and the TP 2 / TP 4 / fp8-KV rows of results_raw.csv."""
    return [Point("tp1", m, "tp1"), Point("tp2", m["tp2_same_source"], "tp2"),
            Point("tp4", m["tp4_same_source"], "tp4"),
            Point("kv_fp8", m["kv_fp8_same_source"], "kv_fp8")]


def _labelled(keys: dict[str, str]) -> Callable[[dict], list[Point]]:
    """One point per measured key: {measured key: variant (also the label)}."""
    return lambda m: [Point(variant, {key: m[key]} if isinstance(m[key], str) else m[key], variant)
                      for key, variant in keys.items()]


def _rps_points(m: dict) -> list[Point]:
    return [Point(key, m[key], key) for key in ("rps_4", "rps_8", "rps_inf")]


def _nim_concurrency(m: dict) -> list[Point]:
    """Every row of the ISL 5000 / OSL 500 table, and the rows of the ISL 500 / OSL 2000
    excerpt (a quoted sentence, "concurrency C: TTFT x ms, ITL y ms, throughput z tok/s; ...",
    whose numbers are read out); variant isl<ISL>_osl<OSL>_c<C>."""
    points = [Point(f"isl5000_osl500_c{row[0]}", dict(zip(m["table_columns"], row)),
                    f"isl5000/osl500 c={row[0]}") for row in m["rows"]]
    names = {"TTFT": "ttft_ms", "ITL": "itl_ms", "throughput": "throughput_tokens_per_s"}
    for c, text in re.findall(r"concurrency (\d+): ([^;]*)", m["isl500_osl2000_partial"]):
        fields = {names[k]: float(v) for k, v in re.findall(r"(TTFT|ITL|throughput) ([\d.]+)",
                                                            text)}
        points.append(Point(f"isl500_osl2000_c{c}", fields, f"isl500/osl2000 c={c}"))
    return points


def _trtllm_grid(m: dict) -> list[Point]:
    """Every ``<gpu>_tp<N>_fp8`` table of ISL/OSL → total output tok/s; variant
    <gpu>-<isl>-<osl>."""
    return [Point(f"{key.split('_')[0]}-{isl_osl.replace('/', '-')}", {"output_tput_tok_s": tok_s},
                  f"{key.split('_')[0]} {isl_osl}")
            for key, table in m.items() if key.endswith("_fp8")
            for isl_osl, tok_s in table.items()]


def _batch_latency(m: dict) -> list[Point]:
    """Each model's median batch latency (Llama-3-8B TP 1, Llama-3-70B TP 4, Mixtral-8x7B
    TP 2)."""
    return [Point(v, {"median_ms": m[f"latency_{v}"]["median_ms"]}, v)
            for v in ("llama8B_tp1", "llama70B_tp4", "mixtral8x7B_tp2")]


def _first_token(m: dict) -> list[Point]:
    """One point per table row; variant llama<size>_tp<N>_in<ISL> (e.g. llama7B_tp1_in128)."""
    return [Point(v, {"first_token_latency_ms": row["ms"]}, v)
            for row in m["first_token_latency_ms"]
            for v in [f"llama{row['model'].split()[1]}_tp{row['tp']}_in{row['input_len']}"]]


#: Why the H100 Llama fp8-KV line of the single-request case is not scored.
FP8_KV_FIT = ("h100-sxm's efficiency.attention_decode_fp8.vllm is fitted to this line: its slope "
              "and intercept against the bf16 line's")

#: Why the H100 gpt-oss fp8-KV line of the single-request case is not scored.
FP8_KV_HD64_FIT = ("h100-sxm's efficiency.attention_decode_fp8_head_dim.vllm.64 is fitted to "
                   "this line: its slope against the bf16 line's")

#: Why the H100 and B200 gpt-oss bf16-KV lines of the single-request case are not scored.
MXFP4_MOE_FIT = ("{gpu}'s efficiency.fused_moe_mxfp4.vllm (vLLM's MXFP4 MoE path) is fitted to "
                 "this line's intercept")

#: Input lengths (tokens) at which a published ITL-vs-input-length line is read.
ITL_LINE_INPUT_LENS = (1_000, 100_000)


def _itl_line(m: dict) -> list[Point]:
    """A published least-squares line ITL = slope x input_len + intercept per (GPU, model, KV
    dtype) (every key but ``form``), read at :data:`ITL_LINE_INPUT_LENS` inside its swept range;
    variant <key>_in<L>. The value at L is arithmetic on the published coefficients."""
    return [Point(f"{key}_in{n}",
                  {"mean_itl_ms": line["intercept_ms"] + line["slope_ms_per_token"] * n},
                  f"{key} in{n}")
            for key, line in m.items() if key != "form" for n in ITL_LINE_INPUT_LENS]


def _inferencex_rows(m: dict) -> list[Point]:
    """The lowest- and highest-concurrency row of each ISL/OSL sweep of an InferenceX results
    table (``table_columns`` / ``rows``; ISL/OSL written "1k/8k"); variant
    isl<ISL>_osl<OSL>_c<C> (e.g. isl1024_osl8192_c64), its TPOT and tok/s per GPU."""
    rows = [dict(zip(m["table_columns"], row)) for row in m["rows"]]
    points = []
    for pair in dict.fromkeys(r["isl_osl"] for r in rows):
        sweep = [r for r in rows if r["isl_osl"] == pair]
        isl, osl = (int(x.rstrip("k")) * 1024 for x in pair.split("/"))
        concs = sorted({r["conc"] for r in sweep})
        for r in [r for r in sweep if r["conc"] in {concs[0], concs[-1]}]:
            points.append(Point(f"isl{isl}_osl{osl}_c{r['conc']}",
                                {k: r[k] for k in ("tpot_ms", "tput_per_gpu_tok_s")},
                                f"{pair} c={r['conc']}"))
    return points


def _conc_sweep_ends(m: dict) -> list[Point]:
    """The lowest- and highest-concurrency rows of a one-ISL/OSL sweep table
    (``table_columns`` / ``rows`` with ``conc``, ``output_tps``, ``median_tpot_ms``);
    variant c<C>, its median TPOT and output tok/s."""
    rows = [dict(zip(m["table_columns"], row)) for row in m["rows"]]
    concs = sorted(r["conc"] for r in rows)
    return [Point(f"c{r['conc']}", {"median_tpot_ms": r["median_tpot_ms"],
                                    "output_token_throughput_tok_s": r["output_tps"]},
                  f"c={r['conc']}")
            for r in rows if r["conc"] in {concs[0], concs[-1]}]


def _c1(m: dict) -> list[Point]:
    """The concurrency-1 figures (``c1``), the scenario's variant c1."""
    return [Point("c1", m["c1"], "c=1")]


def _pp2(m: dict) -> list[Point]:
    """The pipeline-parallel start-up log without its "Available KV cache memory" line, which is
    the other stage's (:data:`PP_OTHER_STAGE`)."""
    return [Point("default", {k: v for k, v in m.items() if k != "log_available_kv"})]


def _benchmark_serving_json(m: dict) -> list[Point]:
    """A vLLM benchmark_serving.py result (``ttft_ms`` / ``tpot_ms`` / ``itl_ms`` as
    {mean, median, ...}) read into the summary's keys; variant rate_inf. Its mean TPOT is not
    read: the key became scorable for the 2026 cases (2026-12-06), and this case's rows stay
    what they were (scoring it here is its own change)."""
    fields = {"request_throughput_req_s": m["request_throughput_req_s"],
              "output_token_throughput_tok_s": m["output_throughput_tok_s"],
              "input_tput_tok_s": m["input_throughput_tok_s"]}
    for name in ("ttft", "tpot", "itl"):
        for stat in ("median", "mean"):
            if f"{stat}_{name}_ms" in SUMMARY_FIELDS and (stat, name) != ("mean", "tpot"):
                fields[f"{stat}_{name}_ms"] = m[f"{name}_ms"][stat]
    return [Point("rate_inf", fields)]


def _perfbench_serving_and_throughput(m: dict) -> list[Point]:
    """The serving row (variant serving_llama70B_tp4_qps_1) and each offline
    ``throughput_<model>_req_s`` row (variant throughput_<model>)."""
    points = [Point("serving_llama70B_tp4_qps_1", m["serving_llama70B_tp4_sharegpt_qps_1"],
                    "serving 70B TP4 qps 1")]
    for key, value in m.items():
        if key.startswith("throughput_"):
            variant = key.removesuffix("_req_s")
            points.append(Point(variant, {"tput_req_s": value}, variant.replace("_", " ")))
    return points


def scored_points(skip: tuple[str, ...] = ()) -> Callable[[dict], list[Point]]:
    """A case whose ``measured`` lists every published run under ``points`` (each with its
    ``label``) and names what is compared: ``scored_points`` (labels; each the scenario's
    variant) and ``scored_quantities`` (keys of :data:`SUMMARY_FIELDS`). Labels in ``skip``
    (runs capsim cannot express, listed in the entry's ``not_expressed``) have no variant."""
    def points(m: dict) -> list[Point]:
        return [Point(p["label"], {k: p[k] for k in m["scored_quantities"] if k in p},
                      p["label"])
                for p in m["points"] if p["label"] in m["scored_points"]
                and p["label"] not in skip]
    return points


NO_STD = "capsim's summary has means and percentiles, no standard deviation"
UNSTATED_WORKLOAD = ("the throughput tests' workload (dataset, prompt count, lengths) is not "
                     "stated in the case")
SKIP_SLIDING_WINDOW = ("fp8 KV on the full-attention layers only (--kv-cache-dtype-skip-layers "
                      "sliding_window): capsim has one KV dtype per model")
PP_OTHER_STAGE = ("the log's one \"Available KV cache memory\" line (66.54 GiB) is the stage "
                  "that does not bind; the token count is the other stage's (the case's notes), "
                  "which capsim's pool is: not comparable")
P99_OF_200 = ("the benchmark scores medians, means and throughputs (SUMMARY_FIELDS); a p99 of "
              "200 requests is their second-largest")
PEAK_DURING_RUN = ("a peak seen while the benchmark ran (free-form, per GPU), not a start-up "
                   "term")
ELEMENTWISE = ("capsim prices a layer's elementwise kernels as one group (2 norms, RoPE, "
               "SiLU-mul, adds); the case omits post_attention_layernorm, so no group sum")
NO_MAVERICK = "no capsim model of Llama-4-Maverick (128 experts, MoE every other layer)"
#: The 2026 kind's cases (supplementary_cases.yaml, issue 30 item 6), one scored-points entry
#: each: case id -> runs of the case capsim cannot express and why.
CASES_2026: dict[str, tuple[tuple[str, str], ...]] = {
    "load_sglang057_8xh200_dsr1_fp8_tp8_random1k1k_concurrency_sweep": (),
    "load_sglang057_8xh200_dsr1_fp8_tp8_c4_isl_osl": (),
    "load_sglang0512_8xh200_dsr1_fp8_tp8_random1k1k_8k1k_concurrency_sweep": (),
    "load_sglang0512_8xb200_dsr1_fp8_tp8_random1k1k_concurrency_sweep": (),
    "load_sglang0519_8xmi325x_dsr1_fp8_tp8_random8k1k_concurrency_sweep": (),
    "load_trtllm130rc14_8xb200_dsr1_fp8_tp8_random1k1k_concurrency_sweep": (),
    "load_sglang0561_8xb200_dsr1_fp8_tp8_random_chat_reasoning_summarization": (),
    "load_sglang056_8xb200_qwen3_235b_bf16_tp8_random_chat_reasoning_summarization": (),
    "load_sglang056_8xb200_gptoss120b_tp8_sharegpt_c1_c100": (),
    "load_sglang057_8xmi300x_dsv3_dpattn_sharegpt_eagle_c1_ep8_c100": (),
    "load_sglang057_8xmi300x_dsv31_tp8_random_chat_reasoning_summarization": (),
    "load_sglang059_8xmi300x_llama4_scout_tp8_random1k1k": (
        ("maverick_in1000_out1000_c1, maverick_in1000_out1000_c16, "
         "maverick_in1000_out1000_c100", NO_MAVERICK),),
    "load_vllm_pr23696_8xb200_gptoss120b_tp8_sharegpt_rate_inf": (),
    "load_vllm0110_sglang053_trtllm100_8xh200_dsr1_sharegpt_rate_inf_engines": (),
}

#: Case id → scenario file and predictor (the per-case glue).
ENTRIES: dict[str, Entry] = {
    "kv_vllm0190_h100_llama31_8b_tp1_bf16": Entry(
        "kv_vllm0190_h100_llama31_8b_tp1_bf16.yaml", kv_capacity(_llama8b_tp1_sweep)),
    "kv_vllm0190_h100_llama31_8b_tp2_bf16": Entry(
        "kv_vllm0190_h100_llama31_8b_tp2_bf16.yaml", kv_capacity(_one)),
    "kv_vllm0190_h100_llama31_8b_tp1_kvfp8": Entry(
        "kv_vllm0190_h100_llama31_8b_tp1_kvfp8.yaml", kv_capacity(_one)),
    "kv_vllm0190_h100_qwen25_7b_tp1_bf16": Entry(
        "kv_vllm0190_h100_qwen25_7b_tp1_bf16.yaml", kv_capacity(_qwen_rows)),
    "kv_vllm0190_h100_llama33_70b_fp8dyn_tp2": Entry(
        "kv_vllm0190_h100_llama33_70b_fp8dyn_tp2.yaml", kv_capacity(_one)),
    "kv_vllm_pr2031_a100_llama2_7b_tp1": Entry(
        "kv_vllm_pr2031_a100_llama2_7b_tp1.yaml",
        kv_capacity(_labelled({"gpu_blocks_current_main": "main_dec2023",
                               "gpu_blocks_with_pr2031": "pr2031"}))),
    "kv_vllm_issue10517_rtx3090_llama31_8b_maxlen_effect": Entry(
        "kv_vllm_issue10517_rtx3090_llama31_8b_maxlen_effect.yaml",
        kv_capacity(_labelled({"max_model_len_20000": "max_model_len_20000",
                               "max_model_len_29000": "max_model_len_29000"}))),
    "kv_vllm_pr10511_llama3_8b_memory_breakdown": Entry(
        "kv_vllm_pr10511_llama3_8b_memory_breakdown.yaml",
        kv_capacity(_labelled({"tp1": "tp1", "tp2": "tp2"}))),
    "load_sglang030_a100_llama31_8b_sharegpt_rps4_rps8": Entry(
        "load_sglang030_a100_llama31_8b_sharegpt_rps4_rps8.yaml", serving(_rps_points)),
    "load_vllm060_a100_llama31_8b_sharegpt_rps4_rps8_multistep10": Entry(
        "load_vllm060_a100_llama31_8b_sharegpt_rps4_rps8_multistep10.yaml",
        # capsim streams a --num-scheduler-steps window as one chunk: its ITL is per chunk.
        serving(_rps_points)),
    "load_nim180_2xh100_llama33_70b_fp8_tp2_isl5000_osl500_concurrency_sweep": Entry(
        "load_nim180_2xh100_llama33_70b_fp8_tp2_isl5000_osl500_concurrency_sweep.yaml",
        serving(_nim_concurrency)),
    "load_vllm_nightly_a100_tgi21_llama3_8b_qps4_and_70b_tp4_qps2": Entry(
        "load_vllm_nightly_a100_tgi21_llama3_8b_qps4_and_70b_tp4_qps2.yaml",
        serving(_labelled({"tgi_llama8B_tp1_qps_4": "llama8B_tp1_qps_4",
                           "tgi_llama70B_tp4_qps_2": "llama70B_tp4_qps_2"})),
        (("std_ttft_ms, std_itl_ms", NO_STD),)),
    "tput_trtllm_v10_h100_fp8_llama31_8b_isl_osl_grid": Entry(
        "tput_trtllm_v10_h100_fp8_llama31_8b_isl_osl_grid.yaml", serving(_trtllm_grid)),
    "step_vllm_perfbench_latency_bs8_in32_out128_a100": Entry(
        "step_vllm_perfbench_latency_bs8_in32_out128_a100.yaml", serving(_batch_latency),
        (("throughput_tests_req_s", UNSTATED_WORKLOAD),)),
    "step_vllm_perfbench_latency_bs8_in32_out128_h100": Entry(
        "step_vllm_perfbench_latency_bs8_in32_out128_h100.yaml", serving(_batch_latency)),
    "step_trtllm_v05_first_token_latency_bs1_a100_fp16": Entry(
        "step_trtllm_v05_first_token_latency_bs1_a100_fp16.yaml", serving(_first_token)),
    "kernel_vidur_a100_llama2_7b_linear_ops_tp1": Entry(
        "kernel_vidur_a100_llama2_7b_linear_ops_tp1.yaml", vidur_linear_ops,
        (("mlp_act, input_layernorm, attn_rope, add, emb", ELEMENTWISE),)),
    "kernel_vidur_h100_llama2_7b_linear_ops_tp1": Entry(
        "kernel_vidur_h100_llama2_7b_linear_ops_tp1.yaml", vidur_linear_ops,
        (("mlp_act, input_layernorm, attn_rope, add, emb", ELEMENTWISE),)),
    # Project-collected supplementary cases (benchmarks/fidelity/supplementary_cases.yaml).
    "load_vllm0191_h100_llama31_8b_random20k2k_c8_kvbf16_kvfp8": Entry(
        "supplementary/load_vllm0191_h100_llama31_8b_random20k2k_c8_kvbf16_kvfp8.yaml",
        serving(_labelled({"kv_bf16": "kv_bf16", "kv_fp8": "kv_fp8"}))),
    "load_vllm0191_h100_gptoss20b_random20k2k_c8_kvbf16_kvfp8": Entry(
        "supplementary/load_vllm0191_h100_gptoss20b_random20k2k_c8_kvbf16_kvfp8.yaml",
        serving(_labelled({"kv_bf16": "kv_bf16", "kv_fp8": "kv_fp8"})),
        (("kv_fp8_skip_sliding_window", SKIP_SLIDING_WINDOW),)),
    "load_vllm0191_h100_b200_llama31_8b_gptoss20b_c1_itl_vs_input_len": Entry(
        "supplementary/load_vllm0191_h100_b200_llama31_8b_gptoss20b_c1_itl_vs_input_len.yaml",
        serving(_itl_line), fitted=tuple(
            (f"h100_llama_kv_fp8_in{n}", FP8_KV_FIT) for n in ITL_LINE_INPUT_LENS) + tuple(
            (f"h100_gptoss_kv_fp8_in{n}", FP8_KV_HD64_FIT) for n in ITL_LINE_INPUT_LENS) + tuple(
            (f"{gpu}_gptoss_kv_bf16_in{n}", MXFP4_MOE_FIT.format(gpu=profile))
            for gpu, profile in (("h100", "h100-sxm"), ("b200", "b200"))
            for n in ITL_LINE_INPUT_LENS)),
    "load_vllm0151_8xh100_gptoss120b_tp8_random_isl_osl_concurrency_sweep": Entry(
        "supplementary/load_vllm0151_8xh100_gptoss120b_tp8_random_isl_osl_concurrency_sweep.yaml",
        serving(_inferencex_rows)),
    "load_vllm_main202606_4xb200_qwen3_235b_fp8_tp4_random30k1k_c64": Entry(
        "supplementary/load_vllm_main202606_4xb200_qwen3_235b_fp8_tp4_random30k1k_c64.yaml",
        serving(_one)),
    "load_vllm0170_mi300x_gptoss120b_tp1_random1k1k_concurrency_sweep": Entry(
        "supplementary/load_vllm0170_mi300x_gptoss120b_tp1_random1k1k_concurrency_sweep.yaml",
        serving(_conc_sweep_ends)),
    "kv_vllm_issue21348_4xh100_qwen3_235b_fp8_tp4_vllm_sglang": Entry(
        "supplementary/kv_vllm_issue21348_4xh100_qwen3_235b_fp8_tp4_vllm_sglang.yaml",
        kv_capacity(_labelled({"vllm_tp4": "vllm_tp4", "sglang_tp4": "sglang_tp4"}))),
    "load_vllm0230_a100_40gb_llama31_8b_random1024_128_c1": Entry(
        "supplementary/load_vllm0230_a100_40gb_llama31_8b_random1024_128_c1.yaml",
        serving(_c1)),
    # Held-out tensor-parallel timing (issue 14): the perf-benchmark test on an H200 and vLLM PR
    # 9856's TP 2 batch.
    "step_vllm_perfbench_latency_bs8_in32_out128_h200": Entry(
        "supplementary/step_vllm_perfbench_latency_bs8_in32_out128_h200.yaml",
        serving(_batch_latency)),
    "step_vllm_pr9856_a100_llama31_8b_tp2_bs8_in128_out256": Entry(
        "supplementary/step_vllm_pr9856_a100_llama31_8b_tp2_bs8_in128_out256.yaml",
        serving(_labelled({"latency_llama8B_tp2": "llama8B_tp2"}))),
    # Shared cases added on 2026-12-06 (the first two were supplementary cases before).
    "load_sglang030_4xh100_llama31_70b_sharegpt_rps4_rps8": Entry(
        "load_sglang030_4xh100_llama31_70b_sharegpt_rps4_rps8.yaml", serving(_rps_points)),
    "load_vllm060_4xh100_llama31_70b_sharegpt_rps4_rps8_multistep10": Entry(
        "load_vllm060_4xh100_llama31_70b_sharegpt_rps4_rps8_multistep10.yaml",
        serving(_rps_points)),
    "kernel_vidur_a100_llama3_8b_and_h100_a100_llama2_70b_tp4_linear_ops": Entry(
        "kernel_vidur_a100_llama3_8b_and_h100_a100_llama2_70b_tp4_linear_ops.yaml", vidur_tables),
    "load_lambda_vllm054_1xh100_mistral7b_sharegpt320_rate_inf": Entry(
        "load_lambda_vllm054_1xh100_mistral7b_sharegpt320_rate_inf.yaml",
        serving(_benchmark_serving_json),
        (("std_ttft_ms, std_tpot_ms, std_itl_ms", NO_STD),)),
    "kv_vllm_pr2031_a100_llama2_70b_tp4": Entry(
        "kv_vllm_pr2031_a100_llama2_70b_tp4.yaml",
        kv_capacity(_labelled({"gpu_blocks_current_main": "main_dec2023",
                               "gpu_blocks_with_pr2031": "pr2031"})),
        (("peak_memory_observed_on_main", PEAK_DURING_RUN),)),
    "tput_trtllm_v10_h100_fp8_llama33_70b_tp2_isl_osl_grid": Entry(
        "tput_trtllm_v10_h100_fp8_llama33_70b_tp2_isl_osl_grid.yaml", serving(_trtllm_grid)),
    "kv_vllm0190_h100_llama31_8b_tp4_bf16": Entry(
        "kv_vllm0190_h100_llama31_8b_tp4_bf16.yaml", kv_capacity(_one)),
    "kv_vllm0190_h100_llama31_8b_pp2_bf16": Entry(
        "kv_vllm0190_h100_llama31_8b_pp2_bf16.yaml", kv_capacity(_pp2),
        (("log_available_kv", PP_OTHER_STAGE),)),
    "load_vllm_perfbench_h100_llama3_70b_tp4_sharegpt_qps1_and_throughput": Entry(
        "load_vllm_perfbench_h100_llama3_70b_tp4_sharegpt_qps1_and_throughput.yaml",
        serving(_perfbench_serving_and_throughput), (("p99_ttft_ms", P99_OF_200),)),
    # Issue 33's target: a ratio of two deployments' fronts, not per-quantity rows; scored by
    # benchmarks/agg_vs_disagg.py (both arms at every concurrency), listed here as a gap.
    "agg_disagg_dynamo_vllm072_8xh100_llama70b_fp8_isl3000_osl150_1node": Entry(
        "supplementary/agg_disagg_dynamo_vllm072_8xh100_llama70b_fp8_isl3000_osl150_1node.yaml",
        lambda case, loaded: [],
        (("throughput_per_gpu_ratio_disagg_over_agg", "a ratio of two fronts: scored by "
          "benchmarks/agg_vs_disagg.py"),)),
    # The 2026 kind (issue 30 item 6), project-collected: every published run quoted, the
    # scored ones named in the case (scored_points / scored_quantities).
    **{case_id: Entry(f"supplementary/{case_id}.yaml",
                      serving(scored_points(tuple(label for labels, _ in gaps
                                                  for label in labels.split(", ")))), gaps)
       for case_id, gaps in CASES_2026.items()},
    # A routing comparison (issue "A KV-aware fleet"): its scenario is loaded here (so a
    # broken one shows), its ratios are run and printed by benchmarks/cache_routing.py.
    "route_llmd_8x2h100_qwen3_32b_shared_prefix_150x5_qps3_60_schedulers": Entry(
        "../cache_routing/llm_d_precise_prefix_73pct.yaml", lambda case, loaded: [],
        (("scored_ratios", "a routing comparison: scored by benchmarks/cache_routing.py"),
         ("random-scheduling", "capsim has no random router"))),
}


# -- running and reporting ---------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One printed quantity."""

    case: str
    kind: str
    quantity: str
    measured: float
    predicted: float
    preset: str             # the engine preset and GPU profile of the variant that predicted it
    hardware: str
    collected: str = SHARED  # SHARED (the reference set) or PROJECT (supplementary_cases.yaml)
    split: str = TEST        # FIT or TEST (SPLIT_YAML)
    engine: str = ""         # the preset's engine family (vllm, sglang, trtllm, tgi)
    band: str = NO_LOAD      # a serving row's load band (BANDS), else NO_LOAD

    @property
    def error_pct(self) -> float:
        """(predicted - measured) / measured x 100; NaN when capsim has no prediction."""
        return (self.predicted - self.measured) / self.measured * 100.0


@dataclass(frozen=True)
class Gap:
    """A case, or part of one, that capsim cannot express, or a quantity a profile value is
    fitted to (predicted, not scored)."""

    case: str
    what: str
    reason: str


class BadInput(Exception):
    """A protocol file that cannot be read as the benchmark needs it: printed as one line
    naming the file and the key, exit 2."""

    def __init__(self, file: Path, key: str, what: str):
        super().__init__(f"{file}: {key}: {what}")


def read_cases() -> list[dict]:
    """The measured cases: the shared reference set, then the project's supplementary cases
    (each marked ``collected: project``). Exit 2 with one line when the shared reference is
    absent, a supplementary case is not marked as the project's or repeats a case id."""
    if not CASES_YAML.is_file():
        print(f"error: {CASES_YAML} not found: the fidelity benchmark reads the measured cases "
              "from ../shared/reference/measured/ next to this checkout", file=sys.stderr)
        sys.exit(2)
    supplementary = load_yaml(SUPPLEMENTARY_YAML.read_text())
    shared = load_yaml(CASES_YAML.read_text())
    seen = {case["id"] for case in shared}
    for i, case in enumerate(supplementary):
        if case.get("collected") != PROJECT:
            print(f"error: {SUPPLEMENTARY_YAML}: [{i}].collected must be {PROJECT!r} (got "
                  f"{case.get('collected')!r})", file=sys.stderr)
            sys.exit(2)
        if case.get("id") in seen:
            print(f"error: {SUPPLEMENTARY_YAML}: [{i}].id: {case['id']!r} is already a case "
                  "(keep one copy)", file=sys.stderr)
            sys.exit(2)
        seen.add(case.get("id"))
    return [*shared, *supplementary]


def read_split(case_ids: list[str], path: Path | None = None) -> dict[str, str]:
    """``fit_test_split.yaml``: case id → FIT or TEST, every case of ``case_ids`` exactly once.

    Raises:
        BadInput: not a mapping of the two lists, a case in both or twice, an id that is no
            measured case, or a measured case in neither list.
    """
    path = path or SPLIT_YAML
    doc = load_yaml(path.read_text())
    if not isinstance(doc, dict) or set(doc) != {FIT, TEST}:
        raise BadInput(path, "(top level)", f"a mapping of exactly {FIT}: and {TEST}: (lists "
                       f"of case ids), got {sorted(doc) if isinstance(doc, dict) else doc!r}")
    known = set(case_ids)
    split: dict[str, str] = {}
    for which in (FIT, TEST):
        if not isinstance(doc[which], list):
            raise BadInput(path, which, f"a list of case ids, got {doc[which]!r}")
        for i, case in enumerate(doc[which]):
            key = f"{which}[{i}]"
            if not isinstance(case, str):
                raise BadInput(path, key, f"a case id, got {case!r}")
            if case in split:
                raise BadInput(path, key, f"{case} is already listed under {split[case]}"
                               + (": a case is fit or test, not both" if split[case] != which
                                  else ""))
            if case not in known:
                raise BadInput(path, key, f"{case} is not a measured case ({CASES_YAML.name} "
                               f"or {SUPPLEMENTARY_YAML.name})")
            split[case] = which
    missing = [c for c in case_ids if c not in split]
    if missing:
        raise BadInput(path, FIT + " / " + TEST, f"{len(missing)} measured case(s) in neither "
                       f"list: {', '.join(missing)}")
    return split


def profile_fitted_to(data: Path | None = None) -> list[tuple[Path, str, list[Any]]]:
    """Every ``fitted_to:`` entry of the profiles under ``data``: (file, constant, what it was
    fitted to)."""
    out = []
    for path in sorted((data or PROFILE_DATA).glob("*/*.yaml")):
        doc = load_yaml(path.read_text())
        fitted = doc.get("fitted_to") if isinstance(doc, dict) else None
        if fitted is None:
            continue
        if not isinstance(fitted, dict):
            raise BadInput(path, "fitted_to", f"a mapping of constant -> case ids, got {fitted!r}")
        out += [(path, key, items) for key, items in fitted.items()]
    return out


def check_fitted_to(split: Mapping[str, str], data: Path | None = None) -> None:
    """Every case a profile's constant was fitted to is a measured case and ``fit``; every
    fitted constant is a ``sources:`` key of its file.

    Raises:
        BadInput: the first constant that breaks it.
    """
    for path, key, items in profile_fitted_to(data):
        where = f"fitted_to.{key}"
        doc = load_yaml(path.read_text())
        if key not in (doc.get("sources") or {}):
            raise BadInput(path, where, f"{key} has no entry in sources:")
        if not isinstance(items, list) or not items:
            raise BadInput(path, where, f"a non-empty list of case ids or {{external: "
                           f"source}}, got {items!r}")
        for item in items:
            if isinstance(item, dict) and set(item) == {"external"}:
                continue
            if not isinstance(item, str):
                raise BadInput(path, where, f"a case id or {{external: source}}, got {item!r}")
            if item not in split:
                raise BadInput(path, where, f"{item} is not a measured case")
            if split[item] != FIT:
                raise BadInput(path, where, f"{item} is a {split[item]} case in {SPLIT_YAML.name}:"
                               " a constant fitted to it makes it fit")


#: Words of a ``sources:`` entry that say its value was fitted (after :data:`NOT_FITTED`
#: phrases are removed).
FITTED_WORDS = re.compile(r"\bfit(?:ted|s)?\b|\bcalibrated\b", re.IGNORECASE)
NOT_FITTED = re.compile(r"uncalibrated|to be calibrated|calibrate against|not fitted",
                        re.IGNORECASE)
#: What follows these in a ``sources:`` entry names the cases it was checked on, not fitted to.
HELD_OUT = re.compile(r"held[ -]out|checked against", re.IGNORECASE)


def needs_fitted_to(source: str, case_ids: list[str]) -> tuple[bool, set[str]]:
    """Whether a ``sources:`` entry says its value was fitted (FITTED_WORDS), and the cases it
    names before any "held out" / "checked against" (the data its value was taken from)."""
    fitted = bool(FITTED_WORDS.search(NOT_FITTED.sub("", source)))
    head = HELD_OUT.split(source, maxsplit=1)[0]
    return fitted, {c for c in case_ids if re.search(rf"\b{re.escape(c)}\b", head)}


def evaluate(cases: list[dict], split: Mapping[str, str] | None = None,
             bands: bool = False) -> tuple[list[Row], list[Gap]]:
    """Predict every case: its rows (each marked fit or test by ``split``, default
    :func:`read_split`; with ``bands``, serving rows with their load band, which simulates
    each serving variant's saturation run too), and the parts no scenario expresses."""
    split = split if split is not None else read_split([c["id"] for c in read_cases()])
    _SIMULATED.clear()
    rows: list[Row] = []
    gaps: list[Gap] = []
    for case in cases:
        entry = ENTRIES.get(case["id"])
        if entry is None:
            gaps.append(Gap(case["id"], "whole case", "no entry in benchmarks/fidelity.py"))
            continue
        gaps += [Gap(case["id"], what, reason) for what, reason in entry.not_expressed]
        if entry.scenario is None:
            continue
        loaded = load(SCENARIOS / entry.scenario)
        runs = {run.variant: run for run in loaded.runs}
        fitted = dict(entry.fitted)
        compared = entry.predict(case, loaded)
        # Only the scored variants' pools: a split (disaggregated) variant has two.
        pools = {v: runs[v].pool() for v in dict.fromkeys(c.variant for c in compared)}
        gaps += [Gap(case["id"], c.name, f"not scored ({fitted[c.variant]}): measured "
                     f"{fmt(c.measured)}, capsim {fmt(c.predicted)} "
                     f"({(c.predicted - c.measured) / c.measured * 100:+.1f} %)")
                 for c in compared if c.variant in fitted]
        band = {v: band_of(load_fraction(loaded, runs[v]))
                for v in dict.fromkeys(c.variant for c in compared)
                if bands and case["kind"] == "load_latency_throughput"}
        rows += [Row(case["id"], case["kind"], c.name, c.measured, c.predicted,
                     pools[c.variant].preset.name, pools[c.variant].hardware.name,
                     case.get("collected", SHARED), split[case["id"]],
                     pools[c.variant].preset.engine, band.get(c.variant, NO_LOAD))
                 for c in compared if c.variant not in fitted]
    return rows, gaps


def fmt(x: float) -> str:
    """A measured or predicted number: thousands separators for large integers."""
    if math.isnan(x):
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"
    return f"{x:.4g}"


def fmt_err(row: Row) -> str:
    return "n/a" if math.isnan(row.predicted) else f"{row.error_pct:+.1f}%"


def error_stats(rows: list[Row]) -> dict[str, Any]:
    """Over the predicted ``rows``: count, median |error| %, median signed error % (the bias),
    max |error| % and the worst quantity; ``not_predicted`` counts the n/a ones."""
    scored = [r for r in rows if not math.isnan(r.predicted)]
    worst = max(scored, key=lambda r: abs(r.error_pct), default=None)
    errors = [r.error_pct for r in scored]
    return {
        "quantities": len(scored), "not_predicted": len(rows) - len(scored),
        "median_abs_err_pct": statistics.median(map(abs, errors)) if errors else NAN,
        "median_err_pct": statistics.median(errors) if errors else NAN,
        "max_abs_err_pct": abs(worst.error_pct) if worst else NAN,
        "worst": f"{worst.case}: {worst.quantity}" if worst else "",
    }


def memory_term(row: Row) -> str:
    """The start-up quantity of a kv_capacity row without its label and length
    ("tp2 max_concurrency@8192" → "max_concurrency")."""
    return row.quantity.split()[-1].split("@")[0]


def summaries(rows: list[Row]) -> dict[str, list[dict[str, Any]]]:
    """:func:`error_stats` per kind (with ``project``: how many of its quantities come from the
    supplementary cases, and ``shared_median_abs_err_pct``: the median without them), per
    kv_capacity quantity (memory term), per trust family (all, shared set only, supplementary
    only) and per case (with its ``collected``)."""
    kv_rows = [r for r in rows if r.kind == "kv_capacity"]
    order = [*LOG_PATTERNS, "max_concurrency"]
    terms = sorted(set(map(memory_term, kv_rows)), key=order.index)
    collected = {r.case: r.collected for r in rows}

    def shared_median(subset: list[Row]) -> float:
        return error_stats([r for r in subset if r.collected == SHARED])["median_abs_err_pct"]

    def scored(subset: list[Row]) -> int:
        return sum(not math.isnan(r.predicted) for r in subset)

    kinds = {k: [r for r in rows if r.kind == k] for k in KINDS}
    families = {f: [r for r in rows if family(r) == f] for f in FAMILIES}
    return {
        "kind": [{"kind": k, **error_stats(sub),
                  "project": scored([r for r in sub if r.collected == PROJECT]),
                  "shared_median_abs_err_pct": shared_median(sub)}
                 for k, sub in kinds.items() if sub],
        "kv_term": [{"term": t, **error_stats([r for r in kv_rows if memory_term(r) == t])}
                    for t in terms],
        "family": [{"family": f, **error_stats(sub),
                    "shared_quantities": scored([r for r in sub if r.collected == SHARED]),
                    "shared_median_abs_err_pct": shared_median(sub),
                    "project_quantities": scored([r for r in sub if r.collected == PROJECT]),
                    "project_median_abs_err_pct": error_stats(
                        [r for r in sub if r.collected == PROJECT])["median_abs_err_pct"]}
                   for f, sub in families.items() if sub],
        "case": [{"case": c, "collected": collected[c],
                  **error_stats([r for r in rows if r.case == c])}
                 for c in dict.fromkeys(r.case for r in rows)],
    }


#: Measured key → its family in capsim/profiles/trust.py (the figure a user reads).
SUMMARY_FAMILY = {
    "median_e2e_latency_ms": "e2el", "median_ms": "e2el",
    "median_ttft_ms": "ttft", "mean_ttft_ms": "ttft", "ttft_ms": "ttft",
    "first_token_latency_ms": "ttft",
    "median_tpot_ms": "tpot_itl", "median_itl_ms": "tpot_itl", "mean_itl_ms": "tpot_itl",
    "mean_tpot_ms": "tpot_itl", "output_tput_per_gpu_tok_s": "throughput",
    "itl_ms": "tpot_itl", "tpot_ms": "tpot_itl", "decode_tok_s": "tpot_itl",
    "request_throughput_req_s": "throughput", "tput_per_gpu_tok_s": "throughput",
    "tput_req_s": "throughput",
    "output_token_throughput_tok_s": "throughput", "output_tput_tok_s": "throughput",
    "input_tput_tok_s": "throughput", "throughput_tokens_per_s": "throughput",
}
assert SUMMARY_FAMILY.keys() == SUMMARY_FIELDS.keys(), "classify every serving quantity"
#: Start-up quantities that are the KV capacity a user sizes with (the other memory terms
#: are its parts).
KV_CAPACITY_TERMS = ("available_kv_gib", "kv_cache_blocks", "kv_cache_tokens", "max_concurrency")


def family(row: Row) -> str | None:
    """The trust family of ``row`` (None: a per-operator kernel time or a memory term)."""
    if row.kind == "kv_capacity":
        return "kv_capacity" if memory_term(row) in KV_CAPACITY_TERMS else None
    return SUMMARY_FAMILY.get(row.quantity.split()[-1])


def trust_table(rows: list[Row]) -> dict[str, Any]:
    """capsim/profiles/data/trust.yaml: per (engine preset, GPU), the error statistics of each
    family over its cases (``fit_case_ids`` names those a shipped constant was fitted to), and
    over the test rows of all cases (``all_cases``: the figure for a configuration capsim has
    not seen; only predicted quantities; see capsim.profiles.trust)."""
    scored = [r for r in rows if family(r) and not math.isnan(r.predicted)]

    def families(subset: list[Row]) -> dict[str, dict[str, Any]]:
        out = {}
        for f in FAMILIES:
            errors = [r.error_pct for r in subset if family(r) == f]
            if errors:
                out[f] = {"n": len(errors),
                          "cases": len({r.case for r in subset if family(r) == f}),
                          "median_abs_err_pct": round(statistics.median(map(abs, errors)), 1),
                          "max_abs_err_pct": round(max(map(abs, errors)), 1),
                          "median_err_pct": round(statistics.median(errors), 1)}
        return out

    def pair(p: str, h: str) -> dict[str, Any]:
        subset = [r for r in scored if (r.preset, r.hardware) == (p, h)]
        project = sorted({r.case for r in subset if r.collected == PROJECT})
        fitted = sorted({r.case for r in subset if r.split == FIT})
        return {"preset": p, "hardware": h, "case_ids": sorted({r.case for r in subset}),
                **({"project_case_ids": project} if project else {}),
                **({"fit_case_ids": fitted} if fitted else {}),
                "families": families(subset)}

    return {"all_cases": families([r for r in scored if r.split == TEST]),
            "coverage": [pair(p, h) for p, h in sorted({(r.preset, r.hardware) for r in scored})]}


TRUST_HEADER = """\
# How far to trust capsim per engine preset x GPU profile: the fidelity benchmark's error
# per family of figures (capsim/profiles/trust.py says how it is read). all_cases: the test rows
# only (cases no shipped constant was fitted to); per pair: all its cases, fit_case_ids in-sample.
# GENERATED, do not edit: python benchmarks/fidelity.py --trust capsim/profiles/data/trust.yaml
# from ../shared/reference/measured/cases.yaml and the project-collected supplementary cases of
# benchmarks/fidelity/supplementary_cases.yaml (counted alike; project_case_ids names them);
# tests/profiles/test_trust.py checks that it is what the benchmark prints today.
"""


SUPPLEMENTARY_TITLE = ("supplementary cases (project-collected, benchmarks/fidelity/"
                       "supplementary_cases.yaml)")
TEST_TITLE = (f"test rows (cases no shipped constant was fitted to; {SPLIT_YAML.name})")
FIT_TITLE = (f"fit rows (cases a shipped constant was fitted to, in-sample; {SPLIT_YAML.name})")


def protocol(rows: list[Row]) -> dict[str, Any]:
    """The fit/test protocol's figures: per split (test, fit), the cases and quantities, and
    per trust family the count and median |error| % over all its rows, per engine family and
    per load band (BANDS, then NO_LOAD)."""
    scored = [r for r in rows if not math.isnan(r.predicted) and family(r)]

    def cells(subset: list[Row]) -> dict[str, dict[str, Any]]:
        out = {}
        for f in FAMILIES:
            errors = [abs(r.error_pct) for r in subset if family(r) == f]
            if errors:
                out[f] = {"n": len(errors), "median_abs_err_pct": statistics.median(errors)}
        return out

    result = {}
    for split in (TEST, FIT):
        part = [r for r in scored if r.split == split]
        result[split] = {
            "cases": len({r.case for r in rows if r.split == split}),
            "quantities": len(part),
            "all": cells(part),
            "engine": {e: cells([r for r in part if r.engine == e])
                       for e in sorted({r.engine for r in part})},
            "band": {b: cells([r for r in part if r.band == b])
                     for b in (*BANDS, NO_LOAD) if any(r.band == b for r in part)},
        }
    return result


def headline(rows: list[Row], label: str = "test rows") -> str:
    """The benchmark's headline: median |error| per trust family over the test rows of
    ``rows`` (all cases: ``fidelity (test rows): ...``; ``label`` names a subset)."""
    cells = protocol(rows)[TEST]["all"]
    return f"fidelity ({label}): " + ", ".join(
        f"{FAMILIES[f].replace('KV capacity', 'KV')} "
        + (f"{cells[f]['median_abs_err_pct']:.1f} %" if f in cells else "n/a")
        for f in FAMILIES)


#: The field of a measured case that marks it of the 2026 kind (issue 30, "Fidelity for the
#: models of 2026") and says why; supplementary_cases.yaml's header gives the rule.
FIELD_2026 = "fidelity_2026"
#: The trust families the 2026 line reports, in its order.
FAMILIES_2026 = ("ttft", "tpot_itl", "throughput")


def kind_2026(case: Mapping[str, Any]) -> bool:
    """Whether ``case`` is of the 2026 kind: it carries a non-empty ``fidelity_2026`` reason
    (a mixture-of-experts model, an H200 / B200 / MI300X / MI325X GPU, speculative decoding, or
    vLLM >= 0.10 / SGLang >= 0.4 / TensorRT-LLM >= 1.0). A rule kept as data, per case."""
    return bool(case.get(FIELD_2026))


def line_2026(rows: list[Row], cases: list[dict]) -> str:
    """``fidelity 2026 (test rows, N cases): TTFT a %, TPOT/ITL b %, throughput c %``: the
    median |error| per family over the predicted test rows of the cases of the 2026 kind
    (:func:`kind_2026`); N counts those cases with at least one such row (a case capsim could
    not run has none). A family with no row prints n/a."""
    chosen = {c["id"] for c in cases if kind_2026(c)}
    scored = [r for r in rows if r.case in chosen and r.split == TEST
              and family(r) in FAMILIES_2026 and not math.isnan(r.predicted)]
    cells = []
    for f in FAMILIES_2026:
        errors = [abs(r.error_pct) for r in scored if family(r) == f]
        cells.append(f"{FAMILIES[f]} " + (f"{statistics.median(errors):.1f} %" if errors
                                           else "n/a"))
    n = len({r.case for r in scored})
    return f"fidelity 2026 (test rows, {n} cases): " + ", ".join(cells)


def print_protocol(rows: list[Row]) -> None:
    summary = protocol(rows)

    def cell(c: dict[str, Any], f: str) -> str:
        return (f"{c[f]['median_abs_err_pct']:5.1f}% ({c[f]['n']})" if f in c else "   -").ljust(14)

    print(f"\nfit/test protocol ({SPLIT_YAML.relative_to(ROOT)}): median |error| (quantities) "
          "per trust family; load = rate / capsim's saturation throughput of the configuration")
    for split in (TEST, FIT):
        s = summary[split]
        print(f"  {split} rows: {s['cases']} cases, {s['quantities']} quantities")
        print("    " + " " * 32 + "".join(FAMILIES[f].ljust(14) for f in FAMILIES))
        print("    " + "all".ljust(32) + "".join(cell(s["all"], f) for f in FAMILIES))
        for name, group in (("engine", s["engine"]), ("band", s["band"])):
            for key, c in group.items():
                label = (f"engine {key}" if name == "engine" else key if key == NO_LOAD
                         else f"load {key}")
                print("    " + label.ljust(32) + "".join(cell(c, f) for f in FAMILIES))


def print_protocol_markdown(rows: list[Row]) -> None:
    summary = protocol(rows)

    def cell(c: dict[str, Any], f: str) -> str:
        return f"{c[f]['median_abs_err_pct']:.1f} % ({c[f]['n']})" if f in c else "–"

    for split in (TEST, FIT):
        s = summary[split]
        print(f"\n**{split} rows** ({s['cases']} cases, {s['quantities']} quantities): median "
              "\\|error\\| (quantities)\n")
        print("| | " + " | ".join(FAMILIES.values()) + " |")
        print("|---|" + "---:|" * len(FAMILIES))
        print("| all | " + " | ".join(cell(s["all"], f) for f in FAMILIES) + " |")
        for key, c in s["engine"].items():
            print(f"| engine {key} | " + " | ".join(cell(c, f) for f in FAMILIES) + " |")
        for key, c in s["band"].items():
            label = key if key == NO_LOAD else f"load {key}"
            print(f"| {label} | " + " | ".join(cell(c, f) for f in FAMILIES) + " |")


def print_rows(rows: list[Row]) -> None:
    """One line per quantity: the test rows, then the fit rows; in each the shared reference
    set, then the supplementary cases. A serving row shows its load band."""
    width = max((len(r.case) for r in rows), default=4)
    qwidth = max((len(r.quantity) for r in rows), default=8)
    for split, title in ((TEST, TEST_TITLE), (FIT, FIT_TITLE)):
        if not any(r.split == split for r in rows):
            continue
        print(f"\n{title}:")
        for collected in (SHARED, PROJECT):
            part = [r for r in rows if r.collected == collected and r.split == split]
            if not part:
                continue
            if collected == PROJECT:
                print(f"  {SUPPLEMENTARY_TITLE}:")
            print(f"{'case':<{width}}  {'quantity':<{qwidth}}  {'measured':>12}  "
                  f"{'predicted':>12}  {'error':>8}  load")
            for r in part:
                print(f"{r.case:<{width}}  {r.quantity:<{qwidth}}  {fmt(r.measured):>12}  "
                      f"{fmt(r.predicted):>12}  {fmt_err(r):>8}  "
                      f"{'' if r.band == NO_LOAD else r.band}".rstrip())


def print_summary(summary: dict[str, list[dict[str, Any]]], gaps: list[Gap]) -> None:
    print("\nper kind: |error| over the quantities capsim predicts (supplementary cases "
          "included; [shared set alone])")
    for s in summary["kind"]:
        print(f"  {s['kind']:<24} n={s['quantities']:<3} median {s['median_abs_err_pct']:5.1f}%  "
              f"max {s['max_abs_err_pct']:6.1f}% ({s['worst']})"
              + (f"  [{s['not_predicted']} n/a]" if s["not_predicted"] else "")
              + (f"  [{s['project']} supplementary; shared set alone: median "
                 f"{s['shared_median_abs_err_pct']:.1f}%]" if s["project"] else ""))
    def pct(x: float) -> str:
        return "  n/a" if math.isnan(x) else f"{x:5.1f}%"

    print("\nper trust family: median |error| (all; shared set; supplementary)")
    for s in summary["family"]:
        print(f"  {FAMILIES[s['family']]:<12} n={s['quantities']:<3} {pct(s['median_abs_err_pct'])};"
              f"  shared n={s['shared_quantities']:<3} {pct(s['shared_median_abs_err_pct'])};"
              f"  supplementary n={s['project_quantities']:<3} "
              f"{pct(s['project_median_abs_err_pct'])}")
    if summary["kv_term"]:
        print("\nkv_capacity per quantity: median signed error (bias), max |error|")
        for s in summary["kv_term"]:
            print(f"  {s['term']:<24} n={s['quantities']:<3} "
                  + ("n/a (not modelled)" if not s["quantities"] else
                     f"median {s['median_err_pct']:+6.1f}%  max {s['max_abs_err_pct']:5.1f}%"))
    print("\nnot expressible in capsim today, or fitted to (not scored):")
    for g in gaps:
        print(f"  {g.case}: {g.what}: {g.reason}")


def print_markdown(summary: dict[str, list[dict[str, Any]]], gaps: list[Gap],
                   rows: list[Row]) -> None:
    """The README's fidelity tables: per kind, per trust family, per memory term, per case,
    then every quantity of the supplementary cases, then the gaps."""
    def pct(x: float, signed: bool = False) -> str:
        return "n/a" if math.isnan(x) else f"{x:+.1f} %" if signed else f"{x:.1f} %"

    print("| kind | quantities (supplementary) | median \\|error\\| | shared set alone | "
          "max \\|error\\| | worst quantity |")
    print("|---|---:|---:|---:|---:|---|")
    for s in summary["kind"]:
        print(f"| `{s['kind']}` | {s['quantities']} ({s['project']}) | "
              f"{pct(s['median_abs_err_pct'])} | {pct(s['shared_median_abs_err_pct'])} | "
              f"{pct(s['max_abs_err_pct'])} | {s['worst']} |")
    print("\n| trust family | n | median \\|error\\| | shared set: n | median | "
          "supplementary: n | median |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in summary["family"]:
        print(f"| {FAMILIES[s['family']]} | {s['quantities']} | {pct(s['median_abs_err_pct'])} | "
              f"{s['shared_quantities']} | {pct(s['shared_median_abs_err_pct'])} | "
              f"{s['project_quantities']} | {pct(s['project_median_abs_err_pct'])} |")
    if summary["kv_term"]:
        print("\n| kv_capacity quantity | n | median error (bias) | max \\|error\\| |")
        print("|---|---:|---:|---:|")
        for s in summary["kv_term"]:
            print(f"| `{s['term']}` | {s['quantities']} | {pct(s['median_err_pct'], True)} | "
                  f"{pct(s['max_abs_err_pct'])} |")
    print("\n| case | quantities | median \\|error\\| | max \\|error\\| |")
    print("|---|---:|---:|---:|")
    for s in summary["case"]:
        mark = " (supplementary)" if s["collected"] == PROJECT else ""
        print(f"| `{s['case']}`{mark} | {s['quantities']} | {pct(s['median_abs_err_pct'])} | "
              f"{pct(s['max_abs_err_pct'])} |")
    supplementary = [r for r in rows if r.collected == PROJECT]
    if supplementary:
        print(f"\nSupplementary cases, every quantity ({SUPPLEMENTARY_TITLE.split(' (')[1][:-1]}):"
              "\n")
        print("| case | quantity | measured | capsim | error |")
        print("|---|---|---:|---:|---:|")
        for r in supplementary:
            err = NAN if math.isnan(r.predicted) else r.error_pct
            print(f"| `{r.case}` | {r.quantity} | {fmt(r.measured)} | {fmt(r.predicted)} | "
                  f"{pct(err, True)} |")
    print("\nNot expressible in capsim today, or fitted to (not scored):\n")
    for g in gaps:
        print(f"- `{g.case}` — {g.what}: {g.reason}")


def finite(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with NaN (not predicted) as null, so the JSON is strict."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in record.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, help="only the cases of this kind")
    parser.add_argument("--case", metavar="ID", help="only this case id")
    parser.add_argument("--only", metavar="PATTERN",
                        help="only the case ids matching this shell pattern (fnmatch: *, ?)")
    parser.add_argument("--fidelity-2026", action="store_true",
                        help="only the cases of the 2026 kind (a fidelity_2026 field)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the summary as GitHub markdown (for the README) instead")
    parser.add_argument("--json", metavar="PATH", type=Path,
                        help="also write every quantity, the summaries and the gaps as JSON")
    parser.add_argument("--trust", metavar="PATH", type=Path,
                        help="also write the per preset x GPU error table capsim shows with "
                             "every run (capsim/profiles/data/trust.yaml); all cases only")
    args = parser.parse_args()
    cases = all_cases = read_cases()
    if args.case and args.case not in {c["id"] for c in cases}:
        parser.error(f"no case {args.case!r} in {CASES_YAML} or {SUPPLEMENTARY_YAML}")
    cases = [c for c in cases if (not args.kind or c["kind"] == args.kind)
             and (not args.case or c["id"] == args.case)
             and (not args.only or fnmatch.fnmatchcase(c["id"], args.only))
             and (not args.fidelity_2026 or kind_2026(c))]
    if not cases:
        parser.error("no case is selected by " + " and ".join(
            f"--{k.replace('_', '-')} {v!r}" for k, v in
            (("kind", args.kind), ("case", args.case), ("only", args.only)) if v)
            + (" and --fidelity-2026" if args.fidelity_2026 else ""))
    if (args.kind or args.case or args.only or args.fidelity_2026) and args.trust:
        parser.error("--trust needs every case (no --kind / --case / --only / --fidelity-2026)")
    for option in ("json", "trust"):
        path = getattr(args, option)
        if path is not None:
            setattr(args, option, path.resolve())
            if not path.resolve().parent.is_dir():
                parser.error(f"--{option} {path}: no directory {path.resolve().parent}")
    try:
        split = read_split([c["id"] for c in all_cases])
        check_fitted_to(split)
        for case_id, entry in ENTRIES.items():
            if entry.fitted and split.get(case_id) != FIT:
                raise BadInput(SPLIT_YAML, case_id, "benchmarks/fidelity.py's entry lists "
                               "fitted quantities: the case is fit")
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    rows, gaps = evaluate(cases, split, bands=True)
    summary = summaries(rows)
    if args.markdown:
        print_markdown(summary, gaps, rows)
        print_protocol_markdown(rows)
    else:
        print_rows(rows)
        print_summary(summary, gaps)
        print_protocol(rows)
    if args.json:
        args.json.write_text(json.dumps({
            "quantities": [finite({**asdict(r), "error_pct": r.error_pct}) for r in rows],
            "summary": {k: [finite(s) for s in v] for k, v in summary.items()},
            "not_expressible": [asdict(g) for g in gaps],
            "protocol": protocol(rows),
            "headline": headline(rows),
            "fidelity_2026": line_2026(rows, cases),
        }, indent=1) + "\n")
    if args.trust:
        args.trust.write_text(TRUST_HEADER + yaml.safe_dump(trust_table(rows), sort_keys=False))
    older = {c["id"] for c in cases if not kind_2026(c)}
    # The same figures without the 2026 kind: the older engines and dense models alone, so a
    # move of the headline reads apart from the cases added with that kind.
    print(("\n" if not args.markdown else "\n")
          + headline([r for r in rows if r.case in older], "test rows, not the 2026 kind"))
    print(headline(rows))
    print(line_2026(rows, cases))


if __name__ == "__main__":
    main()
