"""Shared pydantic base for every user-facing schema (scenario, profiles)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Strict

Int = Annotated[int, Strict()]
"""An integer field that takes only integers: YAML ``true`` is not 1, ``16.0`` is not 16."""


class StrictModel(BaseModel):
    """Frozen model that rejects unknown keys, so YAML typos fail loudly, and non-finite
    numbers (``.inf``, ``.nan``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
