"""The profiles a scenario names, loaded: model, GPU (with ``hardware_overrides``), engine
preset and KV link, each a shipped name or a file relative to the scenario
(:mod:`capsim.scenario.paths`).

An error names the scenario file and the field that named the profile, or, for a mistake
inside a user's own profile file, that file and its own field, then which field of the
scenario named it (:func:`named`).

Public API:
    named(loader, name, path, field)                    the one error rule
    load_model_at, load_hardware_at, load_engine_preset_at, located_link
    check_preset_knobs(preset, name, scenario, field)   a user's preset sets valid knobs
    with_hardware_overrides(hw, base, variant, path, where)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import EnginePreset, engine_preset_names, load_engine_preset
from capsim.profiles.hardware import HardwareProfile, hardware_names, load_hardware
from capsim.profiles.links import LinkNumbers, link_names
from capsim.profiles.models import ModelShape, load_model, model_names
from capsim.scenario.paths import locate
from capsim.scenario.schema import EngineConfig
from capsim.scenario.validation import one_line_error


def named(loader, name: str, path: Path, field: str):
    """``loader(name)``; an error names the scenario ``path`` and ``field``, or, when it is
    a mistake inside the file ``name`` points at (a user's profile), that file and its own
    field, then which field of the scenario named it."""
    try:
        return loader(name)
    except ScenarioError as exc:
        raise in_named_file(exc, path, field) from None


def in_named_file(exc: ScenarioError, path: Path, field: str) -> ScenarioError:
    """``exc``, raised loading what the scenario's ``field`` names, placed as :func:`named`
    says."""
    if exc.file and exc.file != str(path):
        return ScenarioError(f"{exc.message} ({field} of {path})", file=exc.file, path=exc.path)
    return exc.with_context(file=str(path), path=field)


def load_model_at(value: str, scenario: Path) -> ModelShape:
    """The model ``value`` names: a shipped name, or a config.json, its directory or a
    model YAML relative to the ``scenario`` file."""
    return load_model(locate(value, scenario.parent, kind="model", shipped=model_names(),
                             what="a Hugging Face config.json, its directory or a model YAML",
                             dir_ok=True))


def load_hardware_at(value: str, scenario: Path) -> HardwareProfile:
    """The GPU profile ``value`` names: shipped, or a YAML relative to the scenario."""
    return load_hardware(locate(value, scenario.parent, kind="hardware",
                                shipped=hardware_names(), what="a GPU profile YAML"))


def load_engine_preset_at(value: str, scenario: Path) -> EnginePreset:
    """The engine preset ``value`` names: shipped, or a YAML relative to the scenario."""
    return load_engine_preset(locate(value, scenario.parent, kind="engine preset",
                                     shipped=engine_preset_names(), what="an engine preset YAML"))


def check_preset_knobs(preset: EnginePreset, name: str, scenario: Path, field: str) -> None:
    """The knobs a preset file sets must be valid engine knobs (:func:`preset_knob_error`):
    an error names the preset's file and the key in it, then the scenario field that named
    the preset (not the scenario's engine knob, which the user never wrote)."""
    if name in engine_preset_names():
        return                      # shipped presets: tests/profiles hold them to it
    file = locate(name, scenario.parent, kind="engine preset", shipped=engine_preset_names(),
                  what="an engine preset YAML")
    err = preset_knob_error(preset, Path(file))
    if err is not None:
        raise ScenarioError(f"{err.message} ({field} of {scenario})", file=str(file),
                            path=err.path)


def preset_knob_error(preset: EnginePreset, file: Path) -> ScenarioError | None:
    """The first knob of the preset ``file`` (``defaults``, the engine knobs among
    ``scheduler.knobs``, each ``conditional_defaults`` entry's ``set``) that is not a valid
    engine knob, as one line naming ``file`` and the key; None when all are valid
    (``capsim engines FILE`` says it as it is; a scenario adds which field named the file)."""
    # scheduler.knobs also holds the engine's own constants; those that are engine knobs
    # (batch_wait_timeout_iters, ...) fill unset knobs as defaults do
    own = {k: v for k, v in preset.scheduler.knobs.items() if k in EngineConfig.model_fields}
    sets = [("defaults", preset.defaults), ("scheduler.knobs", own)] + [
        (f"conditional_defaults.{i}.set", c.set)
        for i, c in enumerate(preset.conditional_defaults)]
    for at, knobs in sets:
        try:
            EngineConfig.model_validate(knobs)
        except ValidationError as exc:
            return one_line_error(exc, EngineConfig, file, at)
    return None


def located_link(spec: str | LinkNumbers, scenario: Path) -> str | Path | LinkNumbers:
    """``link:`` (or ``link: {name: ...}``) with a file name made relative to the scenario."""
    name = spec if isinstance(spec, str) else spec.name
    if name is None:
        return spec
    where = locate(name, scenario.parent, kind="link", shipped=link_names(),
                   what="a link YAML", also="; or give {bandwidth_gbit_per_s: ..., latency_s: ...}")
    if isinstance(spec, str):
        return where
    return spec.model_copy(update={"name": str(where)})


def with_hardware_overrides(hw: HardwareProfile, base: dict[str, Any], variant: dict[str, Any],
                            path: Path, where: str) -> HardwareProfile:
    """``hw`` with the scenario's then the variant's ``hardware_overrides`` applied; the
    profile's name says it was changed (``h100-sxm[memory_total_gib=70]``), so every
    table and report shows it."""
    if not base and not variant:
        return hw
    for changes, at in ((base, "hardware_overrides"), (variant, f"{where}.hardware_overrides")):
        for key in changes:
            if key not in HardwareProfile.model_fields or key in ("name", "sources"):
                valid = ", ".join(sorted(set(HardwareProfile.model_fields) - {"name", "sources"}))
                raise ScenarioError(f"unknown hardware profile field '{key}'; valid: {valid}",
                                    file=str(path), path=f"{at}.{key}")
        if changes:      # each level on its own first, so an error names the level it is in
            _with_changes(hw, changes, path, at)
    return _with_changes(hw, {**base, **variant}, path,
                         f"{where}.hardware_overrides" if where and variant else "hardware_overrides")


def _with_changes(hw: HardwareProfile, changes: dict[str, Any], path: Path,
                  at: str) -> HardwareProfile:
    """``hw`` with ``changes``; a mapping (``peak_flops_per_s: {fp8: …}``,
    ``efficiency``) is merged into the profile's, not put in its place."""
    data = hw.model_dump()
    for key, value in changes.items():
        old = data.get(key)
        data[key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) \
            else value
    label = ",".join(f"{k}={v}" for k, v in changes.items())
    data |= {"name": f"{hw.name}[{label}]",
             "sources": {**hw.sources, **{k: "scenario hardware_overrides" for k in changes}}}
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        raise one_line_error(exc, HardwareProfile, path, at) from None
