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
- **Aliases that expand past** :data:`MAX_ALIAS_VALUES` **refused**, and recursive ones
  (``&a [*a]``): PyYAML shares an anchored value among its aliases, but everything that
  reads the document afterwards (validation, an error's echo of a bad value,
  ``scenario.resolved.yaml``) walks it expanded, so nine nested anchors of nine aliases
  each (a "billion laughs" document, 1 KB of text) stand for 387 million values and ran
  for hours. The check walks the composed nodes once, each shared node counted once.

Text is parsed by libyaml (PyYAML's C parser, ten times faster than the pure-Python
one) with the same resolvers and constructors; anything it does not read cleanly —
an error of any kind, a character PyYAML's reader refuses, nesting past the limit — is
read again by the pure-Python loader, so errors and their line numbers are PyYAML's own.
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

#: Most values (scalars, mappings and sequences) aliases may add to a document beyond
#: those written in it. A scenario reuses a section by anchor (``engine: *base`` in each
#: of a few dozen variants, a 24-factor schedule) for hundreds; 100,000 still lets a
#: 1,440-factor per-minute schedule be aliased by 60 variants.
MAX_ALIAS_VALUES = 100_000

#: Exponent-notation numbers YAML 1.1 leaves as strings (YAML 1.2 core schema floats with
#: an exponent); the forms 1.1 already reads (``1.5e+3``) match too and read the same.
_EXPONENT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")
#: ``192e9``: an integer mantissa and a non-negative exponent, an integer.
_INTEGER_EXPONENT = re.compile(r"^([-+]?[0-9]+)[eE]\+?([0-9]+)$")
_FLOAT_TAG = "tag:yaml.org,2002:float"
_INF_LITERALS = frozenset({".inf", "+.inf", "-.inf"})


class _Rules:
    """What capsim's loaders add to PyYAML's safe loader: exponent-notation numbers and
    repeated keys refused (mixed into the pure-Python and the libyaml loader alike)."""

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


class _Loader(_Rules, yaml.SafeLoader):
    """SafeLoader with exponent-notation numbers and repeated keys refused."""


#: The same rules on libyaml's parser (None where PyYAML was built without it).
_CLoader = type("_CLoader", (_Rules, yaml.CSafeLoader), {}) \
    if hasattr(yaml, "CSafeLoader") else None

# The 1.1 float form ("1.5e+3") is resolved before this one and constructed by
# construct_number too, so both spellings of a number read the same.
for _cls in (_Loader, _CLoader):
    if _cls is not None:
        _cls.add_implicit_resolver(_FLOAT_TAG, _EXPONENT, list("-+.0123456789"))
        _cls.add_constructor(_FLOAT_TAG, _Rules.construct_number)


def load_yaml(text: str) -> Any:
    """Parse ``text`` as YAML the way every capsim file is read (see the module docstring).

    Raises:
        yaml.YAMLError: malformed YAML, a repeated key ("duplicate key 'x'", with the line
            of the second one), a number out of float range, mappings and sequences
            nested deeper than :data:`MAX_NESTING` (with the line where they do), a
            recursive alias or aliases expanding past :data:`MAX_ALIAS_VALUES`;
            :func:`describe_yaml_error` makes it one line.
    """
    if _CLoader is not None and not yaml.reader.Reader.NON_PRINTABLE.search(text):
        try:
            if _max_depth(text, yaml.CSafeLoader) <= MAX_NESTING:
                return _load(text, _CLoader)
        except yaml.YAMLError:
            pass                          # read again below: PyYAML's own error and mark
    _check_nesting(text)
    return _load(text, _Loader)


def _load(text: str, loader_class: type) -> Any:
    """``yaml.load`` in its two halves, the aliases checked between them: the node graph
    composed (an alias is the anchored node itself, shared), then constructed."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a recursive alias, or aliases adding more than :data:`MAX_ALIAS_VALUES`
    values to what is written (the values the document stands for, expanded, minus its
    distinct nodes). Iterative, each distinct node visited once: O(nodes written).

    Raises:
        yaml.YAMLError: at the value whose aliases expand too far (the top-level key, or
            the deepest key holding most of the expansion), naming its path.
    """
    size: dict[int, int] = {}              # id(node) -> values it stands for, expanded
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if key in size:
            continue
        if key in on_path:
            raise MarkedYAMLError(problem="a recursive alias (an anchored value that "
                                          "contains an alias of itself)",
                                  problem_mark=node.start_mark)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    added = size[id(root)] - len(size)
    if added > MAX_ALIAS_VALUES:
        node, path = _heaviest(root, size)
        raise MarkedYAMLError(
            problem=f"{path + ': ' if path else ''}aliases expand this to "
                    f"{size[id(node)]:,} values, {added:,} more than written (at most "
                    f"{MAX_ALIAS_VALUES:,} may come from aliases); write the values out or "
                    "alias less",
            problem_mark=node.start_mark)


def _children(node: yaml.Node) -> list[yaml.Node]:
    """A node's values (a mapping's keys and values)."""
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _heaviest(root: yaml.Node, size: dict[int, int]) -> tuple[yaml.Node, str]:
    """The node to blame for an expansion, and its dotted path: from the root, down into
    the child that holds more than half of the expansion while there is one."""
    node, path = root, []
    while True:
        if isinstance(node, yaml.MappingNode):
            items = [(str(k.value), v) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            items = [(str(i), v) for i, v in enumerate(node.value)]
        else:
            break
        step = next(((name, child) for name, child in items
                     if 2 * size[id(child)] > size[id(node)]), None)
        if step is None:
            break
        path.append(step[0])
        node = step[1]
    return node, ".".join(path)


def _check_nesting(text: str) -> None:
    """Refuse nesting deeper than :data:`MAX_NESTING` (PyYAML's pure-Python parser)."""
    _max_depth(text, yaml.SafeLoader, raise_past=MAX_NESTING)


def _max_depth(text: str, loader: type, raise_past: int | None = None) -> int:
    """The deepest nesting of mappings and sequences, walking the parser's events
    (both of PyYAML's parsers are iterative); past ``raise_past`` levels a YAML error
    at the event that goes deeper."""
    depth = deepest = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if raise_past is not None and depth > raise_past:
                raise MarkedYAMLError(problem=f"nested more than {raise_past} levels deep "
                                              "(a capsim file needs fewer than 10)",
                                      problem_mark=event.start_mark)
            deepest = max(deepest, depth)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    return deepest


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: ``at line L, column C: problem`` (or just the problem)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "unreadable"
    return f"at line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem
