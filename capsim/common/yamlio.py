"""The one YAML reader of capsim: numbers as people write them, repeated keys refused.

Every YAML capsim reads — scenarios, ``--set`` values, hardware, model, link and engine
profiles — goes through :func:`load_yaml` (``tests/common/test_yamlio.py`` holds the
package to it). It is PyYAML's safe loader with three changes:

- **Numbers in exponent notation.** PyYAML implements YAML 1.1, whose float needs a
  dot and a signed exponent (``1.5e+3``): ``192e9``, ``1e-3``, ``3.35E12`` and
  ``1.0e9`` are strings there, and a profile's ``hbm_bandwidth_bytes_per_s: 3.35E12``
  fails as "not a number". Here they are numbers, as in YAML 1.2's core schema
  (https://yaml.org/spec/1.2.2/#1022-tag-resolution) and JSON. A mantissa without a
  dot and a non-negative exponent (``192e9``, ``1e3``) is read as the integer it
  names (below 2**63), so an integer field (``hbm_bytes: 192e9``, ``max_num_seqs:
  1e3``) takes it; every other form is a float. A number too large for a float
  (``1e400``) is refused rather than read as infinity: ``.inf`` is the only way to
  write one.
- **Repeated keys refused.** ``safe_load`` keeps the last of two equal keys in a
  mapping, so a scenario with two ``engine:`` sections would silently lose the first.
- **Nesting deeper than** :data:`MAX_NESTING` **refused**: PyYAML builds nested nodes
  recursively and a few hundred levels exhaust Python's stack (``RecursionError``, not
  a YAML error).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.error import MarkedYAMLError

#: Deepest nesting of mappings and sequences accepted. A scenario's deepest valid
#: path has about 8 levels (variants.N.disaggregation.prefill.engine.KEY, a
#: distribution's list); PyYAML 6's recursive composer hits Python's default
#: recursion limit (1,000 frames) between 400 and 500 levels (measured).
MAX_NESTING = 100

#: Exponent-notation numbers YAML 1.1 leaves as strings (YAML 1.2 core schema floats with
#: an exponent); the forms 1.1 already reads (``1.5e+3``) match too and read the same.
_EXPONENT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")
#: ``192e9``: an integer mantissa and a non-negative exponent, an integer.
_INTEGER_EXPONENT = re.compile(r"^([-+]?[0-9]+)[eE]\+?([0-9]+)$")
_FLOAT_TAG = "tag:yaml.org,2002:float"
_INF_LITERALS = frozenset({".inf", "+.inf", "-.inf"})


class _Loader(yaml.SafeLoader):
    """SafeLoader with exponent-notation numbers and repeated keys refused."""

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

    def construct_number(self, node: yaml.ScalarNode) -> int | float:
        text = str(node.value).replace("_", "")
        whole = _INTEGER_EXPONENT.match(text)
        if whole and int(whole.group(2)) <= 18:
            value = int(whole.group(1)) * 10 ** int(whole.group(2))
            if abs(value) < 2**63:        # a count; beyond int64 it is a magnitude: a float
                return value
        number = float(text) if whole else self.construct_yaml_float(node)
        if not math.isinf(number) or text.lower() in _INF_LITERALS:
            return number
        raise ConstructorError(None, None, f"number {node.value} is out of range (write .inf "
                               "for infinity)", node.start_mark)


# The 1.1 float form ("1.5e+3") is resolved before this one and constructed by
# construct_number too, so both spellings of a number read the same.
_Loader.add_implicit_resolver(_FLOAT_TAG, _EXPONENT, list("-+.0123456789"))
_Loader.add_constructor(_FLOAT_TAG, _Loader.construct_number)


def load_yaml(text: str) -> Any:
    """Parse ``text`` as YAML the way every capsim file is read (see the module docstring).

    Raises:
        yaml.YAMLError: malformed YAML, a repeated key ("duplicate key 'x'", with the line
            of the second one), a number out of float range, or mappings and sequences
            nested deeper than :data:`MAX_NESTING` (with the line where they do);
            :func:`describe_yaml_error` makes it one line.
    """
    _check_nesting(text)
    return yaml.load(text, Loader=_Loader)


def _check_nesting(text: str) -> None:
    """Walk the parser's events (PyYAML's parser is iterative) and count the depth."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise MarkedYAMLError(problem=f"nested more than {MAX_NESTING} levels deep "
                                              "(a capsim file needs fewer than 10)",
                                      problem_mark=event.start_mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: ``at line L, column C: problem`` (or just the problem)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "unreadable"
    return f"at line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem
