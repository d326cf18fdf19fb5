"""Every path in a scenario is relative to the scenario file (model, hardware, engine preset,
link, trace), whatever the working directory; shipped names stay names; a missing file's error
names the directory searched (issue 16, item 6)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from capsim.common.errors import ScenarioError
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from capsim.scenario.load import load

DATA = Path(__file__).resolve().parents[2] / "capsim" / "profiles" / "data"

WORKLOAD = {"num_requests": 4, "arrival": {"process": "poisson", "rate_per_s": 2},
            "classes": [{"name": "a", "weight": 1,
                         "prompt_tokens": {"dist": "fixed", "value": 64},
                         "output_tokens": {"dist": "fixed", "value": 8}}]}


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """``project/scenarios/s.yaml`` next to ``gpus/``, ``models/``, ``presets/``, ``links/``
    and ``traces/`` under ``project/scenarios``; the working directory is elsewhere."""
    root = tmp_path / "project" / "scenarios"
    for sub, src in (("gpus/my-h100.yaml", "hardware/h100-sxm.yaml"),
                     ("presets/my-vllm.yaml", "engines/vllm-v1.yaml"),
                     ("links/my-ib.yaml", "links/infiniband-ndr.yaml")):
        (root / sub).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / src, root / sub)
    shape = yaml.safe_load((DATA / "models/llama-3.1-8b.yaml").read_text())
    (root / "models/llama8b").mkdir(parents=True)
    (root / "models/llama8b/config.json").write_text(json.dumps(
        {"model_type": "llama", **{k: v for k, v in shape.items() if k not in ("name", "source")}}))
    (root / "traces").mkdir()
    (root / "traces/t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                       "2023-11-16 18:15:46.6805900,64,8\n"
                                       "2023-11-16 18:15:47.6805900,64,8\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return root


def _write(root: Path, **fields) -> Path:
    doc = {"name": "paths", "model": "models/llama8b", "hardware": "gpus/my-h100.yaml",
           "engine": {"preset": "presets/my-vllm.yaml", "max_model_len": 4096},
           "workload": WORKLOAD, **fields}
    path = root / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_every_path_is_relative_to_the_scenario_file(project):
    split = {"prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1,
                                                         "hardware": "gpus/my-h100.yaml"},
             "link": {"name": "links/my-ib.yaml", "latency_s": 1e-4}}
    path = _write(project, workload={"trace": {"path": "traces/t.csv", "format": "azure"}},
                  variants=[{"name": "one"}, {"name": "split", "disaggregation": split}])
    loaded = load(path)
    one, split_run = loaded.runs
    assert one.model.hidden_size == 4096 and one.model.name == "llama8b"
    assert one.pool().hardware == load_hardware("h100-sxm")
    assert one.pool().preset.name == "vllm-v1"
    assert split_run.transfer.link.bandwidth_bytes_per_s == 50e9      # infiniband-ndr's 400 Gb/s
    assert split_run.transfer.link.latency_s == 1e-4
    from capsim.workload import build
    assert len(build(loaded.spec.workload, 0, loaded.base_dir)) == 2


def test_a_relative_scenario_path_works_from_any_working_directory(project, monkeypatch):
    path = _write(project)
    monkeypatch.chdir(project.parent.parent)
    assert load(Path("project/scenarios/s.yaml")).runs[0].model.name == "llama8b"
    monkeypatch.chdir(project / "gpus")
    assert load(Path("../s.yaml")).runs[0].pool().preset.name == "vllm-v1"


def test_shipped_names_are_names_even_next_to_a_file_of_that_name(project):
    """``hardware: h100-sxm`` is the shipped profile, not a file ``h100-sxm`` beside the
    scenario; a name that is no shipped one but a file there is that file."""
    (project / "h100-sxm").write_text("not: a profile\n")
    shutil.copy(project / "gpus/my-h100.yaml", project / "mygpu")
    loaded = load(_write(project, hardware="h100-sxm", model="llama-3.1-8b",
                         variants=[{"name": "a"}, {"name": "b", "hardware": "mygpu"}]))
    assert [r.pool().hardware for r in loaded.runs] == [load_hardware("h100-sxm")] * 2
    assert loaded.runs[0].model == load_model("llama-3.1-8b")


@pytest.mark.parametrize("field, value, message", [
    ("hardware", "gpus/absent.yaml", "hardware: file not found: gpus/absent.yaml (searched {d}: "
                                     "paths in a scenario are relative to the scenario's "
                                     "directory)"),
    ("hardware", "my-gpu", "hardware: unknown hardware 'my-gpu'; valid: a100-40gb, a100-80gb, "
                           "a10g, b200, h100-pcie, h100-sxm, h20, h200-sxm, l4, l40s, mi300x, "
                           "mi325x, rtx-4090 (or a path to a GPU profile YAML, relative to the "
                           "scenario's directory {d})"),
    ("model", "models/absent/config.json", "model: file not found: models/absent/config.json "
                                           "(searched {d}: "),
    ("model", "llama-9b", "model: unknown model 'llama-9b'; valid: deepseek-v3, "),
    ("engine", {"preset": "presets/absent.yaml"}, "engine.preset: file not found: "
                                                  "presets/absent.yaml (searched {d}: "),
    ("variants", [{"name": "d", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1},
        "link": "links/absent.yaml"}}],
     "variants.0.disaggregation.link: file not found: links/absent.yaml (searched {d}: "),
    ("variants", [{"name": "d", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1}, "link": "ib-xdr"}}],
     "variants.0.disaggregation.link: unknown link 'ib-xdr'; valid: infiniband-hdr, "),
    ("hardware", "", "hardware: empty; valid: a100-40gb, a100-80gb, a10g, b200, h100-pcie, "
                     "h100-sxm, h20, h200-sxm, l4, l40s, mi300x, mi325x, rtx-4090, or a path "
                     "to a GPU profile YAML\n"),
    ("hardware", "gpus", "hardware: gpus is a directory; name a GPU profile YAML in it\n"),
    ("hardware", "h100-sxm.yaml", "hardware: file not found: h100-sxm.yaml (searched {d}: paths "
                                  "in a scenario are relative to the scenario's directory); the "
                                  "shipped hardware is named h100-sxm, without a path or "
                                  "suffix\n"),
    ("model", "", "model: empty; valid: deepseek-v3, "),
    ("engine", {"preset": ""}, "engine.preset: empty; valid: sglang, sglang-0.3, "),
    ("workload", {"trace": {"path": "traces/absent.csv"}},
     "workload.trace.path: trace file not found: {d}/traces/absent.csv (paths in a scenario are "
     "relative to the scenario's directory, {d})\n"),
])
def test_a_missing_file_names_the_directory_searched(project, run_cli, field, value, message):
    path = _write(project, **{field: value})
    code, out, err = run_cli(["validate", str(path)])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {path}: {message.format(d=project)}")


def test_a_name_without_its_suffix_suggests_the_file_beside_the_scenario(project, run_cli):
    shutil.copy(project / "presets/my-vllm.yaml", project / "mine.yaml")
    path = _write(project, engine={"preset": "mine", "max_model_len": 4096})
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.startswith(
        f"error: {path}: engine.preset: unknown engine preset 'mine' (did you mean the file "
        "'mine.yaml' beside it?); valid: ")


def test_an_empty_profile_file_says_it_is_empty(project, run_cli):
    (project / "presets/empty.yaml").write_text("# nothing yet\n")
    path = _write(project, engine={"preset": "presets/empty.yaml", "max_model_len": 4096})
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.startswith(
        f"error: {project / 'presets/empty.yaml'}: the file is empty; expected a YAML mapping")


def test_an_absolute_path_is_taken_as_written(project, tmp_path):
    gpu = tmp_path / "abs-gpu.yaml"
    shutil.copy(project / "gpus/my-h100.yaml", gpu)
    assert load(_write(project, hardware=str(gpu))).runs[0].pool().hardware.name == "h100-sxm"
    with pytest.raises(ScenarioError, match=rf"hardware: file not found: {tmp_path}/none.yaml$"):
        load(_write(project, hardware=str(tmp_path / "none.yaml")))


def test_the_resolved_scenario_names_files_absolute_and_loads_from_anywhere(project, tmp_path):
    """scenario.resolved.yaml lands in the report directory: its paths are written absolute
    (shipped names as they are), so it re-runs from there as the original."""
    from capsim.common.yamlio import load_yaml
    from capsim.scenario.load import dump_resolved

    split = {"prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1, "hardware": "h100-sxm"},
             "link": {"name": "links/my-ib.yaml", "latency_s": 1e-4}}
    path = _write(project, workload={"trace": {"path": "traces/t.csv", "format": "azure"}},
                  variants=[{"name": "one", "hardware": "gpus/my-h100.yaml"},
                            {"name": "split", "disaggregation": split}],
                  sweep={"variants.0.hardware": ["gpus/my-h100.yaml", "h100-sxm"]})
    text = dump_resolved(load(path), "test", 3)
    doc = load_yaml(text)
    assert doc["model"] == str(project / "models/llama8b")
    assert doc["hardware"] == str(project / "gpus/my-h100.yaml")
    assert doc["engine"]["preset"] == str(project / "presets/my-vllm.yaml")
    assert doc["workload"]["trace"]["path"] == str(project / "traces/t.csv")
    assert doc["variants"][1]["disaggregation"]["decode"]["hardware"] == "h100-sxm"
    assert doc["variants"][1]["disaggregation"]["link"]["name"] == str(project / "links/my-ib.yaml")
    assert doc["sweep"]["variants.0.hardware"] == [str(project / "gpus/my-h100.yaml"), "h100-sxm"]
    report = tmp_path / "report"
    report.mkdir()
    (report / "scenario.resolved.yaml").write_text(text)
    again = load(report / "scenario.resolved.yaml")
    assert [r.pool("colocated" if i == 0 else "decode").hardware.name
            for i, r in enumerate(again.runs)] == ["h100-sxm", "h100-sxm"]
    assert again.spec.seed == 3


@pytest.mark.parametrize("line, message", [
    ("hbm_bandwidth_bytes_per_s: 5.3 TB/s",
     "hbm_bandwidth_bytes_per_s: expected a number in bytes per second (got '5.3 TB/s') "
     "(hardware of {s})"),
    ("hbm_bytes: 1.92E11",
     "hbm_bytes: expected an integer of bytes (got 192000000000.0; an integer is written "
     "without a decimal point: 192000000000 or 192e9) (hardware of {s})"),
])
def test_a_bad_field_in_a_user_profile_names_that_file_and_field(project, run_cli, line,
                                                                 message):
    gpu = project / "gpus/my-h100.yaml"
    key = line.split(":")[0]
    gpu.write_text("\n".join(line if t.startswith(f"{key}:") else t
                             for t in gpu.read_text().splitlines()) + "\n")
    path = _write(project)
    code, out, err = run_cli(["validate", str(path)])
    assert (code, out) == (2, "")
    assert err == f"error: {gpu}: {message.format(s=path)}\n"


def test_a_bad_field_in_a_user_link_names_that_file_and_field(project, run_cli):
    link = project / "links/my-ib.yaml"
    link.write_text(link.read_text().replace("\nlatency_s: 3.0e-5", "\nlatency_s: -1e-6"))
    path = _write(project, variants=[{"name": "d", "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1},
        "link": "links/my-ib.yaml"}}])
    code, _, err = run_cli(["validate", str(path)])
    assert code == 2 and err.count("\n") == 1
    assert err == (f"error: {link}: latency_s: must be >= 0 "
                   f"(got -1e-06) (variants.0.disaggregation.link of {path})\n")
