"""vLLM V0 runs every prefill forward eagerly (issue "Fidelity where nothing was fitted", item 2).

V0 replays CUDA graphs for decode-only batches alone (vllm/worker/model_runner.py
``_use_captured_graph`` in the 0.5.4, 0.6.0 and 0.6.3.post1 wheels; the 0.2.5 wheel has no
graphs at all), so a prefill step lasts at least its operators' launches. The seconds per
operator are derived, not fitted to a measured case, from vllm-project/vllm PR 1440
(Llama-2-7B, batch 1, 5 + 100 tokens: about 1.2 s eager, 1.05 s with the decode forward in a
CUDA graph) by benchmarks/calibration/v0_eager_prefill_op.py.
"""

from __future__ import annotations

import pytest

from capsim.cost.pricer import StepPricer
from capsim.profiles.engines import load_engine_preset
from capsim.profiles.hardware import load_hardware
from capsim.profiles.models import load_model
from support.scripts import load_script

V0_PRESETS = ("vllm-0.2.5", "vllm-0.5", "vllm-0.6", "vllm-0.6.4")


def _calibration():
    return load_script("benchmarks/calibration/v0_eager_prefill_op.py")


def test_pr1440_derivation():
    """PR 1440's 0.15 s over its 99 decode steps, on top of capsim's A100 80GB graph decode
    step of Llama-2-7B (9.79 ms), over its 192 operators: 58.9 us per operator; an H100 would
    have given 39.5 us."""
    cal = _calibration()
    op_s = cal.eager_op_s()
    assert op_s == pytest.approx(58.90e-6, abs=0.01e-6)
    assert op_s * 192 - 0.15 / 99 == pytest.approx(9.79e-3, abs=0.01e-3)
    assert cal.eager_op_s("h100-sxm") == pytest.approx(39.53e-6, abs=0.01e-6)


@pytest.mark.parametrize("name", V0_PRESETS)
def test_v0_presets_carry_the_derived_figure(name):
    op_s = _calibration().eager_op_s()
    preset = load_engine_preset(name)
    assert preset.host_overhead.eager_prefill_op_s == pytest.approx(op_s, rel=1e-3)
    assert preset.fitted_to["host_overhead.eager_prefill_op_s"][0]["external"].startswith(
        "vllm-project/vllm PR 1440")


def test_v1_presets_capture_prefill_too():
    """V1 compiles and captures mixed batches piecewise: no eager floor."""
    for name in ("vllm-v1", "vllm-0.11", "vllm-0.21"):
        assert load_engine_preset(name).host_overhead.eager_prefill_op_s == 0.0


def _tp4_70b(eager: bool) -> StepPricer:
    host = load_engine_preset("vllm-0.6").host_overhead.for_tensor_parallel(4)
    if not eager:
        host = host.model_copy(update={"eager_prefill_op_s": 0.0})
    return StepPricer(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), 4,
                      engine="vllm", host=host)


def _prefill(pricer: StepPricer, tokens: int) -> float:
    return pricer.cost(prefill_tokens=tokens, prefill_attn_pairs=tokens * tokens / 2,
                       prefill_kv_tokens=tokens).seconds


def test_70b_tp4_short_prefill_lasts_its_launches():
    """Llama-3.1-70B at TP 4 on H100 under vllm-0.6: 480 operators + 162 collectives (two
    all-reduces on each of 80 layers, the embedding's all-reduce, the logits' gather:
    eager_all_reduce_ops, read in vllm/model_executor/layers/linear.py RowParallelLinear.forward
    and vocab_parallel_embedding.py / logits_processor.py of the 0.6.0 sdist) x 58.9 us =
    37.81 ms of launches. Prefills of 16 to 256 tokens (22.3-35.6 ms priced without the floor,
    host terms included) all last the launches (the step's host terms on top): a 64-token one 16.8 ms longer than from a graph; a
    512-token one (GPU 52 ms) and a decode step are priced as before."""
    eager, graph = _tp4_70b(True), _tp4_70b(False)
    assert eager.terms.eager_operators == 480 and eager.terms.eager_all_reduces == 162
    floor_s = 642 * load_engine_preset("vllm-0.6").host_overhead.eager_prefill_op_s
    assert floor_s == pytest.approx(37.81e-3, abs=0.01e-3)
    assert _prefill(eager, 16) == _prefill(eager, 64) == _prefill(eager, 256)
    assert _prefill(eager, 64) - _prefill(graph, 64) == pytest.approx(16.8e-3, abs=0.1e-3)
    assert _prefill(graph, 16) < _prefill(graph, 64) < _prefill(graph, 256)
    assert _prefill(eager, 512) == _prefill(graph, 512)
    decode = {"decode_seqs": 32, "decode_ctx_tokens": 32 * 600}
    assert eager.cost(**decode).seconds == graph.cost(**decode).seconds


@pytest.mark.parametrize("name", V0_PRESETS[1:])
def test_v0_eager_forward_launches_its_collectives(name):
    """vLLM 0.5.4 / 0.6.0 / 0.6.3.post1 count the TP collectives in the floor; at TP 1 there
    are none, so a TP 1 prefill's floor is the operators' alone (Llama-3.1-8B: 192 x 58.9 us);
    the 64-token 70B TP 4 prefill is 162 x 58.9 us = 9.54 ms longer than without them."""
    host = load_engine_preset(name).host_overhead
    assert host.eager_all_reduce_ops is True
    tp1 = StepPricer(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), 1, engine="vllm",
                     host=host)
    assert tp1.terms.eager_all_reduces == 0
    assert tp1._eager_s == pytest.approx(192 * host.eager_prefill_op_s, rel=1e-12)
    tp4 = host.for_tensor_parallel(4)
    without = tp4.model_copy(update={"eager_all_reduce_ops": False})
    hw, model = load_hardware("h100-sxm"), load_model("llama-3.1-70b")
    with_s = _prefill(StepPricer(model, hw, 4, engine="vllm", host=tp4), 64)
    without_s = _prefill(StepPricer(model, hw, 4, engine="vllm", host=without), 64)
    assert with_s - without_s == pytest.approx(162 * host.eager_prefill_op_s, rel=1e-9)
    assert with_s - without_s == pytest.approx(9.54e-3, abs=0.01e-3)


def test_sglang_floor_leaves_collectives_inside_its_figure():
    """SGLang's per-operator figure was derived from a tensor-parallel forward (PR 12160) with
    its collectives inside it: its presets do not count them again."""
    for name in ("sglang-0.4", "sglang-0.5"):
        assert load_engine_preset(name).host_overhead.eager_all_reduce_ops is False


def test_the_floor_leaves_the_v0_host_fit_within_its_precision():
    """Refitting per_step_s and per_extra_tp_worker_s as their sources say, on the fit rows
    of step_vllm_perfbench_latency_bs8_in32_out128_a100 / _h100 (one prefill of 8 x 32 tokens,
    127 decode steps), with and without the floor: per_step_s moves by under 0.5 % (only the
    8B H100 prefill, 10.9 ms on the GPU, is lifted, to 11.6 ms), per_extra_tp_worker_s by
    1.3 % (0.7403 -> 0.7306 ms: the 70B TP 4 H100 prefill of 8 x 32 tokens lasts its 642
    launches), and the shipped host time of a batch-8 step (per_step_s + 8
    x per_seq_s, 1.05 ms: benchmarks/calibration/v0_host_split.py) and 0.735 ms stay within
    3 % of the refit."""
    cal = _calibration()
    step0, worker0 = cal.refit(0.0)
    step1, worker1 = cal.refit(cal.eager_op_s())
    assert abs(step1 / step0 - 1) < 0.005
    assert worker0 == pytest.approx(0.7403e-3, abs=0.0001e-3)
    assert worker1 == pytest.approx(0.7306e-3, abs=0.0001e-3)
    assert step1 < step0                        # the floor takes time the host term held
    host = load_engine_preset("vllm-0.6").host_overhead
    assert host.per_step_s + 8 * host.per_seq_s == pytest.approx(step1, rel=0.03)
    assert host.per_extra_tp_worker_s == pytest.approx(worker1, rel=0.03)
