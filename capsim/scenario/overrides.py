"""``--set dotted.key=value`` overrides of a scenario document (before validation).

Keys are dotted YAML paths, list indices included (``variants.2.cluster.num_replicas``);
values are parsed as YAML by :func:`capsim.common.yamlio.load_yaml` (``1e-3`` is a
number). A variant's ``set:`` mapping uses the same paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from capsim.common.errors import ScenarioError
from capsim.common.yamlio import load_yaml

def apply_override(raw: dict[str, Any], item: str, path: Path) -> None:
    """Apply one ``key=value`` to ``raw``.

    Raises:
        ScenarioError: no ``=``, a value that is not YAML, or a key that does not lead
            anywhere (its path is the whole key, the part that failed in the message).
    """
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ScenarioError(f"--set expects dotted.key=value, got '{item}'", file=str(path))
    try:
        parsed = load_yaml(value) if value.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(f"--set {key.strip()}: value is not valid YAML "
                            f"({getattr(exc, 'problem', None) or exc})", file=str(path)) from None
    try:
        set_dotted(raw, key.strip(), parsed, path)
    except ScenarioError as exc:
        raise ScenarioError(f"{exc.message} (at {exc.path})" if exc.path != key.strip()
                            else exc.message, file=exc.file, path=key.strip()) from None


def set_dotted(raw: dict[str, Any], key: str, parsed: Any, path: Path) -> None:
    """Set ``raw[a][b][0][c] = parsed`` for ``key`` = ``a.b.0.c`` (creating mappings)."""
    parts = key.split(".")
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        node = _child(node, part, parts[: i + 1], path)
    last = parts[-1]
    if isinstance(node, list):
        node[_index(node, last, parts, path)] = parsed
    elif isinstance(node, dict):
        node[last] = parsed
    else:
        raise ScenarioError(f"cannot set '{last}' inside {type(node).__name__} value "
                            f"{node!r}",
                            file=str(path), path=".".join(parts[:-1]))


def _child(node: Any, part: str, so_far: list[str], path: Path) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, so_far, path)]
    if not isinstance(node, dict):
        raise ScenarioError("--set: not a mapping", file=str(path), path=".".join(so_far[:-1]))
    return node.setdefault(part, {})


def _index(node: list, part: str, so_far: list[str], path: Path) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ScenarioError(f"list index must be 0..{len(node) - 1}",
                            file=str(path), path=".".join(so_far))
    return int(part)

