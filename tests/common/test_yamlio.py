"""The one YAML reader: exponent-notation numbers (YAML 1.2 core schema) on profiles, scenarios
and ``--set`` values; repeated keys and out-of-range numbers refused in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.common.yamlio import load_yaml
from capsim.profiles.hardware import load_hardware
from capsim.scenario.load import load

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text, value", [
    ("192e9", 192_000_000_000),        # YAML 1.1 (pyyaml's safe_load): the string '192e9'
    ("1e3", 1000),
    ("-2e3", -2000),
    ("1e-3", 0.001),                   # 1.1: a string (no dot)
    ("3.35E12", 3.35e12),              # 1.1: a string (unsigned exponent)
    ("1.0e9", 1e9),
    ("1.5e+3", 1500.0),                # 1.1 reads this one already: the same value
    (".5e1", 5.0),
    ("1e19", 1e19),                    # beyond int64: a magnitude, a float
    ("12", 12), ("1.5", 1.5), (".inf", float("inf")),
    ("'1e3'", "1e3"), ("e5", "e5"), ("1e", "1e"), ("v1e3", "v1e3"),
])
def test_numbers_as_people_write_them(text, value):
    got = load_yaml(text)
    assert got == value and type(got) is type(value)


def test_integer_exponent_form_is_an_int_other_forms_are_floats():
    assert load_yaml("[192e9, 192.0e9, 1e0]") == [192_000_000_000, 192e9, 1]
    assert [type(v) for v in load_yaml("[192e9, 192.0e9, 1e0]")] == [int, float, int]


@pytest.mark.parametrize("text", ["1e400", "2e308", "-1.0e+999"])
def test_a_number_beyond_float_range_is_refused_not_read_as_infinity(text):
    with pytest.raises(yaml.YAMLError, match=rf"number {re.escape(text)} is out of range"):
        load_yaml(f"rate_per_s: {text}")


def test_repeated_keys_are_refused():
    with pytest.raises(yaml.YAMLError, match="duplicate key 'a'"):
        load_yaml("a: 1\nb: 2\na: 3\n")


def test_a_profile_written_with_exponents_loads_as_the_shipped_one(tmp_path):
    """h100-sxm.yaml with its numbers in the forms YAML 1.1 reads as strings."""
    text = (REPO / "hardware" / "h100-sxm.yaml").read_text()
    for old, new in (("989400000000000.0", "989.4E12"), ("1978900000000000.0", "1.9789e15"),
                     ("hbm_bytes: 85899345920", "hbm_bytes: 85899345920e0"),
                     ("3350000000000.0", "3.35E12"), ("450000000000.0", "450e9"),
                     ("64000000000.0", "64e9"), ("4.28e-06", "4.28e-6"),
                     ("pcie_latency_s: 1.0e-05", "pcie_latency_s: 1e-5"),
                     ("step_overhead_s: 0.0003", "step_overhead_s: 3e-4")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "h100-exp.yaml"
    path.write_text(text)
    assert load_hardware(str(path)) == load_hardware("h100-sxm")


def _scenario(tmp_path: Path, rate: str, gmu: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"""
name: exp
model: llama-3.1-8b
hardware: h100-sxm
engine: {{max_model_len: 4e3, gpu_memory_utilization: {gmu}, max_num_batched_tokens: 2048e0}}
workload:
  num_requests: 1e1
  arrival: {{process: poisson, rate_per_s: {rate}}}
  classes: [{{name: a, weight: 1e0, prompt_tokens: {{dist: fixed, value: 1e2}},
             output_tokens: {{dist: fixed, value: 1e1}}}}]
""")
    return path


def test_a_scenario_written_with_exponents(tmp_path):
    loaded = load(_scenario(tmp_path, "5e0", "9e-1"))
    eng = loaded.runs[0].pool().engine
    assert (eng.max_model_len, eng.gpu_memory_utilization, eng.max_num_batched_tokens) \
        == (4000, 0.9, 2048)
    assert loaded.spec.workload.num_requests == 10
    assert loaded.spec.workload.arrival.rate_per_s == 5.0


def test_set_values_are_read_by_the_same_loader(tmp_path):
    loaded = load(_scenario(tmp_path, "5e0", "9e-1"),
                  ["workload.arrival.rate_per_s=2.5E1", "engine.gpu_memory_utilization=8e-1",
                   "engine.max_num_seqs=64e0"])
    assert loaded.spec.workload.arrival.rate_per_s == 25.0
    assert loaded.runs[0].pool().engine.gpu_memory_utilization == 0.8
    assert loaded.runs[0].pool().engine.max_num_seqs == 64


def test_a_float_is_still_not_an_integer(tmp_path):
    """Only the dotless form names an integer: ``6.4e1`` is the float 64.0, which an integer
    field refuses as it refuses ``64.0`` (capsim.common.schema.Int)."""
    with pytest.raises(ScenarioError, match=r"engine.max_num_seqs: expected an integer "
                                        r"\(got 64.0; an integer is written without a decimal "
                                        r"point: 64\)$"):
        load(_scenario(tmp_path, "5", "0.9"), ["engine.max_num_seqs=6.4e1"])


def test_out_of_range_numbers_are_one_line_exit_2(tmp_path, run_cli):
    path = _scenario(tmp_path, "1e400", "0.9")
    code, out, err = run_cli(["validate", str(path)])
    assert code == 2 and out == ""
    assert err == (f"error: {path}: invalid YAML at line 8, column 43: number 1e400 is out of "
                   "range (write .inf for infinity)\n")
    code, _, err = run_cli(["validate", str(_scenario(tmp_path, "5", "0.9")),
                            "--set", "workload.arrival.rate_per_s=1e999"])
    assert code == 2 and err.count("\n") == 1 and "number 1e999 is out of range" in err


def test_every_yaml_read_goes_through_load_yaml():
    """One YAML reader: no other module of capsim (or the benchmarks) parses YAML itself."""
    offenders = [str(p.relative_to(REPO)) for p in [*(REPO / "capsim").rglob("*.py"),
                                                     *(REPO / "benchmarks").rglob("*.py")]
                 if p.name != "yamlio.py"
                 and re.search(r"yaml\.(safe_load|load|full_load|unsafe_load)\b", p.read_text())]
    assert offenders == []


def _laughs(levels: int) -> str:
    """A "billion laughs" value: ``levels`` nested anchors of nine aliases each."""
    text = '&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
    for k in range(1, levels):
        text = f"&a{k} [{text}" + f",*a{k - 1}" * 8 + "]"
    return text


def test_an_alias_bomb_is_refused_at_its_key_before_anything_walks_it():
    # Issue 31: nine levels in description: stand for 435 million values; every reader of
    # the document (validation, the error's echo of the value) walked them for minutes.
    with pytest.raises(yaml.YAMLError) as exc:
        load_yaml(f"name: x\ndescription: {_laughs(9)}\n")
    assert str(exc.value.problem).startswith(
        "description: aliases expand this to 435,848,050 values, 435,848,032 more than "
        "written (at most 100,000 may come from aliases)")
    assert (exc.value.problem_mark.line, exc.value.problem_mark.column) == (1, 13)


def test_aliases_within_the_budget_load_shared_and_merged():
    # Five levels: 9**5 + ... = 66,430 values from 18 written, under the 100,000 budget.
    doc = load_yaml(f"a: {_laughs(5)}\nbase: &b {{x: 1}}\nv: [{{<<: *b, y: 2}}, *b]\n")
    assert len(doc["a"]) == 9 and doc["a"][0][0][0][0][0] == "lol"
    assert doc["v"] == [{"x": 1, "y": 2}, {"x": 1}]
    with pytest.raises(yaml.YAMLError, match="a: aliases expand this to 597,871 values"):
        load_yaml(f"a: {_laughs(6)}\n")


def test_a_recursive_alias_is_refused():
    with pytest.raises(yaml.YAMLError, match="a recursive alias"):
        load_yaml("a: &x [1, *x]\n")


def test_an_alias_bomb_in_a_scenario_is_one_line_in_seconds(tmp_path, run_cli):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: x\nmodel: llama-3.1-8b\ndescription: {_laughs(9)}\n")
    code, out, err = run_cli(["validate", str(path)])
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path}: invalid YAML at line 3, column 14: description: "
                          "aliases expand this to 435,848,050 values")
    assert err.count("\n") == 1
