"""What the pages say a model file may be matches what loads (issue 31 item 14: "A model"
said mixture-of-experts configs are refused while the MoE page and ``capsim models`` load
seven of them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from capsim.common.errors import ScenarioError
from capsim.profiles.hf_config import DENSE_MODEL_TYPES, MOE_MODEL_TYPES, shape_fields
from capsim.profiles.models import load_model, model_names

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _a_model() -> str:
    page = (DOCS / "own-gpu.md").read_text()
    start = page.index("**A model.**")
    return " ".join(page[start:page.index("\n\n", start)].split())


def _moe_presets() -> list[str]:
    return [n for n in model_names() if load_model(n).num_experts > 0]


def test_a_model_names_every_family_that_loads_and_refuses_the_rest():
    text = _a_model()
    for model_type in (*DENSE_MODEL_TYPES, *MOE_MODEL_TYPES):
        if model_type != "llama4_text":          # Llama 4's text config, read as llama4
            assert f"`{model_type}`" in text, model_type
    assert "mixture-of-experts configs are refused" not in text
    assert "Any other `model_type` (`mamba`, `phimoe`, an encoder) is refused" in text


def test_the_moe_presets_the_pages_count_are_those_capsim_models_lists():
    moe = _moe_presets()
    assert len(moe) == 7 and "the seven MoE presets" in _a_model()
    listed = (DOCS / "how-it-works" / "moe-mla.md").read_text().split("\n\n")[1]
    names = re.findall(r"`([a-z0-9.-]+)`", listed.split("A `config.json`")[0])
    assert sorted(n for n in names if n != "config.json") == moe


def test_refused_is_what_the_page_says():
    """A config under a model_type without a reader (here experts under ``phimoe``) is
    refused naming it; the same keys under ``mixtral`` load."""
    config = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
              "max_position_embeddings": 32768, "num_local_experts": 8,
              "num_experts_per_tok": 2}
    assert shape_fields({**config, "model_type": "mixtral"})["num_experts"] == 8
    with pytest.raises(ScenarioError, match="model_type 'phimoe' is not a model capsim prices"):
        shape_fields({**config, "model_type": "phimoe"})
