"""Shared pydantic base for every user-facing schema (scenario, profiles)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Frozen model that rejects unknown keys, so YAML typos fail loudly."""

    model_config = ConfigDict(extra="forbid", frozen=True)
