"""SGLang 0.5's eager-prefill floor is what benchmarks/calibration/sglang05_eager_prefill_op.py
derives from sgl-project/sglang PR 12160 (DeepSeek-V3, 1 new token: 82.64 ms eager), and the
published figures collected to check it (issue 30) stay outside the preset: none meets the
script's rule (SGLang 0.5.x eager, one node, stated GPU and prompt, not a capsim case).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.profiles.engines import load_engine_preset
from support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _calibration():
    return load_script("benchmarks/calibration/sglang05_eager_prefill_op.py")


def test_shipped_floor_is_the_derived_one():
    """82.64 ms over capsim's 546 DeepSeek-V3 operators: 151.36 us, the preset's value."""
    cal = _calibration()
    assert cal.deepseek_pricer().terms.eager_operators == cal.DSV3_OPERATORS == 546
    assert cal.eager_op_s() == pytest.approx(151.36e-6, abs=0.01e-6)
    shipped = load_engine_preset("sglang-0.5").host_overhead.eager_prefill_op_s
    assert shipped == pytest.approx(cal.eager_op_s(), rel=1e-4)


def test_operator_count_does_not_depend_on_gpu_or_tp():
    """The derivation's count is the model's, not the GPU's (PR 12160 names no GPU)."""
    cal = _calibration()
    counts = {cal.deepseek_pricer(gpu, tp).terms.eager_operators
              for gpu in ("h100-sxm", "h200-sxm", "b200") for tp in (4, 8)}
    assert counts == {546}


def test_the_tt_inference_server_row_would_double_the_floor():
    """tenstorrent/tt-inference-server issue 356 (SGLang 0.4.x, TP 16 over two H100 nodes):
    c1 TTFT 179.7 ms at 128 tokens; less the preset's 8.3 ms request_before_s, 313.9 us per
    operator, 2.07 x PR 12160's. Rejected by the rule (0.4.x, inter-node TP), so not shipped."""
    cal = _calibration()
    tt = next(f for f in cal.EXTERNAL if f.source.startswith("tenstorrent"))
    assert (tt.tp, tt.prompt_tokens, tt.seconds) == (16, 128, pytest.approx(179.7e-3))
    assert cal.implied_op_s(tt) == pytest.approx(313.92e-6, abs=0.01e-6)
    assert cal.implied_op_s(tt) / cal.eager_op_s() == pytest.approx(2.07, abs=0.01)
    assert tt.verdict.startswith("rejected")


def test_the_kimi_b200_row_brackets_the_floor_from_above():
    """The SGLang cookbook's Kimi-K2-Instruct on 8 x B200, SGLang 0.5.6.post1, c1 mean TTFT
    141.22 ms over 548 operators (1 dense + 60 MoE layers): 242.55 us with only
    request_before_s taken off (an upper bound); with PR 13466's graphed c1 TTFT (92.94 ms at
    1,024 tokens) less capsim's graph-run 1,024-token DeepSeek-V3 forward taken off instead,
    204.84 us (H200, as its kernel tables price the forward since the 0.5.14 GEMM / MoE refit;
    206.82 us before) or 168.94 us (B200: 44.30 ms). PR 12160's 151.36 us is
    below all three, within 11 % of the B200 one."""
    cal = _calibration()
    kimi = next(f for f in cal.EXTERNAL if f.model == "Kimi-K2-Instruct")
    assert (kimi.gpu, kimi.sglang, kimi.operators) == ("b200", "0.5.6.post1", 548)
    assert cal.implied_op_s(kimi) == pytest.approx(242.55e-6, abs=0.01e-6)
    bracket = cal.graphed_bracket_op_s()
    assert bracket["h200-sxm"] == pytest.approx(204.84e-6, abs=0.01e-6)
    assert bracket["b200"] == pytest.approx(168.94e-6, abs=0.01e-6)
    op_s = cal.eager_op_s()
    assert op_s < bracket["b200"] < bracket["h200-sxm"] < cal.implied_op_s(kimi)
    assert bracket["b200"] / op_s == pytest.approx(1.116, abs=0.001)


def test_graph_and_unread_rows_imply_nothing():
    """A row run with the piecewise graph (PR 13466 after: 92.9 ms) or whose table could not
    be read gives no per-operator figure; only PR 12160 is marked shipped."""
    cal = _calibration()
    for f in cal.EXTERNAL:
        if f.graph or f.seconds is None:
            assert cal.implied_op_s(f) is None
    shipped = [f for f in cal.EXTERNAL if f.verdict.startswith("shipped")]
    assert [f.seconds for f in shipped] == [cal.PR12160_EAGER_S]
    assert cal.implied_op_s(shipped[0]) == pytest.approx(cal.eager_op_s(), rel=1e-12)


def test_no_external_row_is_a_measured_case():
    """None of the collected sources is a source of a capsim measured case."""
    cal = _calibration()
    cases = (ROOT / "benchmarks" / "fidelity" / "supplementary_cases.yaml").read_text()
    shared = (ROOT.parent / "shared" / "reference" / "measured" / "cases.yaml")
    text = cases + (shared.read_text() if shared.exists() else "")
    for needle in ("tt-inference-server", "pull/12996", "pull/13466", "pull/13287",
                   "PR 12996", "PR 13466", "PR 13287", "Moonshotai/Kimi-K2", "Kimi-K2"):
        assert needle not in text
    assert len(cal.EXTERNAL) == 7
