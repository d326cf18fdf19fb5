"""YAML reading that refuses duplicate keys.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping, so a
scenario with two ``engine:`` sections silently loses the first. Every capsim
YAML file (scenarios, hardware, model and link profiles) is read through
:func:`safe_load_unique`, which raises instead.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # Only keys written in this mapping count: merge keys (``<<: *base``) and the
        # keys they bring in may be overridden, as YAML allows.
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:                  # unhashable: the base class reports it
                break
            if repeated:
                raise ConstructorError(None, None, f"duplicate key '{key}'",
                                       key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def safe_load_unique(text: str) -> Any:
    """``yaml.safe_load`` that raises ``yaml.YAMLError`` ("duplicate key 'x'", with the
    line of the second one) when a mapping repeats a key."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: ``at line L, column C: problem`` (or just the problem)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "unreadable"
    return f"at line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem
