"""How far to trust a run: the fidelity benchmark's error for the engine preset and GPU it used.

``capsim/profiles/data/trust.yaml`` is written by ``python benchmarks/fidelity.py --trust
capsim/profiles/data/trust.yaml`` (never by hand): for every (engine preset, GPU profile)
that a measured case of ``../shared/reference/measured/`` ran on, and for all cases
together, the error of capsim's prediction per *family* of figures:

- ``ttft``: time to first token (median / mean under load, first-token latency);
- ``tpot_itl``: time per output token and inter-token latency;
- ``e2el``: end-to-end request latency (under load, and one fixed batch's latency);
- ``throughput``: request, input-token and output-token throughput;
- ``kv_capacity``: the KV cache the engine allocates at start-up (bytes, blocks, tokens,
  maximum concurrency).

Each family holds ``n`` (quantities compared), ``cases`` (measured cases they come from),
``median_abs_err_pct``, ``max_abs_err_pct`` and ``median_err_pct`` (signed: capsim's bias;
error = (predicted − measured) / measured × 100). ``all_cases`` holds the *test* rows only
(cases no shipped constant was fitted to: benchmarks/fidelity/fit_test_split.yaml), the error
on configurations capsim was not fitted to; a pair's entry holds all its cases and names those
in-sample (``fit_case_ids``). A preset × GPU without a measured case is *uncalibrated*;
:func:`coverage` then falls back to the held-out all-cases figures and says so.
Cases the project collected itself (``benchmarks/fidelity/supplementary_cases.yaml``: vLLM V1
serving runs the shared set lacks; held out) count alike; an entry's ``project_case_ids``
names them and :meth:`Coverage.text` says how many there are.

Public API:
    FAMILIES, EDGES, FamilyError, Coverage
    coverage(preset, hardware) -> Coverage
    all_reduce_note(preset, hardware) -> str
    lines(pairs) -> list[str]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Literal

from capsim.common.errors import ScenarioError
from capsim.common.yamlio import load_yaml
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware

#: Family → how it is named in a sentence.
FAMILIES: dict[str, str] = {
    "ttft": "TTFT", "tpot_itl": "TPOT/ITL", "e2el": "E2EL", "throughput": "throughput",
    "kv_capacity": "KV capacity",
}

#: ``capsim size --trust-edge``: which error bound sizes the fleet ("none": capsim's figures
#: as predicted).
EDGES = ("none", "median", "max")
Edge = Literal["none", "median", "max"]


@dataclass(frozen=True)
class FamilyError:
    """The benchmark's error over one family of figures (percent)."""

    n: int
    cases: int
    median_abs_err_pct: float
    max_abs_err_pct: float
    median_err_pct: float

    def edge_pct(self, edge: Edge) -> float:
        """The |error| a pessimistic sizing assumes at ``edge`` (0 for "none")."""
        return {"none": 0.0, "median": self.median_abs_err_pct,
                "max": self.max_abs_err_pct}[edge]


@dataclass(frozen=True)
class Coverage:
    """What the measured cases say about one engine preset on one GPU profile.

    Attributes:
        preset, hardware: what the run used.
        measured: True when at least one measured case ran this preset on this GPU;
            False: ``families`` are the all-cases figures (uncalibrated here).
        case_ids: the measured cases of this preset × GPU (empty when uncalibrated).
        families: family → :class:`FamilyError` (only the families measured).
        project_case_ids: those of ``case_ids`` the project collected (supplementary cases).
        fit_case_ids: those of ``case_ids`` a shipped constant was fitted to (in-sample).
    """

    preset: str
    hardware: str
    measured: bool
    case_ids: tuple[str, ...] = ()
    families: dict[str, FamilyError] = field(default_factory=dict)
    project_case_ids: tuple[str, ...] = ()
    fit_case_ids: tuple[str, ...] = ()

    def edge_pct(self, family: str, edge: Edge) -> float:
        """|error| % assumed for ``family`` at ``edge``; a family with no measurement here
        takes the all-cases figure (nothing is ever assumed exact)."""
        err = self.families.get(family) or _all_cases().get(family)
        return err.edge_pct(edge) if err else 0.0

    def text(self) -> str:
        """One line for the terminal and the report, e.g. ``vllm-v1 on a100-80gb: measured
        (1 case): E2EL ±3.6 % (n 2); not measured here, held-out cases: TTFT ±7.3 %, …`` — the
        median |error| of each family (python benchmarks/fidelity.py), and :func:`derived_note`."""
        here = ", ".join(f"{FAMILIES[f]} ±{e.median_abs_err_pct:.1f} % (n {e.n})"
                         for f, e in self.families.items())
        elsewhere = ", ".join(f"{FAMILIES[f]} ±{e.median_abs_err_pct:.1f} %"
                              for f, e in _all_cases().items() if f not in self.families)
        derived = derived_note(self.hardware) + all_reduce_note(self.preset, self.hardware)
        if not self.measured:
            return (f"{self.preset} on {self.hardware}: no measured case, uncalibrated; "
                    f"median |error| over all held-out (test) cases: {here}{derived}")
        project = (f", {len(self.project_case_ids)} project-collected"
                   if self.project_case_ids else "")
        fitted = (f", {len(self.fit_case_ids)} fitted to (in-sample)"
                  if self.fit_case_ids else "")
        line = (f"{self.preset} on {self.hardware}: median |error| (n: figures) over "
                f"{len(self.case_ids)} measured case(s){project}{fitted}: {here}")
        return (line + (f"; not measured here, held-out cases: {elsewhere}" if elsewhere else "")
                + derived)


@lru_cache(maxsize=None)
def derived_note(hardware: str) -> str:
    """``"; h200-sxm's gemm, ... efficiencies are derived from h100-sxm, not measured on it"``
    when the GPU profile carries efficiencies over from another GPU (its ``derivation:``,
    :class:`~capsim.profiles.hardware.Derivation`), else ``""``: what a trust line rests on
    that no kernel of this GPU measured (issue 30 item 3); entries measured on a GPU of the
    same die (``derivation.same_die``) are named too: ``"; its gemm, ... efficiencies are
    mi300x's (the same die)"``. A profile that does not load (a path no longer there) adds
    nothing."""
    try:
        derivation = load_hardware(hardware).derivation
    except ScenarioError:
        return ""
    if derivation is None:
        return ""
    note = (f"; {hardware}'s {', '.join(derivation.classes)} efficiencies are derived from "
            f"{derivation.from_profile}, not measured on it")
    same = derivation.same_die
    if same is not None:
        note += (f"; its {', '.join(same.classes)} efficiencies are {same.from_profile}'s "
                 "(the same die)")
    return note


@lru_cache(maxsize=None)
def all_reduce_note(preset: str, hardware: str) -> str:
    """``"; trtllm's own all-reduce (table trtllm_auto) is not measured on a100-80gb: NCCL's
    ring is priced instead"`` when the preset runs a measured all-reduce table
    (``tp_all_reduce.algorithm: table``) that the GPU profile lacks, else ``""``: the run then
    prices a slower collective than the engine runs (TensorRT-LLM's one-shot kernel takes
    3-6 µs where the ring costs tens). A preset or profile that does not load adds nothing."""
    try:
        ar = load_engine_preset(preset).tp_all_reduce
        tables = load_hardware(hardware).all_reduce_tables
    except ScenarioError:
        return ""
    if ar.algorithm != "table" or ar.table in tables:
        return ""
    return (f"; {preset}'s own all-reduce (table {ar.table}) is not measured on {hardware}: "
            "NCCL's ring is priced instead at TP >= 2")


def lines(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """:meth:`Coverage.text` of each distinct (preset, hardware) pair, in order."""
    return [coverage(p, h).text() for p, h in dict.fromkeys(pairs)]


def _data() -> dict:
    path = resources.files("capsim.profiles").joinpath("data", "trust.yaml")
    return load_yaml(path.read_text(encoding="utf-8"))


def _families(raw: dict) -> dict[str, FamilyError]:
    return {f: FamilyError(**raw[f]) for f in FAMILIES if f in raw}


@lru_cache(maxsize=1)
def _all_cases() -> dict[str, FamilyError]:
    return _families(_data()["all_cases"])


@lru_cache(maxsize=None)
def coverage(preset: str, hardware: str) -> Coverage:
    """The benchmark's error for ``preset`` (an engine preset name, e.g. ``vllm-v1``) on
    ``hardware`` (a GPU profile name, e.g. ``h100-sxm``); uncalibrated when no measured case
    ran that pair (a disaggregated run passes ``preset`` "disaggregated": none did)."""
    for entry in _data()["coverage"]:
        if entry["preset"] == preset and entry["hardware"] == hardware:
            return Coverage(preset, hardware, True, tuple(entry["case_ids"]),
                            _families(entry["families"]),
                            tuple(entry.get("project_case_ids", ())),
                            tuple(entry.get("fit_case_ids", ())))
    return Coverage(preset, hardware, False, (), _all_cases())
