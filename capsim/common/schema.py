"""Shared pydantic base for every user-facing schema (scenario, profiles)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict

Int = Annotated[int, Strict()]
"""An integer field that takes only integers: YAML ``true`` is not 1, ``16.0`` is not 16."""

MAX_TOKENS = 2**31 - 1
"""The most tokens a length (a request's prompt or reply, a length distribution's bound, a
trace cell) may hold: far beyond any model's context (the longest shipped, Llama 4 Scout,
has 10,485,760 positions), and every such count and their sums stay exact in int64 (a
larger YAML integer or CSV cell would overflow numpy's int64 or lose digits as float)."""

MAX_SECONDS = 1e9
"""The longest time a scenario may give (an arrival, a failure's time or repair, a start-up
delay, a window), seconds: about 32 years. float64 seconds there still resolve 0.12 µs,
far below an engine step; at 1e300 s a step added to the clock vanished and a run waiting
for a replica repaired then never ended."""

Bool = Annotated[bool, Strict()]
"""A boolean field that takes only YAML's ``true`` / ``false``: pydantic's lax ``'yes'``,
``'false'``, ``1`` and ``0`` are refused (a quoted ``'false'`` would otherwise be echoed into
scenario.resolved.yaml as a string)."""


class StrictModel(BaseModel):
    """Frozen model that rejects unknown keys, so YAML typos fail loudly, and non-finite
    numbers (``.inf``, ``.nan``)."""

    # defer_build: a subclass's validator is built once, by the rebuild below (or at its
    # first use), not also when the class is made (a third of capsim's import time).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """YAML ``true`` is not 1.0: pydantic's lax float takes a bool, a typo's usual shape
        (``gpu_memory_utilization: yes``); every float field of a subclass refuses it."""
        super().__pydantic_init_subclass__(**kwargs)
        changed = False
        for field in cls.model_fields.values():
            if ((field.annotation is float or float in get_args(field.annotation))
                    and _NOT_BOOL not in field.metadata):
                field.metadata.append(_NOT_BOOL)
                changed = True
        if changed:
            cls.model_rebuild(force=True)


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    return value


_NOT_BOOL = BeforeValidator(_not_bool)

Float = Annotated[float, _NOT_BOOL]
"""A number inside a mapping or list (``dict[str, Float]``), refusing YAML ``true`` as a
:class:`StrictModel`'s own float fields do (``targets: {itl_p99_ms: true}`` read as 1 ms)."""


def integer_hint(error: dict[str, Any]) -> str:
    """For a pydantic error on an :data:`Int` field given a whole float (``16.0``,
    ``1.92E11``): how to write it as an integer (one beyond int64, ``1e300``: that it is too
    large); else "".

    ``error`` is one entry of ``ValidationError.errors()``.
    """
    value = error.get("input")
    if error.get("type") != "int_type" or not isinstance(value, float) \
            or not value.is_integer():
        return ""
    if abs(value) >= 2 ** 63:       # its 300 digits would fill the line and help no one
        return "; too large for any integer field"
    whole = int(value)
    mantissa, zeros = str(whole).rstrip("0"), len(str(whole)) - len(str(whole).rstrip("0"))
    short = f" or {mantissa}e{zeros}" if zeros >= 3 else ""
    return f"; an integer is written without a decimal point: {whole}{short}"


def check_tag(key: str, valid: tuple[str, ...]) -> Callable[[Any], Any]:
    """A before-validator for a discriminated union tagged by ``key``: a missing or unknown
    tag names the valid ones (pydantic's own message lists the union's inner errors)."""
    def check(value: Any) -> Any:
        if isinstance(value, dict):
            tag = value.get(key)
            if tag is None:
                raise ValueError(f"missing {key}; valid: {', '.join(valid)}")
            if tag not in valid:
                raise ValueError(f"unknown {key} {tag!r}; valid: {', '.join(valid)}")
        return value
    return check


# ------------------------------------------------------------ pydantic errors in words
#
# pydantic's own wording says what is wrong with the value ("Input should be a valid
# dictionary or instance of EngineConfig") but not what to write instead; these say it in
# YAML terms, with an example where the schema gives one (a model's ``yaml_example``, a
# field's ``examples``) and otherwise the keys it takes.

#: The longest list of keys named when a mapping has no example (one screen line).
_MAX_KEYS_NAMED = 12


def error_text(error: dict[str, Any], model: type[BaseModel] | None = None) -> str:
    """One pydantic error (an entry of ``ValidationError.errors()``) as what was expected,
    in YAML terms, and what was given: ``expected a mapping, e.g. {preset: vllm-v1} (got
    [1, 2])``; literal choices are listed by pydantic itself (``Input should be 'a' or
    'b'``). ``model`` is the model validated, so the field at ``error["loc"]`` can give
    an example."""
    kind, value = error["type"], error.get("input")
    target = annotation_at(model, error["loc"]) if model is not None else None
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        msg = f"expected a mapping{_example(target)}"
    elif kind == "list_type":
        item = _strip(get_args(_strip(target))[0]) if get_args(_strip(target)) else None
        msg = f"expected a list{_list_example(item)}"
    elif kind == "string_type":
        msg = "expected a string"
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        msg = f"expected an integer{_unit(error['loc'])}"
    elif kind in ("bool_type", "bool_parsing"):
        quoted = isinstance(value, str) and value.strip().lower() in ("true", "false")
        msg = "expected true or false" + (", unquoted" if quoted else "")
    elif kind in ("float_type", "float_parsing"):
        msg = f"expected a number{_unit(error['loc'])}"
    elif kind == "string_pattern_mismatch" and getattr(_field_info(target), "description", None):
        msg = f"expected {_field_info(target).description}{_example(target)}"
    elif kind == "too_short" and "min_length" in error.get("ctx", {}):
        n = error["ctx"]["min_length"]
        msg = f"expected at least {n} item{'s' if n != 1 else ''}{_list_example(_item_of(target))}"
    else:
        return _pydantic_text(error)
    return f"{msg} (got {_kind_of(value)}{integer_hint(error)})"


#: A field name's unit suffix (the project's naming rule: units in names) → its words.
_UNITS = (("_bytes_per_s", "bytes per second"), ("_flops_per_s", "FLOP per second"),
          ("_per_s", "per second"), ("_ms", "milliseconds"), ("_s", "seconds"),
          ("_gib", "GiB"), ("_gb", "GB"), ("_bytes", "bytes"), ("_tokens", "tokens"),
          ("_usd", "US dollars"))


def _unit(loc: tuple | list) -> str:
    """`` in seconds`` for a field named ``…_s`` (``max_num_batched_tokens`` → tokens); ""
    for a field without a unit suffix."""
    name = next((p for p in reversed(loc) if isinstance(p, str)), "")
    for suffix, words in _UNITS:
        if name.endswith(suffix):
            if words in ("bytes", "tokens", "US dollars"):
                return f" of {words}"
            return f" {words}" if words.startswith("per ") else f" in {words}"
    return ""


def missing_text(error: dict[str, Any], model: type[BaseModel] | None = None) -> str:
    """A ``missing`` error: ``required field is missing``, with the example of the mapping
    that needs it where the schema gives one (``e.g. {dist: lognormal, mean: 600, sigma:
    0.8}``)."""
    parent = annotation_at(model, error["loc"][:-1]) if model is not None else None
    example = _example(parent) if parent is not None else ""
    return "required field is missing" + (f"; {example.removeprefix(', ')}"
                                          if example.startswith(", e.g.") else "")


def field_named(error: dict[str, Any], model: type[BaseModel]) -> str | None:
    """For an error a model's own validator raised about one of its fields (``min_replicas
    (5) must be <= max_replicas (4)``, ``cv is required for process: gamma``): the field
    its message starts with, so the YAML path can name it; else None."""
    if error["type"] != "value_error":
        return None
    cls = _model_in(annotation_at(model, error["loc"]))
    words = error["msg"].removeprefix("Value error, ").split(" ", 1)
    if cls is None or not words[0]:
        return None
    names = {f.alias or name for name, f in cls.model_fields.items()}
    return words[0] if words[0] in names else None


def annotation_at(model: Any, loc: tuple | list) -> Any:
    """The annotation of the field at ``loc`` inside ``model`` (list indices and mapping keys
    step into the item type; union tags pydantic adds to ``loc`` are skipped); None where
    the path leaves the schema. A field's ``examples`` ride along as Annotated metadata."""
    current: Any = model
    for part in loc:
        plain = _strip(current)
        if isinstance(part, int) or (isinstance(part, str) and part.isdigit()):
            args = get_args(plain)
            current = args[-1] if args else None            # list[X] → X, dict[K, V] → V
            continue
        cls = _model_in(plain)
        if cls is not None and part in cls.model_fields:
            field = cls.model_fields[part]
            current = Annotated[field.annotation, _Field(field)]
        elif _is_tag(part, plain):
            current = _member_tagged(part, plain)
        elif get_origin(plain) is dict:
            current = get_args(plain)[1]
        else:
            return None
    return current


class _Field:
    """A field's FieldInfo (its ``examples``, ``description``) carried on its annotation by
    :func:`annotation_at`."""

    def __init__(self, info: Any) -> None:
        self.info = info


def _strip(annotation: Any) -> Any:
    """``Annotated[X, ...]`` → X and ``X | None`` → X (a union of several models stays)."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is not None and type(None) in get_args(annotation) and origin is not dict:
            rest = [a for a in get_args(annotation) if a is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation


def _models_of(annotation: Any) -> list[type[BaseModel]]:
    """The models a (union) annotation accepts, in order."""
    plain = _strip(annotation)
    if isinstance(plain, type) and issubclass(plain, BaseModel):
        return [plain]
    if get_origin(plain) in (list, dict, Literal) or not get_args(plain):
        return []
    return [m for a in get_args(plain) for m in _models_of(a)]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    models = _models_of(annotation)
    return models[0] if len(models) == 1 else None


def _is_tag(part: str, annotation: Any) -> bool:
    return "[" in part or len(_models_of(annotation)) > 1


def _member_tagged(tag: str, annotation: Any) -> Any:
    """The member of a union whose literal tag field (``dist``, ``kind``) is ``tag``; the
    union itself when none is (a pydantic union-member name such as ``function-after[…]``)."""
    for m in _models_of(annotation):
        for field in m.model_fields.values():
            if get_origin(field.annotation) is Literal and tag in get_args(field.annotation):
                return m
    return annotation


def _field_info(annotation: Any) -> Any:
    """The FieldInfo :func:`annotation_at` put on ``annotation``, or None."""
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, _Field):
            return meta.info
    return None


def _examples(annotation: Any) -> tuple:
    info = _field_info(annotation)
    return tuple(info.examples or ()) if info is not None else ()


def _example(annotation: Any) -> str:
    """``, e.g. {…}``: the field's example, its model's ``yaml_example`` (the first of a
    union's members with one), else the keys the model takes; "" when none is known."""
    given = _examples(annotation)
    if given:
        return f", e.g. {given[0]}"
    models = _models_of(annotation)
    for m in models:
        example = getattr(m, "yaml_example", None)
        if example:
            return f", e.g. {example}"
    if len(models) == 1:
        keys = sorted(f.alias or name for name, f in models[0].model_fields.items())
        shown = ", ".join(keys[:_MAX_KEYS_NAMED]) + (", …" if len(keys) > _MAX_KEYS_NAMED
                                                      else "")
        return f" with keys from: {shown}"
    return ""


def _item_of(annotation: Any) -> Any:
    args = get_args(_strip(annotation))
    return args[0] if args else None


def _list_example(item: Any) -> str:
    """``, e.g. [{…}]`` for a list of ``item``; "" for a list of plain values."""
    text = _example(item)
    if text.startswith(", e.g. "):
        return f", e.g. [{text.removeprefix(', e.g. ')}, ...]"
    return f" of mappings{text}" if text else ""


def _kind_of(value: Any) -> str:
    """A bad value as the user wrote it: ``a list [1, 2]``, ``'maybe'``, ``5``."""
    shown = _shown(value)
    if isinstance(value, dict):
        return f"a mapping {shown}"
    if isinstance(value, list):
        return f"a list {shown}"
    return shown


#: pydantic's bound errors → capsim's wording (``must be > 0``, as its own checks say).
_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _pydantic_text(error: dict[str, Any]) -> str:
    """pydantic's own message (literal choices), bounds in capsim's words (``must be >=
    0``), with the value given."""
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] in _BOUNDS and _BOUNDS[error["type"]][0] in error.get("ctx", {}):
        key, op = _BOUNDS[error["type"]]
        bound = error["ctx"][key]
        msg = f"must be {op} {bound:g}" if isinstance(bound, float) else f"must be {op} {bound}"
        if key == "le" and bound == MAX_SECONDS:
            msg += " s (about 32 years: beyond it the simulated clock no longer resolves a step)"
    elif error["type"] == "finite_number":
        msg = "must be a finite number"
    if "input" in error and not isinstance(error["input"], (dict, list)) \
            and not msg.endswith(f"got {error['input']}"):
        msg += f" (got {_shown(error['input'])}{integer_hint(error)})"
    return msg


#: Longest echo of a bad value in an error line, characters (the line stays one screen line).
_SHOWN_CHARS = 60


def _shown(value: Any) -> str:
    """``repr(value)`` (YAML's spelling for booleans and None, a date as written), cut to
    ``_SHOWN_CHARS`` with its full length named."""
    text = {True: "true", False: "false", None: "null"}.get(value, None) \
        if isinstance(value, (bool, type(None))) else repr(value)
    if isinstance(value, (datetime.date, datetime.time)):   # YAML read an unquoted date
        text = f"{value.isoformat()}, a date: quote it"
    if len(text) <= _SHOWN_CHARS:
        return text
    return (f"{text[:_SHOWN_CHARS - 1]}… "
            f"({len(value) if isinstance(value, str) else len(text):,} characters)")
