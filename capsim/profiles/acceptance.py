"""Published speculative acceptance by draft position, by name
(``capsim/profiles/data/speculative/acceptance.yaml``).

Each row is one published measurement of a drafter on a target model and a dataset: vLLM's
per-position acceptance rates (S_i, the fraction of drafts whose i-th token was accepted;
:mod:`capsim.profiles.speculative`), the source's mean acceptance length and its citation. A
scenario selects a row with ``engine.speculative.acceptance: NAME``.

Public API:
    AcceptanceRow
    acceptance_rows() -> dict[str, AcceptanceRow]
    acceptance_row(name) -> AcceptanceRow
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from capsim.common.schema import StrictModel
from capsim.profiles.files import read_yaml_mapping, scenario_error_from_validation
from capsim.profiles.speculative import METHODS, expected_tokens_by_position

_FILE = ("data", "speculative", "acceptance.yaml")


class AcceptanceRow(StrictModel):
    """One published acceptance measurement.

    Attributes:
        name: the row's key in the file.
        method: vLLM's ``speculative_config.method`` it was measured with.
        target_model: the target model measured (its Hugging Face repository).
        models: capsim's names of the models the row is used on without a warning: the
            target and checkpoints of its architecture and size (:meth:`serves`).
        acceptance_rate_by_position: S_1 … S_k (vLLM's per-position acceptance rate),
            non-increasing, in [0, 1].
        mean_acceptance_length: the source's mean acceptance length (tokens per step,
            the bonus token included).
        tolerance: relative error within which 1 + Σ S_i reproduces it.
        source: where the numbers are published.
    """

    name: str
    method: str
    target_model: str
    models: list[str] = Field(min_length=1)
    drafter: str
    dataset: str
    engine: str
    acceptance_rate_by_position: list[float] = Field(min_length=1)
    mean_acceptance_length: float = Field(ge=1)
    tolerance: float = Field(gt=0, lt=1)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> "AcceptanceRow":
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r}; valid: {', '.join(METHODS)}")
        check_positions(self.acceptance_rate_by_position)
        return self

    @property
    def k(self) -> int:
        """Draft positions measured (the most ``num_speculative_tokens`` it serves)."""
        return len(self.acceptance_rate_by_position)

    def serves(self, model_name: str) -> bool:
        """Whether ``model_name`` (a :class:`~capsim.profiles.models.ModelShape` name) is
        one of ``models``, ignoring case (a config.json's folder may be lower-case)."""
        return model_name.casefold() in {m.casefold() for m in self.models}

    def tokens_per_step(self) -> float:
        """1 + Σ S_i over every measured position."""
        return expected_tokens_by_position(tuple(self.acceptance_rate_by_position), self.k)


def check_positions(rates: list[float]) -> None:
    """Raise ValueError (one line) unless ``rates`` are in [0, 1] and non-increasing (a
    position is accepted only when every one before it was)."""
    for i, rate in enumerate(rates):
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise ValueError(f"acceptance_rate_by_position[{i}] is {rate!r}; each rate is a "
                             "fraction of drafts, a number in [0, 1]")
        if not 0 <= rate <= 1:
            raise ValueError(f"acceptance_rate_by_position[{i}] is {rate}; each rate is a "
                             "fraction of drafts, in [0, 1]")
        if i and rate > rates[i - 1]:
            raise ValueError(
                f"acceptance_rate_by_position[{i}] {rate} is above position {i - 1}'s "
                f"{rates[i - 1]}; vLLM's per-position rates (drafts whose i-th token was "
                "accepted) never increase: give them as vLLM prints them")


@lru_cache(maxsize=1)
def acceptance_rows() -> dict[str, AcceptanceRow]:
    """Every shipped row by name.

    Raises:
        ScenarioError: the packaged file is malformed (one line naming it)."""
    entry = resources.files("capsim.profiles").joinpath(*_FILE)
    with resources.as_file(entry) as path:
        data = read_yaml_mapping(Path(path))
        rows = {}
        for name, body in data.items():
            try:
                rows[name] = AcceptanceRow.model_validate({"name": name, **body})
            except ValidationError as exc:
                raise scenario_error_from_validation(exc, str(path), AcceptanceRow) from None
    return rows


def acceptance_row(name: str) -> AcceptanceRow:
    """The shipped row ``name``.

    Raises:
        ValueError: no such row (the message lists the valid names)."""
    rows = acceptance_rows()
    if name not in rows:
        raise ValueError(f"acceptance {name!r} is not a shipped acceptance table; valid: "
                         f"{', '.join(sorted(rows))}")
    return rows[name]
