"""Pydantic validation errors as one line: the file, the dotted YAML path, what is valid.

Every model of a scenario, profile or link file is validated through
:func:`validate`, so every mistake a user can make reads the same way
(DESIGN.md "Conventions"; the pattern of guidellm's edge validation).
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from capsim.common.errors import ScenarioError
from capsim.common.schema import StrictModel, error_text, field_named, missing_text
from capsim.scenario.schema import EngineConfig

def validate(model: type[BaseModel], data: Any, path: Path, prefix: str = "") -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise one_line_error(exc, model, path, prefix) from None


def merged(model: type[StrictModel], base: StrictModel, override: dict[str, Any], path: Path,
           where: str, section: str, user_keys: set[str] | None = None):
    """``override`` over the fields ``base`` set, validated; errors point at the variant's
    field when it gave it (``user_keys``, default: ``override``'s keys), else the scenario's."""
    data = {**base.model_dump(exclude_unset=True), **override}
    variant_keys = set(override) if user_keys is None else user_keys
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        prefix = f"{where}.{section}" if where and field in variant_keys else section
        raise one_line_error(exc, model, path, prefix) from None


def one_line_error(exc: ValidationError, model: type[BaseModel], path: Path, prefix: str) -> ScenarioError:
    """The first pydantic error as one ScenarioError (file, dotted path, what is valid)."""
    errors = exc.errors(include_url=False)
    # A typo'd key also makes its field "missing": name the typo, it is the real mistake.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [str(p) for p in err["loc"] if not _is_union_tag(p)]
    named = field_named(err, model)        # a model validator's message about one field
    if named is not None:
        loc.append(named)
    dotted = ".".join(([prefix] if prefix else []) + loc)
    if err["type"] == "extra_forbidden":
        valid = _valid_keys(model, [str(p) for p in err["loc"][:-1]])
        knob = _engine_knob_here(loc[-1], valid, ".".join(([prefix] if prefix else []) + loc[:-1]))
        hint = [k for k in difflib.get_close_matches(loc[-1], valid, n=2) if k != loc[-1]][:1]
        msg = f"unknown key '{loc[-1]}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
        if knob:
            msg = knob
        elif valid:
            msg += f"; valid keys: {', '.join(valid)}"
    elif err["type"] == "missing":
        msg = missing_text(err, model)
    else:
        msg = error_text(err, model)
    return ScenarioError(msg, file=str(path), path=dotted or None)


def _engine_knob_here(key: str, valid: list[str], parent: str) -> str:
    """For an engine knob written beside ``engine:`` instead of in it (a pool's
    ``pipeline_parallel_size``, a variant's ``max_num_seqs``): where it goes; else ""."""
    if "engine" not in valid or key not in EngineConfig.model_fields:
        return ""
    at = f"{parent}.engine" if parent else "engine"
    return f"unknown key '{key}' here: an engine knob goes under engine: ({at}.{key})"


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the discriminator tag / union member name into loc.
    return isinstance(part, str) and ("[" in part or part in {"fixed", "uniform", "normal",
                                                              "lognormal", "empirical",
                                                              "piecewise", "diurnal",
                                                              "on_off", "markov"})


def _valid_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    """Keys accepted at ``loc`` (pydantic's, union tags included) inside ``model``, as YAML
    spells them (a field's alias, such as a route rule's ``class``, not its Python name);
    in a tagged union, the keys of the member the tag names (``uniform``: dist, min, max),
    not of its first member; best effort, [] if unknown."""
    current: Any = model
    for part in loc:
        if part.isdigit() or "[" in part:
            continue
        cls = _model_class(current)
        fields = _by_key(cls) if cls is not None else {}
        if part in fields:
            current = fields[part].annotation
            continue
        member = _tagged_member(current, part)
        if member is None:
            return []
        current = member
    cls = _model_class(current)
    return sorted(_by_key(cls)) if cls else []


def _tagged_member(annotation: Any, tag: str) -> type[BaseModel] | None:
    """The model of a union whose discriminator field is ``Literal[tag]`` (None if none)."""
    for cls in _model_classes(annotation):
        for f in cls.model_fields.values():
            if typing.get_origin(f.annotation) is typing.Literal and \
                    tag in typing.get_args(f.annotation):
                return cls
    return None


def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    """Every model inside ``annotation`` (a union's members, an Optional's, …)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [c for arg in typing.get_args(annotation) for c in _model_classes(arg)]


def _by_key(cls: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by the key a YAML file writes: the alias where one is set."""
    return {f.alias or name: f for name, f in cls.model_fields.items()}


def _model_class(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_class(arg)
        if found is not None:
            return found
    return None

