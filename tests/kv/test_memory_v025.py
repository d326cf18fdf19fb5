"""Start-up memory of December-2023 vLLM (preset vllm-0.2.5: PR 2031's profiler, before PR 2151).

The measured figures are vllm-project/vllm PR 2031's "# GPU blocks" (WoosukKwon, 2023-12-12),
quoted in ../shared/reference/measured/cases.yaml as kv_vllm_pr2031_a100_llama2_7b_tp1 and
kv_vllm_pr2031_a100_llama2_70b_tp4, both `test` cases (nothing was fitted to them). capsim's
figures come from the benchmark's own entries for them (benchmarks/fidelity/), so they are
what the fidelity benchmark scores.
"""

from __future__ import annotations

import re

import pytest
import yaml

from capsim.kv.memory import held_all_reduce_bytes
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.models import load_model
from capsim.scenario.load import load

from conftest import REPO, shared_or_skip

GIB = 2**30
ENTRIES = REPO / "benchmarks" / "fidelity"


def _blocks(case_id: str) -> dict[str, int]:
    """Blocks per GPU of each variant of the benchmark's entry for ``case_id``."""
    loaded = load(ENTRIES / f"{case_id}.yaml")
    return {run.variant: run.pool().kv.num_gpu_blocks for run in loaded.runs}


def _measured(case_id: str) -> dict[str, int]:
    """The case's "# GPU blocks: N" lines: {"main_dec2023": ..., "pr2031": ...}."""
    cases = yaml.safe_load(shared_or_skip("reference/measured/cases.yaml",
                                          "the measured cases").read_text())
    case = next(c for c in cases if c["id"] == case_id)
    lines = case["measured"]
    return {"main_dec2023": int(re.search(r"\d+", lines["gpu_blocks_current_main"])[0]),
            "pr2031": int(re.search(r"\d+", lines["gpu_blocks_with_pr2031"])[0])}


def test_held_all_reduce_outputs_are_one_forwards_all_reduces():
    """Llama-2-70B at TP 4, T = 4096: 80 layers × 2 (o_proj, down_proj) + the embedding's =
    161 all-reduces of [4096, 8192] fp16 = 10.06 GiB per GPU. Nothing at TP 1, nothing for a
    version that avoids record_stream (vllm-0.6), and 2 × layers on a stage without the
    embedding."""
    model = load_model("llama-2-70b")
    v025, v06 = load_engine_preset("vllm-0.2.5").memory, load_engine_preset("vllm-0.6").memory
    held = held_all_reduce_bytes(model, v025, 4, 4096)
    assert held == 161 * 4096 * 8192 * 2 == 10_804_527_104
    assert held / GIB == pytest.approx(10.06, abs=0.005)
    assert held_all_reduce_bytes(model, v025, 1, 4096) == 0
    assert held_all_reduce_bytes(model, v06, 4, 4096) == 0
    assert held_all_reduce_bytes(model, v025, 2, 2048, embedding=False) == 160 * 2048 * 8192 * 2


def test_pr2031_70b_tp4_blocks():
    """kv_vllm_pr2031_a100_llama2_70b_tp4 (measured 31,615 blocks before the PR, 20,865 with
    it): capsim 31,752 (+0.4 %) and 20,615 (-1.2 %). The 10,750 blocks the PR removed are
    13.1 GiB per GPU; capsim charges 13.60 GiB: the 10.06 GiB of held all-reduce outputs, the
    A100's CUDA context (0.46) and two NCCL communicators (3.07, vLLM 0.19's figure)."""
    blocks = _blocks("kv_vllm_pr2031_a100_llama2_70b_tp4")
    assert blocks == {"main_dec2023": 31_752, "pr2031": 20_615}
    loaded = load(ENTRIES / "kv_vllm_pr2031_a100_llama2_70b_tp4.yaml")
    terms = {run.variant: run.pool().kv.memory for run in loaded.runs}
    assert terms["pr2031"].non_torch_bytes / GIB == pytest.approx(13.60, abs=0.005)
    assert terms["main_dec2023"].non_torch_bytes == 0


def test_pr2031_7b_tp1_blocks():
    """kv_vllm_pr2031_a100_llama2_7b_tp1 (measured 7,449 before, 7,351 with the PR): capsim
    7,467 (+0.2 %) and 7,407 (+0.8 %): at TP 1 the PR adds only the CUDA context."""
    assert _blocks("kv_vllm_pr2031_a100_llama2_7b_tp1") == {"main_dec2023": 7_467,
                                                             "pr2031": 7_407}


@pytest.mark.parametrize("case_id, rel", [
    ("kv_vllm_pr2031_a100_llama2_70b_tp4", 0.015),   # was +44.1 % (0.19's NCCL figure only)
    ("kv_vllm_pr2031_a100_llama2_7b_tp1", 0.01),
])
def test_pr2031_blocks_against_the_measured_case(case_id, rel):
    """Both variants within ``rel`` of the measured blocks read from ../shared."""
    measured, predicted = _measured(case_id), _blocks(case_id)
    for variant, value in measured.items():
        assert predicted[variant] == pytest.approx(value, rel=rel), variant
