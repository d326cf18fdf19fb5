"""The fit/test protocol, in data: every measured case is fit or test
(benchmarks/fidelity/fit_test_split.yaml), and every fitted constant of capsim/profiles/data says
what it was fitted to (``fitted_to:``), never a test case."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from capsim.profiles.engines import engine_preset_names, load_engine_preset
from capsim.profiles.hardware import hardware_names, load_hardware

from conftest import REPO, load_fidelity, shared_or_skip

DATA = REPO / "capsim" / "profiles" / "data"


@pytest.fixture(scope="module")
def fidelity():
    """benchmarks/fidelity.py as a module."""
    return load_fidelity("fidelity_protocol")


@pytest.fixture(scope="module")
def case_ids(fidelity) -> list[str]:
    shared_or_skip("reference/measured/cases.yaml", "the measured cases")
    return [c["id"] for c in fidelity.read_cases()]


@pytest.fixture(scope="module")
def split(fidelity, case_ids) -> dict[str, str]:
    return fidelity.read_split(case_ids)


def _sources(path):
    """Every ``sources:`` mapping of a profile file (a quantization file holds one per format)."""
    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("sources"), dict):
                yield node["sources"]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)
    return list(walk(yaml.safe_load(path.read_text())))


def test_every_case_is_fit_or_test_and_at_least_40_percent_are_test(split, case_ids):
    """53 cases: the 27 shared and 26 supplementary ones (the supplementary copies of the two
    SGLang / vLLM 0.6 70B TP 4 H100 cases were dropped for the shared ones; 14 of the 2026 kind
    added on 2026-12-06, all test; issue 33's aggregated-against-disaggregated case, llm-d's
    routing comparison and the Qwen3-235B MoE start-up, test)."""
    assert sorted(split) == sorted(case_ids) and len(case_ids) == len(set(case_ids)) == 53
    test = [c for c, s in split.items() if s == "test"]
    fit = [c for c, s in split.items() if s == "fit"]
    assert (len(fit), len(test)) == (13, 40)
    assert len(test) / len(split) >= 0.40
    assert "load_sglang030_h100_llama31_70b_tp4_sharegpt_rps4_rps8" not in split
    assert split["load_sglang030_4xh100_llama31_70b_sharegpt_rps4_rps8"] == "test"
    assert split["step_vllm_perfbench_latency_bs8_in32_out128_h100"] == "fit"
    assert split["agg_disagg_dynamo_vllm072_8xh100_llama70b_fp8_isl3000_osl150_1node"] == "test"


def test_shipped_fitted_to_names_only_fit_cases(fidelity, split):
    fidelity.check_fitted_to(split)            # raises BadInput on the first bad entry
    named = {item for _, _, items in fidelity.profile_fitted_to() for item in items
             if isinstance(item, str)}
    assert named == {c for c, s in split.items() if s == "fit"}, \
        "a fit case no constant names, or a named case that is not fit"


def test_every_fitted_constant_lists_what_it_was_fitted_to(fidelity, case_ids):
    """A ``sources:`` entry that says fitted / fit / calibrated (not "uncalibrated", "not
    fitted", "to be calibrated"), or that names a measured case before any "held out" /
    "checked against", needs a ``fitted_to:`` entry holding those cases."""
    missing = []
    for path in sorted(DATA.glob("*/*.yaml")):
        doc = yaml.safe_load(path.read_text())
        fitted_to = doc.get("fitted_to") or {}
        for sources in _sources(path):
            for key, text in sources.items():
                fitted, named = fidelity.needs_fitted_to(str(text), case_ids)
                listed = set(map(str, fitted_to.get(key, [])))
                if (fitted or named) and key not in fitted_to:
                    missing.append(f"{path.relative_to(DATA)}: {key}")
                elif named - listed:
                    missing.append(f"{path.relative_to(DATA)}: {key} lacks {named - listed}")
    assert missing == []


def test_a_case_held_out_for_a_constant_is_not_in_its_fitted_to(fidelity, case_ids):
    docs: dict = {}                       # each profile parsed once, not once per constant
    for path, key, items in fidelity.profile_fitted_to():
        if path not in docs:
            docs[path] = yaml.safe_load(path.read_text())
        text = docs[path]["sources"][key]
        parts = fidelity.HELD_OUT.split(text, maxsplit=1)
        held_out = {c for c in case_ids if len(parts) == 2 and c in parts[1]}
        assert not held_out & set(map(str, items)), f"{path.name}: {key}"


def test_the_benchmark_entries_marked_fitted_are_fit_cases(fidelity, split):
    fitted = [case for case, entry in fidelity.ENTRIES.items() if entry.fitted]
    assert fitted == ["load_vllm0191_h100_b200_llama31_8b_gptoss20b_c1_itl_vs_input_len"]
    assert all(split[c] == "fit" for c in fitted)


def test_the_loaders_accept_fitted_to():
    v1 = load_engine_preset("vllm-v1")
    assert v1.fitted_to["host_overhead.per_step_s"] == [
        "step_vllm_perfbench_latency_bs8_in32_out128_a100",
        "step_vllm_perfbench_latency_bs8_in32_out128_h100"]
    h100 = load_hardware("h100-sxm")
    assert h100.fitted_to["efficiency.attention_decode"][0]["external"].startswith("FlashInfer")
    assert all(load_engine_preset(n) for n in engine_preset_names())
    assert all(load_hardware(n) for n in hardware_names())


# -- bad input: one line naming the file and the key, exit 2 ---------------------------------


def _run(fidelity_module_args: list[str], tmp_path, split_text: str | None = None,
         profile: tuple[str, str] | None = None):
    """Run the benchmark's checks in a subprocess with SPLIT_YAML / PROFILE_DATA pointed at
    files in tmp_path (``--case`` of a start-up case keeps the run short)."""
    patch = []
    if split_text is not None:
        (tmp_path / "split.yaml").write_text(split_text)
        patch.append(f"m.SPLIT_YAML = pathlib.Path({str(tmp_path / 'split.yaml')!r})")
    if profile is not None:
        folder = tmp_path / "data" / "engines"
        folder.mkdir(parents=True)
        (folder / profile[0]).write_text(profile[1])
        patch.append(f"m.PROFILE_DATA = pathlib.Path({str(tmp_path / 'data')!r})")
    bench = str(REPO / "benchmarks" / "fidelity.py")
    code = ("import importlib.util, pathlib, sys\n"
            f"spec = importlib.util.spec_from_file_location('fid', {bench!r})\n"
            "m = importlib.util.module_from_spec(spec); sys.modules['fid'] = m\n"
            "spec.loader.exec_module(m)\n" + "\n".join(patch) + "\n"
            f"sys.argv = ['fidelity.py', *{fidelity_module_args!r}]\nm.main()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def _run_here(fidelity, monkeypatch, capsys, args: list[str], tmp_path,
              split_text: str | None = None, profile: tuple[str, str] | None = None):
    """:func:`_run` in this process (the same module-level patches, on the module the tests
    share; 2-3 s of CPU less than a fresh interpreter importing capsim each time):
    (exit code, stdout, stderr)."""
    if split_text is not None:
        (tmp_path / "split.yaml").write_text(split_text)
        monkeypatch.setattr(fidelity, "SPLIT_YAML", tmp_path / "split.yaml")
    if profile is not None:
        folder = tmp_path / "data" / "engines"
        folder.mkdir(parents=True)
        (folder / profile[0]).write_text(profile[1])
        monkeypatch.setattr(fidelity, "PROFILE_DATA", tmp_path / "data")
    monkeypatch.setattr(sys, "argv", ["fidelity.py", *args])
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        fidelity.main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


SPLIT = (REPO / "benchmarks" / "fidelity" / "fit_test_split.yaml").read_text()
ONE_CASE = ["--case", "kv_vllm0190_h100_llama31_8b_tp1_kvfp8"]


def test_a_case_in_both_fit_and_test_is_one_line_and_exit_2(tmp_path, case_ids):
    rtx = "kv_vllm_issue10517_rtx3090_llama31_8b_maxlen_effect"           # a fit case
    both = SPLIT.replace("test:\n", f"test:\n  - {rtx}\n")
    out = _run(ONE_CASE, tmp_path, split_text=both)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert (f"{tmp_path / 'split.yaml'}: test[0]: {rtx} is already listed under fit: a case "
            "is fit or test, not both") in out.stderr


def test_an_unknown_or_missing_case_in_the_split_is_exit_2(tmp_path, case_ids, fidelity,
                                                           monkeypatch, capsys):
    code, _, err = _run_here(fidelity, monkeypatch, capsys, ONE_CASE, tmp_path,
                             split_text=SPLIT.replace("  - kv_vllm_pr2031_a100_llama2_7b_tp1\n",
                                                      "  - kv_no_such_case\n"))
    assert code == 2 and err.count("\n") == 1
    assert "test[3]: kv_no_such_case is not a measured case" in err


def test_fitted_to_an_unknown_case_or_a_test_case_is_exit_2(tmp_path, case_ids, fidelity,
                                                            monkeypatch, capsys):
    preset = (DATA / "engines" / "tgi.yaml").read_text()
    bad = preset.replace("  - load_vllm_nightly_a100_tgi21_llama3_8b_qps4_and_70b_tp4_qps2",
                         "  - load_no_such_case")
    code, _, err = _run_here(fidelity, monkeypatch, capsys, ONE_CASE, tmp_path,
                             profile=("tgi.yaml", bad))
    assert code == 2 and err.count("\n") == 1
    assert "tgi.yaml: fitted_to.host_overhead.per_step_s: load_no_such_case is not a " \
           "measured case" in err
    test_case = preset.replace("  - load_vllm_nightly_a100_tgi21_llama3_8b_qps4_and_70b_tp4_qps2",
                               "  - load_vllm060_a100_llama31_8b_sharegpt_rps4_rps8_multistep10")
    code, _, err = _run_here(fidelity, monkeypatch, capsys, ONE_CASE, tmp_path / "t",
                             profile=("tgi.yaml", test_case))
    assert code == 2
    assert "fitted_to.host_overhead.per_step_s: load_vllm060_a100_llama31_8b_sharegpt_rps4_" \
           "rps8_multistep10 is a test case in fit_test_split.yaml" in err


# -- what the benchmark prints -----------------------------------------------------------------


def test_the_last_line_is_the_median_over_test_rows_only(fidelity):
    """fit rows are printed apart and never reach the line; a family without test rows is
    n/a; KV is the capacity a user sizes with (blocks, tokens, available GiB, concurrency)."""
    def row(quantity, measured, predicted, split, kind="load_latency_throughput"):
        return fidelity.Row("c", kind, quantity, measured, predicted, "p", "h", split=split)

    rows = [row("rps_4 median_ttft_ms", 100.0, 110.0, "test"),
            row("rps_8 median_ttft_ms", 100.0, 70.0, "test"),
            row("rps_8 mean_ttft_ms", 100.0, 95.0, "test"),
            row("rps_4 median_ttft_ms", 100.0, 101.0, "fit"),
            row("median_tpot_ms", 10.0, 10.1, "fit"),
            row("kv_cache_blocks", 1000.0, 1001.0, "test", "kv_capacity"),
            row("weights_gib", 10.0, 20.0, "test", "kv_capacity")]
    assert fidelity.headline(rows) == ("fidelity (test rows): TTFT 10.0 %, TPOT/ITL n/a, "
                                       "E2EL n/a, throughput n/a, KV 0.1 %")
    summary = fidelity.protocol(rows)
    assert summary["test"]["cases"] == summary["fit"]["cases"] == 1
    assert summary["fit"]["all"]["tpot_itl"] == {"n": 1, "median_abs_err_pct": pytest.approx(1.0)}


@pytest.mark.parametrize("fraction, band", [(0.0, "below 50 %"), (0.499, "below 50 %"),
                                            (0.5, "50-80 %"), (0.8, "50-80 %"),
                                            (0.801, "above 80 %"), (1.0, "above 80 %")])
def test_load_bands(fidelity, fraction, band):
    assert fidelity.band_of(fraction) == band


def test_a_supplementary_case_repeating_a_shared_id_is_exit_2(fidelity, case_ids, monkeypatch,
                                                              tmp_path, capsys):
    """Keep one copy: the supplementary set may not repeat a shared case's id."""
    dup = tmp_path / "supplementary_cases.yaml"
    dup.write_text("- {id: load_sglang030_4xh100_llama31_70b_sharegpt_rps4_rps8, "
                   "kind: load_latency_throughput, collected: project}\n")
    monkeypatch.setattr(fidelity, "SUPPLEMENTARY_YAML", dup)
    with pytest.raises(SystemExit) as exit_:
        fidelity.read_cases()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert f"{dup}: [0].id: 'load_sglang030_4xh100_llama31_70b_sharegpt_rps4_rps8' is already " \
           "a case (keep one copy)" in err
