"""``capsim calibrate`` without the printing: read inputs, fit, score, describe.

Public API:
    Inputs, Outcome, calibrate
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from capsim import __version__
from capsim.calibrate.fit import fit_profile
from capsim.calibrate.model import predict
from capsim.calibrate.observations import Observations, concat
from capsim.calibrate.plain import read_plain_csv
from capsim.calibrate.stats import error_figures
from capsim.calibrate.vidur import DEVICES, load_vidur
from capsim.calibrate.readers import read_result
from capsim.calibrate.replay import replay
from capsim.calibrate.serving import fit_replay, request_latencies, simulate_replay
from capsim.scenario.run_config import RunConfig
from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import Calibration, ClassError, Derivation, HardwareProfile
from capsim.profiles.models import ModelShape

METHOD = ("scipy.optimize.least_squares on log(predicted / measured) per operator class "
          "(capsim.calibrate.fit); error = |predicted - measured| / measured over every "
          "input row, median and p90, before = the input profile, after = this one")


@dataclass(frozen=True)
class Inputs:
    """What to calibrate from (any combination; at least one).

    ``result`` is a benchmark client's result file (any format of
    :mod:`capsim.calibrate.readers`), ``result_run`` its run when it holds several,
    ``run`` the scenario variant whose engine the server ran.
    """

    vidur: Path | None = None
    vidur_device: str | None = None
    vidur_network: str | None = None
    csv: Path | None = None
    model: ModelShape | None = None
    result: Path | None = None
    result_run: int | None = None
    run: RunConfig | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """A calibration: the new profile, the rows it was scored on and the error figures.

    ``table`` has one row per measurement: ``op_class``, ``operator``, ``tokens``,
    ``group``, ``time_s`` (measured) and ``predicted_before`` / ``predicted_after`` (s).
    """

    base: HardwareProfile
    profile: HardwareProfile
    table: pd.DataFrame
    errors: dict[str, ClassError]
    data: list[str] = field(default_factory=list)


def _vidur(inputs: Inputs, base: HardwareProfile) -> tuple[Observations, list[str]]:
    device, network = inputs.vidur_device, inputs.vidur_network
    if device is None:
        if base.name not in DEVICES:
            raise ScenarioError(f"no Vidur device known for hardware {base.name!r}; pass "
                                f"--vidur-device (a folder under compute/, e.g. a100)")
        device, default_net = DEVICES[base.name]
        network = network or default_net
    data = load_vidur(inputs.vidur, device, network,
                      network_required=inputs.vidur_network is not None)
    root = Path(inputs.vidur)
    used = set(data.observations.source)
    files = [str(Path(f).relative_to(root)) if Path(f).is_relative_to(root) else f
             for f in data.files if f in used]
    return data.observations, [f"Microsoft Vidur profiling CSVs (MIT), {root}: "
                               + ", ".join(files)]


def _operator_inputs(inputs: Inputs, base: HardwareProfile) -> tuple[Observations, list[str]]:
    parts, data = [], []
    if inputs.vidur is not None:
        obs, desc = _vidur(inputs, base)
        parts.append(obs)
        data += desc
    if inputs.csv is not None:
        if inputs.model is None:
            raise ScenarioError("--csv needs --model (the shape the operators were measured on)")
        parts.append(read_plain_csv(inputs.csv, inputs.model))
        data.append(f"measured operators {inputs.csv} (model {inputs.model.name})")
    return concat(parts), data


def _with_provenance(profile: HardwareProfile, errors: dict[str, ClassError],
                     data: list[str], date: str, fitted: set[str]) -> HardwareProfile:
    sources = dict(profile.sources)
    summary = f"calibrated {date} by capsim calibrate (data and error under calibration:)"
    if fitted - {"all_reduce", "ttft", "tpot"}:
        sources["efficiency"] = summary
    if "all_reduce" in fitted:
        sources["nvlink_latency_s" if profile.has_nvlink else "pcie_latency_s"] = summary
    if "ttft" in fitted:
        sources["step_overhead_s"] = summary
    calibration = Calibration(date=date, tool=f"capsim calibrate {__version__}", data=data,
                              method=METHOD, error=errors)
    return type(profile).model_validate({**profile.model_dump(), "sources": sources,
                                        "calibration": calibration.model_dump(),
                                        "derivation": _still_derived(profile.derivation, fitted)})


def _still_derived(derivation: Derivation | None, fitted: set[str]) -> dict | None:
    """The derivation flag without the classes this fit measured (None once none is left):
    a fitted class is calibrated, not "derived, uncalibrated"."""
    if derivation is None:
        return None
    left = [c for c in derivation.classes if c not in fitted]
    return derivation.model_copy(update={"classes": left}).model_dump() if left else None


def _errors(table: pd.DataFrame) -> dict[str, ClassError]:
    out = {}
    for op_class, rows in table.groupby("op_class", sort=False):
        measured = rows.time_s.to_numpy()
        out[op_class] = ClassError(before=error_figures(rows.predicted_before.to_numpy(), measured),
                                   after=error_figures(rows.predicted_after.to_numpy(), measured))
    return out


def calibrate(base: HardwareProfile, inputs: Inputs, *, name: str | None = None,
              date: str | None = None) -> Outcome:
    """Fit ``base`` to the measurements in ``inputs`` and score it before and after.

    Operator data (Vidur, plain CSV) is fitted first; a benchmark result (vllm bench
    serve, sglang.bench_serving, GuideLLM, AIPerf, genai-perf) then fits the step
    overhead and a GPU-time scale on top of that.

    Raises:
        ScenarioError: no input given, or any input problem (see the readers).
    """
    if inputs.vidur is None and inputs.csv is None and inputs.result is None:
        raise ScenarioError("nothing to calibrate from: give --vidur DIR, --csv FILE "
                            "and/or --from RESULT")
    date = date or _dt.date.today().isoformat()
    obs, data = _operator_inputs(inputs, base)
    profile, tables = base, []
    if len(obs):
        profile = fit_profile(obs, base)
        tables.append(obs[["op_class", "operator", "tokens", "group", "time_s"]].assign(
            predicted_before=predict(obs, base), predicted_after=predict(obs, profile)))
    if inputs.result is not None:
        profile, bench_table, description = _bench(inputs, base, profile)
        tables.append(bench_table)
        data.append(description)
    data += list(inputs.notes)
    table = pd.concat(tables, ignore_index=True)
    errors = _errors(table)
    if name:
        profile = profile.model_copy(update={"name": name})
    profile = _with_provenance(profile, errors, data, date, set(errors))
    return Outcome(base, profile, table, errors, data)


def _bench(inputs: Inputs, base: HardwareProfile,
           start: HardwareProfile) -> tuple[HardwareProfile, pd.DataFrame, str]:
    """Fit on a benchmark result; the fitted profile, the ttft / tpot rows and a data line."""
    if inputs.run is None:
        raise ScenarioError("--from needs --scenario (the engine the server ran)")
    measured = read_result(inputs.result, inputs.result_run)
    rep = replay(measured, allow_redrawn=False)
    fit = fit_replay(inputs.run, rep, measured, start)
    before = request_latencies(simulate_replay(inputs.run, rep, base))
    after = request_latencies(simulate_replay(inputs.run, rep, fit.profile))
    rows = rep.rows
    parts = []
    for k, name, want in ((0, "ttft", measured.ttft_s[rows]), (1, "tpot", measured.tpot_s[rows])):
        ok = rep.measured & np.isfinite(want) & np.isfinite(before[k]) & np.isfinite(after[k])
        parts.append(pd.DataFrame({"op_class": name, "operator": name,
                                   "tokens": rep.trace.prompt_tokens[ok].astype(float),
                                   "group": str(inputs.result), "time_s": want[ok],
                                   "predicted_before": before[k][ok],
                                   "predicted_after": after[k][ok]}))
    run_label = f", {measured.run_label}" if measured.run_label else ""
    description = (f"{measured.label} result {inputs.result}{run_label} (schema: "
                   f"{measured.source}); replayed with the engine of scenario variant "
                   f"{inputs.run.variant!r}; arrivals: {rep.arrivals}")
    return fit.profile, pd.concat(parts, ignore_index=True), description
