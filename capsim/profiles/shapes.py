"""Named workload shapes: the request lengths of a public benchmark dataset, as data.

One YAML file per shape under ``capsim/profiles/data/workloads/``, named by its stem
(``sharegpt``): the dataset's filter, a compact quantile table of prompt and output lengths
(tokens at fixed probabilities, interpolated in ln tokens) and the Spearman rank correlation
between them, each with its source and the fit's error. A scenario names one as
``workload.classes[i].shape``; :mod:`capsim.workload.shapes` draws from it.

Public API:
    WorkloadShape, ShapeFilter
    shape_names() -> list[str]
    load_shape(name) -> WorkloadShape
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import Field, model_validator

from capsim.common.schema import MAX_TOKENS, Int, StrictModel
from capsim.profiles.files import FittedTo, packaged_file, packaged_names, read_yaml_mapping

_FOLDER = "workloads"
_SOURCED = ("filter", "prompt_tokens", "output_tokens", "rank_correlation")


class ShapeFilter(StrictModel):
    """The pairs a dataset's benchmark client keeps (vLLM's ShareGPT filter: a pair is
    dropped when prompt or output < ``min_tokens``, prompt > ``max_prompt_tokens`` or
    prompt + output > ``max_total_tokens``)."""

    min_tokens: Int = Field(ge=1, le=MAX_TOKENS)
    max_prompt_tokens: Int = Field(ge=1, le=MAX_TOKENS)
    max_total_tokens: Int = Field(ge=2, le=MAX_TOKENS)


class WorkloadShape(StrictModel):
    """Prompt and output lengths of a dataset's requests.

    Attributes:
        quantiles: probabilities, strictly increasing from 0 to 1.
        prompt_tokens, output_tokens: the length (tokens, >= 1, non-decreasing) at each
            probability; between two the inverse CDF is linear in ln tokens.
        rank_correlation: Spearman's rank correlation of prompt and output, in (-1, 1)
            (a Gaussian copula joins the two marginals).
        filter: pairs outside it are drawn again.
        tokenizer, description, fit, checks: what the tables were counted with, what they
            are, the fit's error and checks against published figures (documentation).
    """

    name: str = Field(min_length=1)
    description: str = ""
    tokenizer: str = ""
    filter: ShapeFilter
    quantiles: list[float] = Field(min_length=2)
    prompt_tokens: list[float] = Field(min_length=2)
    output_tokens: list[float] = Field(min_length=2)
    rank_correlation: float = Field(gt=-1, lt=1)
    fit: dict[str, Any] = Field(default_factory=dict)
    checks: dict[str, Any] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    fitted_to: FittedTo = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_tables(self) -> "WorkloadShape":
        q = self.quantiles
        if q[0] != 0 or q[-1] != 1 or any(b <= a for a, b in zip(q, q[1:])):
            raise ValueError("quantiles must rise strictly from 0 to 1")
        for key in ("prompt_tokens", "output_tokens"):
            values = getattr(self, key)
            if len(values) != len(q):
                raise ValueError(f"{key} needs one length per quantile ({len(q)}), "
                                 f"got {len(values)}")
            if values[0] < 1 or any(b < a for a, b in zip(values, values[1:])):
                raise ValueError(f"{key} must be >= 1 token and non-decreasing")
        return self

    def check_sources(self) -> list[str]:
        """The sourced fields with no ``sources`` entry (a shipped shape has none)."""
        return [k for k in _SOURCED if k not in self.sources]


def shape_names() -> list[str]:
    """Names of the shipped workload shapes, sorted."""
    return packaged_names(_FOLDER)


@lru_cache(maxsize=None)
def load_shape(name: str) -> WorkloadShape:
    """The shipped shape ``name`` (read once per process).

    Raises:
        ScenarioError: no such shape (``unknown workload shape 'x'; valid: ...``), or a
            malformed file.
    """
    with packaged_file(_FOLDER, name, "workload shape") as path:
        return WorkloadShape.model_validate({"name": name, **read_yaml_mapping(path)})
