"""Reading a scenario file: YAML, ``--set`` overrides, validation and every variant resolved.

:func:`load` validates everything once at the edge and turns every mistake into
one :class:`~capsim.common.errors.ScenarioError` naming the file and the YAML
path of the field.
"""

from __future__ import annotations

import copy
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import engine_preset_names
from capsim.profiles.files import read_yaml_mapping
from capsim.profiles.hardware import hardware_names
from capsim.profiles.links import link_names
from capsim.profiles.models import model_names
from capsim.scenario.overrides import apply_override, set_dotted
from capsim.scenario.paths import absolute_paths
from capsim.scenario.describe import engine_label
from capsim.scenario.resolve import resolve_variant
from capsim.scenario.resolve_pools import check_class_models, pooled_cluster, resolve_pooled
from capsim.scenario.run_config import RunConfig
from capsim.scenario.schema import Scenario, VariantSpec
from capsim.scenario.slo import RequestSlo, unbounded_wait_warning
from capsim.scenario.validation import validate
from capsim.scenario.workload import check_rate_pieces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedScenario:
    """A validated scenario plus where it came from."""

    spec: Scenario
    path: Path
    runs: tuple[RunConfig, ...]
    class_slos: dict[str, RequestSlo]
    resolved: dict[str, Any]          # the raw document after --set, for scenario.resolved.yaml

    @property
    def base_dir(self) -> Path:
        return self.path.parent


def load(path: str | Path, overrides: list[str] = (), seed: int | None = None) -> LoadedScenario:
    """Read, override, validate and resolve a scenario file.

    Args:
        path: the scenario YAML.
        overrides: ``dotted.key=value`` strings (value parsed as YAML), applied
            to the raw document before validation, e.g. ``engine.max_num_seqs=64``
            or ``variants.0.cluster.num_replicas=4``.
        seed: replaces the scenario's ``seed`` when given.

    Raises:
        ScenarioError: unreadable file, bad YAML, unknown or invalid field,
            unknown hardware/model, a model that does not fit in memory.
    """
    path = Path(path)
    with warnings_held():
        raw = read_yaml_mapping(path, "scenario",
                                "a scenario must be a YAML mapping (name:, model:, ...)")
        for item in overrides:
            apply_override(raw, item, path)
        if seed is not None:
            raw["seed"] = seed
        spec = validate(Scenario, raw, path)
        runs = tuple(_resolve(raw, spec, i, v, path) for i, v in enumerate(_variants(spec)))
        class_slos = _class_slos(spec, path)
        warning = unbounded_wait_warning(spec.slo, class_slos,
                                         [rc.variant for rc in runs if rc.static_batching])
        if warning:
            log.warning("%s: %s", path, warning)
    return LoadedScenario(spec=spec, path=path, runs=runs, class_slos=class_slos,
                          resolved=raw)


@contextmanager
def warnings_held():
    """The ``capsim`` loggers' records while a scenario loads (or a command checks it),
    passed on when the block ends and dropped when it raises: a refusal is one line, not a
    warning and the error. Nests (an inner block passes its records to the outer)."""
    logger, held = logging.getLogger("capsim"), []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record)
    handlers, propagate = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [Hold()], False
    try:
        yield
    finally:
        logger.handlers, logger.propagate = handlers, propagate
    for record in held:
        logger.handle(record)


def _variants(spec: Scenario) -> list[VariantSpec]:
    return spec.variants or [VariantSpec(name="default")]


def _resolve(raw: dict[str, Any], spec: Scenario, index: int, v: VariantSpec,
             path: Path) -> RunConfig:
    """Variant ``index`` resolved; an error in a field its ``set:`` gave names that entry
    (``variants.<i>.set.engine.preset``), not the scenario's field it replaced."""
    try:
        seen = _variant_scenario(raw, spec, index, v, path)
        try:
            check_rate_pieces(seen.workload)
        except ScenarioError as exc:
            raise exc.with_context(file=str(path)) from None
        if pooled_cluster(seen, v):
            return resolve_pooled(seen, index, v, path)
        run = resolve_variant(seen, index, v, path)
        check_class_models(seen, run, path)
        return run
    except ScenarioError as exc:
        key = next((k for k in v.set if exc.path == k or (exc.path or "").startswith(f"{k}.")),
                   None)
        if key is None:
            raise
        raise ScenarioError(exc.message, file=exc.file,
                            path=f"variants.{index}.set.{exc.path}") from None


def _variant_scenario(raw: dict[str, Any], spec: Scenario, index: int, v: VariantSpec,
                      path: Path) -> Scenario:
    """The scenario as variant ``index`` sees it: ``spec`` with the variant's ``set:`` applied."""
    if not v.set:
        return spec
    doc = copy.deepcopy(raw)
    for key, value in v.set.items():
        try:
            set_dotted(doc, key, value, path)
        except ScenarioError as exc:
            raise ScenarioError(exc.message, file=str(path),
                                path=f"variants.{index}.set.{key}") from None
    try:
        return validate(Scenario, doc, path)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, file=str(path),
                            path=f"variants.{index}.set: {exc.path}") from None


def _class_slos(spec: Scenario, path: Path) -> dict[str, RequestSlo]:
    """Per-class SLO overrides (``workload.classes[i].slo``), merged over the scenario's."""
    out: dict[str, RequestSlo] = {}
    base = spec.slo.model_dump(include={"ttft_ms", "tpot_ms", "e2el_ms"})
    for i, cls in enumerate(spec.workload.classes or []):
        if cls.slo:
            out[cls.name] = validate(RequestSlo, {**base, **cls.slo}, path,
                                      f"workload.classes.{i}.slo")
    return out


def dump_resolved(loaded: LoadedScenario, version: str, seed: int) -> str:
    """scenario.resolved.yaml: the document as run, with the capsim version and seed, and
    a comment naming each variant's engine preset and version. Loads as a scenario, from
    any directory: its file paths (profiles, traces) are written absolute."""
    doc = {"capsim_version": version,
           **absolute_paths(loaded.resolved, loaded.base_dir, _shipped_names()), "seed": seed}
    header = "".join(f"# engine of {rc.variant}: {engine_label(rc)}\n" for rc in loaded.runs)
    return header + yaml.safe_dump(doc, sort_keys=False)



def _shipped_names() -> list[str]:
    return [*model_names(), *hardware_names(), *engine_preset_names(), *link_names()]
