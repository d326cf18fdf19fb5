"""An error in a file a command-line option names reads in one form, ``error: --OPTION FILE:
YAML.PATH: message`` (the path left out when the error is about the file itself): bad YAML
and a bad field of ``roofline --preset`` printed different prefixes before (issue 31's
new-user polish)."""

from __future__ import annotations

import pytest
import yaml

ARGS = ["roofline", "--model", "llama-3.1-8b", "--hardware", "b200", "--decode-batch", "1",
        "--context", "100"]


def _preset(tmp_path, text: str):
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    return path


def _sglang_with(edit) -> str:
    with open("capsim/profiles/data/engines/sglang-0.5.yaml") as f:
        doc = yaml.safe_load(f)
    edit(doc)
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize("text, rest", [
    ("name: x\n  bad: [\n", "invalid YAML at line 2, column 6"),
    (_sglang_with(lambda d: d["all_reduce_fusion"].update(max_tokens=-5)),
     "all_reduce_fusion.max_tokens: must be > 0 (got -5)"),
    (_sglang_with(lambda d: d["untuned_fp8_gemm"].update(matmuls=["qkv"])),
     "untuned_fp8_gemm.matmuls: unknown layer matmul(s) qkv; valid: qkv_proj"),
    # an alias of an alias
    ("name: x\nalias_of: sglang\n", "alias_of: alias_of names a packaged preset that is not "
                                    "itself an alias; got 'sglang'"),
])
def test_roofline_preset_errors_share_one_form(tmp_path, run_cli, text, rest):
    path = _preset(tmp_path, text)
    code, out, err = run_cli([*ARGS, "--preset", str(path)])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: --preset {path}: {rest}"), err


def test_a_missing_preset_file_and_an_unknown_name(tmp_path, run_cli):
    code, _, err = run_cli([*ARGS, "--preset", str(tmp_path / "none.yaml")])
    assert code == 2 and err.startswith(f"error: --preset {tmp_path / 'none.yaml'}: cannot read"), err
    code, _, err = run_cli([*ARGS, "--preset", "vllm-9"])
    assert code == 2 and err.startswith("error: --preset: unknown engine preset 'vllm-9'; "
                                        "valid: sglang"), err
