"""docs/own-gpu.md ("Your own GPU / model"), run as written: the template command, the
fields the reader replaces, the scenario, ``capsim validate`` and ``capsim run`` (issue 16,
item 6)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd
import yaml

from capsim.common.yamlio import load_yaml
from capsim.profiles.hardware import load_hardware

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-gpu.md"


def _section() -> str:
    text = PAGE.read_text()
    assert text.startswith("# Your own GPU / model\n")
    return text


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", _section(), flags=re.S)


def test_the_worked_example_validates_and_runs(tmp_path, monkeypatch, run_cli):
    monkeypatch.chdir(tmp_path)
    template_cmd, run_cmds = _blocks("bash")
    edits, scenario = _blocks("yaml")
    assert edits.startswith("# gpus/my-mi300x.yaml") and scenario.startswith("# chat_mi300x.yaml")

    # mkdir -p gpus && capsim hardware --template my-mi300x -o gpus/my-mi300x.yaml
    mkdir, capsim = (shlex.split(part) for part in template_cmd.strip().split(" && "))
    assert mkdir == ["mkdir", "-p", "gpus"] and capsim[0] == "capsim"
    (tmp_path / "gpus").mkdir()
    code, out, err = run_cli(capsim[1:])
    assert (code, err) == (0, "") and out.startswith("wrote gpus/my-mi300x.yaml")

    # The reader replaces the listed fields by hand; here: the same fields, set in the file.
    gpu = tmp_path / "gpus" / "my-mi300x.yaml"
    profile = {**load_yaml(gpu.read_text()), **load_yaml(edits)}
    gpu.write_text("\n".join(f"{k}: {_flow(v)}" for k, v in profile.items()) + "\n")
    hw = load_hardware(str(gpu))
    assert (hw.peak_flops_per_s["bf16"], hw.peak_flops_per_s["fp8"]) == (1307.4e12, 2614.9e12)
    assert hw.hbm_bytes == 192 * 2**30 and hw.memory_total_gib is None
    assert hw.hbm_bandwidth_bytes_per_s == 5.3e12 and hw.missing_sources() == []
    assert hw.efficiency == load_hardware("h100-sxm").efficiency
    assert hw.derivation.from_profile == "h100-sxm"

    (tmp_path / "chat_mi300x.yaml").write_text(scenario)
    validate, run = (shlex.split(part) for part in run_cmds.strip().split(" && "))
    code, out, err = run_cli(validate[1:])
    assert (code, err) == (0, ""), err
    # The figures the page quotes, from validate's vLLM-style start-up lines.
    mi300x, h100 = out.split("  h100-tp4: ")
    page = " ".join(_section().split())
    for line, quoted in (("Model loading took 131.45 GiB", "131.45 GiB of bf16 weights"),
                         ("Available KV cache memory: 39.06 GiB", "39.06 GiB left"),
                         ("GPU KV cache size: 127,968 tokens", "127,968 tokens"),
                         ("Maximum concurrency for 16,384 tokens per request: 7.81x",
                          "7.81 requests of 16,384 tokens")):
        assert line in mi300x and quoted in page
    assert "GPU KV cache size: 450,240 tokens" in h100 and "TP 4 (450,240 tokens)" in page

    code, out, err = run_cli([*run[1:], "-o", str(tmp_path / "report")])
    assert code == 0, err
    summary = pd.read_csv(tmp_path / "report" / "summary.csv")
    rows = summary[summary.cls == "all"].set_index("variant")
    assert list(rows.index) == ["mi300x-tp1", "h100-tp4"]
    assert (rows.num_finished == 200).all()
    assert rows.loc["mi300x-tp1", "num_gpus"] == 1 and rows.loc["h100-tp4", "num_gpus"] == 4


def _flow(value) -> str:
    """``value`` as one line of YAML (flow style)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix(
        "...").strip()
