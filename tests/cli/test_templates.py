"""``capsim hardware --template`` and ``capsim models --template``: a commented profile that
loads as written with its base's numbers; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import pytest

from capsim.profiles.hardware import hardware_names, load_hardware
from capsim.profiles.models import load_model, model_names


@pytest.mark.parametrize("base", hardware_names())
def test_a_hardware_template_loads_with_its_base_numbers(tmp_path, run_cli, base):
    out = tmp_path / "my-gpu.yaml"
    code, stdout, err = run_cli(["hardware", "--template", "my-gpu", "--from", base,
                                 "-o", str(out)])
    assert (code, err) == (0, "") and stdout.startswith(f"wrote {out}:")
    text = out.read_text()
    assert text.count("\n# ") >= 10                        # commented for the reader
    got, want = load_hardware(str(out)), load_hardware(base)
    assert (got.name, got.display_name, got.sources, got.fitted_to, got.calibration) == (
        "my-gpu", "my-gpu", {}, {}, None)            # nothing of the user's GPU was fitted
    same = {"name": want.name, "display_name": want.display_name, "sources": want.sources,
            "fitted_to": want.fitted_to, "calibration": want.calibration,
            "derivation": want.derivation, "notes": want.notes,
            # measurements of the base GPU, not carried over: presets that name a table
            # price NCCL's ring on the user's GPU and say so (test_all_reduce_table.py)
            "all_reduce_tables": want.all_reduce_tables}
    assert got.all_reduce_tables == {}
    assert got.model_copy(update=same) == want             # every number exactly the base's
    assert got.derivation.from_profile == base and got.derivation.status == \
        "derived, uncalibrated"


def test_the_template_prints_by_default_and_starts_from_the_h100(run_cli):
    code, out, err = run_cli(["hardware", "--template", "my-gpu"])
    assert (code, err) == (0, "")
    assert out.startswith("# GPU profile my-gpu: a template from `capsim hardware --template "
                          "my-gpu --from h100-sxm`")
    assert "\nhbm_bandwidth_bytes_per_s: 3.35e12 " in out and "\n  bf16: 989.4e12\n" in out


def test_a_template_without_sources_warns_once_when_a_scenario_uses_it(tmp_path, run_cli,
                                                                        write_scenario):
    run_cli(["hardware", "--template", "g", "-o", str(tmp_path / "g.yaml")])
    doc = {"name": "t", "model": "llama-3.1-8b", "hardware": "g.yaml",
           "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1},
                        "classes": [{"name": "a", "weight": 1,
                                     "prompt_tokens": {"dist": "fixed", "value": 16},
                                     "output_tokens": {"dist": "fixed", "value": 4}}]}}
    code, out, err = run_cli(["validate", str(write_scenario(tmp_path, doc))])
    assert code == 0 and "1 × g TP1" in out
    assert err.count("\n") == 1 and err.startswith(
        f"warning: {tmp_path / 'g.yaml'}: sources has no entry for peak_flops_per_s, hbm_bytes")


DENSE = [n for n in model_names()
         if not (m := load_model(n)).is_moe and not m.is_mla and not m.sliding_window_layers
         and not m.chunked_attention_layers]


def test_the_model_template_refuses_a_moe_base(run_cli):
    code, out, err = run_cli(["models", "--template", "mine", "--from", "deepseek-v3"])
    assert code == 2 and not out and err.startswith(
        "error: --from deepseek-v3: the model template is for dense models;")


@pytest.mark.parametrize("base", DENSE)
def test_a_model_template_loads_as_its_base(tmp_path, run_cli, base):
    out = tmp_path / "m.yaml"
    code, _, err = run_cli(["models", "--template", "my-model", "--from", base, "-o", str(out)])
    assert (code, err) == (0, "")
    got, want = load_model(str(out)), load_model(base)
    assert got.model_copy(update={"name": want.name, "source": want.source,
                                  "notes": want.notes}) == want


@pytest.mark.parametrize("args, expected", [
    (["hardware", "--template", "h100-sxm"], "--template 'h100-sxm' is the name of a shipped "
                                             "GPU profile; choose another"),
    (["hardware", "--template", "my gpu"], "--template 'my gpu': a name is 1-64 letters, "
                                           "digits, '.', '_' or '-'"),
    (["hardware", "--template", "g", "--from", "tpu-v5e"], "--from: unknown hardware 'tpu-v5e'; "
                                                           "valid: a100-40gb, a100-80gb, a10g, "
                                                           "b200, h100-pcie, h100-sxm"),
    (["hardware", "--from", "l40s"], "--from and -o go with --template NAME"),
    (["hardware", "-o", "x.yaml"], "--from and -o go with --template NAME"),
    (["hardware", "--template", "g", "-o", "{tmp}/absent/g.yaml"],
     "-o {tmp}/absent/g.yaml: cannot write: No such file or directory"),
    (["models", "--template", "llama-3.1-8b"], "--template 'llama-3.1-8b' is the name of a "
                                               "shipped model"),
    (["models", "--template", "m", "--from", "gpt-5"], "--from: unknown model 'gpt-5'"),
])
def test_bad_template_input_is_one_line_exit_2(tmp_path, monkeypatch, run_cli, args, expected):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli([a.format(tmp=tmp_path) for a in args])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {expected.format(tmp=tmp_path)}")
    assert list(tmp_path.iterdir()) == []                  # nothing written


def test_an_existing_file_is_never_overwritten(tmp_path, run_cli):
    out = tmp_path / "g.yaml"
    out.write_text("mine\n")
    code, _, err = run_cli(["hardware", "--template", "g", "-o", str(out)])
    assert code == 2 and err == f"error: -o {out}: the file exists; name a new file\n"
    assert out.read_text() == "mine\n"
