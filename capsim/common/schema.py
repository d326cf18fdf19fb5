"""Shared pydantic base for every user-facing schema (scenario, profiles)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict

Int = Annotated[int, Strict()]
"""An integer field that takes only integers: YAML ``true`` is not 1, ``16.0`` is not 16."""


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
        raise ValueError(f"Input should be a number, not {str(value).lower()}")
    return value


_NOT_BOOL = BeforeValidator(_not_bool)


def integer_hint(error: dict[str, Any]) -> str:
    """For a pydantic error on an :data:`Int` field given a whole float (``16.0``,
    ``1.92E11``): how to write it as an integer; else "".

    ``error`` is one entry of ``ValidationError.errors()``.
    """
    value = error.get("input")
    if error.get("type") != "int_type" or not isinstance(value, float) \
            or not value.is_integer():
        return ""
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
