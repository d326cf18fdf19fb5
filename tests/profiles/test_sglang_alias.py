"""The ``sglang`` preset is another name for the newest SGLang preset, ``sglang-0.5.10`` (SGLang
0.5.12); before that it named ``sglang-0.5`` (0.5.7), and before that held its own values (a
fixed mem_fraction_static 0.88 under a 0.5.23 version claim) that matched no SGLang release."""

from __future__ import annotations

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.engines import load_engine_preset
from capsim.scenario.load import load


def test_sglang_loads_sglang_0510_itself():
    alias, target = load_engine_preset("sglang"), load_engine_preset("sglang-0.5.10")
    assert alias == target
    assert alias.label == "sglang-0.5.10 (SGLang 0.5.12)"
    assert alias.piecewise_cuda_graph is not None          # 0.5.10's graphed prefill
    assert alias.memory.static_fraction is not None        # 0.5's rule, not a fixed 0.88
    assert "mem_fraction_static" not in alias.defaults


def test_engines_lists_the_alias_with_its_target(run_cli):
    code, out, _ = run_cli(["engines"])
    rows = [" ".join(line.split()) for line in out.splitlines()
            if line.startswith("│ sglang ")]
    assert code == 0 and len(rows) == 1
    assert rows[0].startswith("│ sglang (= sglang-0.5.10) │ SGLang │ 0.5.12 │")


def test_a_scenario_under_sglang_gets_0510s_fraction(tmp_path):
    """H200 TP 8 at chunk 8,192: 0.5's reserve gives 0.896 (tests/scenario/test_sglang_05.py);
    0.5.10's adds 8 MiB for each of the piecewise graph's captured sizes of a non-MLA model
    (the sglang-0.5.10 preset's memory.static_fraction source), 0.893; the old preset gave
    0.88."""
    doc = {"name": "s", "model": "llama-3.1-70b", "hardware": "h200-sxm",
           "engine": {"preset": "sglang", "tensor_parallel_size": 8},
           "workload": {"num_requests": 1, "arrival": {"process": "constant", "rate_per_s": 1.0},
                        "classes": [{"name": "a", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 10},
                                     "output_tokens": {"dist": "fixed", "value": 2}}]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load(path).runs[0].pool().engine.mem_fraction_static == 0.893


def test_a_users_alias_file_loads_its_target(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nalias_of: sglang-0.4\n")
    assert load_engine_preset(path) == load_engine_preset("sglang-0.4")


@pytest.mark.parametrize("target", ["sglang", "nosuch"])
def test_an_alias_of_an_alias_or_of_nothing_is_refused(tmp_path, target):
    """One line naming the file, alias_of, what it got and the valid names."""
    path = tmp_path / "mine.yaml"
    path.write_text(f"name: mine\nalias_of: {target}\n")
    with pytest.raises(ScenarioError) as err:
        load_engine_preset(path)
    assert err.value.path == "alias_of" and err.value.file == str(path)
    assert f"got '{target}' (valid: sglang-0.3, sglang-0.4, sglang-0.5, sglang-0.5.10, tgi" in err.value.message


def test_an_alias_with_values_is_refused(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nalias_of: sglang-0.5\nversion: 0.5.9\n")
    with pytest.raises(ScenarioError, match="version: unknown key 'version'"):
        load_engine_preset(path)
