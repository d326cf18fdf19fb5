"""The examples a bad-input message offers (``expected a mapping, e.g. {…}``) are valid:
each model's ``yaml_example`` validates as that model, and each field's ``examples``
parse as YAML of the field's kind. An example that no longer validates would send a user
from one error to the next."""

from __future__ import annotations

import pytest
import yaml
from pydantic import TypeAdapter

import capsim.scenario.load  # noqa: F401  (imports every scenario model)
from capsim.common.schema import StrictModel
from capsim.profiles.hardware import HardwareProfile
from capsim.scenario.schema import EngineConfig


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


MODELS = sorted({c for c in _subclasses(StrictModel) if c.__dict__.get("yaml_example")},
                key=lambda c: c.__name__)
FIELDS = sorted({(c.__name__, name, example) for c in _subclasses(StrictModel)
                 for name, f in c.model_fields.items() for example in f.examples or ()})


def test_the_scenario_sections_have_examples():
    names = {c.__name__ for c in MODELS}
    assert {"EngineConfig", "ArrivalConfig", "RequestClass", "FleetPoolConfig", "RouteRule",
            "AutoscalingConfig", "FailuresConfig", "SpeculativeConfig", "PoolConfig",
            "DisaggregationConfig", "VariantSpec", "SloConfig", "SizingConfig"} <= names


@pytest.mark.parametrize("model", MODELS, ids=lambda c: c.__name__)
def test_a_models_example_validates(model):
    model.model_validate(yaml.safe_load(model.yaml_example))


@pytest.mark.parametrize("owner,field,example", FIELDS)
def test_a_fields_example_is_yaml_of_its_kind(owner, field, example):
    value = yaml.safe_load(example)
    if field in ("engine",):                  # engine knobs over the scenario's
        EngineConfig.model_validate(value)
    elif field == "hardware_overrides":       # fields of a GPU profile
        assert set(value) <= set(HardwareProfile.model_fields)
    elif field == "name":
        assert isinstance(value, str)
    elif isinstance(value, dict):
        assert value
    else:                                     # a name or a list: of the field's own type
        owner_model = next(c for c in _subclasses(StrictModel) if c.__name__ == owner)
        TypeAdapter(owner_model.model_fields[field].annotation).validate_python(value)
