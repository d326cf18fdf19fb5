"""Where a scenario's names and files are looked up: one rule for every field.

A scenario names a model, GPU, engine preset or KV link either by a **shipped name**
(``llama-3.1-8b``, ``h100-sxm``, ``vllm-v1``, ``nvlink-4``: ``capsim models``,
``capsim hardware``, ``capsim engines`` list them) or by a **path**. Paths — these and
the workload's trace and empirical length files alike — are relative to the directory
of the scenario file, never to the working directory, so a scenario runs the same from
anywhere; an absolute path or ``~`` is taken as written.

A value is a shipped name when it is one; otherwise it is a path when it looks like one
(a ``/``, a ``.yaml`` / ``.yml`` / ``.json`` suffix, a leading ``.`` or ``~``) or names
something in the scenario's directory (a model directory holding ``config.json``).
Errors name the directory searched. ``scenario.resolved.yaml`` (:func:`absolute_paths`)
writes every such path absolute, so the copy in a report directory runs as the original.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from capsim.common.errors import ScenarioError

_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def scenario_relative(value: str, base_dir: Path) -> Path:
    """``value`` as a path: absolute (or ``~``) as written, else under ``base_dir``
    (normalised: ``a/../b`` is ``b``)."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else Path(os.path.normpath(Path(base_dir) / p))


def looks_like_path(value: str) -> bool:
    """True for ``my.yaml``, ``gpus/x``, ``./x``, ``~/x``: a value no shipped name has."""
    return ("/" in value or os.sep in value or value.startswith((".", "~"))
            or value.endswith(_FILE_SUFFIXES))


def locate(value: str, base_dir: Path, *, kind: str, shipped: Iterable[str],
           what: str, also: str = "", dir_ok: bool = False) -> str | Path:
    """A scenario's ``model`` / ``hardware`` / ``engine.preset`` / ``link`` value resolved.

    Args:
        value: as written in the scenario.
        base_dir: the scenario file's directory.
        kind: ``hardware``, ``model``, ``engine preset`` or ``link`` (for messages).
        shipped: the shipped names of that kind.
        what: the file a path should name, for messages (``a GPU profile YAML``).
        also: another valid form, appended to the unknown-name message.
        dir_ok: a directory is valid (a model's, holding its ``config.json``).

    Returns:
        ``value`` itself when it is a shipped name, else the file's :class:`Path`.

    Raises:
        ScenarioError: an empty value, a directory (unless ``dir_ok``), a path that does not
            exist, or a name that is neither shipped nor a file; the message names the
            directory searched and the shipped names.
    """
    names = sorted(shipped)
    if value in names:
        return value
    if not value.strip():
        raise ScenarioError(f"empty; valid: {', '.join(names)}, or a path to {what}")
    path = scenario_relative(value, base_dir)
    if path.is_dir() and not dir_ok:
        raise ScenarioError(f"{value} is a directory; name {what} in it")
    if path.exists():
        return path
    here = Path(base_dir).resolve()
    if looks_like_path(value):
        stem = Path(value).name.rsplit(".", 1)[0]
        shipped_hint = (f"; the shipped {kind} is named {stem}, without a path or suffix"
                        if stem in names else "")
        if Path(value).expanduser().is_absolute():
            raise ScenarioError(f"file not found: {value}{shipped_hint}")
        raise ScenarioError(f"file not found: {value} (searched {here}: paths in a scenario are "
                            f"relative to the scenario's directory){shipped_hint}")
    beside = [f"{value}{ext}" for ext in (".yaml", ".yml") if (here / f"{value}{ext}").is_file()]
    hint = f" (did you mean the file {beside[0]!r} beside it?)" if beside else ""
    raise ScenarioError(f"unknown {kind} {value!r}{hint}; valid: {', '.join(names)} (or a path "
                        f"to {what}, relative to the scenario's directory {here}){also}")


#: Keys whose values are a shipped name or a path (the last part of a dotted ``--set`` /
#: ``sweep:`` / ``set:`` key counts too): model, hardware (scenario, variant, pool),
#: engine.preset, a split's link, workload.trace.path and empirical length files' path.
_PATH_KEYS = frozenset({"model", "hardware", "preset", "link", "path"})


def absolute_paths(doc: Any, base_dir: Path, shipped: Iterable[str]) -> Any:
    """A copy of a scenario document with every relative path that exists under
    ``base_dir`` made absolute; shipped names, missing files and other values unchanged.

    Args:
        doc: the raw scenario mapping (after ``--set``).
        base_dir: the scenario file's directory.
        shipped: every shipped name (models, hardware, engine presets, links).
    """
    names = frozenset(shipped)

    def fix(value: Any) -> Any:
        if isinstance(value, list):
            return [fix(v) for v in value]
        if not isinstance(value, str) or value in names:
            return value
        path = scenario_relative(value, base_dir)
        return str(path.resolve()) if path.exists() else value

    def walk(node: Any, key: str = "") -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                last = str(k).rsplit(".", 1)[-1]
                if last in _PATH_KEYS and not isinstance(v, dict):
                    out[k] = fix(v)
                elif last == "link" and isinstance(v, dict) and "name" in v:
                    out[k] = {**v, "name": fix(v["name"])}
                else:
                    out[k] = walk(v, last)
            return out
        if isinstance(node, list):
            return [walk(v, key) for v in node]
        return node

    return walk(doc)
