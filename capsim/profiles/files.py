"""Reading profile files: the packaged ones by name, a user's by path, and their errors.

Every profile kind (hardware, engines, links, models, startup) ships as YAML files under
``capsim/profiles/data/<folder>/`` and is named by the file's stem; a user's own is a
``.yaml`` path. This module holds what they share: listing and opening packaged files,
reading a YAML mapping, turning a pydantic error into one :class:`ScenarioError` line,
and the "every number has a source" check.

Public API:
    packaged_names(folder) -> list[str]
    is_path(name_or_path) -> bool
    packaged_file(folder, name, what, hint="") -> context manager of a Path
    read_yaml_mapping(path) -> dict
    scenario_error_from_validation(exc, file) -> ScenarioError
    check_sources(missing, path, shipped, what)
    FittedTo: the ``fitted_to:`` mapping of a profile
"""

from __future__ import annotations

import copy
import difflib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from capsim.common.errors import ScenarioError, read_text
from capsim.common.schema import _model_in, annotation_at, error_text, missing_text
from capsim.common.yamlio import describe_yaml_error, load_yaml

log = logging.getLogger(__name__)

FittedTo = dict[str, list[str | dict[Literal["external"], str]]]
"""A profile's ``fitted_to:``: each fitted constant (its ``sources`` key) → what it was fitted
to: measured case ids (benchmarks/fidelity/fit_test_split.yaml assigns each to ``fit`` or
``test``) or ``{external: <source>}`` for data with no case id (a kernel benchmark, a blog
figure). Read by the tests of the fit/test protocol only; capsim does not use it."""


def _folder(folder: str) -> Any:
    return resources.files("capsim.profiles").joinpath("data", folder)


def packaged_names(folder: str) -> list[str]:
    """Stems of the ``.yaml`` files in ``capsim/profiles/data/<folder>``, sorted."""
    return sorted(e.name[: -len(".yaml")] for e in _folder(folder).iterdir()
                  if e.name.endswith(".yaml"))


def is_path(name_or_path: str | Path) -> bool:
    """True for a :class:`~pathlib.Path` or text ending in ``.yaml``/``.yml``: a user's
    file, never a packaged name."""
    return isinstance(name_or_path, Path) or str(name_or_path).endswith((".yaml", ".yml"))


@contextmanager
def packaged_file(folder: str, name: str, what: str, hint: str = "") -> Iterator[Path]:
    """The packaged ``<folder>/<name>.yaml`` as a real path while the context is open.

    Raises:
        ScenarioError: no such name: ``unknown <what> 'x'; valid: a, b<hint>``.
    """
    names = packaged_names(folder)
    if name not in names:
        raise ScenarioError(f"unknown {what} {name!r}; valid: {', '.join(names)}{hint}")
    with resources.as_file(_folder(folder).joinpath(f"{name}.yaml")) as path:
        yield Path(path)


def read_yaml_mapping(path: Path, what: str = "file",
                      not_a_mapping: str = "expected a YAML mapping at the top level"
                      ) -> dict[str, Any]:
    """Read a YAML file (a ``what``: profile, scenario) that must hold a mapping.

    Raises:
        ScenarioError: unreadable file, malformed YAML, an empty file, or not a mapping
            (``not_a_mapping``); the error names the file.
    """
    text = read_text(path, what)
    data = _PARSED.get(text)
    if data is None:
        try:
            data = load_yaml(text)
        except yaml.YAMLError as exc:
            raise ScenarioError(f"invalid YAML {describe_yaml_error(exc)}",
                                file=str(path)) from None
        if data is None:                      # no document: nothing but comments or blanks
            raise ScenarioError(f"the file is empty; {not_a_mapping}", file=str(path))
        if not isinstance(data, dict):
            raise ScenarioError(not_a_mapping, file=str(path))
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = data
    return copy.deepcopy(data)        # callers edit what they read (--set, sweep points)


#: Mappings already parsed, by their file's text: a sweep loads the scenario and its
#: profiles once per point (1,000 points re-parsed the same YAML for over a minute).
#: Keyed by the text, so an edited file is parsed again.
_PARSED: dict[str, dict[str, Any]] = {}
_PARSED_MAX = 64


def scenario_error_from_validation(exc: ValidationError, file: str | None,
                                   model: type[BaseModel] | None = None) -> ScenarioError:
    """Turn a pydantic ``ValidationError`` of ``model`` into one ScenarioError.

    The first error is reported (:func:`~capsim.common.schema.error_text`: what was
    expected, with an example where ``model`` gives one); its ``loc`` tuple becomes the
    dotted path (``efficiency.compute``). Further errors are counted in the message.
    """
    errors = exc.errors(include_url=False)
    # A typo'd key also makes its field "missing": name the typo, it is the real mistake.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    path = ".".join(str(part) for part in first["loc"]) or None
    if first["type"] == "extra_forbidden":
        parent = _model_in(annotation_at(model, first["loc"][:-1])) if model else None
        valid = sorted(f.alias or n for n, f in parent.model_fields.items()) if parent else []
        hint = difflib.get_close_matches(str(first["loc"][-1]), valid, n=1)
        message = f"unknown key '{first['loc'][-1]}'" + (
            f" (did you mean '{hint[0]}'?)" if hint else
            f"; valid keys: {', '.join(valid)}" if valid else "")
        if hint:        # the field the typo left missing is the same mistake
            typo_of = (*first["loc"][:-1], hint[0])
            errors = [e for e in errors if not (e["type"] == "missing"
                                                and tuple(e["loc"]) == typo_of)]
    elif first["type"] == "missing":
        message = missing_text(first, model)
    else:
        message = error_text(first, model)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error(s))"
    return ScenarioError(message, file=file, path=path)


def check_sources(missing: list[str], path: Path, shipped: bool, what: str) -> None:
    """A shipped file must source every number (``missing`` names those it does not); a
    user's own ``what`` (profile, link) is used as it is, with one warning.

    Raises:
        ScenarioError: a shipped file with ``missing`` numbers.
    """
    if missing and shipped:
        raise ScenarioError(f"a shipped {what} sources every number; sources has no entry "
                            f"for: {', '.join(missing)}", file=str(path), path="sources")
    if missing:
        log.warning("%s: sources has no entry for %s: the %s is used as it is; say where "
                    "each number comes from (a datasheet URL, a measurement, or 'estimate: "
                    "why')", path, ", ".join(missing), what)
